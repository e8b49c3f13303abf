"""What the proxy keeps of one ACP session: the turns it saw, as ledger items (protocol items).

- the user's prompt: a user message (its text blocks; a resource by its text or its URI);
- the agent's `agent_message_chunk`s: joined into one assistant message per turn, split only
  where a tool call comes between them (so the order stays the agent's);
- each tool call: a `function_call` when it is first seen (`name` its kind; `arguments` and the
  extra fields `title`, `kind`, `locations`), and a `function_call_output` when it completes or
  fails (its content's text, diffs named by path, or its raw output);
- `usage_update`: the agent's gauge (`used`, `size`), kept with the items it follows.

Nothing here does I/O: the proxy feeds it the messages it passes and sends what `take` returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ctxd.protocol.threadnames import SESSION_ID_CHARS, acp_thread

CHANGING_KINDS = frozenset({"edit", "delete", "move", "execute"})
"""Tool kinds that change the working tree: allowing one takes a checkpoint first."""
TITLE_CHARS = 80
MODEL_CHARS = 200
"""The protocol's bound for a model id (`AcpRecordParams.model`): a longer one is left out, never
sent (the owner would refuse the whole record, and with it the turn's items)."""
TOOL_TITLE_CHARS = 1_000
"""A tool call's title is a label (a checkpoint's message shows its first 120 characters): a longer
one is cut. It is stored with the call and its output, and in the call's arguments."""
CALL_ID_CHARS = 1_000
"""A tool call's id names it in a checkpoint's tool: a longer one is left out of it."""
KIND_CHARS = 100
"""ACP's tool kinds are a few short words: a longer kind is none of them, and is kept as "other"."""
MAX_COUNT = 2**53 - 1
"""The protocol's bound for a count (`ctxd.protocol.params.MAX_COUNT`; pydantic is not imported
here): a gauge past it is ignored, never sent."""
MAX_TEXT = 1_000_000  # a message or output kept whole up to this many characters (the owner truncates further)
MAX_LOCATIONS = 100
LOCATION_PATH_CHARS = 4_096
"""A tool call's `locations` are the files it touches, stored with the call, its arguments and its
output, and a checkpoint's paths: past MAX_LOCATIONS the rest are left out, and so is a location
whose path is longer than a path can be (Linux's PATH_MAX)."""
def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT]


def content_text(block: Any) -> str:
    """The text of one ACP content block (text, a resource, a link, an image named by its kind)."""
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "resource":
        resource = block.get("resource")
        resource = resource if isinstance(resource, dict) else {}
        text = resource.get("text")
        return str(text) if isinstance(text, str) else f"[resource {resource.get('uri', '')}]"
    if kind == "resource_link":
        return f"[{block.get('name') or 'link'}: {block.get('uri', '')}]"
    if kind in ("image", "audio"):
        return f"[{kind}]"
    return ""


def prompt_text(prompt: Any) -> str:
    blocks = prompt if isinstance(prompt, list) else []
    return "\n".join(text for text in map(content_text, blocks) if text)


def tool_output(update: dict[str, Any]) -> str:
    """A finished tool call's result as text: its content, else its raw output."""
    parts: list[str] = []
    for entry in update.get("content") or []:
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "content":
            parts.append(content_text(entry.get("content")))
        elif entry.get("type") == "diff":
            parts.append(f"[diff of {entry.get('path', '')}]\n{entry.get('newText') or ''}")
        elif entry.get("type") == "terminal":
            parts.append(f"[terminal {entry.get('terminalId', '')}]")
    text = "\n".join(part for part in parts if part)
    if not text and "rawOutput" in update:
        raw = update["rawOutput"]
        text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    if update.get("status") == "failed":
        text = f"failed: {text}" if text else "failed"
    return _clip(text)


