"""qwen-code: its chat recordings, window and compaction rule, hooks, configuration and status line
(ctxd/agents/base.py; the facts and where each was read are in docs/agents-research.md).

Sessions: `<home>/projects/<project>/chats/<session id>.jsonl` (`QWEN_HOME`, default `~/.qwen`),
where `<project>` is the project folder with every character other than an ASCII letter or digit
replaced by `-` (`sanitizeCwd`). A session file is not opened unless that name could be a
directory inside an open workspace; then its first line, which states the `cwd`, is read, and no
further unless the cwd is inside the workspace. Subagents keep files of their own
(`projects/<project>/subagents/...`): their requests are in the main file's telemetry (below).

The format, as qwen-code 0.24.4 writes it (packages/core/src/services/chatRecordingService.ts,
`ChatRecordingService.createBaseRecord` and its `record*` methods): one JSON object a line, appended,
never rewritten, with `uuid`, `parentUuid` (the previous record's), `sessionId`, `timestamp`,
`type`, `cwd`, `version`. Types:

- `user` {message: Gemini `Content` {role, parts [{text}]}}: a typed prompt (`provenance`
  `real_user`), or with `subtype` `notification` a message qwen sends on its own (a finished
  background agent's report);
- `assistant` {model, message {role: "model", parts [{text, thought?} | {functionCall {id, name,
  args}}]}, usageMetadata {promptTokenCount (cached included), candidatesTokenCount,
  thoughtsTokenCount, totalTokenCount, cachedContentTokenCount}, contextWindowSize};
- `tool_result` {message {parts [{functionResponse {id, name, response {output} | {error}}}]}};
- `system` with a `subtype`: `chat_compression` (its `compressedHistory` is the whole new history,
  `info` {originalTokenCount, newTokenCount, triggerReason}), `rewind` (re-rooted: its parent is
  the record before the rewound turn, so what followed is a dead branch:
  `ChatRecordingService.rewindRecording`), `ui_telemetry` (`qwen-code.api_response`: one request's
  usage, every request of the session, compressions and subagents included; `qwen-code.tool_call`),
  and bookkeeping with nothing the model sees (`KNOWN_SYSTEM`).

The conversation is the `parentUuid` chain ending at the last record
(`SessionService.reconstructHistory`): a record whose parent is not the record before it
re-roots the chain, and the items after that parent leave the window (archived, never lost).

Fill rule (the footer's "N% context used", packages/cli/src/ui/components/ContextUsageDisplay.tsx,
and on resume `getResumeTokenCounts`): the last, in file order, of an assistant record's
`usageMetadata.promptTokenCount` (else `totalTokenCount`) or a `chat_compression`'s
`info.newTokenCount`, out of the record's `contextWindowSize`. The reply's output is not added.

Cost: qwen records none. Each request's usage is its `ui_telemetry` `qwen-code.api_response`
(`input_token_count` with `cached_content_token_count` inside it, `output_token_count`,
`thoughts_token_count`), priced per `model`; a file without telemetry is priced from its
assistant records instead.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.agents import payloads
from ctxd.agents.base import Action, Agent, AgentConfig, AgentLimits, HookAction, HookInput, Scope, StatusUsage
from ctxd.agents.jsonl import HEAD_LIMIT, JsonlStore, Reader, entries, head
from ctxd.agents.session import Change, Turn, Usage, first_request, note_report, shorten, tokens, usages

if TYPE_CHECKING:
    from ctxd.agents.config.plan import ConfigChange
    from ctxd.agents.folders import Folders

VERSION = "0.24.4"

# System records with nothing the model sees (attribution, file history, branch points, the model
# switched, a notice shown to the user) and the telemetry ctxd reads only for the cost.
KNOWN_SYSTEM = {"ui_telemetry", "attribution_snapshot", "session_model", "notification", "file_history_snapshot",
                "branch_checkpoint"}
API_RESPONSE = "qwen-code.api_response"
# Records a reader that caught up remembers for rewinds (`trim`), as its saved state does: a rewind
# further back has the file read again from its start (a read from the start remembers them all).
IDLE_RECORDS = 64


def _count(value: Any) -> int:
    return tokens(value)


def _usage(prompt: int, cached: int, output: int, thoughts: int, total: int) -> Usage:
    """A request's usage in ctxd's split. qwen's prompt count holds the cached part; whether its
    output count holds the thoughts depends on the provider (OpenAI's completion tokens do,
    Gemini's candidates do not: packages/core/src/core/openaiContentGenerator/converter.ts): the
    total says which."""
    cached = min(cached, prompt)
    separate = bool(thoughts) and total == prompt + output + thoughts
    return Usage(input=prompt - cached, cached_input=cached, output=output + (thoughts if separate else 0),
                 reasoning=thoughts)


def _items(content: Any) -> list[dict[str, Any]]:
    """A Gemini `Content` ({role, parts}) as ctxd's items: text, thoughts, function calls and their
    responses, inline images."""
    if not isinstance(content, dict):
        return []
    model = content.get("role") == "model"
    texts: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []

    def flush() -> None:
        if texts:
            items.append({"type": "message", "role": "assistant" if model else "user", "content": list(texts)})
            texts.clear()

    parts = content.get("parts")
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            if part.get("thought") is True:
                flush()
                items.append({"type": "reasoning", "summary": [],
                              "content": [{"type": "reasoning_text", "text": part["text"]}]})
            else:
                texts.append({"type": "output_text" if model else "input_text", "text": part["text"]})
        elif isinstance(part.get("functionCall"), dict):
            flush()
            call = part["functionCall"]
            items.append({"type": "function_call", "call_id": str(call.get("id", "")), "name": str(call.get("name", "")),
                          "arguments": json.dumps(call.get("args", {}), ensure_ascii=False)})
        elif isinstance(part.get("functionResponse"), dict):
            flush()
            answer = part["functionResponse"]
            response = answer.get("response")
            output = response.get("output") if isinstance(response, dict) else None
            items.append({"type": "function_call_output", "call_id": str(answer.get("id", "")),
                          "output": output if isinstance(output, str) else json.dumps(response, ensure_ascii=False)})
        elif isinstance(part.get("inlineData"), dict) and not model:
            data = part["inlineData"]
            texts.append({"type": "input_image",
                          "image_url": f"data:{data.get('mimeType', 'image/png')};base64,{data.get('data', '')}"})
    flush()
    return items


def _text(content: Any) -> str:
    parts = content.get("parts") if isinstance(content, dict) else None
    return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)) \
        if isinstance(parts, list) else ""


class QwenReader(Reader):
    agent = "qwen"
    resumable = True

    def __init__(self, path: str, session_id: str | None = None, *, window: bool = True) -> None:
        super().__init__(path, window=window)
        self.session.id = session_id
        self._init()

    def _init(self) -> None:
        # uuid on the chain -> (the window's count of items, turns) after it, for rewinds: every record
        # since the start or the last compression (`_complete`), or the latest ones (`trim`).
        self._end: dict[str, tuple[int, int]] = {}
        self._complete = True
        self._leaf: str | None = None
        self._billed: dict[str, Usage] = {}  # per model, from the telemetry (every request)
        self._replied: dict[str, Usage] = {}  # per model, from assistant records (no telemetry)
        self._carried = 0  # the estimate of the items before the first report (`first_request`)

    def reset(self) -> None:
        session_id = self.session.id
        super().reset()
        self.session.id = session_id
        self._init()

    def trim(self, records: int = IDLE_RECORDS) -> None:
        """Forget all but the last `records` records (a reader that caught up: little memory each)."""
        if len(self._end) > records:
            self._end = dict(list(self._end.items())[-records:])
            self._complete = False

    def own_state(self) -> dict[str, Any]:
        return {"end": [[uuid, *where] for uuid, where in list(self._end.items())[-IDLE_RECORDS:]],
                "complete": self._complete and len(self._end) <= IDLE_RECORDS, "leaf": self._leaf, "carried": self._carried,
                "billed": {model: usage.as_dict() for model, usage in self._billed.items()},
                "replied": {model: usage.as_dict() for model, usage in self._replied.items()}}

    def restore_own(self, state: dict[str, Any]) -> None:
        self._end = {str(entry[0]): (int(entry[1]), int(entry[2])) for entry in state.get("end") or []}
        self._complete = bool(state.get("complete"))
        self._leaf = state.get("leaf")
        self._carried = int(state.get("carried") or 0)
        self._billed, self._replied = usages(state.get("billed")), usages(state.get("replied"))
        self.session.cumulative = self._billed or self._replied  # (the same objects, as a read leaves them)

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
            session.sidechain_lines += 1  # a subagent's record: its requests are in the telemetry
            return
        self._rewind(rec, change)
        if self.replay:
            return
        if kind == "user":
            self._user(rec, change)
        elif kind == "assistant":
            self._assistant(rec, change)
        elif kind == "tool_result":
            self._add(_items(rec.get("message")), change)
        elif kind == "system":
            subtype = rec.get("subtype")
            if subtype == "chat_compression":
                self._compressed(rec, change)
            elif subtype == "ui_telemetry":
                self._telemetry(rec)
            elif isinstance(subtype, list | dict):  # (no kind this reader knows, and not one a set can hold)
                session.count_unknown(f"system.{type(subtype).__name__}")
            elif subtype not in KNOWN_SYSTEM and subtype != "rewind":
                session.count_unknown(f"system.{subtype}")
        else:
            session.count_unknown(str(kind))
        uuid = rec.get("uuid")
        if isinstance(uuid, str):
            self._end.pop(uuid, None)  # (a record written again is the latest)
            self._end[uuid] = (session.window, session.turn_count)
            self._leaf = uuid

    def _add(self, items: list[dict[str, Any]], change: Change) -> None:
        session = self.session
        for item in items:
            session.add_item(item, self.holds_window)
            change.add(item, session)
            if session.first_request is None:
                from ctxd.tokens.approx import item_tokens  # (not for a hook, which imports this module)

                self._carried += item_tokens(item)

    def _rewind(self, rec: dict[str, Any], change: Change) -> None:
        """A record whose parent is not the last record re-roots the chain (qwen's `rewind`
        record): what followed that parent left the window. A parent forgotten since (`trim`) has
        the file read again from its start, once."""
        parent = rec.get("parentUuid")
        if not isinstance(parent, str) or parent == self._leaf:
            return
        found = self._end.get(parent)
        if found is None:
            if not self._complete:
                self.read_again_for(parent)
            return
        keep, turns = found
        session = self.session
        if keep >= session.window:
            return
        if self.holds_window:
            del session.items[keep:]
        session.window = keep
        session.turn_count = turns
        session.turns = [t for t in session.turns if t.generation != session.generation or t.index < keep] \
            if self.holds_window else []
        session.generation += 1
        session.rewinds += 1
        if session.baseline_items > keep:
            session.baseline, session.baseline_items, session.tail = None, 0, []  # that report counted what left
            change.usage = True
        else:
            session.tail = session.tail[:max(0, keep - session.baseline_items)]
        change.replace(session, session.items, None, rec.get("timestamp") if isinstance(rec.get("timestamp"), str)
                       else session.last_activity, keep=keep)

    def _user(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        message = rec.get("message")
        items = _items(message)
        prompt = rec.get("subtype") is None and rec.get("provenance") in (None, "real_user") and bool(items)
        if prompt:
            text = _text(message)
            turn = Turn(session.window, shorten(text, 60), rec.get("timestamp"), session.generation)
            session.add_turn(turn, self.holds_window)
            change.turns.append(turn)
            if session.title is None and text.strip():
                session.title = shorten(text)
                change.meta = True
        self._add(items, change)

    def _assistant(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        raw_model = rec.get("model")
        model = raw_model if isinstance(raw_model, str) else ""
        if model and model != session.model:
            session.model = model
            change.meta = True
        window = _count(rec.get("contextWindowSize"))
        if window and window != session.context_window:
            session.context_window = window
            change.meta = True
        carried = self._carried
        self._add(_items(rec.get("message")), change)
        raw = rec.get("usageMetadata")
        if not isinstance(raw, dict):
            return
        prompt = _count(raw.get("promptTokenCount"))
        usage = _usage(prompt, _count(raw.get("cachedContentTokenCount")), _count(raw.get("candidatesTokenCount")),
                       _count(raw.get("thoughtsTokenCount")), _count(raw.get("totalTokenCount")))
        self._replied.setdefault(model, Usage()).add(usage)
        if not self._billed:
            session.cumulative = self._replied
        used = prompt or _count(raw.get("totalTokenCount"))  # the footer's figure: the prompt, not the reply
        if not used:
            return
        note_report(session, used, usage, model, rec.get("timestamp"))
        if session.first_request is None:
            session.first_request = first_request(used, [], carried)
        session.reported(used)
        session.last_usage = {k: _count(v) for k, v in raw.items() if type(v) is int}
        change.usage = True

    def _telemetry(self, rec: dict[str, Any]) -> None:
        payload = rec.get("systemPayload")
        event = payload.get("uiEvent") if isinstance(payload, dict) else None
        if not isinstance(event, dict) or event.get("event.name") != API_RESPONSE:
            return
        raw_model = event.get("model")
        model = raw_model if isinstance(raw_model, str) else ""
        usage = _usage(_count(event.get("input_token_count")), _count(event.get("cached_content_token_count")),
                       _count(event.get("output_token_count")), _count(event.get("thoughts_token_count")),
                       _count(event.get("total_token_count")))
        self._billed.setdefault(model, Usage()).add(usage)
        self.session.cumulative = self._billed

    def _compressed(self, rec: dict[str, Any], change: Change) -> None:
        """`chat_compression`: the history is replaced by `compressedHistory` (the summary and the
        files qwen put back); its `newTokenCount` is the footer's figure until the next reply."""
        session = self.session
        raw_payload, raw_info = rec.get("systemPayload"), None
        payload: dict[str, Any] = raw_payload if isinstance(raw_payload, dict) else {}
        raw_info = payload.get("info")
        info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
        history = payload.get("compressedHistory")
        at = rec.get("timestamp") if isinstance(rec.get("timestamp"), str) else session.last_activity
        after = _count(info.get("newTokenCount"))
        session.agent_compactions.append({
            "trigger": "manual" if info.get("triggerReason") == "manual" else "auto",
            "tokensBefore": _count(info.get("originalTokenCount")) or session.baseline,
            "tokensAfter": after or None,
            "at": at})
        items = [item for content in (history if isinstance(history, list) else []) for item in _items(content)]
        session.replace_window(items, self.holds_window)
        session.compactions += 1
        session.generation += 1
        session.baseline, session.baseline_items = (after or None), len(items)
        self._end, self._complete = {}, True
        change.replace(session, items, session.compactions - 1, at)
        change.usage = True


# --- where its sessions live ----------------------------------------------------------------------


def encode_project(directory: str | Path) -> str:
    """qwen-code's project folder name for a directory (`sanitizeCwd`, on POSIX)."""
    return re.sub(r"[^a-zA-Z0-9]", "-", str(directory))


def session_id(path: str) -> str | None:
    """A session's id is its file name (UTF-8 only: else the records' `sessionId`)."""
    stem = Path(path).stem
    try:
        stem.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return stem


class QwenSessions(JsonlStore):
    """`<root>/<project>/chats/<session>.jsonl` (archived sessions in `chats/archive/` are not followed)."""

    def session_files(self) -> list[str]:
        chats = [os.path.join(e.path, "chats") for e in entries(str(self.root)) if e.is_dir(follow_symlinks=False)]
        return [e.path for folder in chats if not os.path.islink(folder) for e in entries(folder)
                if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)]

    def is_session_file(self, path: str) -> bool:
        p = Path(path)
        return p.name.endswith(".jsonl") and p.parent.name == "chats" and p.parent.parent.parent == self.root

    def peek_cwd(self, key: str, folders: Folders) -> tuple[str | None, bool, int]:
        """A file whose project folder cannot be inside an open folder is not opened; else its
        first line, which states the cwd."""
        if not folders.may_hold(Path(key).parent.parent.name, encode_project):
            return None, True, 0
        records, read = head(key, 1)
        if records and isinstance(records[0].get("cwd"), str):
            return records[0]["cwd"], True, read
        return None, bool(records) or read >= HEAD_LIMIT, read

    def reader(self, key: str) -> QwenReader:
        return QwenReader(key, session_id(key))


