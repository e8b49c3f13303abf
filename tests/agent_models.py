"""The agents' own model lists, read from their npm packages (for tests/test_models_catalog.py).

Claude Code ships a baked-in model catalogue (ids, windows, default output, pricing tiers) as a
JavaScript object literal inside its binary; Codex ships `models.json` (slugs, windows) inside
its binary. Both packages are the pinned ones tests/agents.py installs with npm into a cache
folder under ~/.cache the first time; here they are only read.
"""

from __future__ import annotations

import json
import mmap
import re
from pathlib import Path
from typing import Any

from tests import agents

CLAUDE_CODE = agents.CLAUDE
CODEX = agents.CODEX
CLAUDE_BINARY = "node_modules/@anthropic-ai/claude-code-linux-x64/claude"
CODEX_BINARY = "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
CLAUDE_MARK = b"Hand-maintained baked-in model catalog"
CODEX_MARK = b'{\n  "models": ['


def install() -> tuple[Path, Path]:
    """The install folders of Claude Code and Codex (tests/agents.py installs them once)."""
    return (agents.install(CLAUDE_CODE).parents[2], agents.install(CODEX).parents[2])


def _js_object(data: bytes, start: int) -> str:
    """The JavaScript object literal that starts at `start`, as text (braces matched outside strings)."""
    depth, i, quote = 0, start, None
    while True:
        c = data[i:i + 1]
        if quote:
            if c == b"\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in (b'"', b"'", b"`"):
            quote = c
        elif c == b"{":
            depth += 1
        elif c == b"}":
            depth -= 1
            if depth == 0:
                return data[start:i + 1].decode("utf-8")
        i += 1


_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|![01]|\d+(?:\.\d+)?(?:e[+-]?\d+)?|[A-Za-z_$][\w$]*|[^"!A-Za-z_$\d]+')


def js_to_json(text: str) -> Any:
    """A JS object literal of plain data (unquoted keys, `!0`/`!1`) parsed as JSON."""
    out = []
    for token in _TOKEN.findall(text):
        if token == "!0":
            out.append("true")
        elif token == "!1":
            out.append("false")
        elif re.fullmatch(r"[A-Za-z_$][\w$]*", token) and token not in ("null", "true", "false"):
            out.append(json.dumps(token))
        else:
            out.append(token)
    return json.loads("".join(out))


def claude_code_catalog(folder: Path) -> dict[str, Any]:
    """Claude Code's model catalogue: {schema_version, pricing_tiers, models: [...], aliases, ...}."""
    with open(folder / CLAUDE_BINARY, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        mark = data.find(CLAUDE_MARK)
        assert mark > 0, "Claude Code's binary has no model catalogue where expected"
        return js_to_json(_js_object(data, data.rfind(b"{", 0, mark)))


def codex_models(folder: Path) -> list[dict[str, Any]]:
    """Codex's bundled models.json `models`."""
    with open(folder / CODEX_BINARY, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        start = data.find(CODEX_MARK)
        assert start > 0, "Codex's binary has no models.json where expected"
        text = data[start:start + 4_000_000].decode("utf-8", "replace")
    return json.JSONDecoder().raw_decode(text)[0]["models"]
