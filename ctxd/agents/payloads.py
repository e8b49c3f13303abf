"""Hook payloads in the shape Claude Code set, which Codex, qwen-code and Gemini CLI follow:
`session_id`, `cwd`, `prompt`, `tool_name`, `tool_input`, `tool_use_id`, and `source` on
SessionStart; and the paths and commands the common tools name. Shared by the agent modules."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ctxd.agents.base import HookAction, HookInput

PATH_KEYS = ("file_path", "notebook_path", "path")
_PATCH_PATH = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+?)\s*$", re.M)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def claude_style(events: Mapping[str, HookAction], event: str, data: dict[str, Any]) -> HookInput:
    """The payload's fields; SessionStart acts only after a compaction (`source` "compact")."""
    action = events.get(event)
    if event == "SessionStart" and action is not None and data.get("source") != "compact":
        action = "ignore"
    return HookInput(action, _text(data.get("session_id")), _text(data.get("cwd")), _text(data.get("prompt")),
                     _text(data.get("tool_name")), data.get("tool_input"), _text(data.get("tool_use_id")))


def named_paths(tool_input: Any, keys: tuple[str, ...] = PATH_KEYS) -> list[str]:
    """The paths a file tool's input names under `keys`."""
    if not isinstance(tool_input, dict):
        return []
    return [tool_input[key] for key in keys if isinstance(tool_input.get(key), str)]


def patch_paths(tool_input: Any) -> list[str]:
    """The files an `apply_patch` input adds, updates, deletes or moves to."""
    if not isinstance(tool_input, dict):
        return []
    text = tool_input.get("command") or tool_input.get("input") or tool_input.get("patch")
    if isinstance(text, list):
        text = "\n".join(str(t) for t in text)
    return _PATCH_PATH.findall(text) if isinstance(text, str) else []


def command(tool_input: Any) -> str:
    """A shell tool's command ("" when its input names none); a list of words joined."""
    found = tool_input.get("command") if isinstance(tool_input, dict) else None
    if isinstance(found, list):
        found = " ".join(str(c) for c in found)
    return found if isinstance(found, str) else ""


def session_start_context(text: str) -> str:
    """SessionStart's hook output that adds `text` to the model's context."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}})
