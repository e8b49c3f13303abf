"""Item builders shared by the tests."""

from __future__ import annotations

import json
from typing import Any


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def call(call_id: str, name: str = "shell", arguments: str = '{"cmd": "ls"}') -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def shell_call(call_id: str, command: str) -> dict[str, Any]:
    """A shell tool call running `command`, as Codex records one."""
    return call(call_id, "shell", json.dumps({"command": command}))


def output(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}
