"""The agents' own model lists, read from their npm packages (for tests/test_models_catalog.py).

Claude Code ships a baked-in model catalogue (ids, windows, default output, pricing tiers) as a
JavaScript object literal inside its binary; Codex ships `models.json` (slugs, windows) inside
its binary. Gemini CLI names its models in its bundle (`modelDefinitions`), qwen-code in its
Alibaba provider presets; OpenCode's binary carries a snapshot of models.dev (every provider's
models with their prices), which prices Gemini's and Qwen's models from their own providers
(bench/opencode_prices.py writes those rows of ctxd/sessions/prices.json). The packages are the
pinned ones tests/agents.py installs with npm into a cache folder under ~/.cache the first time;
here they are only read.
"""

from __future__ import annotations

import json
import mmap
import re
from pathlib import Path
from typing import Any

from ctxd.tokens import catalog
from tests import agents

CLAUDE_CODE = agents.CLAUDE
CODEX = agents.CODEX
GEMINI_CLI = agents.GEMINI
QWEN_CODE = agents.QWEN
OPENCODE = agents.OPENCODE
CLAUDE_BINARY = "node_modules/@anthropic-ai/claude-code-linux-x64/claude"
CODEX_BINARY = "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
CLAUDE_MARK = b"Hand-maintained baked-in model catalog"
CODEX_MARK = b'{\n  "models": ['
OPENCODE_BINARY = "node_modules/opencode-linux-x64/bin/opencode"
# OpenCode's models.dev client (ModelsDev.fetchApi) is followed by its built-in snapshot, the
# object literal returned by `sync(()=>({...}))`: {provider id: {id, name, api, models: {...}}}.
MODELS_DEV_MARK = b"ModelsDev.fetchApi"
MODELS_DEV_START = b"sync(()=>("


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


_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|![01]|\d+(?:\.\d+)?(?:e[+-]?\d+)?|[A-Za-z_$][\w$]*'
                    r'|[^"\'!A-Za-z_$\d]+')
_JS_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{2}|u\{[0-9A-Fa-f]+\}|u[0-9A-Fa-f]{4}|\n|.)", re.S)
_JS_CHARS = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0", "\n": ""}


def _js_string(token: str) -> str:
    """A JS string literal ("..." or '...', with JS's escapes) as a JSON string."""
    def char(m: re.Match[str]) -> str:
        code = m[1]
        if code[0] in "xu" and len(code) > 1:
            return chr(int(code[1:].strip("{}"), 16))
        return _JS_CHARS.get(code, code)
    return json.dumps(_JS_ESCAPE.sub(char, token[1:-1]))


def js_to_json(text: str) -> Any:
    """A JS object literal of plain data (unquoted keys, `!0`/`!1`, either quote) parsed as JSON."""
    out = []
    for token in _TOKEN.findall(text):
        if token[0] in "\"'":
            out.append(_js_string(token))
        elif token == "!0":
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


