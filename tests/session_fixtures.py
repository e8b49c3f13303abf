"""Agent session files as the agents write them, for the tests of ctxd/sessions (issue #16).

Written by hand from the agents' own definitions; every record says where its shape comes from.

Codex CLI (openai/codex): `codex-rs/protocol/src/protocol.rs` — `RolloutLine {timestamp, #[serde(flatten)]
item: RolloutItem}`, `RolloutItem` is `#[serde(tag = "type", content = "payload", rename_all =
"snake_case")]` over SessionMeta(SessionMetaLine) / ResponseItem / Compacted(CompactedItem) /
TurnContext(TurnContextItem) / EventMsg; `EventMsg` is `#[serde(tag = "type", rename_all =
"snake_case")]` with TokenCount(TokenCountEvent {info: Option<TokenUsageInfo>, rate_limits}),
TaskStarted {model_context_window}, UserMessage {message, images}, ContextCompacted;
`TokenUsage {input_tokens, cached_input_tokens, output_tokens, reasoning_output_tokens,
total_tokens}`; `CompactedItem {message, replacement_history?}`. Response items are the
Responses API items of `codex-rs/protocol/src/models.rs` (`ResponseItem`), e.g. the user message of
`codex-rs/core/tests/fixtures/rollout_copy_paste_local_image.json`. File location and name:
`codex-rs/core/src/rollout/recorder.rs` (`sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl`).

Claude Code: transcripts under `~/.claude/projects/<cwd with every non-alphanumeric character as
'-'>/<session uuid>.jsonl`, as parsed by ccusage (`data-loader.ts`: `message.usage`
input/output/cache_creation_input_tokens/cache_read_input_tokens, dedup by `message.id` +
`requestId`) and claude-code-log (`models.py`: `type` user/assistant/summary/system, `uuid`,
`parentUuid`, `isSidechain`, `isMeta`, `isCompactSummary`, content blocks text/tool_use/tool_result/
thinking). The `compact_boundary` record (`{"type":"system","subtype":"compact_boundary","content":
"Conversation compacted","compactMetadata":{"trigger","preTokens"},"parentUuid":null,
"logicalParentUuid"}`) and the streamed assistant lines (one content block a line, same
`message.id`, same `usage`) are as in public transcripts of Claude Code 1.0.x/2.0.x.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxd.agents.session import Change
    from tests.rpc import Client

CODEX_ID = "0199a213-81c0-7800-8aa1-bbab2a035a53"
CLAUDE_ID = "7f2c1d9e-3b4a-4c5d-8e6f-0a1b2c3d4e5f"


def write_jsonl(path: Path, records: list[dict[str, Any]], tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)
    return path


def append_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("ab") as f:
        f.write(b"".join(json.dumps(r).encode() + b"\n" for r in records))
        f.flush()


# --- Codex -------------------------------------------------------------------------------------


def codex_path(home: Path, session_id: str = CODEX_ID, day: str = "2025/10/03") -> Path:
    stamp = day.replace("/", "-") + "T10-00-00"
    return home / "sessions" / day / f"rollout-{stamp}-{session_id}.jsonl"


def codex_meta(cwd: Path | str, session_id: str = CODEX_ID, ts: str = "2025-10-03T10:00:00.000Z") -> dict[str, Any]:
    # RolloutItem::SessionMeta(SessionMetaLine { meta: SessionMeta {id, timestamp, cwd, originator,
    # cli_version, instructions, source, model_provider}, git: Option<GitInfo> }), flattened.
    return {"timestamp": ts, "type": "session_meta", "payload": {
        "id": session_id, "timestamp": ts, "cwd": str(cwd), "originator": "codex_cli_rs",
        "cli_version": "0.46.0", "instructions": None, "source": "cli", "model_provider": "openai",
        "git": {"commit_hash": "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "branch": "main"}}}


def codex_turn(text: str, ts: str, model: str = "gpt-5-codex", cwd: str = "/") -> list[dict[str, Any]]:
    """One user turn's opening records, in the order codex-rs/core records them."""
    return [
        # RolloutItem::TurnContext(TurnContextItem {cwd, approval_policy, sandbox_policy, model, effort, summary})
        {"timestamp": ts, "type": "turn_context", "payload": {
            "cwd": cwd, "approval_policy": "on-request", "sandbox_policy": {"type": "workspace-write"},
            "model": model, "effort": "medium", "summary": "auto"}},
        # ResponseItem::Message, role user, ContentItem::InputText (as in rollout_copy_paste_local_image.json)
        {"timestamp": ts, "type": "response_item", "payload": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}},
        # EventMsg::UserMessage(UserMessageEvent {message, images})
        {"timestamp": ts, "type": "event_msg", "payload": {"type": "user_message", "message": text, "images": []}},
        # EventMsg::TaskStarted(TaskStartedEvent {model_context_window})
        {"timestamp": ts, "type": "event_msg", "payload": {"type": "task_started", "model_context_window": 272000}},
    ]


