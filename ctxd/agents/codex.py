"""Codex CLI: its rollouts, window and compaction rule, hooks and configuration (ctxd/agents/base.py).

Sessions: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl` (`CODEX_HOME` default `~/.codex`); the
first line is the session's meta, with its `cwd`, and a session outside every open folder is never
read beyond it.

The format, as openai/codex writes it (codex-rs/protocol/src/protocol.rs): every line is a
`RolloutLine` `{timestamp, type, payload}` where `type`/`payload` is a `RolloutItem`:
`session_meta` (`SessionMetaLine`: id, timestamp, cwd, originator, cli_version, instructions,
source, model_provider, git), `response_item` (a Responses API item, which is already ctxd's item
shape), `compacted` (`CompactedItem` {message, replacement_history?}: the history is replaced),
`turn_context` (`TurnContextItem`: cwd, model, policies, ...), `event_msg` (`EventMsg`, tagged by
`type`). The events used here: `token_count` (`TokenCountEvent` {info: `TokenUsageInfo`
{total_token_usage, last_token_usage, model_context_window} | null, rate_limits}),
`task_started` {model_context_window} and `user_message` {message, images} (what the user typed:
a new turn, and the title). Other event types are normal and ignored; other record types are
skipped and counted.

Newer versions (0.171) write a user turn as `event_msg` `item_completed` whose `item` is
`{type: "UserMessage", content: [{type: "text", text}]}` instead of `user_message`, and add
bookkeeping records ctxd has no use for (`KNOWN_OTHER`); the window is still the events'
`model_context_window` (the model's window less Codex's 5% reserve). A version that writes both forms of a turn counts it once; the same
prompt typed twice ("continue") is two turns, in a summary too.

A `token_count` whose `last_token_usage` has neither input nor output is no request's report but
a marker: 0.171
writes one before its compaction's summary (`total_tokens` 0) and one after the `compacted` record,
before its first request there, whose `total_tokens` is its own figure for the new history (6,877
in a test, 940,500 for a window of 258,400 in issue #36). Neither is the window's fill, nor a
compaction's fill before or after: the fill stays the last report's until the compaction, and is
estimated from the new history after it until the first real report.

Gauge rule (Codex's own status line, codex-rs/tui chatwidget `context_remaining_percent`): the
tokens in the window are `info.last_token_usage.total_tokens` of the latest `token_count`, out of
`info.model_context_window`. Codex then shows "% left" after setting aside a 12,000-token
baseline (`BASELINE_TOKENS`) from both; ctxd's percent is the plain ratio (docs/sessions.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.agents import payloads, skim
from ctxd.agents.base import Action, Agent, AgentConfig, AgentLimits, HookAction, HookInput, Scope
from ctxd.agents.jsonl import HEAD_LIMIT, JsonlStore, Reader, entries, head, kind_of, parse, under
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
    token_list,
)
from ctxd.agents.skim import value as _value
from ctxd.ledger.rules import is_real_user_message, message_text
from ctxd.redact import redact

try:
    from ctxd.agents import _codex
except ImportError:  # no compiler at install: each line is read by `take`, with the same result
    _codex = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from ctxd.agents.config.codex_toml import HookTrust
    from ctxd.agents.config.plan import ConfigChange
    from ctxd.agents.folders import Folders

VERSION = "0.171"

# Response items Codex records that ctxd's ledger takes as they are.
PASS_THROUGH = {"message", "function_call", "function_call_output", "custom_tool_call",
                "custom_tool_call_output", "reasoning", "compaction"}
# Tool calls ctxd's item set has no type for: mirrored as function calls of that name.
AS_FUNCTION_CALL = {"local_shell_call": "local_shell", "web_search_call": "web_search"}
# Recorded but never sent to the model (Codex's own undo commits).
NOT_MODEL_VISIBLE = {"ghost_snapshot"}
# Record types read and deliberately not used: `world_state` (the context Codex assembled; its
# text also arrives as response items), `token_usage_record` (one response's usage; the
# `token_count` event that follows carries the same numbers and the running total),
# `last_usage_includes_reasoning` (a flag about how the last usage was counted).
KNOWN_OTHER = {"world_state", "token_usage_record", "last_usage_includes_reasoning"}
_TOTALS = ("total_tokens", "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
# Summary mode (ctxd/sessions/summaries.py): the top-level fields a line is skimmed for, the
# events that are parsed, and the response items whose kind is known.
LINE_KEYS = (b"timestamp", b"type")
SKIMMED = {"response_item", "event_msg"} | KNOWN_OTHER  # passed over unless they hold one of the needles
# What `take` is given of a line it reads (skim.py `scan`): the event's fields `_event` reads, built
# when plain (a report's usage), the payload as its offsets. A row is (start, end, timestamp, type,
# payload, payload.type, payload.model, then `_EVENT_FIELDS`).
PATHS = ((b"timestamp",), (b"type",), (b"payload",), (b"payload", b"type"), (b"payload", b"model"),
         *((b"payload", name.encode()) for name in ("info", "model_context_window", "message", "item")))
LIMITS = (0, 0, 0, 0, 0, *(4 * [skim.PLAIN_BYTES]))
_TURN_FORMS = ("item_completed", "user_message")  # the events a turn is written as
_EVENT_FIELDS = ("info", "model_context_window", "message", "item")
_LAYOUT = tuple(range(2, 2 + len(PATHS)))  # where `_codex.run` finds each of PATHS in a row, in their order
NEEDLES = tuple(f'"{name}"'.encode() for name in ("token_count", "user_message", "UserMessage", "task_started"))
TITLE_NEEDLES = (b'"role":"user"', b'"role": "user"')
# The same, read from the line's values as the skimmer walks it (a search of every line for the
# needles cost a first `ctxd sessions` 0.19 s of CPU over 1,000 rollouts): the events it reads, a
# user message's completion, and a user message while the title is not known.
MARKS = (((b"payload", b"type"), tuple(f'"{name}"'.encode() for name in ("token_count", "user_message", "task_started"))),
         ((b"payload", b"item", b"type"), (b'"UserMessage"',)))
TITLE_MARKS = (((b"payload", b"role"), (b'"user"',)),)
_SKIMMED_KINDS = ("event_msg", "turn_context")  # (summary mode) read from their fields, not parsed whole


def _is_input(item: dict[str, Any]) -> bool:
    """An item a request sends (not one its response wrote)."""
    kind = item.get("type")
    return (kind == "message" and item.get("role") != "assistant") or kind in (
        "function_call_output", "custom_tool_call_output")


class CodexReader(Reader):
    agent = "codex"
    resumable = True

    def __init__(self, path: str, *, window: bool = True, summary: bool = False) -> None:
        super().__init__(path, window=window, summary=summary)
        self.skims = summary
        if summary:
            self.paths, self.limits = PATHS, LIMITS
            self.folds = _codex is not None
        self._init()

    def _init(self) -> None:
        self._total: tuple[int, ...] = (0, 0, 0, 0, 0)  # the latest total_token_usage (`_TOTALS`), for deltas
        self._stamp: str | None = None  # the timestamp of the line being read
        self._fill = 0  # the latest non-zero fill reported (a compaction's "before")
        self._users = 0  # the window's real user messages (a compaction without its history keeps them)
        self._early: list[dict[str, Any]] = []  # the items before the first report, when the window is not held
        self._pending: list[bytes] = []  # summary mode: response items after the last report, for the tail
        self._report_end = -1  # summary mode: where the chunk's last report ends
        # The forms the last turn was read in (`user_message`, `item_completed`): a version that
        # writes both writes one turn twice; the same form again is a turn of its own ("continue"
        # typed twice). A state saved without them: both (counted once, as before).
        self._turn_forms: set[str] = set()

    def reset(self) -> None:
        super().reset()
        self._init()

    def own_state(self) -> dict[str, Any]:
        return {"total": list(self._total), "fill": self._fill, "users": self._users, "turn_forms": sorted(self._turn_forms),
                "pending": [redact(raw.decode("utf-8", "replace")) for raw in self._pending]}

    def restore_own(self, state: dict[str, Any]) -> None:
        total = state.get("total")
        self._total = tuple(int(n) for n in total) if isinstance(total, list) and len(total) == len(_TOTALS) \
            else (0, 0, 0, 0, 0)
        self._fill = int(state.get("fill") or 0)
        self._users = int(state.get("users") or 0)
        forms = state.get("turn_forms", list(_TURN_FORMS))
        self._turn_forms = {form for form in forms if form in _TURN_FORMS} if isinstance(forms, list) else set()
        self._pending = [raw.encode("utf-8") for raw in state.get("pending") or []]

    skip_types = tuple(json.dumps(kind).encode() for kind in sorted(SKIMMED))

    def needles(self) -> tuple[bytes, ...]:
        """Summary mode: the events it reads, and a user message while the title is not known (in
        a line the skimmer cannot walk; the others are looked at by `marks`)."""
        return NEEDLES if self.session.title is not None else NEEDLES + TITLE_NEEDLES

    def marks(self) -> tuple[tuple[tuple[bytes, ...], tuple[bytes, ...]], ...]:
        return MARKS if self.session.title is not None else MARKS + TITLE_MARKS

    def take(self, data: bytes, row: tuple[Any, ...], change: Change) -> None:
        """Summary mode: a line it reads (the others are passed over in skim.py). An event or a turn
        context is read from the fields `record` would read of it (a report's usage only); any
        other line is parsed whole."""
        kind = row[3] if len(row) > 2 else None
        payload = row[4] if kind is not None else None
        if kind == "response_item" and self.session.title is not None:
            # Looked at for a title (`marks` held its while the chunk was scanned), known now: a
            # summary keeps nothing else of a response item (`record`), so it is not parsed.
            stamp = row[2] if type(row[2]) is not tuple else skim.decode(data, row[2])
            if isinstance(stamp, str):
                self.session.last_activity = stamp
            return
        if (kind == "event_msg" or kind == "turn_context") and type(payload) is tuple and data[payload[0]] == 0x7B:
            decode = skim.decode
            stamp = row[2] if type(row[2]) is not tuple else decode(data, row[2])
            if isinstance(stamp, str):
                self.session.last_activity = self._stamp = stamp
            else:
                self._stamp = None
            if kind == "turn_context":
                self._context(decode(data, row[6]), change)
                return
            event_type = row[5] if type(row[5]) is not tuple else decode(data, row[5])
            if event_type == "token_count":  # (`_event`, at once: one a request)
                info = row[7] if type(row[7]) is not tuple else decode(data, row[7])
                if isinstance(info, dict):
                    self._usage(info, change)
                return
            event = {"type": event_type}
            for name, value in zip(_EVENT_FIELDS, row[7:]):
                event[name] = decode(data, value)
            self._event(event, stamp, change)
            return
        self.take_whole(data[row[0]:row[1]], change)

    def fold(self, data: bytes, rows: list[tuple[Any, ...]], i: int, change: Change) -> int:
        """Summary mode: the lines from rows[i] on that `take` reads from their fields (reports, turns,
        turn contexts, the events and response items around them), read at once (_codex.c); the
        index after them."""
        session = self.session
        run = _codex.run(data, rows, i, _LAYOUT, MAX_TOKENS, (session.title is not None, session.model,
                                                               session.context_window, session.baseline,
                                                               session.last_usage, self._total))
        if run is None:
            return i
        (stop, self.line_stop, activity, stamped, stamp, model, model_changed, window, window_changed, first_used,
         prompted, request_at, cache_1h, fill, reported, baseline, last_usage, report_end, usage_changed,
         total_changed, total, sums, turns) = run
        if activity is not None:
            session.last_activity = activity
        if stamped:
            self._stamp = stamp
        if model_changed or window_changed:
            session.model, session.context_window = model, window
            change.meta = True
        if first_used:
            note_reports(session, first_used, prompted, request_at, None if cache_1h < 0 else bool(cache_1h))
        self._fill = fill or self._fill
        if reported:
            session.reported(baseline)
            session.last_usage = last_usage
            self._pending = []
            self._report_end = report_end
        for name, counts in sums:
            session.bill(name, Usage(*counts))
        if total_changed:
            self._total = total
        change.usage = change.usage or bool(usage_changed)
        for event_type, said, timestamp in turns:  # (as `take` has them, in their order)
            self._event({"type": event_type, "message" if event_type == "user_message" else "item": skim.decode(data, said)},
                        timestamp, change)
        return int(stop)

    def skipped(self, data: bytes, start: int, stop: int, change: Change) -> None:
        found = skim.fields(memoryview(data)[start:stop], 0, LINE_KEYS)
        stamp = _value(data, start, found, 0) if found is not None else None
        if isinstance(stamp, str):
            self.session.last_activity = stamp

    def chunk_read(self, data: bytes, end: int) -> None:
        """The response items after the chunk's last report (or all of them, with no report in
        it) are kept for the tail, as they are."""
        if self.session.baseline is None:
            self._pending, self._report_end = [], -1
            return
        start = self._report_end + 1 if self._report_end >= 0 else 0
        self._report_end = -1
        while start <= end:
            stop = data.find(b"\n", start, end + 1)
            stop = end if stop < 0 else stop
            found = skim.fields(memoryview(data)[start:stop], 0, LINE_KEYS)
            if found is not None and _value(data, start, found, 1) == "response_item":
                self._pending.append(data[start:stop])
            start = stop + 1

    def finish_summary(self) -> None:
        """The items after the last report, from the lines kept for them (the fill counts them)."""
        tail: list[dict[str, Any]] = []
        if self.session.baseline is not None:
            for raw in self._pending:
                rec = parse(raw.decode("utf-8", "replace"))
                payload = rec.get("payload") if rec is not None else None
                item = self._item(payload, count=False) if isinstance(payload, dict) else None
                if item is not None:
                    tail.append(item)
        self.session.tail = tail

    def record(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        kind = kind_of(rec)
        payload = rec.get("payload")
        timestamp = rec.get("timestamp")
        if isinstance(timestamp, str):
            session.last_activity = timestamp
        self._stamp = timestamp if isinstance(timestamp, str) else None
        if not isinstance(payload, dict):
            session.count_unknown(str(kind))
            return
        if kind == "response_item":
            item = self._item(payload)
            if item is not None and session.title is None and is_real_user_message(item):
                session.title = shorten(message_text(item))  # rollouts without user_message events
                change.meta = True
            if item is not None:
                if self.summary:
                    return  # (read for the title; kept for the tail by `chunk_read`)
                self._add(item, change)
        elif kind == "event_msg":
            self._event(payload, timestamp, change)
        elif kind == "turn_context":
            self._context(payload.get("model"), change)
        elif kind == "compacted":
            self._compacted(payload, change)
        elif kind == "session_meta":
            self._meta(payload, timestamp, change)
        elif kind in KNOWN_OTHER:
            return
        else:
            session.count_unknown(str(kind))

    # --- records ---

    def _add(self, item: dict[str, Any], change: Change) -> None:
        session = self.session
        session.add_item(item, self.holds_window)
        change.add(item, session)
        if is_real_user_message(item):
            self._users += 1
        if session.first_request is None and not self.holds_window:
            self._early.append(item)  # until the first report

    def _meta(self, meta: dict[str, Any], timestamp: Any, change: Change) -> None:
        session = self.session
        meta_id = meta.get("id")
        if session.id is None:
            session.id = meta_id if isinstance(meta_id, str) else None
            session.cwd = meta.get("cwd") if isinstance(meta.get("cwd"), str) else None
            session.started = meta.get("timestamp") or timestamp
            version = meta.get("cli_version")
            session.version = version if isinstance(version, str) else None
            forked = meta.get("forked_from_id")
            session.forked_from = forked if isinstance(forked, str) else None
            instructions = meta.get("base_instructions") or meta.get("instructions")
            if isinstance(instructions, dict):
                instructions = instructions.get("text")
            if isinstance(instructions, str):
                session.base_instructions = instructions
            tools = meta.get("dynamic_tools")
            if isinstance(tools, list):  # the client's own tools, declared in the meta line
                session.tools = [{"name": str(t.get("name") or "?"), "schema": t.get("input_schema")}
                                 for t in tools if isinstance(t, dict)]
            change.meta = True
        elif meta_id != session.id and session.forked_from is None and isinstance(meta_id, str):
            # A fork copies its source's history, source meta line included.
            session.forked_from = meta_id
        elif meta_id == session.id and isinstance(meta.get("cli_version"), str):
            session.version = meta["cli_version"]  # a resume by another version of Codex

    def _item(self, payload: dict[str, Any], count: bool = True) -> dict[str, Any] | None:
        kind = kind_of(payload)
        if kind in PASS_THROUGH:
            if kind == "function_call_output" and isinstance(payload.get("output"), dict):
                payload = {**payload, "output": str(payload["output"].get("content", ""))}
            return payload
        if kind == "compaction_summary":
            return {**payload, "type": "compaction"}
        name = AS_FUNCTION_CALL.get(str(kind))
        if name is not None:
            call_id = payload.get("call_id") or payload.get("id") or ""
            arguments = {k: v for k, v in payload.items() if k not in ("type", "id", "call_id", "status")}
            return {"type": "function_call", "call_id": str(call_id), "name": name,
                    "arguments": json.dumps(arguments, ensure_ascii=False)}
        if kind not in NOT_MODEL_VISIBLE and count:
            self.session.count_unknown(f"response_item.{kind}")
        return None

    def _context(self, model: Any, change: Change) -> None:
        """A turn context: the model the turns from here use."""
        if isinstance(model, str) and model != self.session.model:
            self.session.model = model
            change.meta = True

    def _event(self, event: dict[str, Any], timestamp: Any, change: Change) -> None:
        session = self.session
        kind = kind_of(event)
        if kind == "token_count":
            info = event.get("info")
            if isinstance(info, dict):
                self._usage(info, change)
        elif kind == "user_message":
            self._turn(event.get("message"), timestamp, change, kind)
        elif kind == "item_completed":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "UserMessage":
                parts = item.get("content")
                texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)] \
                    if isinstance(parts, list) else []
                self._turn("\n".join(texts), timestamp, change, kind)
        elif kind == "task_started":
            window = event.get("model_context_window")
            if isinstance(window, int) and window > 0 and window != session.context_window:
                session.context_window = window
                change.meta = True

    def _turn(self, text: Any, timestamp: Any, change: Change, form: str) -> None:
        """A user turn: what the user typed, from whichever event (`form`) this version writes."""
        session = self.session
        if not isinstance(text, str):
            return
        last = session.last_turn()
        label = shorten(text, 60)
        if last is not None and last.index == session.window and last.generation == session.generation \
                and last.text == label and form not in self._turn_forms:
            self._turn_forms.add(form)
            return  # the same turn in the other form (`user_message` and `UserMessage` both written)
        self._turn_forms = {form}
        if session.title is None and text.strip():
            session.title = shorten(text)
            change.meta = True
        turn = Turn(session.window, label, timestamp if isinstance(timestamp, str) else None, session.generation)
        session.add_turn(turn, self.holds_window)
        change.turns.append(turn)

    def _usage(self, info: dict[str, Any], change: Change) -> None:
        session = self.session
        last = info.get("last_token_usage")
        total = info.get("total_token_usage")
        window = info.get("model_context_window")
        if isinstance(window, int) and window > 0 and window != session.context_window:
            session.context_window = window
            change.meta = True
        counts = token_counts(last) if isinstance(last, dict) else {}
        count = counts.get
        if count("input_tokens") or count("output_tokens"):
            # (no input and no output: a marker, module docstring)
            used = count("total_tokens", 0)
            cached = count("cached_input_tokens", 0)
            request = Usage(input=max(0, count("input_tokens", 0) - cached), cached_input=cached,
                            cache_write=count("cache_write_input_tokens", 0))
            note_report(session, used, request, session.model, self._stamp)
            self._fill = used or self._fill
            if session.first_request is None and counts.get("input_tokens") and not self.summary:
                # What the request carried: the items up to the last input; the response's
                # items were recorded before this event.
                window = session.items if self.holds_window else self._early
                carried = len(window)
                while carried and not _is_input(window[carried - 1]):
                    carried -= 1
                session.first_request = first_request(counts["input_tokens"], window[:carried])
                self._early = []
            if used != session.baseline or session.last_usage != counts:
                session.reported(used)
                session.last_usage = counts
                change.usage = True
                self._pending = []
                self._report_end = self.line_stop
        if isinstance(total, dict):
            # Cost from the running total; a total that went down is a new process (a resume)
            # whose count starts again, so it is added on top rather than subtracted. Never a
            # negative part, whatever the file says; cached input is part of the input.
            now = tuple(token_list(map(total.get, _TOTALS)))
            if now == self._total:
                return  # (the same total again: nothing billed)
            before = self._total if now[0] >= self._total[0] else (0, 0, 0, 0, 0)
            billed = max(0, now[1] - before[1])
            cached = min(max(0, now[2] - before[2]), billed)
            output = max(0, now[3] - before[3])
            if billed or output:
                session.bill(session.model or "", Usage(input=billed - cached, cached_input=cached, output=output,
                                                        reasoning=max(0, now[4] - before[4])))
                change.usage = True
            self._total = now

    def _compacted(self, payload: dict[str, Any], change: Change) -> None:
        """The history is replaced: by `replacement_history` when the line has it, else as Codex
        rebuilds it (codex-rs/core compact.rs): the earlier user messages, then the summary."""
        session = self.session
        replacement = payload.get("replacement_history")
        rebuild = not isinstance(replacement, list)
        if isinstance(replacement, list):
            items = [item for item in (self._item(i) for i in replacement if isinstance(i, dict)) if item is not None]
            kept = items
        else:
            message = payload.get("message")
            items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": message}]}] \
                if isinstance(message, str) and message else []
            kept = [i for i in session.items if is_real_user_message(i)] + items  # (the window, when held)
        at = self._stamp or session.last_activity  # the file's time, never the time it is read
        session.agent_compactions.append({"trigger": None, "tokensBefore": self._fill or None, "tokensAfter": None,
                                          "at": at})
        users = sum(map(is_real_user_message, items)) + (self._users if rebuild else 0)
        session.replace_window(kept, self.holds_window)  # until the next token_count reports the smaller window
        if rebuild and not self.holds_window:
            session.window = users  # the window's user messages, then the summary (one of them)
        self._users = users
        self._pending = []
        session.compactions += 1
        session.generation += 1
        change.replace(session, kept if self.holds_window else items, session.compactions - 1, at,
                       rebuild=rebuild and not self.holds_window)
        change.usage = True


# --- where its sessions live ----------------------------------------------------------------------


class CodexSessions(JsonlStore):
    """`<root>/YYYY/MM/DD/rollout-*.jsonl`, found at any depth under the root."""

    def session_files(self) -> list[str]:
        found: list[str] = []
        pending = [str(self.root)]
        while pending:
            for entry in entries(pending.pop()):
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.name.startswith("rollout-") and entry.name.endswith(".jsonl") and entry.is_file(
                        follow_symlinks=False):
                    found.append(entry.path)
        return found

    def is_session_file(self, path: str) -> bool:
        p = Path(path)
        return p.name.startswith("rollout-") and p.name.endswith(".jsonl") and under(p, self.root)

    def peek_cwd(self, key: str, folders: Folders) -> tuple[str | None, bool, int]:
        """The first line is the session's meta: its `cwd` is the session's."""
        records, read = head(key, 1)
        if not records:
            return None, read >= HEAD_LIMIT, read  # a first line over the limit: not a session
        payload = records[0].get("payload") if records[0].get("type") == "session_meta" else None
        cwd = payload.get("cwd") if isinstance(payload, dict) else None
        return (cwd if isinstance(cwd, str) else None), True, read

    def reader(self, key: str) -> CodexReader:
        return CodexReader(key)


# --- how full, when it compacts -------------------------------------------------------------------
# Codex 0.171 (codex-rs `ModelContextMetadata::auto_compact_token_limit_with_override`): the
# configured `model_auto_compact_token_limit` (or the model's own `auto_compact_token_limit`),
# never above 90% of the model's context window; without either, 90% of it. The rollout's
# `model_context_window` is the *effective* window (95% of the model's, Codex's
# `effective_context_window_percent`), so the model's window comes from the catalogue.

COMPACT_FRACTION = (9, 10)  # context_window * 9 / 10
EFFECTIVE_PERCENT = 95  # default effective_context_window_percent
CATALOGUE_SOURCE = "codex"  # ctxd.tokens.catalog's entries read from Codex's bundled models.json


def compact_limits(model: str | None, stated_window: int | None, configured: int | None = None) -> AgentLimits:
    """Codex's window (what the rollout states, else the catalogue's effective one) and its
    auto-compact limit for `model` with the user's `model_auto_compact_token_limit`."""
    from ctxd.tokens import catalog

    info = catalog.lookup(model)
    if info is not None and (info.source == CATALOGUE_SOURCE or not stated_window):
        model_window = info.context_window
        model_source = f"Codex {VERSION}'s models.json ({model})" if info.source == CATALOGUE_SOURCE else \
            f"ctxd's model catalogue ({model})"
    elif stated_window:
        model_window = stated_window * 100 // EFFECTIVE_PERCENT
        model_source = f"inferred: the rollout's window / {EFFECTIVE_PERCENT}% (model {model!r} is unknown)"
    else:
        model_window = 0
        model_source = "unknown"
    window = stated_window or model_window * EFFECTIVE_PERCENT // 100
    window_source = "the rollout's model_context_window" if stated_window else model_source
    num, den = COMPACT_FRACTION
    cap = model_window * num // den
    if configured and configured > 0 and (not cap or configured < cap):
        limit, source = configured, "model_auto_compact_token_limit in Codex's config.toml"
    else:
        limit, source = cap, f"Codex {VERSION}'s default: 90% of the model's window ({model_source})"
    return AgentLimits(window, window_source, limit, source, limit * 4 // 5)  # no warning tier of its own: ctxd's


def configured_limit(home: Path) -> int | None:
    """`model_auto_compact_token_limit` from `$CODEX_HOME/config.toml` (read only), if set."""
    import tomllib

    try:
        with open(home / "config.toml", "rb") as handle:
            value = tomllib.load(handle).get("model_auto_compact_token_limit")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    return value if type(value) is int and value > 0 else None


# --- hooks ----------------------------------------------------------------------------------------

CHANGES_FILES = {"Bash", "apply_patch", "shell", "local_shell", "exec_command", "unified_exec", "write_stdin",
                 "shell_command"}
"""Tools that can change the working tree. A shell command can change anything: always one."""
SHELLS = CHANGES_FILES - {"apply_patch"}
EVENTS = {  # the hooks install writes: event -> matcher (None: every occurrence)
    "UserPromptSubmit": None,
    "PreToolUse": "^(Bash|apply_patch|shell|local_shell|exec_command|unified_exec|write_stdin|shell_command)$",
    "PostCompact": None,
    "SessionStart": "compact",
}


# --- ctxd's entries in its configuration: config.toml, edited as text -------------------------------
# `[[hooks.*]]` tables and `[mcp_servers.ctxd]`; an older ctxd's `notify`, which ran a process after
# every turn for nothing, is removed (`codex_toml.is_our_notify`). Codex's TOML is edited as text, never re-serialised (`ctxd.agents.config.codex_toml`):
# uninstall removes ctxd's own tables and keys wherever Codex's editor moved them, and nothing else.

HOOK_TIMEOUT_SECONDS = 10
"""What Codex waits at most (the hook itself returns within 2 s)."""


def config_file(scope: str, project: Path, home: Path) -> Path:
    return project / ".codex" / "config.toml" if scope == "project" else home / "config.toml"


def _toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def codex_add(path: Path, text: str | None, ctxd: list[str], scope: str) -> tuple[str, list[str]]:
    """The file with ctxd's entries (replacing earlier ones), and notes for the user."""
    from ctxd.agents.config import codex_toml
    from ctxd.agents.config.codex_toml import TomlEditError
    from ctxd.agents.config.files import InstallError
    from ctxd.agents.config.ours import shell

    try:
        base = codex_toml.remove_ours(text or "")
        parsed = codex_toml.parse(base)
    except TomlEditError as error:
        raise InstallError(f"{path}: {error}; left unchanged") from None
    notes = []
    servers = parsed.get("mcp_servers") or {}
    with_mcp = not (isinstance(servers, dict) and "ctxd" in servers)
    if not with_mcp:
        notes.append(f"{path}: an [mcp_servers.ctxd] of your own is configured; ctxd's was not added")
    hooks = [codex_toml.Hook(event, matcher, shell([*ctxd, "hook", "codex", event]), HOOK_TIMEOUT_SECONDS)
             for event, matcher in EVENTS.items()]
    result = codex_toml.add_ours(base, hooks, [*ctxd, "mcp"] if with_mcp else None)
    try:
        wanted = codex_toml.parse(result)
    except TomlEditError as error:
        raise InstallError(f"{path}: ctxd's hooks would not fit with what the file defines ({error}); "
                           "left unchanged") from None
    if text is not None and "ctxd" in text and codex_toml.parse(text) == wanted:
        result = text  # installed already, as this ctxd would write it (maybe moved by Codex's editor)
    return result, notes


def codex_remove(text: str) -> str:
    """`text` without ctxd's entries (wherever Codex's editor put them) and nothing else."""
    from ctxd.agents.config import codex_toml
    from ctxd.agents.config.files import InstallError

    try:
        return codex_toml.remove_ours(text)
    except codex_toml.TomlEditError as error:
        raise InstallError(f"{error}; left unchanged") from None


def holds_ours(text: str) -> bool:
    """Whether the file holds ctxd's entries already (put there by an install this one cannot
    undo byte for byte)."""
    import copy

    from ctxd.agents.config import codex_toml

    try:
        parsed = codex_toml.parse(text)
    except codex_toml.TomlEditError:
        return False
    return codex_toml.without_ours(parsed) != codex_toml.tidy(copy.deepcopy(parsed))


def _trust_words(trust: list[HookTrust]) -> str:
    states = [t.state for t in trust]
    if all(s == "trusted" for s in states):
        return "trusted"
    if all(s == "untrusted" for s in states):
        return "installed, not trusted yet: review them in Codex's /hooks"
    if "changed" in states:
        return (f"{states.count('trusted')} of {len(states)} trusted; changed since you trusted them: "
                "trust them again in Codex's /hooks")
    if "disabled" in states:
        return f"{states.count('disabled')} of {len(states)} turned off in Codex's /hooks"
    return f"{states.count('trusted')} of {len(states)} trusted; review the others in Codex's /hooks"


class Codex(Agent):
    name = "codex"
    title = "Codex"
    version = VERSION
    cache_provider = "openai"
    overhead = (("builtinTools", "Codex's built-in tools and instructions (inferred)", 1.0),)
    hook_events: Mapping[str, HookAction] = {
        "UserPromptSubmit": "turn",
        "PreToolUse": "tool",
        "PostCompact": "compacted",
        "SessionStart": "after-compaction",
        "notify": "ignore",  # an older ctxd's after-turn program, until the next install removes it
    }

    def home(self, env: Mapping[str, str], configured: str | None) -> Path:
        user = Path(env.get("HOME") or Path.home())
        return Path(configured or env.get("CODEX_HOME") or user / ".codex").expanduser()

    def session_root(self, home: Path) -> Path:
        return home / "sessions"

    def sessions(self, root: Path) -> CodexSessions:
        return CodexSessions(root)

    def summary_reader(self, key: str) -> CodexReader:
        return CodexReader(key, summary=True, window=False)

    def read_config(self, home: Path) -> AgentConfig:
        return AgentConfig(compact_limit=configured_limit(home), source=str(home / "config.toml"))

    def limits(self, model: str | None, stated_window: int | None, config: AgentConfig) -> AgentLimits:
        return compact_limits(model, stated_window, config.compact_limit)

    # --- hooks ---

    def hook_input(self, event: str, data: dict[str, Any]) -> HookInput | None:
        return payloads.claude_style(self.hook_events, event, data)

    def changes_files(self, tool_name: str, tool_input: Any) -> bool:
        return tool_name in CHANGES_FILES

    def tool_paths(self, tool_name: str, tool_input: Any) -> list[str]:
        if tool_name == "apply_patch":
            return payloads.patch_paths(tool_input)
        return payloads.named_paths(tool_input)

    def shell_command(self, tool_name: str, tool_input: Any) -> str | None:
        return payloads.command(tool_input) if tool_name in SHELLS else None

    def compaction_notice(self, text: str) -> str | None:
        return payloads.session_start_context(text)

    # --- ctxd's entries in its configuration ---

    def _file(self, scope: str, project: Path) -> Path:
        return config_file(scope, project, self.home(os.environ, None))

    def config_changes(self, action: Action, scope: Scope, project: Path, state_dir: Path,
                       ctxd: list[str]) -> tuple[list[ConfigChange], list[str]]:
        from ctxd.agents.config.plan import ConfigChange, read_backup, read_scoped

        path = self._file(scope, project)
        before = read_scoped(path, scope, project)
        notes: list[str] = []
        after: str | None
        if action == "install":
            after, notes = codex_add(path, before, ctxd, scope)
            notes.append("Codex runs a hook only once you have trusted it: start `codex` here and open `/hooks` "
                         "to review and trust ctxd's hooks (a changed hook needs trusting again); "
                         "`ctxd hooks status` says when Codex has.")
            if scope == "project":
                notes.append(f"Codex reads {path} only in a trusted project: accept Codex's prompt to trust "
                             f"{project}, or add [projects.{_toml_str(str(project))}] trust_level = \"trusted\" "
                             f"to {self._file('user', project)} yourself.")
        elif before is None:
            after = None
        else:
            from ctxd.agents.config.files import InstallError

            try:
                after = codex_remove(before)
            except InstallError as error:
                raise InstallError(f"{path}: {error}") from None
            backup = read_backup(state_dir, path)
            if after != before and not after.strip() and backup is not None and not backup.get("existed"):
                after = None  # install created it: nothing of the user's in it
        return [ConfigChange(path, before, after, holds_ours)], notes

    def config_status(self, scope: Scope, project: Path) -> str:
        from ctxd.agents.config import codex_toml
        from ctxd.agents.config.files import InstallError
        from ctxd.agents.config.ours import is_our_mcp
        from ctxd.agents.config.plan import read_scoped

        path = self._file(scope, project)
        user_path = self._file("user", project)
        try:
            config = codex_toml.parse(read_scoped(path, scope, project) or "")
            user = config if scope == "user" else codex_toml.parse(read_scoped(user_path, "user", project) or "")
        except (InstallError, codex_toml.TomlEditError) as error:
            return f"codex {scope}: {error}" if isinstance(error, InstallError) else f"codex {scope}: {path}: {error}"
        sources = list(dict.fromkeys([str(path), os.path.realpath(path)]))
        trust = codex_toml.our_hooks_trust(config, sources, user)
        events = list(dict.fromkeys(t.event for t in trust))
        servers = config.get("mcp_servers")
        has_mcp = isinstance(servers, dict) and is_our_mcp(servers.get("ctxd"))
        line = f"codex {scope}: hooks {', '.join(events) or 'none'}"
        if trust:
            line += f" ({_trust_words(trust)})"
        line += f"; MCP server {'yes' if has_mcp else 'no'}"
        if codex_toml.is_our_notify(config.get("notify")):
            line += "; an older ctxd's `notify` (install or uninstall removes it)"
        if scope == "project" and (trust or has_mcp):
            projects = user.get("projects")
            entry = projects.get(str(project)) if isinstance(projects, dict) else None
            if not (isinstance(entry, dict) and entry.get("trust_level") == "trusted"):
                line += "; Codex reads the file only once you trust the project"
        return line + f" ({path})"

    def mcp_installed(self, project: Path) -> bool:
        from ctxd.agents.config import codex_toml
        from ctxd.agents.config.files import InstallError
        from ctxd.agents.config.plan import read_scoped

        for scope in ("project", "user"):
            try:
                path = self._file(scope, project)
                servers = codex_toml.parse(read_scoped(path, scope, project) or "").get("mcp_servers") or {}
                if isinstance(servers, dict) and "ctxd" in servers:
                    return True
            except (InstallError, codex_toml.TomlEditError):
                continue
        return False


AGENT = Codex()
