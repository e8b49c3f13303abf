"""Gemini CLI 0.61.0: its session files, window and compression rule, hooks and configuration
(ctxd/agents/base.py; the facts, with the bundle functions they were read from, are in
docs/agents-research.md).

Sessions: `<home>/tmp/<short id>/chats/session-<minute>-<id[:8]>.jsonl`, where `<home>` is
`$GEMINI_CLI_HOME/.gemini` (default `~/.gemini`) and the short id is the project's entry in
`<home>/projects.json`; `<home>/tmp/<short id>/.project_root` names the project's folder
(`ProjectRegistry`). A subagent's file is `chats/<parent session id>/<id>.jsonl`: not a session,
its usage is billed to its parent's. Privacy rule: a session file is not opened unless its
project's `.project_root` names a folder inside an open workspace, and is followed only when its
header's `projectHash` is the sha256 of that folder (the agent's own rule, not a name on disk).

The format (`ChatRecordingService`; the loader ctxd mirrors is `loadConversationRecord`,
packages/core/src/services/chatRecordingService.ts): line 1 a header `{sessionId, projectHash,
startTime, lastUpdated, kind}`; then message records `{id, timestamp, type, content, ...}` (type
`user` or `gemini`; `gemini` ones with `tokens {input, output, cached, thoughts, tool, total}`,
`model` and `toolCalls`), where **a message id written again replaces the earlier one in place**;
`{"$set": {...}}` updates, where `$set.messages` replaces the whole conversation (at the start of
every run, on a resume, and by a compression); `{"$rewindTo": id}` drops that message and all
after it (all of them when the id is unknown). A resume appends a second header to the original
file, first with a `$set.messages` holding only the session context (a stub), then with the whole
history; a resume in a later minute leaves the stub in a file of its own (two lines), never
followed: a file has a session id only once it holds a message other than the session context.

Gauge rule (docs/sessions.md): the footer's "N% used" (`ContextUsageDisplay`,
`getContextUsagePercentage`) is `lastPromptTokenCount / tokenLimit(model)`, where live the last
reply's `promptTokenCount` is the message's `tokens.input` (cached included): the API baseline is
the latest gemini message's `tokens.input`, covering the window up to that message. After a
resume Gemini shows `tokens.total` until its next request; ctxd keeps the live figure.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.agents import payloads
from ctxd.agents.base import Action, Agent, AgentConfig, AgentLimits, HookAction, HookInput, Scope
from ctxd.agents.jsonl import HEAD_LIMIT, JsonlStore, Reader, entries, head, open_regular
from ctxd.agents.session import Change, Turn, Usage, first_request, note_report, shorten, tokens, usages

if TYPE_CHECKING:
    from ctxd.agents.config.plan import ConfigChange
    from ctxd.agents.folders import Folders

VERSION = "0.61.0"

CONTEXT_PREFIX = "<session_context>"  # the first user message of every run: not a typed prompt
SNAPSHOT_PREFIX = "<state_snapshot>"  # the summary a compression leaves in place of what it dropped
MAX_SUBAGENT_FILES = 1_000  # per session: more is not a real session
# Messages a reader that caught up remembers (`GeminiReader.trim`), as its saved state does: a rewind
# further back has the file read again from its start.
IDLE_MESSAGES = 64
KEPT_REPLIES = 16  # a subagent's latest replies whose usage its saved state keeps (one written again replaces)
MESSAGE_TYPES = ("user", "gemini", "info", "error", "warning")
"""Its message types (`MessageRecord.type`): the CLI's own info, error and warning lines are never
sent to the model; another type is counted as unread (format drift)."""
PROJECT_ROOT_FILE = ".project_root"
PROJECT_ROOT_LIMIT = 4096  # a folder's path: a larger `.project_root` is not Gemini CLI's


def _parts(content: Any) -> list[dict[str, Any]]:
    """A message's content as a list of parts (a string is one text part)."""
    if isinstance(content, str):
        return [{"text": content}]
    return [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []


def _text(content: Any) -> str:
    return "".join(p["text"] for p in _parts(content) if isinstance(p.get("text"), str))


def _call(call_id: Any, name: Any, args: Any) -> dict[str, Any]:
    return {"type": "function_call", "call_id": str(call_id or ""), "name": str(name or ""),
            "arguments": json.dumps(args if args is not None else {}, ensure_ascii=False)}


def _output(response: dict[str, Any]) -> dict[str, Any]:
    result = response.get("response")
    output = result.get("output") if isinstance(result, dict) else None
    return {"type": "function_call_output", "call_id": str(response.get("id") or ""),
            "output": output if isinstance(output, str) else json.dumps(result, ensure_ascii=False)}


def message_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message record as ctxd's items: a user message's text and its tool results; a reply's
    text and tool calls, whether written live (a string and `toolCalls`) or as a resume or a
    compression rewrites it (API parts with `functionCall`). Other types (info, error) are the
    CLI's own lines, never sent to the model."""
    kind = message.get("type")
    content = message.get("content")
    items: list[dict[str, Any]] = []
    if kind == "user":
        typed = [{"type": "input_text", "text": p["text"]} for p in _parts(content) if isinstance(p.get("text"), str)]
        if typed:
            items.append({"type": "message", "role": "user", "content": typed})
        items += [_output(p["functionResponse"]) for p in _parts(content) if isinstance(p.get("functionResponse"), dict)]
    elif kind == "gemini":
        text = _text(content)
        if text:
            items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
        items += [_call(p["functionCall"].get("id"), p["functionCall"].get("name"), p["functionCall"].get("args"))
                  for p in _parts(content) if isinstance(p.get("functionCall"), dict)]
        calls = message.get("toolCalls")
        items += [_call(c.get("id"), c.get("name"), c.get("args"))
                  for c in (calls if isinstance(calls, list) else []) if isinstance(c, dict)]
    return items


def is_context(message: dict[str, Any]) -> bool:
    """The session context Gemini CLI sends first in every run (date, OS, folder, GEMINI.md)."""
    return message.get("type") == "user" and _text(message.get("content")).startswith(CONTEXT_PREFIX)


def is_prompt(message: dict[str, Any]) -> bool:
    """A message the user typed: a user message with text, other than the session context and a
    compression's snapshot."""
    if message.get("type") != "user":
        return False
    text = _text(message.get("content")).lstrip()
    return bool(text) and not text.startswith((CONTEXT_PREFIX, SNAPSHOT_PREFIX))


def _model(rec: dict[str, Any]) -> str:
    model = rec.get("model")
    return model if isinstance(model, str) else ""


def usage_of(raw: dict[str, Any]) -> Usage:
    """`tokens`: `cached` is part of `input`; thoughts are billed as output."""
    prompt, cached = tokens(raw.get("input")), tokens(raw.get("cached"))
    thoughts = tokens(raw.get("thoughts"))
    return Usage(input=max(0, prompt - cached), cached_input=min(cached, prompt),
                 output=tokens(raw.get("output")) + thoughts, reasoning=thoughts)


class _Message:
    """A message of the window, as a reader remembers it: where it starts (the window's count of
    items, the turns, the first request's estimate before it), the tool results it added, and its
    items (`items`, until `trim`; the latest one's as `digests` in a saved state)."""

    __slots__ = ("start", "turns", "carried", "outputs", "items", "digests")

    def __init__(self, start: int, turns: int, carried: int, items: list[dict[str, Any]] | None = None,
                 outputs: tuple[str, ...] = (), digests: list[str] | None = None) -> None:
        self.start, self.turns, self.carried = start, turns, carried
        self.items = items
        self.outputs = outputs
        self.digests = digests

    @property
    def size(self) -> int:
        """Its items known (held, or their digests)."""
        return len(self.items if self.items is not None else self.digests or ())

    def same_start(self, items: list[dict[str, Any]]) -> bool:
        """Do `items` begin with this message's items (a reply written again with what it gained)?"""
        if self.items is not None:
            return items[:len(self.items)] == self.items
        return self.digests is not None and [_digest(i) for i in items[:len(self.digests)]] == self.digests


def _digest(item: dict[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(item, sort_keys=True).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


class GeminiReader(Reader):
    """One session file, read as `loadConversationRecord` loads it, into ctxd's window: each
    message id keeps its place and its items; a message written again adds what it gained (a
    reply's tool calls); a `$set.messages` that drops messages (a compression) or a `$rewindTo`
    replaces the window, so the bridge archives what left it.

    The daemon's readers hold no window (`Reader.holds_window`): once caught up (`trim`) they
    remember the latest IDLE_MESSAGES messages, where each starts, the latest one's items, and how
    many messages the window holds (a resume's `$set.messages` restates them all, `_restates`).
    What needs more has the file read again from its start, where every message is known
    (`read_again_for`): an earlier message written again, a rewind to a message forgotten or one
    that leaves fewer than two remembered, and a `$set.messages` that is not a resume (a
    compression: which messages left?). Gemini CLI writes again only its latest message; a message
    forgotten and written again would be read as a new one."""

    agent = "gemini"
    resumable = True

    def __init__(self, path: str, *, window: bool = True) -> None:
        super().__init__(path, window=window)
        self._read_from = 0  # where the latest read started
        self._init()

    def _init(self) -> None:
        self._header_id: str | None = None
        # Message id -> what the window holds of it, in the file's order: every message since the
        # start or the last `$set.messages` that replaced them, with its items (`_complete`), or the
        # latest ones (`trim`).
        self._messages: dict[str, _Message] = {}
        self._complete = True
        self._total = 0  # the window's messages, those forgotten included
        self._outputs: set[str] = set()  # tool call ids whose result is in the window (of those remembered)
        self._usage: dict[str, tuple[str, Usage]] = {}  # message id -> (model, usage): the last one counts
        self._run_start = False  # a header was read, and no message since (a resume's stub may follow)
        self._carried = 0  # the estimate of the items before the first report (`first_request`)
        self._subagents: dict[str, _SubagentCost] = {}

    def reset(self) -> None:
        super().reset()
        self._init()

    def read(self, ident: tuple[int, int] | None = None, budget: int | None = None) -> Change:
        """The file's new lines, then its subagents' new usage (billed to this session)."""
        self._read_from = self.offset
        change = super().read(ident, budget)
        change.usage = self._read_subagents() or change.usage
        return change

    # --- put aside, taken up again ---

    def trim(self, messages: int = IDLE_MESSAGES) -> None:
        """Forget all but the latest `messages` messages, and every item but the latest message's
        (a reader that caught up: little memory each; a window held keeps them all)."""
        if self.holds_window:
            return
        if len(self._messages) > messages:
            self._messages = dict(list(self._messages.items())[-messages:])
            self._usage = {key: self._usage[key] for key in self._messages if key in self._usage}
            self._outputs = {call for message in self._messages.values() for call in message.outputs}
            self._complete = False
        for message in list(self._messages.values())[:-1]:
            if message.items is not None:
                message.items, self._complete = None, False

    def own_state(self) -> dict[str, Any]:
        kept = list(self._messages.items())[-IDLE_MESSAGES:]
        last = kept[-1][1] if kept else None
        return {"header": self._header_id, "runStart": self._run_start, "carried": self._carried, "total": self._total,
                "complete": self._complete and not self._messages,  # (a saved state holds no items)
                "messages": [[key, m.start, m.turns, m.carried, list(m.outputs)] for key, m in kept],
                "last": ([_digest(i) for i in last.items] if last.items is not None else last.digests)
                if last is not None else None,
                "usage": [[key, self._usage[key][0], self._usage[key][1].as_dict()] for key, _ in kept
                          if key in self._usage],
                "subagents": {name: sub.position() for name, sub in self._subagents.items()}}

    def restore_own(self, state: dict[str, Any]) -> None:
        header = state.get("header")
        self._header_id = header if isinstance(header, str) else None
        self._run_start = bool(state.get("runStart"))
        self._carried = int(state.get("carried") or 0)
        self._total = int(state.get("total") or 0)
        self._complete = bool(state.get("complete"))
        self._messages = {str(key): _Message(int(start), int(turns), int(carried), None, tuple(map(str, outputs)))
                          for key, start, turns, carried, outputs in state.get("messages") or []}
        last = state.get("last")
        if self._messages and last is not None:
            self._messages[next(reversed(self._messages))].digests = [str(d) for d in last if isinstance(d, str)]
        self._outputs = {call for message in self._messages.values() for call in message.outputs}
        self._usage = {str(key): (str(model), usages({"": usage})[""]) for key, model, usage in state.get("usage") or []}
        for name, sub_state in (state.get("subagents") or {}).items():
            if self.session.id is not None and isinstance(name, str) and os.sep not in name:
                sub = self._subagents[name] = _SubagentCost(os.path.join(self._subagent_folder(self.session.id), name), self)
                sub.restore(sub_state)

    # --- records ---

    def record(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        if isinstance(rec.get("$rewindTo"), str):
            self._rewind(rec["$rewindTo"], change)
        elif isinstance(rec.get("id"), str):
            self._run_start = False
            self._message(rec, change)
        elif isinstance(rec.get("$set"), dict):
            update = rec["$set"]
            if isinstance(update.get("lastUpdated"), str):
                session.last_activity = update["lastUpdated"]
            if isinstance(update.get("messages"), list):
                self._set_messages([m for m in update["messages"] if isinstance(m, dict) and isinstance(m.get("id"), str)],
                                   change, update.get("lastUpdated"))
        elif isinstance(rec.get("sessionId"), str) and isinstance(rec.get("projectHash"), str):
            self._header(rec, change)
        else:
            session.count_unknown(str(rec.get("type") or next(iter(rec), "")))

    def _header(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        if self._header_id is None:
            self._header_id = rec["sessionId"]
            if isinstance(rec.get("startTime"), str):
                session.started = rec["startTime"]
        self._run_start = True

    def _known(self, change: Change) -> None:
        """The session id, once the file holds more than the session context (a stub never has one).
        Found by a read after the first, the file is read again from its start: what the reads
        before it found (the session context) had no session to go to."""
        if self.session.id is None and self._header_id is not None:
            self.session.id = self._header_id
            change.meta = True
            if not self.holds_window and self._read_from > 0:
                self.read_again_for("the session's id")

    def _add_items(self, message: _Message, items: list[dict[str, Any]], change: Change) -> None:
        """Append `items` of `message` to the window, less a tool result already there (a resume
        repeats one)."""
        session = self.session
        added = []
        for item in items:
            if item["type"] == "function_call_output":
                if item["call_id"] in self._outputs:
                    continue
                self._outputs.add(item["call_id"])
                message.outputs += (item["call_id"],)
            session.add_item(item, self.holds_window)
            change.add(item, session)
            added.append(item)
            if session.first_request is None:
                from ctxd.tokens.approx import item_tokens  # (not for a hook, which imports this module)

                self._carried += item_tokens(item)
        if message.items is not None:
            message.items.extend(added)
        elif message.digests is not None:  # (taken up from a saved state)
            message.digests += [_digest(item) for item in added]

    def _message(self, rec: dict[str, Any], change: Change, report: bool = True) -> None:
        """A message record: new, or written again under its id (the last one counts). `report`
        False: one a `$set.messages` restates (its usage, if any, was counted when written)."""
        session = self.session
        message_id = rec["id"]
        timestamp = rec.get("timestamp") if isinstance(rec.get("timestamp"), str) else None
        if timestamp is not None:
            session.last_activity = timestamp
        if not is_context(rec):
            self._known(change)
        if rec.get("type") not in MESSAGE_TYPES:
            session.count_unknown(f"message.{rec.get('type')}")
        items = message_items(rec)
        old = self._messages.get(message_id)
        last = old is not None and message_id == next(reversed(self._messages))
        if old is None:
            message = _Message(session.window, session.turn_total, self._carried, [])
            self._total += 1
            if is_prompt(rec):
                text = _text(rec.get("content"))
                turn = Turn(session.window, shorten(text, 60), timestamp, session.generation)
                session.add_turn(turn, self.holds_window)
                change.turns.append(turn)
                if session.title is None:
                    session.title = shorten(text)
                    change.meta = True
            self._messages[message_id] = message
            self._add_items(message, items, change)
        elif last and old.same_start(items):  # the reply again, with its tool calls
            self._add_items(old, items[old.size:], change)
        elif items == old.items:
            pass
        elif self._complete:  # an earlier message changed: the window, rebuilt
            old.items = items
            self._rebuild(change, None, timestamp)
        elif last:
            self._again(rec, old, items, change)
        else:
            self.read_again_for(f"{message_id}@{self.offset}")  # from the start, where every message's items are known
            return
        if report and rec.get("type") == "gemini":
            self._report(rec, message_id, change)

    def _again(self, rec: dict[str, Any], old: _Message, items: list[dict[str, Any]], change: Change) -> None:
        """The latest message written again otherwise (its items forgotten): the window cut back to
        its start, then its items as they are now."""
        session = self.session
        self._cut(old.start, old.turns, change, rec.get("timestamp"))
        self._outputs.difference_update(old.outputs)
        message = self._messages[rec["id"]] = _Message(old.start, old.turns, old.carried, [])
        if is_prompt(rec):
            session.add_turn(Turn(session.window, shorten(_text(rec.get("content")), 60), rec.get("timestamp"),
                                  session.generation), self.holds_window)
        self._add_items(message, items, change)

    def _cut(self, keep: int, turns: int, change: Change, at: Any) -> None:
        """The window cut back to its first `keep` items (the turns to `turns`), without holding it."""
        session = self.session
        if session.baseline is not None:
            session.tail = session.tail[:max(0, keep - session.baseline_items)]
        session.baseline_items = min(session.baseline_items, keep)
        session.window, session.turn_count = keep, turns
        session.turns = []
        session.generation += 1
        change.replace(session, [], None, at if isinstance(at, str) else session.last_activity, keep=keep)

    def _report(self, rec: dict[str, Any], message_id: str, change: Change) -> None:
        session = self.session
        raw = rec.get("tokens")
        model = _model(rec)
        if model and model != session.model:
            session.model = model
            change.meta = True
        if not isinstance(raw, dict):
            return
        usage = usage_of(raw)
        old = self._usage.get(message_id)
        if old is not None:
            session.cumulative[old[0]].add(old[1], -1)  # written again: its usage replaces, not adds
        self._usage[message_id] = (model, usage)
        session.bill(model, usage)
        used = tokens(raw.get("input"))
        note_report(session, used, usage, model, rec.get("timestamp"))
        if not used:
            change.usage = True
            return
        if session.first_request is None:
            message = self._messages.get(message_id)
            session.first_request = first_request(used, [], message.carried if message is not None else self._carried)
        session.last_usage = {k: tokens(v) for k, v in raw.items() if type(v) is int}
        session.reported(used)  # the footer counts the reply from the next request on
        change.usage = True

    # --- replacements ---

    def _rebuild(self, change: Change, compaction: int | None, at: Any) -> None:
        """The window is the messages' items again (something left it: a rewind, a compaction),
        every one of which this reader holds (`_complete`). A rewind also drops the turns it took back."""
        session = self.session
        if any(message.items is None for message in self._messages.values()):
            self.read_again_for(f"rebuild@{self.offset}")  # (taken up from a saved state: never, but not a crash)
            return
        window: list[dict[str, Any]] = []
        self._outputs = set()
        for message in self._messages.values():
            assert message.items is not None
            kept = [i for i in message.items if i["type"] != "function_call_output" or i["call_id"] not in self._outputs]
            message.outputs = tuple(i["call_id"] for i in kept if i["type"] == "function_call_output")
            self._outputs.update(message.outputs)
            message.start, message.items, message.digests = len(window), kept, None
            window.extend(kept)
        if self.holds_window:
            session.items = window
            if compaction is None:
                session.turns = [t for t in session.turns
                                 if t.generation != session.generation or t.index < len(window)]
                session.turn_count = len(session.turns)
        session.window = len(window)
        session.generation += 1
        session.baseline_items = min(session.baseline_items, len(window))
        session.tail = window[session.baseline_items:] if session.baseline is not None else []
        change.replace(session, window, compaction, at if isinstance(at, str) else session.last_activity)

    def _rewind(self, target: str, change: Change) -> None:
        """`$rewindTo`: that message and every one after it leave the window (all of them when
        the id is unknown, as Gemini CLI's loader does)."""
        ids = list(self._messages)
        if target not in self._messages and not self._complete:
            self.read_again_for(f"{target}@{self.offset}")  # forgotten: from the start, where every message is known
            return
        cut = ids.index(target) if target in ids else 0
        if cut == len(ids):
            return
        first = self._messages[ids[cut]]
        self._total = self._total - (len(ids) - cut) if cut else 0
        for message_id in ids[cut:]:
            self._outputs.difference_update(self._messages.pop(message_id).outputs)
            self._usage.pop(message_id, None)
        self.session.rewinds += 1
        self._unreport(first.start, change)
        if first.start == 0 and not self._messages:
            self._complete = True  # the window is empty: every message of it is known
        if self._complete and (self.holds_window or cut == 0):
            self._rebuild(change, None, None)
            return
        self._cut(first.start, first.turns, change, None)
        if len(self._messages) < 2 and first.start > 0:  # the window's latest messages now are ones it forgot
            self.read_again_for(f"{target}@{self.offset}")

    def _unreport(self, keep: int, change: Change) -> None:
        """A rewind that keeps the window's first `keep` items: a report that counted items past
        them described what was dropped, so it is no fill any more; the gauge estimates from the
        items until Gemini reports again (docs/sessions.md, as after a compaction)."""
        session = self.session
        if session.baseline is not None and session.baseline_items > keep:
            session.baseline, session.baseline_items, session.tail = None, 0, []
            change.usage = True

    def _set_messages(self, messages: list[dict[str, Any]], change: Change, at: Any) -> None:
        """`$set.messages`: the whole conversation. Keeping every message the window has, it adds
        the new ones (a resume); a run's first `$set` holding a part of the window is that run's
        stub (its whole history follows); anything else dropped messages: a compaction when it
        brings a state snapshot, else a rewind."""
        session = self.session
        ids = [m["id"] for m in messages]
        given = set(ids)
        known = list(self._messages)
        # A resume restates the window: first the messages forgotten (as many as the window holds
        # beyond those remembered), then the ones remembered, and any new ones. A message new
        # before all of them (the session context again, after a `$rewindTo` emptied the window)
        # makes it a replacement: it is no message forgotten, nor one for the window's end.
        forgotten = 0 if self._complete else self._total - len(known)
        if all(i in given for i in known) and (self._complete or self._restates(messages)) and (
                not known or list(dict.fromkeys(ids)).index(known[0]) == forgotten):
            first = 0 if self._complete else ids.index(known[0])
            for message in messages[first:]:
                if message["id"] not in self._messages:
                    self._message(message, change, report=False)
            return
        if self._run_start and (ids == known[:len(ids)] or (
                not given & set(known) and all(map(is_context, messages)))):
            return  # a resume's stub: the history follows in the next `$set`
        if not self._complete:  # is a snapshot new, which messages left? From the start, where all are known
            self.read_again_for(f"$set@{self.offset}")
            if self.replay:
                return
        if any(not is_context(m) for m in messages):
            self._known(change)
        snapshot = any(m["id"] not in self._messages and _text(m.get("content")).lstrip().startswith(SNAPSHOT_PREFIX)
                       for m in messages if m.get("type") == "user")
        turns = session.turn_total  # (a compaction keeps the turns; the window's messages add none)
        held = self._held_before(messages)
        self._messages = {m["id"]: _Message(0, turns, 0, message_items(m)) for m in messages}
        self._total = len(self._messages)
        self._usage = {key: usage for key, usage in self._usage.items() if key in given}
        self._complete = True
        if snapshot:
            session.agent_compactions.append({"trigger": None, "tokensBefore": session.baseline, "tokensAfter": None,
                                              "at": at if isinstance(at, str) else session.last_activity})
            session.compactions += 1
            session.baseline = None
            self._rebuild(change, session.compactions - 1, at)
            change.usage = True
        else:
            session.rewinds += 1
            self._unreport(held, change)
            self._rebuild(change, None, at)

    def _held_before(self, messages: list[dict[str, Any]]) -> int:
        """The window's items a `$set.messages` keeps as they stand from its start: those of the
        messages it restates alike, in their place, up to the first it drops or changes (a report
        that counted more counted what left: `_unreport`)."""
        held = 0
        for (key, message), given in zip(self._messages.items(), messages):
            if key != given["id"] or message.items is None or message_items(given) != message.items:
                break
            held += message.size
        return held

    def _restates(self, messages: list[dict[str, Any]]) -> bool:
        """Whether a `$set.messages` that keeps every message this reader remembers (it forgot the
        first ones) is a resume, the whole history again: as many messages as its window, and no
        snapshot it does not remember (a compression's; a resume of a compressed session restates
        one it forgot: read again from the start, then)."""
        return bool(self._messages) and len({m["id"] for m in messages}) >= self._total and not any(
            m["id"] not in self._messages and m.get("type") == "user"
            and _text(m.get("content")).lstrip().startswith(SNAPSHOT_PREFIX) for m in messages)

    # --- subagents ---

    def _subagent_folder(self, session_id: str) -> str:
        return os.path.join(os.path.dirname(self.path), session_id)

    def _read_subagents(self) -> bool:
        """`chats/<session id>/*.jsonl`: a subagent's requests are billed to its parent session."""
        found = self.session.id
        if found is None or not found.isprintable() or os.sep in found or found in (".", ".."):
            return False  # not a folder name (the follower does not follow such an id either)
        folder = self._subagent_folder(found)
        if os.path.islink(folder):
            return False  # never read through a link (docs/sessions.md, Privacy)
        names = sorted(e.name for e in entries(folder) if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False))
        grew = False
        for name in names[:MAX_SUBAGENT_FILES]:
            sub = self._subagents.get(name)
            if sub is None:
                sub = self._subagents[name] = _SubagentCost(os.path.join(folder, name), self)
            grew = sub.read().lines > 0 or grew
        return grew


class _SubagentCost(Reader):
    """A subagent's file: only its replies' usage is read, into the parent session's cost."""

    agent = "gemini"

    def __init__(self, path: str, parent: GeminiReader) -> None:
        super().__init__(path)
        self.parent = parent
        self.seen: dict[str, tuple[str, Usage]] = {}

    def record(self, rec: dict[str, Any], change: Change) -> None:
        raw = rec.get("tokens")
        if rec.get("type") != "gemini" or not isinstance(raw, dict) or not isinstance(rec.get("id"), str):
            return
        model = _model(rec)
        cumulative = self.parent.session.cumulative
        old = self.seen.get(rec["id"])
        if old is not None:
            cumulative[old[0]].add(old[1], -1)
        usage = usage_of(raw)
        self.seen.pop(rec["id"], None)
        self.seen[rec["id"]] = (model, usage)
        self.parent.session.bill(model, usage)
        if len(self.seen) > 2 * KEPT_REPLIES:
            self.seen = dict(list(self.seen.items())[-KEPT_REPLIES:])

    def own_state(self) -> dict[str, Any]:
        return {"seen": [[key, model, usage.as_dict()] for key, (model, usage) in list(self.seen.items())[-KEPT_REPLIES:]]}

    def restore_own(self, state: dict[str, Any]) -> None:
        self.seen = {str(key): (str(model), usages({"": usage})[""]) for key, model, usage in state.get("seen") or []}


# --- where its sessions live ----------------------------------------------------------------------


def project_root(project_dir: str) -> str | None:
    """The folder `<tmp>/<short id>/.project_root` names (a regular file, bounded), else None."""
    opened = open_regular(os.path.join(project_dir, PROJECT_ROOT_FILE))
    if opened is None:
        return None
    fd = opened[0]
    try:
        data = os.read(fd, PROJECT_ROOT_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > PROJECT_ROOT_LIMIT:
        return None
    text = data.decode("utf-8", "replace").strip()
    return text if os.path.isabs(text) and "\n" not in text else None


def project_hash(folder: str) -> str:
    """Gemini CLI's `projectHash`: the sha256 of the project's folder."""
    return hashlib.sha256(folder.encode("utf-8", "surrogateescape")).hexdigest()


class GeminiSessions(JsonlStore):
    """`<root>/<short id>/chats/session-*.jsonl`; subagents' files sit one folder deeper."""

    def session_files(self) -> list[str]:
        projects = [e.path for e in entries(str(self.root)) if e.is_dir(follow_symlinks=False)]
        found = []
        for project in projects:
            chats = os.path.join(project, "chats")
            if os.path.islink(chats):
                continue
            found += [e.path for e in entries(chats) if e.name.startswith("session-") and e.name.endswith(".jsonl")
                      and e.is_file(follow_symlinks=False)]
        return found

    def is_session_file(self, path: str) -> bool:
        p = Path(path)
        return p.name.startswith("session-") and p.parent.name == "chats" and p.parent.parent.parent == self.root

    def peek_cwd(self, key: str, folders: Folders) -> tuple[str | None, bool, int]:
        """The project's folder from `.project_root`; the file is opened only when that folder is
        inside an open one, and its header must state that folder's hash."""
        root = project_root(str(Path(key).parent.parent))
        if root is None or folders.folder_of(root) is None:
            return None, True, 0
        records, read = head(key, 1)
        if not records:
            return None, read >= HEAD_LIMIT, read
        claimed = records[0].get("projectHash")
        return (root if claimed == project_hash(root) else None), True, read

    def reader(self, key: str) -> GeminiReader:
        return GeminiReader(key)


# --- how full, when it compacts -------------------------------------------------------------------
# Gemini CLI 0.61.0: `tokenLimit(model)` (core tokenLimits.js) is 1,048,576 for every model but the
# Gemma 4 ones (256,000); it compresses before a request once the last prompt reached
# `model.compressionThreshold` (default 0.5, DEFAULT_COMPRESSION_TOKEN_THRESHOLD) of it
# (ChatCompressionService.compress); its footer shows the figure always from 60% on (isContextUsageHigh).

DEFAULT_WINDOW = 1_048_576
GEMMA_4_WINDOW = 256_000
GEMMA_4_MODELS = ("gemma-4-31b-it", "gemma-4-26b-a4b-it")
DEFAULT_THRESHOLD = 0.5
WARN_BEFORE = 0.1  # of the window, before the compression point


def window_for(model: str | None) -> tuple[int, str]:
    if model in GEMMA_4_MODELS:
        return GEMMA_4_WINDOW, f"Gemini CLI {VERSION}'s tokenLimit ({model})"
    return DEFAULT_WINDOW, f"Gemini CLI {VERSION}'s tokenLimit (every model but Gemma 4)"


def compression_threshold(settings: Path) -> float | None:
    """`model.compressionThreshold` of a settings.json (a fraction of the window), if set."""
    opened = open_regular(str(settings))
    if opened is None:
        return None
    fd = opened[0]
    try:
        raw = json.loads(os.read(fd, 1 << 20))
        value = raw["model"]["compressionThreshold"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    finally:
        os.close(fd)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1 else None


# --- hooks ----------------------------------------------------------------------------------------

CHANGES_FILES = {"write_file", "replace", "run_shell_command"}
"""Its tools that change the working tree (a shell command can change anything)."""
EVENTS = {  # the hooks install writes: event -> matcher (a JavaScript regex on the tool name)
    "BeforeAgent": None,
    "BeforeTool": "^(write_file|replace|run_shell_command)$",
}
HOOK_TIMEOUT_MS = 10_000
"""What Gemini CLI waits at most, in its unit (milliseconds; the hook itself returns within 2 s)."""


def config_file(scope: str, project: Path, home: Path) -> Path:
    """settings.json (hooks and MCP servers in one file) for a scope."""
    return project / ".gemini" / "settings.json" if scope == "project" else home / "settings.json"


def _hooks(ctxd: list[str]) -> Any:
    from ctxd.agents.config.json_settings import Hooks
    from ctxd.agents.config.ours import shell

    return Hooks(EVENTS, lambda event: shell([*ctxd, "hook", "gemini", event]), HOOK_TIMEOUT_MS)


def settings_add(settings: dict[str, Any], ctxd: list[str]) -> dict[str, Any]:
    from ctxd.agents.config import json_settings
    from ctxd.agents.config.ours import mcp_entry

    return json_settings.mcp_add(json_settings.hooks_add(settings, _hooks(ctxd)), mcp_entry(ctxd))


def settings_remove(settings: dict[str, Any]) -> dict[str, Any]:
    from ctxd.agents.config import json_settings

    return json_settings.mcp_remove(json_settings.hooks_remove(settings))


def holds_ours(text: str) -> bool:
    from ctxd.agents.config import json_settings

    return json_settings.holds(text, settings_remove)


def trusted(folder: Path, home: Path) -> bool | None:
    """Whether Gemini CLI trusts `folder` by `trustedFolders.json` (`LoadedTrustedFolders.
    isPathTrusted`: the longest rule that holds it wins); None when no rule says."""
    path = Path(os.environ.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or home / "trustedFolders.json")
    opened = open_regular(str(path))
    if opened is None:
        return None
    fd = opened[0]
    try:
        rules = json.loads(os.read(fd, 1 << 20))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    best: tuple[int, bool] | None = None
    for rule, value in (rules.items() if isinstance(rules, dict) else []):
        if not isinstance(rule, str) or not os.path.isabs(rule):
            continue
        base = Path(rule) if value != "TRUST_PARENT" else Path(rule).parent
        inside = folder == base or base in folder.parents
        if inside and (best is None or len(str(base)) > best[0]):
            best = (len(str(base)), value != "DO_NOT_TRUST")
    return None if best is None else best[1]


class Gemini(Agent):
    name = "gemini"
    title = "Gemini CLI"
    version = VERSION
    cache_provider = "google"
    overhead = (("systemPrompt", "Gemini CLI's system instruction (inferred)", 0.5),
                ("builtinTools", "Gemini CLI's built-in tool declarations (inferred)", 0.5))
    """Gemini CLI has no /context (gemini-cli #13400, #23165); what it sends besides the messages is
    its `systemInstruction` and its `tools` (16 built-in declarations), measured on 0.61.0's first
    request (no MCP server, no GEMINI.md): 23,717 and 24,023 characters, half each. GEMINI.md and
    the folder listing travel in the session-context message: counted with the messages."""
    hook_events: Mapping[str, HookAction] = {"BeforeAgent": "turn", "BeforeTool": "tool"}

    def home(self, env: Mapping[str, str], configured: str | None) -> Path:
        """Its state folder: `sources.gemini_home`, else `$GEMINI_CLI_HOME/.gemini`, else `~/.gemini`."""
        if configured:
            return Path(configured).expanduser()
        base = env.get("GEMINI_CLI_HOME") or env.get("HOME") or str(Path.home())
        return (Path(base) / ".gemini").expanduser()

    def session_root(self, home: Path) -> Path:
        return home / "tmp"

    def sessions(self, root: Path) -> GeminiSessions:
        return GeminiSessions(root)

    def summary_reader(self, key: str) -> GeminiReader:
        """Its reader without the window. (A subagent's file that grew is read with its session's
        next change: the session's own file says when the subagent ended.)"""
        return GeminiReader(key, window=False)

    def read_config(self, home: Path) -> AgentConfig:
        threshold = compression_threshold(home / "settings.json")
        return AgentConfig(compact_percent=threshold * 100 if threshold else None, source=str(home / "settings.json"))

    def limits(self, model: str | None, stated_window: int | None, config: AgentConfig) -> AgentLimits:
        window, window_source = window_for(model)
        percent = config.compact_percent or DEFAULT_THRESHOLD * 100
        limit = int(window * percent / 100)
        source = (f"Gemini CLI {VERSION}: model.compressionThreshold={percent / 100:g} of the window"
                  + ("" if config.compact_percent else " (its default)"))
        return AgentLimits(window, window_source, limit, source, max(0, limit - int(window * WARN_BEFORE)))

    # --- hooks ---

    def hook_input(self, event: str, data: dict[str, Any]) -> HookInput | None:
        return payloads.claude_style(self.hook_events, event, data)

    def changes_files(self, tool_name: str, tool_input: Any) -> bool:
        return tool_name in CHANGES_FILES

    def tool_paths(self, tool_name: str, tool_input: Any) -> list[str]:
        return payloads.named_paths(tool_input)

    def shell_command(self, tool_name: str, tool_input: Any) -> str | None:
        return payloads.command(tool_input) if tool_name == "run_shell_command" else None

    # --- ctxd's entries in its configuration ---

    def _home(self) -> Path:
        return self.home(os.environ, None)

    def config_changes(self, action: Action, scope: Scope, project: Path, state_dir: Path,
                       ctxd: list[str]) -> tuple[list[ConfigChange], list[str]]:
        from ctxd.agents.config.plan import json_install, json_uninstall, read_scoped

        path = config_file(scope, project, self._home())
        before = read_scoped(path, scope, project)
        if action == "uninstall":
            return [json_uninstall(path, before, settings_remove, state_dir, holds_ours)], []
        notes = ["Gemini CLI runs settings hooks only in folders it trusts (trustedFolders.json, or "
                 "`/permissions` in the CLI): trust your projects for ctxd's checkpoints."]
        return [json_install(path, before, lambda v: settings_add(v, ctxd), holds_ours)], notes

    def config_status(self, scope: Scope, project: Path) -> str:
        from ctxd.agents.config import json_settings
        from ctxd.agents.config.files import InstallError
        from ctxd.agents.config.plan import read_scoped

        path = config_file(scope, project, self._home())
        try:
            value = json_settings.load(path, read_scoped(path, scope, project))
        except InstallError as error:
            return f"gemini {scope}: {error}"
        events = json_settings.hooks_installed(value, EVENTS)
        trust = trusted(project.absolute(), self._home())
        return (f"gemini {scope}: hooks {', '.join(events) or 'none'}; MCP server "
                f"{'yes' if json_settings.mcp_installed(value) else 'no'}; this folder "
                f"{'trusted' if trust else 'not trusted (no hooks run)' if trust is False else 'not trusted yet'} ({path})")

    def mcp_installed(self, project: Path) -> bool:
        from ctxd.agents.config.plan import mcp_in_json

        return mcp_in_json(lambda scope: config_file(scope, project, self._home()), project)


AGENT = Gemini()