def codex_token_count(last_total: int, total: dict[str, int], ts: str, window: int = 272000) -> dict[str, Any]:
    # EventMsg::TokenCount(TokenCountEvent {info: Some(TokenUsageInfo {total_token_usage,
    # last_token_usage, model_context_window}), rate_limits})
    last_input = last_total - 300
    return {"timestamp": ts, "type": "event_msg", "payload": {"type": "token_count", "info": {
        "total_token_usage": total,
        "last_token_usage": {"input_tokens": last_input, "cached_input_tokens": last_input // 2,
                             "output_tokens": 300, "reasoning_output_tokens": 128, "total_tokens": last_total},
        "model_context_window": window},
        "rate_limits": {"primary": {"used_percent": 4.0, "window_minutes": 300, "resets_at": 1759500000},
                        "secondary": None}}}


def codex_tool_round(call_id: str, command: str, output: str, ts: str) -> list[dict[str, Any]]:
    return [
        # ResponseItem::Reasoning {id, summary: [SummaryText], content: None, encrypted_content}
        {"timestamp": ts, "type": "response_item", "payload": {
            "type": "reasoning", "summary": [{"type": "summary_text", "text": "**Inspecting files**"}],
            "content": None, "encrypted_content": "gAAAAABo3x"}},
        # ResponseItem::FunctionCall {name, arguments (a JSON string), call_id}
        {"timestamp": ts, "type": "response_item", "payload": {
            "type": "function_call", "name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", command]}),
            "call_id": call_id}},
        # ResponseItem::FunctionCallOutput {call_id, output} (FunctionCallOutputPayload serialises as a string)
        {"timestamp": ts, "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": call_id, "output": output}},
    ]


