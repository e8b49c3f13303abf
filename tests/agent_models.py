"""The agents' own model lists, read from their npm packages (for tests/test_models_catalog.py).

Claude Code ships a baked-in model catalogue (ids, windows, default output, pricing tiers) as a
JavaScript object literal inside its binary; Codex ships `models.json` (slugs, windows) inside
its binary. Both packages are installed with npm into a cache folder under ~/.cache (or
$CTXD_AGENTS_CACHE) the first time; nothing is run.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.332")
CODEX = ("@openai/codex", "0.171.0")
CLAUDE_BINARY = "node_modules/@anthropic-ai/claude-code-linux-x64/claude"
CODEX_BINARY = "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
CLAUDE_MARK = b"Hand-maintained baked-in model catalog"
CODEX_MARK = b'{\n  "models": ['


def cache_dir() -> Path:
    return Path(os.environ.get("CTXD_AGENTS_CACHE") or Path.home() / ".cache" / "ctxd-agents")


def install() -> tuple[Path | None, str]:
    """The cache folder with both packages, installing them when missing; else (None, why)."""
    folder = cache_dir()
    if (folder / CLAUDE_BINARY).is_file() and (folder / CODEX_BINARY).is_file():
        return folder, ""
    npm = shutil.which("npm")
    if npm is None:
        return None, "npm is not installed: it installs the agents' packages whose model lists are compared"
    folder.mkdir(parents=True, exist_ok=True)
    specs = [f"{name}@{version}" for name, version in (CLAUDE_CODE, CODEX)]
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", str(folder),
                           *specs], capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not (folder / CLAUDE_BINARY).is_file() or not (folder / CODEX_BINARY).is_file():
        return None, f"npm could not install {' '.join(specs)}: {done.stderr.strip()[-300:]}"
    return folder, ""


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
