"""Codex CLI rollouts: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`.

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
`model_context_window` (the model's window less Codex's 5% reserve). A version that writes both forms of a turn counts it once.

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
from typing import Any

from ctxd.ledger.rules import is_real_user_message, message_text
from ctxd.sessions.model import Change, Turn, Usage, first_request, note_report, shorten, tokens
from ctxd.sessions.reader import Reader

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


def _is_input(item: dict[str, Any]) -> bool:
    """An item a request sends (not one its response wrote)."""
    kind = item.get("type")
    return (kind == "message" and item.get("role") != "assistant") or kind in (
        "function_call_output", "custom_tool_call_output")


class CodexReader(Reader):
    agent = "codex"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._total: dict[str, int] = {}  # the latest total_token_usage (for per-model deltas)
        self._stamp: str | None = None  # the timestamp of the line being read
        self._fill = 0  # the latest non-zero fill reported (a compaction's "before")

    def reset(self) -> None:
        super().reset()
        self._total = {}
        self._fill = 0

    def record(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        kind = rec.get("type")
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
                session.items.append(item)
                change.add(item, session)
        elif kind == "event_msg":
            self._event(payload, timestamp, change)
        elif kind == "turn_context":
            model = payload.get("model")
            if isinstance(model, str) and model != session.model:
                session.model = model
                change.meta = True
        elif kind == "compacted":
            self._compacted(payload, change)
        elif kind == "session_meta":
            self._meta(payload, timestamp, change)
        elif kind in KNOWN_OTHER:
            return
        else:
            session.count_unknown(str(kind))

    # --- records ---

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

    def _item(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        kind = payload.get("type")
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
        if kind not in NOT_MODEL_VISIBLE:
            self.session.count_unknown(f"response_item.{kind}")
        return None

    def _event(self, event: dict[str, Any], timestamp: Any, change: Change) -> None:
        session = self.session
        kind = event.get("type")
        if kind == "token_count":
            info = event.get("info")
            if isinstance(info, dict):
                self._usage(info, change)
        elif kind == "user_message":
            self._turn(event.get("message"), timestamp, change)
        elif kind == "item_completed":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "UserMessage":
                parts = item.get("content")
                texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)] \
                    if isinstance(parts, list) else []
                self._turn("\n".join(texts), timestamp, change)
        elif kind == "task_started":
            window = event.get("model_context_window")
            if isinstance(window, int) and window > 0 and window != session.context_window:
                session.context_window = window
                change.meta = True

    def _turn(self, text: Any, timestamp: Any, change: Change) -> None:
        """A user turn: what the user typed, from whichever event this version writes."""
        session = self.session
        if not isinstance(text, str):
            return
        last = session.turns[-1] if session.turns else None
        label = shorten(text, 60)
        if last is not None and last.index == len(session.items) and last.generation == session.generation \
                and last.text == label:
            return  # the same turn in the other form (`user_message` and `UserMessage` both written)
        if session.title is None and text.strip():
            session.title = shorten(text)
            change.meta = True
        turn = Turn(len(session.items), label, timestamp if isinstance(timestamp, str) else None, session.generation)
        session.turns.append(turn)
        change.turns.append(turn)

    def _usage(self, info: dict[str, Any], change: Change) -> None:
        session = self.session
        last = info.get("last_token_usage")
        total = info.get("total_token_usage")
        window = info.get("model_context_window")
        if isinstance(window, int) and window > 0 and window != session.context_window:
            session.context_window = window
            change.meta = True
        if isinstance(last, dict) and (tokens(last.get("input_tokens")) or tokens(last.get("output_tokens"))):
            # (no input and no output: a marker, module docstring)
            used = tokens(last.get("total_tokens"))
            cached = tokens(last.get("cached_input_tokens"))
            request = Usage(input=max(0, tokens(last.get("input_tokens")) - cached), cached_input=cached,
                            cache_write=tokens(last.get("cache_write_input_tokens")))
            note_report(session, used, request, session.model, self._stamp)
            self._fill = used or self._fill
            if session.first_request is None and tokens(last.get("input_tokens")):
                # What the request carried: the items up to the last input; the response's
                # items were recorded before this event.
                carried = len(session.items)
                while carried and not _is_input(session.items[carried - 1]):
                    carried -= 1
                session.first_request = first_request(tokens(last.get("input_tokens")), session.items[:carried])
            if used != session.baseline or session.last_usage != last:
                session.baseline = used
                session.baseline_items = len(session.items)
                session.last_usage = {k: tokens(v) for k, v in last.items()}
                change.usage = True
        if isinstance(total, dict):
            # Cost from the running total; a total that went down is a new process (a resume)
            # whose count starts again, so it is added on top rather than subtracted.
            previous = self._total if tokens(total.get("total_tokens")) >= tokens(self._total.get("total_tokens")) else {}

            def grew(key: str) -> int:  # never negative, whatever the file says
                return max(0, tokens(total.get(key)) - tokens(previous.get(key)))

            billed = grew("input_tokens")
            cached = min(grew("cached_input_tokens"), billed)  # cached input is part of the input
            delta = Usage(input=billed - cached, cached_input=cached, output=grew("output_tokens"),
                          reasoning=grew("reasoning_output_tokens"))
            if delta.input or delta.cached_input or delta.output:
                session.cumulative.setdefault(session.model or "", Usage()).add(delta)
                change.usage = True
            self._total = total

    def _compacted(self, payload: dict[str, Any], change: Change) -> None:
        """The history is replaced: by `replacement_history` when the line has it, else as Codex
        rebuilds it (codex-rs/core compact.rs): the earlier user messages, then the summary."""
        session = self.session
        replacement = payload.get("replacement_history")
        if isinstance(replacement, list):
            items = [item for item in (self._item(i) for i in replacement if isinstance(i, dict)) if item is not None]
        else:
            items = [i for i in session.items if is_real_user_message(i)]
            message = payload.get("message")
            if isinstance(message, str) and message:
                items.append({"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": message}]})
        at = self._stamp or session.last_activity  # the file's time, never the time it is read
        session.agent_compactions.append({"trigger": None, "tokensBefore": self._fill or None, "tokensAfter": None,
                                          "at": at})
        session.items = items
        session.compactions += 1
        session.generation += 1
        session.baseline = None  # until the next token_count reports the smaller window
        change.replace(session, session.compactions - 1, at)
        change.usage = True