# --- how full, when it compacts -------------------------------------------------------------------
# The window: settings `model.generationConfig.contextWindowSize`, else `tokenLimit(model)`
# (packages/core/src/core/tokenLimits.ts); every assistant record states the one in force.
# Auto-compaction (`computeThresholds`, packages/core/src/services/chatCompressionService.ts):
# effective = window - 20,000; auto = min(pct x window, effective - 13,000), pct the setting
# `context.autoCompactThreshold` (0 < pct <= 1) else 0.85; warn = auto - 20,000.

DEFAULT_WINDOW = 200_000  # tokenLimit's answer for a model it does not know
WINDOWS = (  # tokenLimit's table (first match on the model id, lower-cased), as 0.24.4 ships it
    (re.compile(r"^(qwen3-coder-(plus|flash)|qwen3\.\d|qwen-(plus|flash)-latest|coder-model|gemini-|deepseek-v4)"),
     1_000_000),
    (re.compile(r"^(qwen3-max|qwen3-coder-|qwen)"), 262_144),
    (re.compile(r"^claude-"), 200_000),
    (re.compile(r"^gpt-5"), 272_000),
)
OUTPUT_RESERVE = 20_000
COMPACT_BUFFER = 13_000
WARN_BEFORE = 20_000
DEFAULT_THRESHOLD = 0.85