def codex_answer(text: str, ts: str) -> dict[str, Any]:
    # ResponseItem::Message, role assistant, ContentItem::OutputText
    return {"timestamp": ts, "type": "response_item", "payload": {
        "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}}


def codex_session(cwd: Path | str, session_id: str = CODEX_ID) -> list[dict[str, Any]]:
    """A two-turn Codex session: meta, injected context, two turns with a tool call each."""
    t = "2025-10-03T10:00:0{}.000Z".format
    return [
        codex_meta(cwd, session_id),
        # The injected context Codex records before the first turn (role user, <environment_context>).
        {"timestamp": t(1), "type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"<environment_context>\n  <cwd>{cwd}</cwd>\n</environment_context>"}]}},
        *codex_turn("Fix the failing test in parser.py please", t(2), cwd=str(cwd)),
        *codex_tool_round("call_1", "pytest -q", "1 failed", t(3)),
        codex_token_count(9_000, {"input_tokens": 8_700, "cached_input_tokens": 4_350, "output_tokens": 300,
                                  "reasoning_output_tokens": 128, "total_tokens": 9_000}, t(4)),
        codex_answer("Fixed: the tokenizer skipped blank lines.", t(5)),
        codex_token_count(12_000, {"input_tokens": 20_400, "cached_input_tokens": 10_200, "output_tokens": 600,
                                   "reasoning_output_tokens": 256, "total_tokens": 21_000}, t(6)),
    ]


def codex_compacted(message: str, ts: str, replacement: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    # RolloutItem::Compacted(CompactedItem {message, replacement_history}) then
    # EventMsg::ContextCompacted(ContextCompactedEvent)
    payload: dict[str, Any] = {"message": message}
    if replacement is not None:
        payload["replacement_history"] = replacement
    return [{"timestamp": ts, "type": "compacted", "payload": payload},
            {"timestamp": ts, "type": "event_msg", "payload": {"type": "context_compacted"}}]


def codex_marker(ts: str, total: int = 0, window: int = 258_400,
                 running: dict[str, int] | None = None) -> dict[str, Any]:
    """The `token_count` Codex 0.171 writes around its own compaction, no request made: before the
    `compacted` record with a `total_tokens` of 0, after it with Codex's own figure for the new
    history (6,877 in tests/test_real_agents.py's run; 940,500 in issue #36's) and every other
    count 0. Written by the real Codex CLI 0.171 (`codex exec`, `model_auto_compact_token_limit`)."""
    zero = {"input_tokens": 0, "cached_input_tokens": 0, "cache_write_input_tokens": 0, "output_tokens": 0,
            "reasoning_output_tokens": 0}
    return {"timestamp": ts, "type": "event_msg", "payload": {"type": "token_count", "info": {
        "total_token_usage": running or {**zero, "total_tokens": 0},
        "last_token_usage": {**zero, "total_tokens": total}, "last_usage_includes_reasoning": total > 0,
        "model_context_window": window}, "rate_limits": None}}


# --- Claude Code -------------------------------------------------------------------------------


def claude_project_dir(home: Path, cwd: Path | str) -> Path:
    return home / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


def claude_path(home: Path, cwd: Path | str, session_id: str = CLAUDE_ID) -> Path:
    return claude_project_dir(home, cwd) / f"{session_id}.jsonl"


def _line(kind: str, uuid: str, parent: str | None, cwd: Path | str, ts: str, session_id: str,
          **extra: Any) -> dict[str, Any]:
    # The common fields of every message line (claude-code-log models.py BaseTranscriptEntry).
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": str(cwd),
            "sessionId": session_id, "version": "2.0.14", "gitBranch": "main", "type": kind, "uuid": uuid,
            "timestamp": ts, **extra}


def claude_user(text: str | list[dict[str, Any]], uuid: str, parent: str | None, cwd: Path | str, ts: str,
                session_id: str = CLAUDE_ID, **extra: Any) -> dict[str, Any]:
    return _line("user", uuid, parent, cwd, ts, session_id, message={"role": "user", "content": text}, **extra)


def claude_usage(input_tokens: int, creation: int, read: int, output: int) -> dict[str, Any]:
    # Anthropic Messages API usage, as ccusage reads it.
    return {"input_tokens": input_tokens, "cache_creation_input_tokens": creation, "cache_read_input_tokens": read,
            "output_tokens": output, "service_tier": "standard",
            "cache_creation": {"ephemeral_5m_input_tokens": creation, "ephemeral_1h_input_tokens": 0}}


def claude_assistant(blocks: list[dict[str, Any]], message_id: str, first_uuid: str, parent: str | None,
                     cwd: Path | str, ts: str, usage: dict[str, Any], model: str = "claude-sonnet-4-5-20250929",
                     session_id: str = CLAUDE_ID, **extra: Any) -> list[dict[str, Any]]:
    """One streamed assistant message: a line per content block, sharing message.id and usage."""
    lines = []
    for n, block in enumerate(blocks):
        uuid = f"{first_uuid}-{n}" if n else first_uuid
        lines.append(_line("assistant", uuid, parent, cwd, ts, session_id, requestId=f"req_{message_id}", message={
            "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [block],
            "stop_reason": None, "stop_sequence": None, "usage": usage}, **extra))
        parent = uuid
    return lines


def claude_session(cwd: Path | str, session_id: str = CLAUDE_ID) -> list[dict[str, Any]]:
    t = "2025-10-03T11:00:0{}.000Z".format
    return [
        # Older Claude Code writes the title record first; it carries no cwd.
        {"type": "summary", "summary": "Parser fix", "leafUuid": "a2"},
        claude_user("Add a --verbose flag to the CLI", "u1", None, cwd, t(1), session_id),
        *claude_assistant([
            {"type": "thinking", "thinking": "Look at cli.py first.", "signature": "EqQBCkYIBxgCKkA"},
            {"type": "text", "text": "I'll read cli.py."},
            {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": f"{cwd}/cli.py"}},
        ], "msg_01", "a1", "u1", cwd, t(2), claude_usage(4, 3_000, 12_000, 120), session_id=session_id),
        claude_user([{"type": "tool_result", "tool_use_id": "toolu_01", "content": "import argparse\n"}],
                    "u2", "a1-2", cwd, t(3), session_id,
                    toolUseResult={"type": "text", "file": {"filePath": f"{cwd}/cli.py"}}),
        *claude_assistant([{"type": "text", "text": "Added --verbose."}], "msg_02", "a2", "u2", cwd, t(4),
                          claude_usage(6, 500, 15_000, 40), session_id=session_id),
    ]


def claude_compact(uuid: str, parent: str, cwd: Path | str, ts: str, summary: str,
                   session_id: str = CLAUDE_ID) -> list[dict[str, Any]]:
    return [
        {"parentUuid": None, "logicalParentUuid": parent, "isSidechain": False, "userType": "external",
         "cwd": str(cwd), "sessionId": session_id, "version": "2.0.14", "gitBranch": "main", "type": "system",
         "subtype": "compact_boundary", "content": "Conversation compacted", "isMeta": False, "timestamp": ts,
         "uuid": uuid, "level": "info", "compactMetadata": {"trigger": "manual", "preTokens": 15_546}},
        claude_user(f"This session is being continued from a previous conversation. {summary}", f"{uuid}-s",
                    uuid, cwd, ts, session_id, isCompactSummary=True, isVisibleInTranscriptOnly=True),
    ]


# --- Sessions compacted by their agent (issue #36) -----------------------------------------------


def _stamp(day: str, segment: int, second: int) -> str:
    return f"{day}T{9 + segment // 60:02d}:{segment % 60:02d}:{second:02d}.000Z"


def codex_history(cwd: Path | str, words: list[str], replacement: list[bool] | None = None,
                  session_id: str = CODEX_ID, day: str = "2026-02-10", markers: bool = True) -> list[dict[str, Any]]:
    """A Codex session of `len(words)` stretches, each with a user turn, a tool call whose output
    says its word, an answer and a report; Codex compacted between each two (`len(words) - 1`
    compactions), on `day`, one minute apart. `replacement[k]`: the k-th `compacted` record has a
    `replacement_history` (the summary alone; 0.171) or not (0.46: Codex rebuilds it). `markers`:
    the zero-input `token_count`s Codex 0.171 writes around each compaction."""
    records = [codex_meta(cwd, session_id, ts=_stamp(day, 0, 0))]
    running = 0
    for n, word in enumerate(words):
        t = functools.partial(_stamp, day, n)  # the stretch's own minute
        if n:
            summary = f"Summary {n}: the work so far, without its details."
            if markers:
                records.append(codex_marker(t(0), 0))
            keep = (replacement or [True] * len(words))[n - 1]
            items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": summary}]}]
            records += codex_compacted(summary, t(1), items if keep else None)
            if markers:
                records.append(codex_marker(t(1), 900_000 + n))
        records += codex_turn(f"Stretch {n}: carry on with the work", t(2), model="gpt-5.5", cwd=str(cwd))
        records += codex_tool_round(f"call_{n}", "cat notes.txt", f"notes of stretch {n}: the {word} setting", t(3))
        records.append(codex_answer(f"Stretch {n} is done.", t(4)))
        fill = 20_000 + 1_000 * n
        running += fill
        records.append(codex_token_count(fill, {"input_tokens": running - 300, "cached_input_tokens": 0,
                                                "output_tokens": 300, "reasoning_output_tokens": 0,
                                                "total_tokens": running}, t(5), window=258_400))
    return records


def claude_history(cwd: Path | str, words: list[str], session_id: str = CLAUDE_ID,
                   day: str = "2026-02-10") -> list[dict[str, Any]]:
    """A Claude Code transcript of `len(words)` stretches, each a prompt, a Read whose result says
    its word and an answer; Claude Code compacted between each two (its `compact_boundary` and
    the summary after it), on `day`, one minute apart."""
    records: list[dict[str, Any]] = []
    parent: str | None = None
    for n, word in enumerate(words):
        t = functools.partial(_stamp, day, n)  # the stretch's own minute
        if n:
            boundary = claude_compact(f"c{n}", parent or "", cwd, t(1), f"Summary {n}: the work so far.", session_id)
            records += boundary
            parent = f"c{n}-s"
        records.append(claude_user(f"Stretch {n}: carry on with the work", f"u{n}", parent, cwd, t(2), session_id))
        records += claude_assistant([{"type": "tool_use", "id": f"toolu_{n}", "name": "Read",
                                      "input": {"file_path": f"{cwd}/notes.txt"}}], f"msg_{n}a", f"a{n}", f"u{n}",
                                    cwd, t(3), claude_usage(5, 1_000, 20_000 + 1_000 * n, 50), session_id=session_id)
        records.append(claude_user([{"type": "tool_result", "tool_use_id": f"toolu_{n}",
                                      "content": f"notes of stretch {n}: the {word} setting"}],
                                   f"r{n}", f"a{n}", cwd, t(4), session_id))
        records += claude_assistant([{"type": "text", "text": f"Stretch {n} is done."}], f"msg_{n}b", f"b{n}", f"r{n}",
                                    cwd, t(5), claude_usage(5, 100, 21_000 + 1_000 * n, 20), session_id=session_id)
        parent = f"b{n}"
    return records


# --- a session's window, as the daemon's store keeps it ---------------------------------------------


def mirror(window: list[dict[str, Any]], change: Change) -> None:
    """`window` as the daemon's store keeps it from a read's steps (a read from the start: anew)."""
    if change.from_start:
        window.clear()
    for step in change.steps:
        if step.replace and step.keep is not None:
            del window[step.keep:]
        elif step.replace:
            window[:] = step.items
        else:
            window.extend(step.items)


def mirrored_as(client: Client, uri: str, thread: str, held: list[dict[str, Any]]) -> bool:
    """The owner is idle and the thread's active window is `held` (a reader's that holds it)."""
    from tests.rpc import RpcError

    if not client.request("ctxd/sessions/sync", {"workspace": uri}, timeout=60).get("idle"):
        return False
    try:
        items = client.request("ctxd/history", {"workspace": uri, "thread": thread, "includeArchived": True})["items"]
    except RpcError:
        return False
    active = [json.dumps(i, sort_keys=True) for i in items if not i.get("archived")]
    return active == [json.dumps(i, sort_keys=True) for i in held]