def opencode_models_dev(folder: Path) -> dict[str, Any]:
    """The models.dev snapshot OpenCode's binary carries: {provider id: {name, api, models}}."""
    with open(folder / OPENCODE_BINARY, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        mark = data.find(MODELS_DEV_MARK)
        start = data.find(MODELS_DEV_START, mark)
        assert mark > 0 and start > 0, "OpenCode's binary has no models.dev snapshot where expected"
        start += len(MODELS_DEV_START)
        assert data[start:start + 1] == b"{", "OpenCode's models.dev snapshot is not an object literal"
        return js_to_json(_js_object(data, start))


def _bundle_text(folder: Path, package: str, mark: str) -> str:
    """The first file of a JavaScript bundle (in name order) that holds `mark`."""
    for path in sorted((folder / "node_modules" / package).rglob("*.js")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if mark in text:
            return text
    raise AssertionError(f"{package} has no {mark!r} where expected")


def gemini_cli_models(folder: Path) -> list[str]:
    """The concrete models Gemini CLI knows (packages/core's `modelDefinitions`, before its aliases)."""
    mark = "modelDefinitions: {\n    // Concrete Models"
    text = _bundle_text(folder, GEMINI_CLI[0], mark)
    start = text.index(mark)
    block = text[start:text.index("// Aliases", start)]
    return re.findall(r'^ {4}"([\w.-]+)": \{', block, re.M)


def qwen_code_models(folder: Path) -> list[str]:
    """The Qwen models qwen-code offers in its Alibaba provider presets (Coding Plan, Token Plan,
    Standard API key: packages/core/src/providers/presets/alibaba-*.ts)."""
    text = _bundle_text(folder, QWEN_CODE[0], "// packages/core/src/providers/presets/alibaba-")
    names: list[str] = []
    for part in text.split("\n// packages/")[1:]:
        if part.startswith("core/src/providers/presets/alibaba-"):
            names += [n for n in re.findall(r'\bid: "(qwen[\w.-]*)"', part) if n not in names]
    return names


# --- Gemini's and Qwen's prices, from OpenCode's models.dev snapshot -------------------------------

CHECKED = "2026-12-02"
# Each agent's models priced by its vendor's own provider in models.dev (not a reseller's): Google's
# Gemini API, and Alibaba Cloud Model Studio's international DashScope endpoint.
PROVIDERS = {"gemini": "google", "qwen": "alibaba"}
# Named by qwen-code's tokenLimits (packages/core/src/core/tokenLimits.ts) though in no preset, and
# its default: `coder-model`, the Qwen OAuth model.
QWEN_NAMED = ("coder-model", "qwen3-coder-plus", "qwen3-coder-flash", "qwen3-max")
LONG_CONTEXT = 200_000  # tiers from here up are not modelled (prices.json `_about`)
# A vendor's published rule for the input its cache serves, for its models models.dev gives no
# cached rate: (fraction of the input price, where it is published). Alibaba Cloud Model Studio
# bills the input its implicit cache serves (on by default, cannot be turned off) at 20% of the
# input price; a request with explicit `cache_control` markers (qwen-code's DashScope requests
# carry them) has its hits billed at 10% and its cache writes at 125%, which a session's usage does
# not tell apart: the implicit rate is the one every request can get.
CACHE_RULES = {"alibaba": (0.2, "cached input at 20% of input, Alibaba Cloud Model Studio's implicit-cache rate "
                                "(https://www.alibabacloud.com/help/en/model-studio/context-cache; explicit-cache "
                                "hits, with cache_control markers, are billed at 10%)")}


def agent_model_names(folders: dict[str, Path]) -> dict[str, list[str]]:
    """{"gemini": Gemini CLI's models, "qwen": qwen-code's}, from the installed packages
    (`folders`: the install folder of each, as tests/agents.py makes them)."""
    qwen = qwen_code_models(folders["qwen"])
    return {"gemini": gemini_cli_models(folders["gemini"]), "qwen": qwen + [n for n in QWEN_NAMED if n not in qwen]}


def models_dev_rows(snapshot: dict[str, Any], names: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """prices.json rows for each agent's models, from its vendor's provider in the snapshot. A model
    is found as ctxd's lookup finds it (exact, then without a release date or `-latest`) and listed
    under the name found; one the snapshot does not price, or prices in a way the table cannot
    state (by prompt size below LONG_CONTEXT, thinking output at its own rate), is listed unpriced
    with the reason."""
    rows: dict[str, dict[str, Any]] = {}
    for agent, agent_names in names.items():
        provider = snapshot[PROVIDERS[agent]]
        source = (f"OpenCode {OPENCODE[1]}'s bundled models.dev snapshot (npm {OPENCODE[0]}@{OPENCODE[1]}), "
                  f"provider {provider['id']} ({provider['name']}" + (f", {provider['api']}" if provider.get("api")
                                                                        else "") + ")")
        for name in agent_names:
            # the names ctxd's lookup tries, in its order
            found = next((n for n in catalog.candidates(name) if n in provider["models"]), None)
            key = found or name
            if key in rows:
                continue
            cost = provider["models"][found].get("cost") if found else None
            reason = None
            if not cost or cost.get("input") is None or cost.get("output") is None:
                reason = f"{provider['name']}'s entry in models.dev has no price for it" if found else (
                    f"models.dev lists no {name} under {provider['id']}")
            elif any(t["tier"]["size"] < LONG_CONTEXT for t in cost.get("tiers", [])):
                sizes = ", ".join(f"{t['tier']['size']:,}" for t in cost["tiers"])
                reason = f"priced by prompt size (tiers from {sizes} tokens), which ctxd does not model"
            elif cost.get("reasoning", cost["output"]) != cost["output"]:
                reason = (f"thinking output at {cost['reasoning']} and other output at {cost['output']}; ctxd's "
                          "usage does not tell them apart")
            if reason:
                rows[key] = {"input": None, "output": None, "unpriced": reason, "source": source, "checked": CHECKED}
                continue
            row: dict[str, Any] = {"input": cost["input"], "cachedInput": cost.get("cache_read"),
                                   "cacheWrite": cost.get("cache_write"), "output": cost["output"]}
            tiers = cost.get("tiers", [])
            note = "; ".join(f"from {t['tier']['size']:,} prompt tokens {t['input']}/{t['output']}"
                             + (f" (cached {t['cache_read']})" if "cache_read" in t else "") for t in tiers)
            rule = CACHE_RULES.get(provider["id"]) if row["cachedInput"] is None else None
            if rule:
                row["cachedInput"] = round(cost["input"] * rule[0], 9)
            rows[key] = {**row, "source": source + (f"; its base rate: {note}, not modelled" if note else "")
                         + (f"; {rule[1]}" if rule else ""), "checked": CHECKED}
    return rows