def token_limit(model: str | None) -> int | None:
    """tokenLimit(model) for a model its table names; None for one it does not."""
    name = (model or "").lower().rpartition("/")[2]
    return next((window for pattern, window in WINDOWS if pattern.match(name)), None)


def compact_limits(model: str | None, stated_window: int | None, config: AgentConfig) -> AgentLimits:
    window = stated_window or (config.windows.get(model) if model else None) or 0
    if stated_window:
        window_source = f"qwen-code {VERSION}: the session's contextWindowSize"
    elif window:
        window_source = f"qwen-code {VERSION}: model.generationConfig.contextWindowSize ({config.source})"
    elif (known := token_limit(model)) is not None:
        window, window_source = known, f"qwen-code {VERSION}: tokenLimit({model!r})"
    else:
        window, window_source = DEFAULT_WINDOW, f"qwen-code {VERSION}: tokenLimit's default ({model!r} unknown)"
    pct = config.compact_percent / 100 if config.compact_percent else DEFAULT_THRESHOLD
    limit = max(1, min(int(pct * window), window - OUTPUT_RESERVE - COMPACT_BUFFER))
    source = (f"qwen-code {VERSION} computeThresholds: min({pct:g} x window, window - "
              f"{OUTPUT_RESERVE:,} - {COMPACT_BUFFER:,})")
    if not config.auto_compact:
        source += "; its automatic compaction is off"
    return AgentLimits(window, window_source, limit, source, max(0, limit - WARN_BEFORE))


