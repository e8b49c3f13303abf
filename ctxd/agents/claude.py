"""Claude Code transcripts: `~/.claude/projects/<project>/<session>.jsonl`.

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
"""

from __future__ import annotations

import json
import os
from typing import Any

from ctxd.sessions.model import Change, Turn, Usage, first_request, note_report, shorten, tokens
from ctxd.sessions.reader import Reader

MAX_SUBAGENT_FILES = 1_000  # per session: more is not a real session, and each is opened on every read

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


def _usage(raw: dict[str, Any]) -> Usage:
    written = tokens(raw.get("cache_creation_input_tokens"))
    split = raw.get("cache_creation")
    hour = min(written, tokens(split.get("ephemeral_1h_input_tokens"))) if isinstance(split, dict) else 0
    return Usage(input=tokens(raw.get("input_tokens")), cached_input=tokens(raw.get("cache_read_input_tokens")),
                 cache_write=written, output=tokens(raw.get("output_tokens")), cache_write_1h=hour)


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

    def __init__(self, path: str, session_id: str | None = None) -> None:
        super().__init__(path)
        self.session.id = session_id
        self._init()

    def _init(self) -> None:
        self._subagents: dict[str, _SubagentCost] = {}
        self._msg_usage: dict[str, tuple[str, Usage]] = {}  # message.id -> (model, usage), for cost
        self._blocks_of: str | None = None  # the message id whose blocks `_blocks` holds
        self._blocks: set[str] = set()
        self._end: dict[str, int] = {}  # main-chain uuid -> len(items) after it (for rewinds)
        self._leaf: str | None = None

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

    def _read_subagents(self) -> bool:
        if not self.path.endswith(".jsonl"):
            return False
        folder = os.path.join(self.path[: -len(".jsonl")], "subagents")
        if os.path.islink(os.path.dirname(folder)) or os.path.islink(folder):
            return False  # never read through a link (docs/sessions.md, Privacy)
        try:
            with os.scandir(folder) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False))
        except OSError:
            return False
        grew = False
        for name in names[:MAX_SUBAGENT_FILES]:
            sub = self._subagents.get(name)
            if sub is None:
                sub = self._subagents[name] = _SubagentCost(os.path.join(folder, name), self)
            grew = sub.read().lines > 0 or grew
        return grew

    def record(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        kind = rec.get("type")
        timestamp = rec.get("timestamp")
        if isinstance(timestamp, str):
            session.last_activity = timestamp
            if session.started is None:
                session.started = timestamp
        if session.cwd is None and isinstance(rec.get("cwd"), str):
            session.cwd = rec["cwd"]
            change.meta = True
        if session.id is None and isinstance(rec.get("sessionId"), str):
            session.id = rec["sessionId"]
            change.meta = True
        if isinstance(rec.get("version"), str):
            session.version = rec["version"]
        if rec.get("isSidechain"):
            session.sidechain_lines += 1
            if kind == "assistant":
                self._cost(rec)  # a subagent's tokens are billed too, but are not this window
            return
        if kind == "assistant":
            self._assistant(rec, change)
        elif kind == "user":
            self._user(rec, change)
        elif kind == "system":
            if rec.get("subtype") == "compact_boundary":
                self._compact(change, rec)
            self._link(rec)
        elif kind in KNOWN_OTHER:
            return
        else:
            session.count_unknown(str(kind))

    # --- the chain ---

    def _link(self, rec: dict[str, Any]) -> None:
        uuid = rec.get("uuid")
        if isinstance(uuid, str):
            self._end[uuid] = len(self.session.items)
            self._leaf = uuid

    def _rewind(self, rec: dict[str, Any], change: Change) -> None:
        """A prompt whose parent is an earlier line than the last one: the user went back and
        edited; what followed that parent is no longer in the window."""
        parent = rec.get("parentUuid")
        if not isinstance(parent, str) or parent == self._leaf or parent not in self._end:
            return
        keep = self._end[parent]
        session = self.session
        if keep < len(session.items):
            del session.items[keep:]
            session.turns = [t for t in session.turns if t.generation != session.generation or t.index < keep]
            session.generation += 1
            session.rewinds += 1
            change.replace(session, None, rec.get("timestamp") if isinstance(rec.get("timestamp"), str)
                           else session.last_activity)

    # --- records ---

    def _add(self, item: dict[str, Any], change: Change) -> None:
        self.session.items.append(item)
        change.add(item, self.session)

    def _cost(self, rec: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
        message = rec.get("message")
        if not isinstance(message, dict):
            return None
        model = message.get("model")
        if not isinstance(model, str):
            model = ""
        raw = message.get("usage")
        if not isinstance(raw, dict) or model == SYNTHETIC_MODEL:
            return None
        usage = _usage(raw)
        key = message.get("id") or rec.get("requestId") or rec.get("uuid")
        cumulative = self.session.cumulative
        if isinstance(key, str):
            old = self._msg_usage.get(key)
            if old is not None:
                cumulative[old[0]].add(old[1], -1)  # a streamed copy: its usage replaces, not adds
            self._msg_usage[key] = (model, usage)
        cumulative.setdefault(model, Usage()).add(usage)
        return raw, model

    def _assistant(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        message = rec.get("message")
        if not isinstance(message, dict):
            session.count_unknown("assistant.no_message")
            return
        reported = self._cost(rec)
        used = 0
        if reported is not None:
            raw, model = reported
            used = tokens(raw.get("input_tokens")) + tokens(raw.get("cache_creation_input_tokens")) + tokens(
                raw.get("cache_read_input_tokens")) + tokens(raw.get("output_tokens"))
            last = {k: tokens(v) for k, v in raw.items() if type(v) is int}
            note_report(session, used, _usage(raw), model, rec.get("timestamp"))
            if used and session.first_request is None:  # what the request carried: its input, not the reply
                session.first_request = first_request(used - tokens(raw.get("output_tokens")), session.items)
            if used and (used != session.baseline or last != session.last_usage):
                session.baseline = used
                session.last_usage = last
                change.usage = True
            if model and model != session.model:
                session.model = model
                change.meta = True
        message_id = message.get("id")
        if message_id != self._blocks_of or not isinstance(message_id, str):
            self._blocks_of = message_id if isinstance(message_id, str) else None
            self._blocks = set()
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, dict):
                continue
            key = json.dumps(block, sort_keys=True) if self._blocks_of else None
            if key is not None:
                if key in self._blocks:
                    continue  # a streamed duplicate of a block already mirrored
                self._blocks.add(key)
            item = self._assistant_item(block)
            if item is not None:
                self._add(item, change)
        if used:
            session.baseline_items = len(session.items)  # the report covers the reply's blocks too
        self._link(rec)

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

    def _user(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        message = rec.get("message")
        if not isinstance(message, dict):
            session.count_unknown("user.no_message")
            return
        content = message.get("content")
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
                session.count_unknown(f"user.{kind}")
        text = "\n".join(p["text"] for p in parts if p["type"] == "input_text")
        prompt = (bool(parts) and not outputs and not rec.get("isMeta") and not rec.get("isCompactSummary")
                  and not text.lstrip().startswith(NOT_A_PROMPT))
        if prompt:
            self._rewind(rec, change)
        for item in outputs:
            self._add(item, change)
        if parts:
            if prompt:
                turn = Turn(len(session.items), shorten(text, 60), rec.get("timestamp"), session.generation)
                session.turns.append(turn)
                change.turns.append(turn)
                if session.title is None and text.strip():
                    session.title = shorten(text)
                    change.meta = True
            item = {"type": "message", "role": "user", "content": parts}
            if rec.get("isCompactSummary"):  # the summary is what the compaction wrote
                session.items.append(item)
                change.add_to_replacement(item, session)
            else:
                self._add(item, change)
        self._link(rec)

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
        session.items = []
        session.compactions += 1
        session.generation += 1
        session.baseline = None
        self._end = {}
        change.replace(session, session.compactions - 1, at)
        change.usage = True


class _SubagentCost(Reader):
    """A subagent's transcript (`<session>/subagents/agent-*.jsonl`): only its assistant messages'
    usage is read, into the parent session's cost. Its lines are never the main window."""

    agent = "claude"

    def __init__(self, path: str, parent: ClaudeReader) -> None:
        super().__init__(path)
        self.parent = parent

    def record(self, rec: dict[str, Any], change: Change) -> None:
        if rec.get("type") == "assistant":
            self.parent._cost(rec)