@dataclass
class ToolCall:
    title: str = ""
    kind: str = "other"
    locations: list[dict[str, Any]] = field(default_factory=list)
    raw_input: Any = None
    finished: bool = False

    def merge(self, update: dict[str, Any]) -> list[str]:
        """`update`'s fields taken; returns what was over its bound (cut, or left out)."""
        over = []
        if isinstance(update.get("title"), str):
            self.title = update["title"]
            if len(self.title) > TOOL_TITLE_CHARS:
                self.title = self.title[:TOOL_TITLE_CHARS - 1] + "…"
                over.append(f"a tool call's title is longer than {TOOL_TITLE_CHARS} characters: cut")
        if isinstance(update.get("kind"), str):
            self.kind = update["kind"]
            if len(self.kind) > KIND_CHARS:
                self.kind = "other"
                over.append(f"a tool call's kind is longer than {KIND_CHARS} characters: kept as \"other\"")
        if isinstance(update.get("locations"), list):
            self.locations = _locations(update["locations"], over)
        if "rawInput" in update:
            self.raw_input = update["rawInput"]
        return over

    def paths(self) -> list[str]:
        return [str(loc["path"]) for loc in self.locations]


def _locations(given: list[Any], over: list[str]) -> list[dict[str, Any]]:
    """`{path, line?}` of each location (nothing else an agent put in it), within their bounds."""
    kept: list[dict[str, Any]] = []
    for loc in given:
        path = loc.get("path") if isinstance(loc, dict) else None
        if not isinstance(path, str):
            continue
        if len(kept) == MAX_LOCATIONS:
            over.append(f"a tool call has more than {MAX_LOCATIONS} locations: the rest are left out")
            break
        if len(path) > LOCATION_PATH_CHARS:
            over.append(f"a tool call's location path is longer than {LOCATION_PATH_CHARS} characters: left out")
            continue
        line = loc.get("line")
        kept.append({"path": path, "line": line} if isinstance(line, int) and not isinstance(line, bool)
                    and 0 <= line <= MAX_COUNT else {"path": path})
    return kept