def _settings(path: Path) -> dict[str, Any]:
    from ctxd.agents.config.files import LIMIT, InstallError, read

    try:
        text = read(path, limit=LIMIT)
        value = json.loads(text) if text else {}
    except (InstallError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def read_settings_config(home: Path) -> AgentConfig:
    """`context.autoCompactThreshold` and the configured model's window from the user settings."""
    path = home / "settings.json"
    settings = _settings(path)
    context, model = settings.get("context"), settings.get("model")
    threshold = context.get("autoCompactThreshold") if isinstance(context, dict) else None
    percent = float(threshold) * 100 if isinstance(threshold, (int, float)) and not isinstance(
        threshold, bool) and 0 < threshold <= 1 else None
    windows: dict[str, int] = {}
    if isinstance(model, dict) and isinstance(model.get("name"), str):
        generation = model.get("generationConfig")
        size = generation.get("contextWindowSize") if isinstance(generation, dict) else None
        if tokens(size):
            windows[model["name"]] = tokens(size)
    return AgentConfig(compact_percent=percent, windows=windows, source=str(path))


# --- hooks ----------------------------------------------------------------------------------------
# Claude Code's schema and payload fields (hookEventHandler.createBaseInput); the timeout in
# seconds. UserPromptSubmit fires again after every tool batch with `prompt: ""`: only a typed
# prompt is a turn.

SHELLS = {"run_shell_command", "Shell", "exec"}
CHANGES_FILES = {"write_file", "WriteFile", "edit", "Edit", "replace", "notebook_edit", *SHELLS}
EVENTS = {  # the hooks install writes: event -> matcher (None: every occurrence)
    "UserPromptSubmit": None,
    "PreToolUse": "write_file|edit|replace|notebook_edit|run_shell_command|exec",
    "PostCompact": None,
    "SessionStart": "compact",
}
HOOK_TIMEOUT_SECONDS = 10
STATUS_LINE_KEY = "ui.statusLine"
SETTINGS_VERSION_KEY, SETTINGS_VERSION = "$version", 4
"""qwen-code 0.24.4 adds this to a settings.json without it on every start (`loadAndMigrate`)."""


def config_file(scope: str, project: Path, home: Path) -> Path:
    """settings.json of a scope: hooks, the status line and MCP servers are all in it."""
    return project / ".qwen" / "settings.json" if scope == "project" else home / "settings.json"


def _remove(settings: dict[str, Any]) -> dict[str, Any]:
    from ctxd.agents.config import json_settings as js

    return js.mcp_remove(js.status_line_remove(js.hooks_remove(settings), STATUS_LINE_KEY))


def holds_ours(text: str) -> bool:
    from ctxd.agents.config import json_settings as js

    return js.holds(text, _remove)


# --- the status line ------------------------------------------------------------------------------
# Its stdin (packages/cli/src/ui/components/StatusLine.tsx): `session_id`, `model.display_name`,
# `context_window {context_window_size, used_percentage, current_usage (the footer's prompt
# tokens, a number), total_input_tokens, total_output_tokens}`, `workspace.current_dir`.


class Qwen(Agent):
    name = "qwen"
    title = "Qwen Code"  # its README's and its VS Code companion's name (npm @qwen-code/qwen-code)
    version = VERSION
    # `/context`'s categories for what qwen sends besides the messages, in the shares its own
    # `/context` showed for qwen3-coder-plus (tests/fixtures/agents/qwen/context-command.txt:
    # system prompt 3.0k + startup context 416, built-in tools 6.6k, memory files 782, skills 1.2k).
    overhead = (("systemPrompt", "qwen-code's system prompt and startup context (inferred)", 0.2847),
                ("builtinTools", "qwen-code's built-in tools (inferred)", 0.5501),
                ("memoryFiles", "memory files: QWEN.md, output language (inferred)", 0.0652),
                ("skills", "qwen-code's skills (inferred)", 0.1000))
    hook_events: Mapping[str, HookAction] = {
        "UserPromptSubmit": "turn",
        "PreToolUse": "tool",
        "PostCompact": "compacted",
        "SessionStart": "after-compaction",
    }

    def home(self, env: Mapping[str, str], configured: str | None) -> Path:
        user = Path(env.get("HOME") or Path.home())
        return Path(configured or env.get("QWEN_HOME") or user / ".qwen").expanduser()

    def session_root(self, home: Path) -> Path:
        return home / "projects"

    def sessions(self, root: Path) -> QwenSessions:
        return QwenSessions(root)

    def summary_reader(self, key: str) -> QwenReader:
        return QwenReader(key, session_id(key), window=False)

    def read_config(self, home: Path) -> AgentConfig:
        return read_settings_config(home)

    def limits(self, model: str | None, stated_window: int | None, config: AgentConfig) -> AgentLimits:
        return compact_limits(model, stated_window, config)

    # --- hooks ---

    def hook_input(self, event: str, data: dict[str, Any]) -> HookInput | None:
        found = payloads.claude_style(self.hook_events, event, data)
        call = data.get("tool_call_id")
        if isinstance(call, str) and call:
            found = found._replace(tool_id=call)  # the model's call id, as the transcript has it (tool_use_id is the hook's own)
        if found.action == "turn" and not (found.prompt or "").strip():
            return found._replace(action="ignore")  # the repeat after a tool batch, not a typed prompt
        return found

    def changes_files(self, tool_name: str, tool_input: Any) -> bool:
        return tool_name in CHANGES_FILES

    def tool_paths(self, tool_name: str, tool_input: Any) -> list[str]:
        return payloads.named_paths(tool_input)

    def shell_command(self, tool_name: str, tool_input: Any) -> str | None:
        return payloads.command(tool_input) if tool_name in SHELLS else None

    def compaction_notice(self, text: str) -> str | None:
        return payloads.session_start_context(text)

    # --- ctxd's entries in its configuration ---

    def _home(self) -> Path:
        return self.home(os.environ, None)

    def config_changes(self, action: Action, scope: Scope, project: Path, state_dir: Path,
                       ctxd: list[str]) -> tuple[list[ConfigChange], list[str]]:
        from ctxd.agents.config import json_settings as js
        from ctxd.agents.config.ours import mcp_entry, shell
        from ctxd.agents.config.plan import json_install, json_uninstall, read_scoped

        path = config_file(scope, project, self._home())
        before = read_scoped(path, scope, project)
        if action == "uninstall":
            return [json_uninstall(path, before, _remove, state_dir, holds_ours)], []
        hooks = js.Hooks(EVENTS, lambda event: shell([*ctxd, "hook", "qwen", event]), HOOK_TIMEOUT_SECONDS)

        def add(value: dict[str, Any]) -> dict[str, Any]:
            if before is None:  # a file ctxd creates: stamped as qwen would, else qwen rewrites it on start
                value[SETTINGS_VERSION_KEY] = SETTINGS_VERSION
            js.status_line_add(js.hooks_add(value, hooks), [*ctxd, "statusline", "--agent", "qwen"],
                               key=STATUS_LINE_KEY)
            return js.mcp_add(value, mcp_entry(ctxd))

        notes = []
        if before is not None and f'"{SETTINGS_VERSION_KEY}"' not in before:
            notes.append(f"qwen-code adds \"$version\" to {path} when it next starts (its settings migration); "
                         "uninstall then leaves that key")
        return [json_install(path, before, add, holds_ours)], notes

    def config_status(self, scope: Scope, project: Path) -> str:
        from ctxd.agents.config import json_settings as js
        from ctxd.agents.config.files import InstallError
        from ctxd.agents.config.plan import read_scoped

        path = config_file(scope, project, self._home())
        try:
            value = js.load(path, read_scoped(path, scope, project))
        except InstallError as error:
            return f"qwen {scope}: {error}"
        events = js.hooks_installed(value, EVENTS)
        ui = value.get("ui")
        line = js.our_status_line(ui.get("statusLine")) if isinstance(ui, dict) else None
        return (f"qwen {scope}: hooks {', '.join(events) or 'none'}; status line {'yes' if line else 'no'}; "
                f"MCP server {'yes' if js.mcp_installed(value) else 'no'} ({path})")

    def mcp_installed(self, project: Path) -> bool:
        from ctxd.agents.config.plan import mcp_in_json

        return mcp_in_json(lambda scope: config_file(scope, project, self._home()), project)

    # --- status line ---

    def statusline_usage(self, data: dict[str, Any]) -> StatusUsage:
        """The footer's prompt tokens against the window and qwen's own compaction point."""
        raw = data.get("context_window")
        context: dict[str, Any] = raw if isinstance(raw, dict) else {}
        current = context.get("current_usage")
        known = type(current) is int
        used = _count(current)
        window = _count(context.get("context_window_size")) or DEFAULT_WINDOW
        limits = compact_limits(None, window, read_settings_config(self._home()))
        raw_model = data.get("model")
        model = raw_model.get("display_name") if isinstance(raw_model, dict) else None
        workspace = data.get("workspace")
        cwd = workspace.get("current_dir") if isinstance(workspace, dict) else None
        session = data.get("session_id")
        return StatusUsage(used, 0, window, limits.limit, known, None,
                           model if isinstance(model, str) else None,
                           session if isinstance(session, str) and session else None,
                           cwd if isinstance(cwd, str) else None)


AGENT = Qwen()
