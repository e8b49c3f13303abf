"""Claude Code: its transcripts, window and compaction rule, hooks, configuration and status line
(ctxd/agents/base.py).

Sessions: `<config>/projects/<project>/<session>.jsonl` (`CLAUDE_CONFIG_DIR` default `~/.claude`),
where `<project>` is the starting directory with every character other than a letter or digit
replaced by `-`; subagents' own files (`agent-*.jsonl`, or under a session's folder) are not
sessions. Privacy rule: a file is not opened at all unless its folder's name could be a directory
inside an open workspace; then its head is read up to the first line that states a `cwd` (a
`summary` or snapshot record may come first), and no further unless that cwd is inside the
workspace.

The format, as Claude Code writes it and its well-kept readers parse it (ccusage,
claude-code-log): one JSON object a line with `type` `user` / `assistant` (with `message`, the
Anthropic Messages API message), `system` (`subtype` e.g. `compact_boundary`), `summary`,
`file-history-snapshot` and a few other bookkeeping types; `uuid` / `parentUuid` chain the lines,
`isSidechain` marks a subagent's lines, `cwd`, `sessionId`, `timestamp` on every message line.
An assistant message is streamed as several lines that share `message.id`, one content block each
(sometimes repeated), each carrying the message's `usage`.

Gauge rule (docs/sessions.md): the API baseline is the latest main-chain assistant message's
`usage.input_tokens + cache_creation_input_tokens + cache_read_input_tokens + output_tokens`:
the request it answered plus the reply itself, which is what the next request carries (as
Codex's `total_tokens`). It covers the items up to that message's last block; what comes after
(tool results, a new prompt) is counted by ctxd until the next report. After a
`compact_boundary` it is unknown until the next assistant message reports one.

Versions from 2.1 write more bookkeeping lines (`KNOWN_OTHER`) and keep a subagent's
conversation in `<session>/subagents/agent-*.jsonl` rather than in the main file; those
requests are billed to the session, so their usage is read for its cost (`_SubagentCost`).

Lines are skimmed first (ctxd/agents/skim.py): a bookkeeping line gives its time, folder and
version without being parsed whole; in summary mode a message line gives only what the summary
shows (usage, the prompt's text), never a tool's output. A slash command (`<command-name>/init
</command-name>`) is a turn, titled by the command, once the model acts on it (the prompt it
stands for, or the reply); a local one (`/model`, answered by `<local-command-stdout>`) is not.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import re
import stat
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.agents import payloads, skim
from ctxd.agents.base import Action, Agent, AgentConfig, AgentLimits, HookAction, HookInput, Scope, Stamp, StatusUsage
from ctxd.agents.jsonl import HEAD_LIMIT, JsonlStore, Reader, entries, head, kind_of, open_regular, parse, read_tail
from ctxd.agents.session import (
    MAX_TOKENS,
    Change,
    Turn,
    Usage,
    first_request,
    note_report,
    note_reports,
    shorten,
    token_counts,
    tokens,
)
from ctxd.redact import redact

try:
    from ctxd.agents import _claude
except ImportError:  # no compiler at install: each line is read by `_take_plain`, with the same result
    _claude = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from ctxd.agents.config.plan import ConfigChange
    from ctxd.agents.folders import Folders

VERSION = "2.1.332"

MAX_SUBAGENT_FILES = 1_000  # per session: more is not a real session, and each is opened on every read
# Lines remembered for rewinds (uuid -> where the window stood), and message ids for streamed
# copies: a reader of a session that goes on keeps the last ones. A rewind to an older line reads
# the file again from its start; a streamed copy this far apart does not happen.
MAX_LINES = 4_096
IDLE_LINES = 64  # what a reader that caught up keeps (`trim`): thousands of sessions are followed
KEPT_MESSAGES = 16  # the latest messages' usage kept by a reader that caught up, and in its saved state
MAX_MESSAGES = 256
RUN_LINES = 64  # a message's lines a summary keeps undigested (`ClaudeReader._in_run`)

# Bookkeeping line types that carry nothing the model sees.
KNOWN_OTHER = {"summary", "file-history-snapshot", "queue-operation", "progress", "attachment",
               "custom-title", "last-prompt", "tag",
               # 2.1: the request as sent (shape, blobs), cost and tool bookkeeping, the permission mode
               "api-request", "api-request-shape", "api-request-blob", "atis-latch", "tools-used", "cost-state",
               "mode"}
SYNTHETIC_MODEL = "<synthetic>"  # Claude Code's own stand-in replies (errors, interruptions)
# User texts that are not a prompt the model acts on.
NOT_A_PROMPT = ("<local-command-stdout>", "<local-command-stderr>", "<command-name>", "<command-message>",
                "[Request interrupted", "<bash-stdout>", "<bash-stderr>", "Caveat:")
LOCAL_OUTPUT = ("<local-command-stdout>", "<local-command-stderr>")
_COMMAND = re.compile(r"<command-name>\s*(/?[^<\s][^<]*?)\s*</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)

# The top-level fields a line is skimmed for (ctxd/agents/skim.py), in this order.
LINE_KEYS = (b"type", b"timestamp", b"uuid", b"parentUuid", b"isSidechain", b"cwd", b"sessionId", b"version",
             b"message", b"isMeta", b"isCompactSummary", b"subtype", b"compactMetadata", b"requestId")
_MESSAGE_KEYS = (b"id", b"model", b"usage", b"content")


def command_text(text: str) -> str | None:
    """`/name args` of a slash command as Claude Code writes it in a user line, else None."""
    if "<command-name>" not in text:
        return None
    found = _COMMAND.search(text)
    if found is None:
        return None
    name = found.group(1).strip()
    args = _COMMAND_ARGS.search(text)
    extra = " ".join(args.group(1).split()) if args else ""
    return f"{name if name.startswith('/') else '/' + name}{' ' + extra if extra else ''}"


def _usage(counts: dict[str, int], raw: dict[str, Any]) -> Usage:
    """A message's usage from its counts (`token_counts` of `raw`, its ints) and the 1-hour part of
    its cache write (`raw`'s cache_creation)."""
    written = counts.get("cache_creation_input_tokens", 0)
    split = raw.get("cache_creation")
    hour = min(written, tokens(split.get("ephemeral_1h_input_tokens"))) if isinstance(split, dict) else 0
    return Usage(input=counts.get("input_tokens", 0), cached_input=counts.get("cache_read_input_tokens", 0),
                 cache_write=written, output=counts.get("output_tokens", 0), cache_write_1h=hour)


def _text_part(text: str, role: str) -> dict[str, Any]:
    return {"type": "output_text" if role == "assistant" else "input_text", "text": text}


def _image_part(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64":
        return {"type": "input_image", "image_url": f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"}
    if isinstance(source.get("url"), str):
        return {"type": "input_image", "image_url": source["url"]}
    return None


def _output(content: Any) -> str | list[dict[str, Any]]:
    """A tool_result's content as a function_call_output's output."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "input_text", "text": block["text"]})
        elif block.get("type") == "image":
            image = _image_part(block)
            if image:
                parts.append(image)
    if all(p["type"] == "input_text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


class ClaudeReader(Reader):
    agent = "claude"
    skims = True
    resumable = True

    def __init__(self, path: str, session_id: str | None = None, *, window: bool = True,
                 summary: bool = False) -> None:
        super().__init__(path, window=window, summary=summary)
        if summary:
            self.paths, self.limits = PATHS, LIMITS
            self.folds = _claude is not None
        self.session.id = session_id
        self._init()

    def _init(self) -> None:
        self._subagents: dict[str, _SubagentCost] = {}
        # message.id -> (model, usage), for cost: a streamed copy's usage replaces, never adds
        self._msg_usage: OrderedDict[str, tuple[str, tuple[int, ...]]] = OrderedDict()  # (Usage.values())
        self._blocks_of: str | None = None  # the message id whose blocks `_blocks` holds
        self._blocks: set[str] = set()
        # Summary mode: `_blocks` holds the blocks of the message's lines read so far (its streamed
        # copies), with those lines not digested yet (`_run_keys`): a copy after the last report
        # brings into the tail only the blocks its message had not (`_assistant_items`).
        self._run: list[bytes] = []
        # Main-chain uuid -> (its line, the window's count of items, turns, reports) after it, for rewinds.
        self._end: OrderedDict[str, tuple[int, int, int, int]] = OrderedDict()
        self._complete = True  # `_end` holds every line since the start (or the last compaction)
        self._pinned: dict[str, tuple[int, int, int, int]] = {}  # `_end`'s entries of `wanted` lines it forgot
        self._leaf: str | None = None
        self._line = 0  # main-chain user and assistant lines so far
        self._reports = 0
        # Summary mode: lines after the last report, for the tail; a streamed copy's with the blocks
        # of its message it repeats (`_in_run`).
        self._pending: list[Pending] = []
        self._command: tuple[str, Any, int] | None = None  # a slash command not known yet to be a turn
        self._early: list[dict[str, Any]] = []  # the items before the first report, when the window is not held

    def reset(self) -> None:
        session_id = self.session.id
        super().reset()
        self.session.id = session_id
        self._init()

    def read(self, ident: tuple[int, int] | None = None, budget: int | None = None) -> Change:
        """The transcript's new lines, then its subagents' new usage (billed to this session)."""
        change = super().read(ident, budget)
        change.usage = self._read_subagents() or change.usage
        return change

    def left(self, stamp: Stamp) -> int:
        """The transcript's bytes not read yet, and its subagents' (written while it waits for
        them, or while no ctxd ran: a reader taken up from the store reads them at once)."""
        left = super().left(stamp)
        for path in subagent_files(self.path):
            sub = self._subagents.get(os.path.basename(path))
            with contextlib.suppress(OSError):
                left += max(0, os.lstat(path).st_size - (sub.offset if sub is not None else 0))
        return left

    def trim(self, lines: int = IDLE_LINES) -> None:
        """Forget all but the last `lines` lines (a reader that caught up: little memory each)."""
        self._forget(lines)
        while len(self._msg_usage) > KEPT_MESSAGES:  # as many as its saved state keeps (`own_state`)
            self._msg_usage.popitem(last=False)

    def own_state(self) -> dict[str, Any]:
        self._run_keys()
        return {"end": [[uuid, *where] for uuid, where in list(self._end.items())[-IDLE_LINES:]],
                "complete": self._complete and len(self._end) <= IDLE_LINES, "leaf": self._leaf, "line": self._line,
                "reports": self._reports,
                "messages": _messages_state(self._msg_usage),
                "pending": [[entry[0], redact(entry[1].decode("utf-8", "replace")), *entry[2:]]
                            for entry in self._pending],
                "blocks": [self._blocks_of, sorted(self._blocks)] if self._blocks_of else None,
                "command": list(self._command) if self._command else None,
                "subagents": {name: sub.position() for name, sub in self._subagents.items()}}

    def restore_own(self, state: dict[str, Any]) -> None:
        self._end = OrderedDict((str(entry[0]), (int(entry[1]), int(entry[2]), int(entry[3]), int(entry[4])))
                                for entry in state.get("end") or [])
        self._complete = bool(state.get("complete"))
        self._leaf = state.get("leaf")
        self._line, self._reports = int(state.get("line") or 0), int(state.get("reports") or 0)
        self._msg_usage = _messages_from(state)
        self._pending = [(int(entry[0]), entry[1].encode("utf-8"), [str(key) for key in entry[2]])
                         if len(entry) > 2 else (int(entry[0]), entry[1].encode("utf-8"))
                         for entry in state.get("pending") or []]
        blocks = state.get("blocks")
        if isinstance(blocks, list) and len(blocks) == 2 and isinstance(blocks[0], str) and isinstance(blocks[1], list):
            self._blocks_of, self._blocks = blocks[0], {str(key) for key in blocks[1]}
        command = state.get("command")
        self._command = (command[0], command[1], int(command[2])) if command else None
        for name, sub_state in (state.get("subagents") or {}).items():
            sub = self._subagents[name] = _SubagentCost(os.path.join(self._subagent_folder(), name), self)
            sub.restore(sub_state)

    def matches(self, fd: int, st: os.stat_result) -> bool:
        """The transcript is the one read (`Reader.matches`), and so is every subagent's file read
        (one rewritten in place would keep its old cost in the session's)."""
        if not super().matches(fd, st):
            return False
        for sub in self._subagents.values():
            opened = open_regular(sub.path)
            if opened is None:
                return False
            try:
                if not sub.matches(*opened):
                    return False
            finally:
                os.close(opened[0])
        return True

    def _subagent_folder(self) -> str:
        return os.path.join(self.path[: -len(".jsonl")], "subagents")

    def _read_subagents(self) -> bool:
        grew = False
        for path in subagent_files(self.path):
            name = os.path.basename(path)
            sub = self._subagents.get(name)
            if sub is None:
                sub = self._subagents[name] = _SubagentCost(path, self)
            grew = sub.read().lines > 0 or grew
        return grew

    # --- lines ---

    skip_types = tuple(json.dumps(kind).encode() for kind in sorted(KNOWN_OTHER))

    def take(self, data: bytes, row: tuple[Any, ...], change: Change) -> None:
        """One line that is not bookkeeping: parsed whole, or (summary mode) a message line's small
        parts only (skim.py)."""
        skimmed = self.summary and len(row) > 2
        if skimmed and self._take_plain(data, row, change):
            return
        rec = _skimmed(data, row) if skimmed else None
        line = data[row[0]:row[1]]
        if rec is None:
            # Parsed whole: a line the skimmer cannot walk, or one `parse` may refuse (skim.py `scan`).
            # Kept raw for the tail all the same, as a skimmed one is.
            rec = parse(line.decode("utf-8", "replace"))
            if rec is None:
                self.session.bad_lines += 1
                return
        self.record(rec, change, line)

    def skipped(self, data: bytes, start: int, stop: int, change: Change) -> None:
        """A bookkeeping line at the edge of a chunk: its time (the session's start, its latest)."""
        found = skim.values(data, start, stop, _EDGE_KEYS)
        if found is not None:
            self.record({key.decode(): skim.decode(data, value) for key, value in zip(_EDGE_KEYS, found)
                         if value is not None}, change)

    def record(self, rec: dict[str, Any], change: Change, raw: bytes | None = None) -> None:
        """One line's record. `raw`: summary mode, the line as read (kept for the tail)."""
        session = self.session
        kind = kind_of(rec)
        self._facts(rec.get("timestamp"), rec.get("cwd"), rec.get("sessionId"), rec.get("version"), change)
        if rec.get("isSidechain"):
            session.sidechain_lines += 1
            if kind == "assistant":
                self._cost_of(rec)  # a subagent's tokens are billed too, but are not this window
            return
        if kind == "assistant":
            self._assistant(rec, change, raw)
        elif kind == "user":
            self._user(rec, change, raw)
        elif kind == "system":
            if rec.get("subtype") == "compact_boundary":
                self._compact(change, rec)
            self._link(rec.get("uuid"))
        elif kind in KNOWN_OTHER:
            return
        else:
            session.count_unknown(str(kind))

    def _facts(self, timestamp: Any, cwd: Any, session_id: Any, version: Any, change: Change) -> None:
        """What any line says of the session: its time, folder, id and the agent's version."""
        session = self.session
        if isinstance(timestamp, str):
            session.last_activity = timestamp
            if session.started is None:
                session.started = timestamp
        if session.cwd is None and isinstance(cwd, str):
            session.cwd = cwd
            change.meta = True
        if session.id is None and isinstance(session_id, str):
            session.id = session_id
            change.meta = True
        if isinstance(version, str):
            session.version = version

    def _take_plain(self, data: bytes, row: tuple[Any, ...], change: Change) -> bool:
        """Summary mode: a main-chain assistant line, or a user line of tool results (most message
        lines), read from `row` as `record` reads it, without building the record; False for any
        other line (and while a slash command waits to be known as a turn)."""
        kind = row[2]
        if (kind != "assistant" and kind != "user") or self._command is not None or row[_SIDECHAIN]:
            return False
        message = row[_MESSAGE]
        if type(message) is not tuple or data[message[0]] != 0x7B:  # { (else: parsed as `record` has it)
            return False
        if kind == "user":
            content = row[_IN_MESSAGE + 3]
            if type(content) is not tuple or data[content[0]] != 0x5B or row[_COMPACT_SUMMARY]:  # [
                return False
            kinds = skim.kinds(data, *content)
            if kinds is None or "tool_result" not in kinds or not _RESULT_KINDS.issuperset(kinds):
                return False  # (a block of another kind is counted as unknown: `record`)
        values = _plain_values(row)
        if tuple in map(type, values):  # (a string with escapes, say)
            values = tuple(value if type(value) is not tuple else skim.decode(data, value) for value in values)
        timestamp, uuid, cwd, session_id, version, request, key, model, usage = values
        self._facts(timestamp, cwd, session_id, version, change)
        raw_line = data[row[0]:row[1]]
        if kind == "user":
            self._line += 1
            self._pending.append((self._line, raw_line))
        else:
            self._reply(self._cost(model, usage, key or request or uuid), timestamp, None, change, raw_line, key)
        self._link(uuid)
        return True

    def fold(self, data: bytes, rows: list[tuple[Any, ...]], i: int, change: Change) -> int:
        """Summary mode: the plain lines from rows[i] on (those `_take_plain` reads, and user lines of
        text `_user_text` judges), read at once (_claude.c); the index of the first row after them."""
        if self._command is not None:
            return i
        session = self.session
        run = _claude.run(data, rows, i, _LAYOUT, _RUN_LIMITS, self._msg_usage, self._end,
                          (self._line, session.window, session.turn_count, self._reports, session.baseline,
                           session.last_usage, session.model, self._leaf), _user_text)
        if run is None:
            return i
        (stop, self.line_stop, self._line, reports, first_time, last_time, cwd, session_id, version, ends, pending,
         reset, first_used, prompted, request_at, cache_1h, baseline, last_usage, usage_changed, model, model_changed,
         sums, messages, prompts) = run
        if last_time is not None:
            session.last_activity = last_time
            if session.started is None:
                session.started = first_time
        self._facts(None, cwd, session_id, version, change)
        for name, counts in sums:
            session.bill(name, Usage(*counts))
        if messages:
            known = self._msg_usage
            known.update(messages)
            while len(known) > MAX_MESSAGES:
                known.popitem(last=False)
        if reports:
            note_reports(session, first_used, prompted, request_at, None if cache_1h < 0 else bool(cache_1h))
            session.last_usage = last_usage
            session.reported(baseline)
            self._reports += reports
            change.usage = change.usage or bool(usage_changed)
        if model_changed:
            session.model = model
            change.meta = True
        if reset:
            self._pending = pending
        else:
            self._pending += pending
        if ends:
            self._end.update(ends)
            self._leaf = ends[-1][0]
            self._forget(MAX_LINES)
        for text, timestamp in prompts:  # (in their order; nothing else in the run depends on them)
            self._turn(text, timestamp, change)
        self._folded_run(data, rows, i, int(stop))
        return int(stop)

    def _folded_run(self, data: bytes, rows: list[tuple[Any, ...]], i: int, stop: int) -> None:
        """After `fold` read rows[i:stop] (replies that report, each of which `_reply` would have
        taken into `_in_run`): the lines of the last message among them, from the end back."""
        last: Any = None
        lines: list[bytes] = []
        for k in range(stop - 1, i - 1, -1):
            row = rows[k]
            if row[2] != "assistant":
                continue
            message_id = row[_IN_MESSAGE]
            if not lines:
                last = message_id
            elif message_id != last:
                break
            if not isinstance(last, str) or not last:
                break  # (no streamed copies are told apart: `_assistant_items`)
            lines.append(data[row[0]:row[1]])
        else:
            if not lines:
                return  # no reply: the message is the one before
            if last == self._blocks_of:
                self._run += reversed(lines)
                self._bound_run()
                return
        self._blocks_of = last if isinstance(last, str) else None
        self._blocks = set()
        self._run = lines[::-1]
        self._bound_run()

    # --- the chain ---

    def _link(self, uuid: Any) -> None:
        if isinstance(uuid, str):
            self._end[uuid] = (self._line, self.session.window, self.session.turn_count, self._reports)
            self._end.move_to_end(uuid)
            self._leaf = uuid
            if len(self._end) > MAX_LINES:
                self._forget(MAX_LINES)

    def _forget(self, keep: int) -> None:
        """Forget all but the latest `keep` lines; where the window stood at a line a rewind wanted
        is kept aside."""
        end = self._end
        while len(end) > keep:
            uuid, where = end.popitem(last=False)
            if uuid in self.wanted:
                self._pinned[uuid] = where
            self._complete = False

    def _rewind(self, rec: dict[str, Any], change: Change) -> None:
        """A prompt whose parent is an earlier line than the last one: the user went back and
        edited; what followed that parent is no longer in the window. A parent this reader no
        longer remembers, when it does not remember every line, has the file read again."""
        parent = rec.get("parentUuid")
        if not isinstance(parent, str) or parent == self._leaf:
            return
        found = self._end.get(parent) or self._pinned.get(parent)
        if found is None:
            # Forgotten: the whole file again, this line remembered (a read from the start had
            # forgotten it too when it was more than MAX_LINES back, and would stop here for ever).
            if not self._complete:
                self.read_again_for(parent)
            return
        line, keep, turns, reports = found
        if line >= self._line:
            return  # nothing of the window came after it
        session = self.session
        session.turn_count = turns
        session.turns = [t for t in session.turns if t.generation != session.generation or t.index < keep] \
            if self.holds_window else []
        if reports < self._reports:
            session.baseline, session.tail = None, []  # the report described what is cut away
            self._pending = []
        else:
            session.tail = session.tail[:max(0, keep - session.baseline_items)]
            self._pending = [entry for entry in self._pending if entry[0] <= line]
        if self.holds_window:
            del session.items[keep:]
        session.window = keep
        self._line = line
        session.generation += 1
        session.rewinds += 1
        self._command = None
        change.replace(session, session.items, None, rec.get("timestamp") if isinstance(rec.get("timestamp"), str)
                       else session.last_activity, keep=keep)

    # --- records ---

    def _add(self, item: dict[str, Any], change: Change) -> None:
        self.session.add_item(item, self.holds_window)
        change.add(item, self.session)
        if self.session.first_request is None and not self.holds_window:
            self._early.append(item)  # until the first report (`_carried`)

    def _cost_of(self, rec: dict[str, Any], known: MessageUsage | None = None) -> tuple[dict[str, int], str, Usage] | None:
        """An assistant line's usage, billed (`_cost`; `known`: the messages of the file it is in)."""
        message = rec.get("message")
        if not isinstance(message, dict):
            return None
        return self._cost(message.get("model"), message.get("usage"),
                          message.get("id") or rec.get("requestId") or rec.get("uuid"), known)

    def _cost(self, model: Any, raw: Any, key: Any, known: MessageUsage | None = None
              ) -> tuple[dict[str, int], str, Usage] | None:
        """A message's usage billed to its model, with its counts (`token_counts`); `key` names the
        message (a streamed copy of it replaces its usage, never adds) among `known`, the latest
        messages of the file it is in (the session's own, else a subagent's)."""
        if not isinstance(model, str):
            model = ""
        if not isinstance(raw, dict) or model == SYNTHETIC_MODEL:
            return None
        counts = token_counts(raw, ints_only=True)
        usage = _usage(counts, raw)
        known = self._msg_usage if known is None else known
        if isinstance(key, str):
            old = known.get(key)
            if old is not None:
                self.session.cumulative[old[0]].add(Usage(*old[1]), -1)  # a streamed copy: its usage replaces, not adds
                known.move_to_end(key)
            known[key] = (model, usage.values())
            if len(known) > MAX_MESSAGES:
                known.popitem(last=False)
        self.session.bill(model, usage)
        return counts, model, usage

    def _assistant(self, rec: dict[str, Any], change: Change, raw_line: bytes | None = None) -> None:
        message = rec.get("message")
        if not isinstance(message, dict):
            self.session.count_unknown("assistant.no_message")
            return
        self._reply(self._cost_of(rec), rec.get("timestamp"), message, change, raw_line, message.get("id"))
        self._link(rec.get("uuid"))

    def _reply(self, reported: tuple[dict[str, int], str, Usage] | None, timestamp: Any,
               message: dict[str, Any] | None, change: Change, raw_line: bytes | None, message_id: Any = None) -> None:
        """An assistant line: its usage `reported` (`_cost`), its blocks (`message`: None in summary
        mode, where the line is kept raw for the tail instead)."""
        session = self.session
        used = 0
        if reported is not None:
            last, model, usage = reported
            used = usage.input + usage.cache_write + usage.cached_input + usage.output
            note_report(session, used, usage, model, timestamp)
            if used and session.first_request is None and not self.summary:  # what it carried: its input
                session.first_request = first_request(used - usage.output, self._carried())
                self._early = []
            if used and (used != session.baseline or last != session.last_usage):
                session.baseline = used
                session.last_usage = last
                change.usage = True
            if model and model != session.model:
                session.model = model
                change.meta = True
        if model_acted(reported):
            self._command_acted(change)
        self._line += 1
        if self.summary:
            if raw_line is not None:  # (kept for the tail unless a report covers it: see below)
                self._in_run(message_id, raw_line, not used)
        elif message is not None:
            for item in self._assistant_items(message):
                self._add(item, change)
        if used:
            session.reported(used)  # the report covers the reply's blocks too
            self._reports += 1
            self._pending = []

    def _carried(self) -> list[dict[str, Any]]:
        """The window so far, for the first request's estimate (only the first report needs it)."""
        return self.session.items if self.holds_window else self._early

    def _assistant_items(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """The items of one assistant line's blocks; a streamed duplicate of a block already read is
        left out."""
        message_id = message.get("id")
        if message_id != self._blocks_of or not isinstance(message_id, str):
            self._blocks_of = message_id if isinstance(message_id, str) else None
            self._blocks = set()
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        items = []
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, dict):
                continue
            key = _block_key(block) if self._blocks_of else None
            if key is not None:
                if key in self._blocks:
                    continue  # a streamed duplicate of a block already mirrored
                self._blocks.add(key)
            item = self._assistant_item(block)
            if item is not None:
                items.append(item)
        return items

    def _assistant_item(self, block: dict[str, Any]) -> dict[str, Any] | None:
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            return {"type": "message", "role": "assistant", "content": [_text_part(block["text"], "assistant")]}
        if kind in ("tool_use", "server_tool_use"):
            return {"type": "function_call", "call_id": str(block.get("id", "")), "name": str(block.get("name", "")),
                    "arguments": json.dumps(block.get("input", {}), ensure_ascii=False)}
        if kind == "thinking":
            return {"type": "reasoning", "summary": [],
                    "content": [{"type": "reasoning_text", "text": str(block.get("thinking", ""))}]}
        if kind == "redacted_thinking":
            return {"type": "reasoning", "summary": [], "encrypted_content": str(block.get("data", ""))}
        if kind == "web_search_tool_result":
            return {"type": "function_call_output", "call_id": str(block.get("tool_use_id", "")),
                    "output": json.dumps(block.get("content"), ensure_ascii=False)}
        self.session.count_unknown(f"assistant.{kind}")
        return None

    def _user(self, rec: dict[str, Any], change: Change, raw_line: bytes | None = None) -> None:
        session = self.session
        message = rec.get("message")
        if not isinstance(message, dict):
            session.count_unknown("user.no_message")
            return
        parts, outputs = self._user_parts(message.get("content"))
        text = "\n".join(p["text"] for p in parts if p["type"] == "input_text")
        stripped = text.lstrip()
        prompt = (bool(parts) and not outputs and not rec.get("isMeta") and not rec.get("isCompactSummary")
                  and not stripped.startswith(NOT_A_PROMPT))
        command = command_text(text) if parts and not outputs and not rec.get("isMeta") else None
        if prompt or command is not None:
            self._rewind(rec, change)
            if self.replay:
                return
        if self._command is not None:
            if rec.get("isMeta") and parts:
                self._command_acted(change)  # the prompt the command stands for: the model acts on it
            elif prompt or command is not None or stripped.startswith(LOCAL_OUTPUT):
                self._command = None  # a local command (its output), or another prompt first
        self._line += 1
        building = not self.summary
        if not building and raw_line is not None:  # (a compaction's summary too: after a report, the tail's)
            self._pending.append((self._line, raw_line))
        for item in outputs:
            if building:
                self._add(item, change)
        if parts:
            if prompt:
                self._turn(text, rec.get("timestamp"), change)
            elif command is not None:
                self._command = (command, rec.get("timestamp"), session.window)
            item = {"type": "message", "role": "user", "content": parts}
            if rec.get("isCompactSummary"):  # the summary is what the compaction wrote
                session.add_item(item, self.holds_window)
                change.add_to_replacement(item, session)
            elif building:
                self._add(item, change)
        self._link(rec.get("uuid"))

    def _user_parts(self, content: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """A user message's text and image parts, and its tool results as items."""
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        parts: list[dict[str, Any]] = []
        outputs: list[dict[str, Any]] = []
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_result":
                outputs.append({"type": "function_call_output", "call_id": str(block.get("tool_use_id", "")),
                                "output": _output(block.get("content", ""))})
            elif kind == "text" and isinstance(block.get("text"), str):
                parts.append(_text_part(block["text"], "user"))
            elif kind == "image":
                image = _image_part(block)
                if image:
                    parts.append(image)
            else:
                self.session.count_unknown(f"user.{kind}")
        return parts, outputs

    def _turn(self, text: str, timestamp: Any, change: Change, index: int | None = None) -> None:
        """A turn the user's `text` started (the first one with words titles the session)."""
        session = self.session
        turn = Turn(session.window if index is None else index, shorten(text, 60),
                    timestamp if isinstance(timestamp, str) else None, session.generation)
        session.add_turn(turn, self.holds_window)
        change.turns.append(turn)
        if session.title is None and (title := shorten(text)).strip():
            session.title = title
            change.meta = True
        self._command = None

    def _command_acted(self, change: Change) -> None:
        """The model acts on the slash command read before: it was a turn."""
        if self._command is None:
            return
        text, timestamp, index = self._command
        self._turn(text, timestamp, change, index)

    def _compact(self, change: Change, rec: dict[str, Any]) -> None:
        """`compact_boundary`: what came before is gone from the window; the summary follows as a
        user message (`isCompactSummary`). Its `compactMetadata` says what triggered it and the
        tokens before (and, in newer versions, after) it."""
        session = self.session
        meta = rec.get("compactMetadata")
        if not isinstance(meta, dict):
            meta = {}
        at = rec.get("timestamp") if isinstance(rec.get("timestamp"), str) else session.last_activity
        session.agent_compactions.append({
            "trigger": meta.get("trigger") if meta.get("trigger") in ("auto", "manual") else None,
            "tokensBefore": tokens(meta.get("preTokens")) or session.baseline,
            "tokensAfter": tokens(meta.get("postTokens")) or None,
            "at": at})
        session.replace_window([], self.holds_window)
        session.compactions += 1
        session.generation += 1
        self._end = OrderedDict()
        self._complete = True
        self._pinned = {}
        self._pending = []
        self._command = None
        change.replace(session, [], session.compactions - 1, at)
        change.usage = True

    # --- summary mode ---

    def _in_run(self, message_id: Any, raw: bytes, pend: bool) -> None:
        """A main-chain assistant line (summary mode): of the message `_blocks_of` names (a streamed
        copy: its blocks that message had are not the tail's), or another's. `pend`: no report
        covers it, it is kept for the tail, with the blocks its message had before it."""
        if message_id != self._blocks_of or not isinstance(message_id, str):
            self._blocks_of = message_id if isinstance(message_id, str) else None
            self._blocks, self._run = set(), []
            if pend:
                self._pending.append((self._line, raw))
        elif pend:
            had = self._run_keys() if message_id else set()
            repeated = [key for key in _line_keys(raw) if key in had]
            self._pending.append((self._line, raw, repeated) if repeated else (self._line, raw))
        if self._blocks_of:
            self._run.append(raw)
            self._bound_run()

    def _bound_run(self) -> None:
        if len(self._run) > RUN_LINES:
            self._run_keys()

    def _run_keys(self) -> set[str]:
        """The blocks of the lines of `_blocks_of`'s message read so far."""
        for raw in self._run:
            self._blocks.update(_line_keys(raw))
        self._run = []
        return self._blocks

    def finish_summary(self) -> None:
        """The items after the last report, from the lines kept for them (the fill counts them)."""
        if self.session.baseline is None:  # (no report yet: its lines are not kept, none will be counted)
            self.session.tail, self._pending = [], []
            return
        tail: list[dict[str, Any]] = []
        blocks_of, blocks = self._blocks_of, self._blocks
        self._blocks_of, self._blocks = None, set()
        # The kept lines were read (and their unknown blocks counted) as they came; building their
        # items again, at the end of each read, counts nothing more.
        unknown = dict(self.session.unknown)
        for entry in self._pending:
            rec = parse(entry[1].decode("utf-8", "replace"))
            message = rec.get("message") if rec is not None else None
            if rec is None or not isinstance(message, dict):
                continue
            if rec.get("type") == "assistant":
                # Each line's blocks less those its message had before it (`_in_run`), as the
                # daemon's reader leaves them out (a rewind between does not bring them back).
                self._blocks_of, self._blocks = (message.get("id"), set(entry[2])) if len(entry) > 2 else (None, set())
                tail += self._assistant_items(message)
            else:
                parts, outputs = self._user_parts(message.get("content"))
                tail += outputs
                if parts:
                    tail.append({"type": "message", "role": "user", "content": parts})
        self._blocks_of, self._blocks = blocks_of, blocks
        self.session.unknown = unknown
        self.session.tail = tail


def _line_keys(raw: bytes) -> list[str]:
    """The keys of an assistant line's blocks (`_assistant_items`)."""
    rec = parse(raw.decode("utf-8", "replace"))
    message = rec.get("message") if rec is not None else None
    content = message.get("content") if isinstance(message, dict) else None
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return [_block_key(block) for block in blocks if isinstance(block, dict)] if isinstance(blocks, list) else []


def _user_text(data: bytes, content: Any) -> tuple[str, bool] | None:
    """For `_claude.run`: a user line's content that is a text (decoded from `data` when it is
    offsets), and whether `_user` takes it as a prompt; None when `record` must read the line (a
    slash command, or content that is not a text)."""
    text = skim.decode(data, content) if type(content) is tuple else content
    if type(text) is not str or command_text(text) is not None:
        return None
    return text, not text.lstrip().startswith(NOT_A_PROMPT)


def model_acted(reported: tuple[dict[str, int], str, Usage] | None) -> bool:
    """An assistant line the model wrote (not Claude Code's stand-in reply)."""
    return reported is not None


def _skimmed(data: bytes, row: tuple[Any, ...]) -> dict[str, Any] | None:
    """A user or assistant line's record with only what a summary needs decoded: a user message's
    content when it holds no tool result (a prompt's text), an assistant message's id, model and
    usage; never a tool's output. None when the line must be parsed whole. `row`: its values at
    `PATHS` (skim.py `scan`)."""
    kind = row[2]
    if kind != "user" and kind != "assistant":
        return None
    decode = skim.decode
    rec = {name: decode(data, value) if type(value) is tuple else value
           for name, value in zip(_LINE_NAMES, row[2:_IN_MESSAGE]) if value is not None and name != "message"}
    span = row[_MESSAGE]
    if not isinstance(span, tuple):
        return rec
    if data[span[0]] != 0x7B:  # {
        return None
    parsed: dict[str, Any] = {}
    for key, value in zip(("id", "model", "usage"), row[_IN_MESSAGE:_IN_MESSAGE + 3]):
        if value is not None:
            parsed[key] = decode(data, value)
    content = row[_IN_MESSAGE + 3]
    if kind == "user" and content is not None:
        parsed["content"] = content
        if isinstance(content, tuple):
            kinds = skim.kinds(data, *content)
            if kinds is not None and "tool_result" in kinds:  # a tool's output: never a prompt, never decoded here
                parsed["content"] = [{"type": "text", "text": ""} if kind == "text" else {"type": kind}
                                     for kind in kinds]
            else:
                parsed["content"] = decode(data, content)
    rec["message"] = parsed
    return rec


_LINE_NAMES = tuple(key.decode() for key in LINE_KEYS)
_EDGE_KEYS = (b"type", b"timestamp", b"cwd", b"sessionId", b"version")
# What `take` is given of a line (skim.py `scan`): the top-level fields, then the message's; its usage
# built when plain, its content as its offsets.
PATHS = (*((key,) for key in LINE_KEYS), *((b"message", key) for key in _MESSAGE_KEYS))
LIMITS = (*(0 for _ in LINE_KEYS), skim.PLAIN_BYTES, skim.PLAIN_BYTES, skim.PLAIN_BYTES, 0)
_MESSAGE = 2 + LINE_KEYS.index(b"message")  # where a row has the message (its offsets)...
_IN_MESSAGE = 2 + len(LINE_KEYS)  # ...and its id, model, usage and content
_SIDECHAIN, _COMPACT_SUMMARY = 2 + LINE_KEYS.index(b"isSidechain"), 2 + LINE_KEYS.index(b"isCompactSummary")
_PARENT, _META = 2 + LINE_KEYS.index(b"parentUuid"), 2 + LINE_KEYS.index(b"isMeta")
# What `_take_plain` reads of a row: the line's time, uuid, cwd, sessionId, version and requestId, its
# message's id, model and usage.
_PLAIN = (*(2 + LINE_KEYS.index(key) for key in (b"timestamp", b"uuid", b"cwd", b"sessionId", b"version", b"requestId")),
          _IN_MESSAGE, _IN_MESSAGE + 1, _IN_MESSAGE + 2)
_plain_values = operator.itemgetter(*_PLAIN)
_RESULT_KINDS = frozenset(("tool_result", "text", "image"))  # a user line's blocks beside tool results
# Where `_claude.run` finds a row's type, isSidechain, message, isCompactSummary, content, parentUuid and
# isMeta, then what `_take_plain` reads; and the bounds it keeps to.
_LAYOUT = (2, _SIDECHAIN, _MESSAGE, _COMPACT_SUMMARY, _IN_MESSAGE + 3, _PARENT, _META, *_PLAIN)
_RUN_LIMITS = (MAX_MESSAGES, MAX_TOKENS)


class _SubagentCost(Reader):
    """A subagent's transcript (`<session>/subagents/agent-*.jsonl`): only its assistant messages'
    usage is read, into the parent session's cost. Its lines are never the main window."""

    agent = "claude"
    skims = True
    skip_types = tuple(json.dumps(kind).encode() for kind in sorted(KNOWN_OTHER | {"user", "system"}))

    def __init__(self, path: str, parent: ClaudeReader) -> None:
        super().__init__(path, window=False)
        self.parent = parent
        # Its own latest messages: a streamed copy is in the same file, and the session's latest 16
        # (a reader that caught up keeps no more) were another file's once other lines came between.
        self._msg_usage: MessageUsage = OrderedDict()

    def take(self, data: bytes, row: tuple[Any, ...], change: Change) -> None:
        self.take_whole(data[row[0]:row[1]], change)

    def record(self, rec: dict[str, Any], change: Change, raw: bytes | None = None) -> None:
        if rec.get("type") == "assistant":
            self.parent._cost_of(rec, self._msg_usage)
            while len(self._msg_usage) > KEPT_MESSAGES:
                self._msg_usage.popitem(last=False)

    def own_state(self) -> dict[str, Any]:
        return {"messages": _messages_state(self._msg_usage)}

    def restore_own(self, state: dict[str, Any]) -> None:
        self._msg_usage = _messages_from(state)


def _block_key(block: dict[str, Any]) -> str:
    """What tells one content block from another of its message (a streamed copy has the same):
    a digest of its JSON, kept in the reader's state."""
    import hashlib

    return hashlib.blake2b(json.dumps(block, sort_keys=True).encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


Pending = tuple[int, bytes] | tuple[int, bytes, list[str]]  # a line kept for the tail (`ClaudeReader._in_run`)
MessageUsage = OrderedDict[str, tuple[str, tuple[int, ...]]]  # a message's key: its model and `Usage.values()`


def _messages_state(known: MessageUsage) -> list[list[Any]]:
    return [[key, model, Usage(*usage).as_dict()] for key, (model, usage) in list(known.items())[-KEPT_MESSAGES:]]


def _messages_from(state: dict[str, Any]) -> MessageUsage:
    from ctxd.agents.session import _USAGE_FIELDS

    return OrderedDict((key, (model, Usage(**{_USAGE_FIELDS[k]: int(v) for k, v in usage.items()
                                              if k in _USAGE_FIELDS}).values()))
                       for key, model, usage in state.get("messages") or [])


# --- where its sessions live ----------------------------------------------------------------------

HEAD_LINES = 8  # a transcript states its cwd on its first message line


def encode_project(directory: str | Path) -> str:
    """Claude Code's project folder name for a directory."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(directory))


def dir_may_match(project_dir: str, folders: Folders) -> bool:
    """Could the project folder `project_dir` be a directory inside one of the folders?"""
    return folders.may_hold(project_dir, encode_project)


def session_id(path: str) -> str | None:
    """A session's id is its file name. A name that is not UTF-8 cannot be an id a reply can
    carry: None, and the id comes from the lines' `sessionId`."""
    stem = os.path.splitext(os.path.basename(path))[0]
    try:
        stem.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return stem


def subagent_files(key: str) -> list[str]:
    """The subagents' transcripts of the session `key` (`<session>/subagents/*.jsonl`), never
    through a link (docs/sessions.md, Privacy)."""
    if not key.endswith(".jsonl"):
        return []
    try:  # (most sessions have no folder beside them: one call to learn it)
        if not stat.S_ISDIR(os.lstat(key[: -len(".jsonl")]).st_mode):
            return []  # a link, or not a folder
    except OSError:
        return []
    folder = os.path.join(key[: -len(".jsonl")], "subagents")
    if os.path.islink(folder):
        return []
    return sorted(entry.path for entry in entries(folder)
                  if entry.name.endswith(".jsonl") and entry.is_file(follow_symlinks=False))[:MAX_SUBAGENT_FILES]


class ClaudeSessions(JsonlStore):
    """`<root>/<project>/<session>.jsonl`; `agent-*.jsonl` are subagents' files."""

    def session_files(self) -> list[str]:
        projects = [e.path for e in entries(str(self.root)) if e.is_dir(follow_symlinks=False)]
        return [e.path for project in projects for e in entries(project)
                if e.name.endswith(".jsonl") and not e.name.startswith("agent-") and e.is_file(follow_symlinks=False)]

    def is_session_file(self, path: str) -> bool:
        p = Path(path)
        return p.name.endswith(".jsonl") and p.parent.parent == self.root and not p.name.startswith("agent-")

    def touched(self, path: str) -> list[str]:
        """The session a write changed: its own file, or one of its subagents' files
        (`<project>/<session>/subagents/*.jsonl`, billed to it: written while its transcript waits)."""
        p = Path(path)
        if p.name.endswith(".jsonl") and p.parent.name == "subagents" and p.parent.parent.parent.parent == self.root:
            return [f"{p.parent.parent}.jsonl"]
        return super().touched(path)

    def stamp(self, key: str) -> Stamp | None:
        """The transcript's stamp, its version moved by its subagents' files too: they are written
        while the transcript waits, and a follower that polls sees a change only in a stamp."""
        found = super().stamp(key)
        if found is None:
            return None
        beside = []
        for path in subagent_files(key):
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                beside.append((st.st_size, st.st_mtime_ns))
        return found._replace(version=hash((found.version, *beside))) if beside else found

    def peek_cwd(self, key: str, folders: Folders) -> tuple[str | None, bool, int]:
        """A file whose project folder cannot be inside an open folder is not opened (cwd None,
        complete); else its head up to the first line that states a cwd."""
        if not dir_may_match(os.path.basename(os.path.dirname(key)), folders):
            return None, True, 0
        records, read = head(key, HEAD_LINES, until="cwd")
        for rec in records:
            if isinstance(rec.get("cwd"), str):
                return rec["cwd"], True, read
        return None, len(records) >= HEAD_LINES or read >= HEAD_LIMIT, read

    def reader(self, key: str) -> ClaudeReader:
        return ClaudeReader(key, session_id(key))


# --- how full, when it compacts -------------------------------------------------------------------
# Claude Code 2.1.332: it compacts at its effective window (the model's window less
# min(default output tokens, 20,000)) less a 13,000-token buffer, and warns 20,000 tokens before
# that; `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` lowers the point to that percent of the effective
# window. A model it does not know gets a 200,000-token window.

UNKNOWN_WINDOW = 200_000  # Claude Code's window for a model it does not recognise
OUTPUT_RESERVE = 20_000  # at most this much of the default output is set aside
COMPACT_BUFFER = 13_000
WARN_BEFORE = 20_000
DEFAULT_OUTPUT = 32_000  # an unknown model's default output (reserve: 20,000 either way)
PCT_OVERRIDE = "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"


def compact_limits(model: str | None, pct_override: float | None = None) -> AgentLimits:
    """Claude Code's window for `model` and where it compacts by itself."""
    from ctxd.tokens import catalog

    info = catalog.lookup(model)
    window = catalog.context_window_for(model)
    if info is None or window is None:
        window, window_source = UNKNOWN_WINDOW, \
            f"Claude Code {VERSION}'s window for a model it does not recognise ({model!r})"
        output = DEFAULT_OUTPUT
    else:
        window_source = f"Claude Code {VERSION}'s model catalogue ({info.prefix}" + (
            ", [1m])" if catalog.one_million_tag(model) else ")")
        output = info.max_output or DEFAULT_OUTPUT
    effective = window - min(output, OUTPUT_RESERVE)
    limit = effective - COMPACT_BUFFER
    source = (f"Claude Code {VERSION}: window - min(default output, {OUTPUT_RESERVE:,}) - "
              f"{COMPACT_BUFFER:,}")
    if pct_override and 0 < pct_override <= 100:
        limit = min(int(effective * pct_override / 100), limit)
        source += f", {PCT_OVERRIDE}={pct_override:g}"
    return AgentLimits(window, window_source, limit, source, max(0, limit - WARN_BEFORE))


def pct_override(home: Path) -> float | None:
    """`CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` as Claude Code's user settings set it (`env` in
    settings.json), if any."""
    try:
        settings = json.loads((home / "settings.json").read_text(encoding="utf-8"))
        raw: Any = (settings.get("env") or {}).get(PCT_OVERRIDE)
        value = float(raw)  # None or a non-number: TypeError, ValueError
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return value if 0 < value <= 100 else None


# --- hooks ----------------------------------------------------------------------------------------

CHANGES_FILES = {"Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"}
"""Tools that can change the working tree. A shell command can change anything: always one."""
EVENTS = {  # the hooks install writes: event -> matcher (None: every occurrence)
    "UserPromptSubmit": None,
    "PreToolUse": "Write|Edit|MultiEdit|NotebookEdit|Bash",
    "PostCompact": None,
    "SessionStart": "compact",
}
HOOK_TIMEOUT_SECONDS = 10
"""What Claude Code waits at most (the hook itself returns within 2 s)."""


# --- ctxd's entries in its configuration ----------------------------------------------------------
# settings.json: `hooks`, `statusLine`; the MCP server in `.mcp.json` for a project,
# `~/.claude.json` for the user. At project scope, with no status line of the project's own, the
# user's (from ~/.claude/settings.json, which the project's would hide) is carried, and uninstall
# leaves the project without one.


def config_files(scope: str, project: Path, home: Path) -> tuple[Path, Path]:
    """(settings.json, the file holding its MCP servers) for a scope."""
    if scope == "project":
        return project / ".claude" / "settings.json", project / ".mcp.json"
    state = home / ".claude.json" if os.environ.get("CLAUDE_CONFIG_DIR") else Path.home() / ".claude.json"
    return home / "settings.json", state


def _limit(scope: str, path: Path) -> int:
    """How much of a file install reads: `~/.claude.json` (Claude Code's own state) may be large."""
    from ctxd.agents.config.files import LARGE_LIMIT, LIMIT

    return LARGE_LIMIT if scope == "user" and path.name == ".claude.json" else LIMIT


def _read(path: Path, scope: str, project: Path) -> str | None:
    from ctxd.agents.config.plan import read_scoped

    return read_scoped(path, scope, project, _limit(scope, path))


def _hooks(ctxd: list[str]) -> Any:
    from ctxd.agents.config.json_settings import Hooks
    from ctxd.agents.config.ours import shell

    return Hooks(EVENTS, lambda event: shell([*ctxd, "hook", "claude", event]), HOOK_TIMEOUT_SECONDS)


def settings_add(settings: dict[str, Any], ctxd: list[str], inherited: Any = None) -> dict[str, Any]:
    """ctxd's hooks and status line in `settings`; `inherited`: the user's own status line to
    carry when `settings` has none (project scope)."""
    from ctxd.agents.config import json_settings

    json_settings.hooks_add(settings, _hooks(ctxd))
    return json_settings.status_line_add(settings, [*ctxd, "statusline"], inherited, extra={"padding": 0})


def settings_remove(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` without ctxd's hook entries and its status line (the one it carried put back)."""
    from ctxd.agents.config import json_settings

    return json_settings.status_line_remove(json_settings.hooks_remove(settings))


def mcp_add(state: dict[str, Any], ctxd: list[str]) -> dict[str, Any]:
    from ctxd.agents.config import json_settings
    from ctxd.agents.config.ours import mcp_entry

    return json_settings.mcp_add(state, mcp_entry(ctxd))


def mcp_remove(state: dict[str, Any]) -> dict[str, Any]:
    from ctxd.agents.config import json_settings

    return json_settings.mcp_remove(state)


def holds_ours(text: str) -> bool:
    from ctxd.agents.config import json_settings

    return json_settings.holds(text, lambda value: mcp_remove(settings_remove(value)))


# --- the status line ------------------------------------------------------------------------------
# Its JSON on stdin: `context_window {context_window_size, current_usage {input_tokens,
# cache_creation_input_tokens, cache_read_input_tokens, output_tokens}}`, `cost.total_cost_usd`,
# `model.id`, `session_id`, `cwd`, `workspace.current_dir`, `transcript_path`.

SUMMARY_OUTPUT_TOKENS = 20_000
"""Claude Code keeps room for the compaction's summary (at most the model's output limit)..."""
COMPACT_BUFFER_TOKENS = 13_000
"""...and a buffer below that: it compacts at window - 20,000 - 13,000 (167,000 of 200,000)."""
TAIL_BYTES = 65_536  # the transcript's end read for the latest request (never the whole file)


def compaction_point(window: int) -> int:
    """Where Claude Code compacts a window of `window` tokens (CLAUDE_AUTOCOMPACT_PCT_OVERRIDE
    lowers it, as it does in Claude Code)."""
    effective = window - min(SUMMARY_OUTPUT_TOKENS, window // 2)
    point = effective - COMPACT_BUFFER_TOKENS
    try:
        override = float(os.environ.get(PCT_OVERRIDE) or "")
    except ValueError:
        override = 0.0
    if 0 < override <= 100:
        point = min(int(effective * override / 100), point)
    return max(1, point)


def last_request(transcript: Any) -> tuple[float, bool] | None:
    """The latest main-chain reply in the transcript's tail: when it came, and whether its cache
    writes went to Anthropic's 1-hour cache."""
    from ctxd import isotime

    if not isinstance(transcript, str) or not os.path.isabs(transcript):
        return None
    try:
        tail = read_tail(transcript, TAIL_BYTES).splitlines()
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    for raw in reversed(tail):
        if b'"assistant"' not in raw or b'"usage"' not in raw:
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        message = rec.get("message") if isinstance(rec, dict) and not rec.get("isSidechain") else None
        usage = message.get("usage") if isinstance(message, dict) else None
        at = isotime.seconds(rec.get("timestamp")) if isinstance(usage, dict) else None
        if at is not None and isinstance(usage, dict):
            split = usage.get("cache_creation")
            return at, isinstance(split, dict) and tokens(split.get("ephemeral_1h_input_tokens")) > 0
    return None


class Claude(Agent):
    name = "claude"
    title = "Claude Code"
    version = VERSION
    cache_provider = "anthropic"
    # Claude Code's transcripts state neither its system prompt nor its tools; its own /context
    # counts them apart. Its first request (Claude Code 2.1.332, `claude -p` captured by the fake
    # Messages server of tests/model_servers.py) carried a system prompt of 7.1k estimated tokens and
    # 12 tool declarations of 11.9k: the tools are 62.5% of the two.
    overhead = (("builtinTools", "Claude Code's built-in tools (inferred)", 0.625),
                ("systemPrompt", "Claude Code's system prompt and memory (inferred)", 0.375))
    overhead_how = "; Claude Code's tools and system prompt split as its own first request carries them (62.5% tools)"
    hook_events: Mapping[str, HookAction] = {
        "UserPromptSubmit": "turn",
        "PreToolUse": "tool",
        "PostCompact": "compacted",
        "SessionStart": "after-compaction",
    }

    def home(self, env: Mapping[str, str], configured: str | None) -> Path:
        user = Path(env.get("HOME") or Path.home())
        return Path(configured or env.get("CLAUDE_CONFIG_DIR") or user / ".claude").expanduser()

    def session_root(self, home: Path) -> Path:
        return home / "projects"

    def sessions(self, root: Path) -> ClaudeSessions:
        return ClaudeSessions(root)

    def summary_reader(self, key: str) -> ClaudeReader:
        return ClaudeReader(key, session_id(key), summary=True, window=False)

    def summary_files(self, key: str) -> list[str]:
        """Its subagents' transcripts (they add to its cost)."""
        return subagent_files(key)

    def read_config(self, home: Path) -> AgentConfig:
        return AgentConfig(compact_percent=pct_override(home), source=str(home / "settings.json"))

    def limits(self, model: str | None, stated_window: int | None, config: AgentConfig) -> AgentLimits:
        return compact_limits(model, config.compact_percent)  # the transcript states no window

    # --- hooks ---

    def hook_input(self, event: str, data: dict[str, Any]) -> HookInput | None:
        return payloads.claude_style(self.hook_events, event, data)

    def changes_files(self, tool_name: str, tool_input: Any) -> bool:
        return tool_name in CHANGES_FILES

    def tool_paths(self, tool_name: str, tool_input: Any) -> list[str]:
        return payloads.named_paths(tool_input)

    def shell_command(self, tool_name: str, tool_input: Any) -> str | None:
        return payloads.command(tool_input) if tool_name == "Bash" else None

    def compaction_notice(self, text: str) -> str | None:
        return payloads.session_start_context(text)

    # --- ctxd's entries in its configuration ---

    def _home(self) -> Path:
        return self.home(os.environ, None)

    def user_status_line(self) -> Any:
        """The status line of the user's own settings (not ctxd's: the one ctxd's carries, if any)."""
        from ctxd.agents.config import json_settings
        from ctxd.agents.config.files import InstallError

        path = self._home() / "settings.json"
        try:
            settings = json_settings.load(path, _read(path, "user", Path()))
        except InstallError:
            return None
        return json_settings.own_status_line(settings)

    def config_changes(self, action: Action, scope: Scope, project: Path, state_dir: Path,
                       ctxd: list[str]) -> tuple[list[ConfigChange], list[str]]:
        from ctxd.agents.config.plan import json_install, json_uninstall

        settings, mcp = config_files(scope, project, self._home())
        settings_text, mcp_text = _read(settings, scope, project), _read(mcp, scope, project)
        notes: list[str] = []
        if action == "install":
            inherited = self.user_status_line() if scope == "project" else None
            changes = [json_install(settings, settings_text, lambda v: settings_add(v, ctxd, inherited), holds_ours),
                       json_install(mcp, mcp_text, lambda v: mcp_add(v, ctxd), holds_ours)]
            if scope == "project":
                notes.append("Claude Code asks once whether to use the MCP servers of this project's .mcp.json: "
                             "approve `ctxd` (or run `claude mcp list` to see its state).")
        else:
            changes = [json_uninstall(settings, settings_text, settings_remove, state_dir, holds_ours),
                       json_uninstall(mcp, mcp_text, mcp_remove, state_dir, holds_ours)]
        return changes, notes

    def config_status(self, scope: Scope, project: Path) -> str:
        from ctxd.agents.config import json_settings
        from ctxd.agents.config.files import InstallError

        settings, mcp = config_files(scope, project, self._home())
        try:
            value = json_settings.load(settings, _read(settings, scope, project))
            events = json_settings.hooks_installed(value, EVENTS)
            has_mcp = json_settings.mcp_installed(json_settings.load(mcp, _read(mcp, scope, project)))
        except InstallError as error:
            return f"claude {scope}: {error}"
        return (f"claude {scope}: hooks {', '.join(events) or 'none'}; status line "
                f"{'yes' if json_settings.our_status_line(value.get('statusLine')) else 'no'}; MCP server "
                f"{'yes' if has_mcp else 'no'} ({settings})")

    def mcp_installed(self, project: Path) -> bool:
        from ctxd.agents.config.plan import mcp_in_json

        return mcp_in_json(lambda scope: config_files(scope, project, self._home())[1], project, _limit)

    # --- status line ---

    def statusline_usage(self, data: dict[str, Any]) -> StatusUsage:
        """Input + cache writes + cache reads of the latest request, against its window and
        compaction point."""
        raw_context = data.get("context_window")
        context: dict[str, Any] = raw_context if isinstance(raw_context, dict) else {}
        raw_current = context.get("current_usage")
        current: dict[str, Any] | None = raw_current if isinstance(raw_current, dict) else None
        used = (tokens(current.get("input_tokens")) + tokens(current.get("cache_creation_input_tokens"))
                + tokens(current.get("cache_read_input_tokens"))) if current else 0
        window = tokens(context.get("context_window_size")) or UNKNOWN_WINDOW
        raw_cost, raw_model = data.get("cost"), data.get("model")
        cost: dict[str, Any] = raw_cost if isinstance(raw_cost, dict) else {}
        total = cost.get("total_cost_usd")
        model: dict[str, Any] = raw_model if isinstance(raw_model, dict) else {}
        workspace = data.get("workspace")
        cwd = data.get("cwd") or (workspace.get("current_dir") if isinstance(workspace, dict) else None)
        session = data.get("session_id")
        return StatusUsage(used, tokens(current.get("output_tokens")) if current else 0, window,
                           compaction_point(window), current is not None,
                           total if _amount(total) else None,
                           model.get("id") if isinstance(model.get("id"), str) else None,
                           session if isinstance(session, str) and session else None,
                           cwd if isinstance(cwd, str) else None)

    def statusline_cache(self, data: dict[str, Any]) -> tuple[float, bool] | None:
        return last_request(data.get("transcript_path"))


def _amount(value: Any) -> bool:
    """Whether a stated cost is an amount of dollars to show: a finite number from 0 up to a
    billion (a broken or hostile status line input said 1e999, which JSON reads as infinity)."""
    return type(value) in (int, float) and 0 <= value < 1e9  # (NaN compares false: not one)


AGENT = Claude()