@dataclass
class Transcript:
    """One session: its thread, title and model, and the items not yet sent to the owner."""

    session_id: str
    title: str | None = None
    model: str | None = None
    turns: int = 0
    turn: dict[str, Any] | None = None  # the latest turn: {index, text}
    replaying: bool = False  # inside `session/load`: the agent replays the history
    usage_in_turn: bool = False
    used: int | None = None
    size: int | None = None
    tools: dict[str, ToolCall] = field(default_factory=dict)
    _segment: list[str] = field(default_factory=list)
    _pending: list[dict[str, Any]] = field(default_factory=list)
    _pending_replay: bool = False
    _usage_pending: bool = False
    _noted: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    """What was left out of the session's records, for the proxy's log (each said once per
    session, never quoting what the agent sent: a prompt's words or a key could be in it)."""

    thread: str = field(init=False)

    def __post_init__(self) -> None:
        self.thread = acp_thread(self.session_id)
        if self.thread != f"acp:{self.session_id}":
            self._note("session id", f"the session id cannot name its thread as it is (over {SESSION_ID_CHARS} "
                                      "characters, empty, not Unicode, or shaped like this name): named by a digest")

    # --- what the proxy saw ---

    def set_model(self, model: Any) -> None:
        """The agent's model id (`models.currentModelId`); one over its bound is left out."""
        if not isinstance(model, str):
            return
        if len(model) > MODEL_CHARS:
            self._note("model", f"the agent's model id is longer than {MODEL_CHARS} characters: left out")
            self.model = None
            return
        self.model = model

    def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        """The editor sent `session/prompt`: a new turn. Returns the turn ({index, text})."""
        self._close_segment()
        text = prompt_text(params.get("prompt"))
        self.turns += 1
        self.usage_in_turn = False
        if self.title is None and text.strip():
            line = " ".join(text.split())
            self.title = line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1].rstrip() + "…"
        self._add({"type": "message", "role": "user", "content": [{"type": "input_text", "text": _clip(text)}]})
        self.turn = {"index": self.turns, "text": " ".join(text.split())[:200]}
        return dict(self.turn)

    def update(self, update: dict[str, Any]) -> None:
        """A `session/update` from the agent."""
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = content_text(update.get("content"))
            if text:
                self._segment.append(text)
        elif kind == "user_message_chunk" and self.replaying:
            self._close_segment()
            text = content_text(update.get("content"))
            if text:
                self._add({"type": "message", "role": "user", "content": [{"type": "input_text", "text": _clip(text)}]})
        elif kind == "tool_call":
            self._tool_call(update)
        elif kind == "tool_call_update":
            self._tool_update(update)
        elif kind == "usage_update":
            used, size = update.get("used"), update.get("size")
            if isinstance(size, int) and not isinstance(size, bool) and size > MAX_COUNT:
                self._note("size", "the agent reported a context window past 2**53 - 1 tokens: ignored")
                size = None
            if isinstance(used, int) and not isinstance(used, bool) and used > MAX_COUNT:
                self._note("used", "the agent reported a context fill past 2**53 - 1 tokens: ignored")
            elif isinstance(used, int) and not isinstance(used, bool) and used >= 0:
                self._close_segment()
                self.used = used
                self.size = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else self.size
                self.usage_in_turn = True
                self._usage_pending = True
        elif kind == "session_info_update" and isinstance(update.get("title"), str) and update["title"].strip():
            self.title = update["title"].strip()[:TITLE_CHARS]

    def turn_ended(self) -> None:
        """The agent answered `session/prompt` (or it failed): the turn's text is complete."""
        self._close_segment()

    def tool(self, call_id: Any) -> ToolCall | None:
        return self.tools.get(call_id) if isinstance(call_id, str) else None

    def tool_seen(self, update: Any) -> ToolCall:
        """A tool call named by a permission request (its fields merged into what was seen)."""
        update = update if isinstance(update, dict) else {}
        call_id = update.get("toolCallId")
        call = self.tools.get(call_id) if isinstance(call_id, str) else None
        if call is None:
            call = ToolCall()
            if isinstance(call_id, str):
                self._tool_call(update)
                call = self.tools[call_id]
        self._merge(call, update)
        return call

    # --- what goes to the owner ---

    def take(self) -> tuple[list[dict[str, Any]], bool, int | None]:
        """The items to send now, whether they are a replay, and the agent's gauge when it just
        reported one (covering these items)."""
        items, self._pending = self._pending, []
        replay, self._pending_replay = self._pending_replay, False
        used = self.used if self._usage_pending else None
        self._usage_pending = False
        return items, replay, used

    def has_pending(self) -> bool:
        return bool(self._pending) or self._usage_pending

    # --- inside ---

    def _merge(self, call: ToolCall, update: dict[str, Any]) -> None:
        for message in call.merge(update):
            self._note(message, message)

    def _note(self, kind: str, message: str) -> None:
        if kind not in self._noted:
            self._noted.add(kind)
            self.notes.append(f"{self.thread}: {message}")

    def _add(self, item: dict[str, Any]) -> None:
        if self.replaying:
            self._pending_replay = True
        self._pending.append(item)

    def _close_segment(self) -> None:
        if self._segment:
            text = _clip("".join(self._segment))
            self._segment = []
            self._add({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})

    def _tool_call(self, update: dict[str, Any]) -> None:
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str) or call_id in self.tools:
            if isinstance(call_id, str):
                self._tool_update(update)
            return
        self._close_segment()
        call = ToolCall()
        self._merge(call, update)
        self.tools[call_id] = call
        arguments = {"title": call.title, "kind": call.kind, "locations": call.locations}
        if call.raw_input is not None:
            arguments["rawInput"] = call.raw_input
        self._add({"type": "function_call", "call_id": call_id, "name": call.kind or "other",
                   "arguments": _clip(json.dumps(arguments, ensure_ascii=False)), "title": call.title,
                   "kind": call.kind, "locations": call.locations})
        if update.get("status") in ("completed", "failed"):
            self._tool_update(update)

    def _tool_update(self, update: dict[str, Any]) -> None:
        call_id = update.get("toolCallId")
        call = self.tools.get(call_id) if isinstance(call_id, str) else None
        if call is None:
            self._tool_call(update)
            return
        self._merge(call, update)
        if update.get("status") in ("completed", "failed") and not call.finished:
            call.finished = True
            self._close_segment()
            self._add({"type": "function_call_output", "call_id": call_id, "output": tool_output(update),
                       "title": call.title, "kind": call.kind, "locations": call.locations})
