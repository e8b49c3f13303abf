"""`ctxd usage`: the context breakdown in a terminal, read from the persisted state.

    ctxd usage [--workspace PATH] [--thread T] [--detail] [--format text|short|json] [--state-dir DIR]

Opens the workspace's database read-only (a running daemon is not disturbed and need not run)
and computes the same `Breakdown` as `ctxd/usage`. `text` draws seed 001's view: a coloured bar
when stdout is a terminal, plain characters otherwise; `short` prints one line such as
`38% 48.2k/128k` for tmux, shell prompts and editor status bars; `json` prints the Breakdown.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ctxd.ledger.rules import item_group
from ctxd.ledger.store import Store, database_path
from ctxd.ledger.thread import Entry, ThreadLedger, usage_snapshot
from ctxd.settings import Settings, default_state_dir, load_settings
from ctxd.tokens import catalog
from ctxd.tokens import encodings
from ctxd.tokens.counter import ESTIMATE, EXACT, UNAVAILABLE
from ctxd.tokens.estimator import estimate_tokens
from ctxd.usage import breakdown as usage_mod

log = logging.getLogger(__name__)

LABELS = {
    "systemPrompt": "System prompt",
    "builtinTools": "Built-in tools",
    "mcpTools": "MCP tools",
    "skills": "Skills",
    "memoryFiles": "Memory files",
    "messages": "Messages",
    "freeSpace": "Free space",
    "autocompactBuffer": "Autocompact buffer",
}
# 256-colour foregrounds per category; free space and the buffer are drawn dim.
COLOURS = {
    "systemPrompt": 67, "builtinTools": 73, "mcpTools": 109, "skills": 139, "memoryFiles": 179,
    "messages": 173, "freeSpace": 240, "autocompactBuffer": 236,
}
EMPTY_CATEGORIES = ("freeSpace", "autocompactBuffer")
BAR_WIDTH = 44


class UsageError(Exception):
    """Nothing to show (no state for the workspace or thread); the message says why."""


def format_tokens(n: int) -> str:
    """845, 48.2k, 128k, 1.05M: short enough for a status bar."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}".removesuffix(".0") + "k"
    return f"{n / 1_000_000:.2f}".rstrip("0").removesuffix(".") + "M"


def _counter(settings: Settings, exact: bool) -> tuple[Callable[[str], int], dict[str, str]]:
    """The CLI loads the encoding in the foreground (it has nothing else to do), from the files the
    install ships; when it cannot, it estimates, like the daemon."""
    encoding, profile = catalog.counter_spec(settings.model, settings.tokenizer)
    if encoding and exact:
        try:
            enc = encodings.load(encoding)
        except encodings.EncodingUnavailable as error:
            log.warning("tiktoken encoding %s: %s; estimating", encoding, error)
        else:
            return (lambda text: len(enc.encode_ordinary(text)) if text else 0,
                    {"tokenizer": encoding, "tokenizerStatus": EXACT})
    status = UNAVAILABLE if encoding and exact else ESTIMATE
    return (lambda text: estimate_tokens(text, profile)), {"tokenizer": f"estimate:{profile}", "tokenizerStatus": status}


def load_breakdown(workspace: Path, thread: str, state_dir: Path | None = None, exact: bool = True) -> dict[str, Any]:
    """The Breakdown of a thread from the persisted state, without writing anything."""
    problems: list[str] = []
    settings = load_settings(workspace, None, problems)
    state = state_dir or (Path(settings.state_dir).expanduser() if settings.state_dir else default_state_dir())
    path = database_path(state, workspace)
    if not path.exists():
        raise UsageError(f"no ctxd state for {workspace} (looked for {path})")
    store = Store(path, readonly=True)
    try:
        row = store.thread(thread)
        if row is None:
            raise UsageError(f"no thread {thread!r} in {workspace}")
        rows = store.active_rows(thread)
    finally:
        store.close()
    # What the daemon last used (it includes the editor's initialization options), else the
    # config files; the thread's prompt context wins over both.
    facts = (row.state or {}).get("usageSettings") or {}
    settings.model = facts.get("model") or settings.model
    settings.context_window = facts.get("contextWindow") or settings.context_window
    if facts.get("autoCompactLimit") is not None:
        settings.auto_compact_token_limit = facts["autoCompactLimit"]
    settings.tokenizer = facts.get("tokenizer") or settings.tokenizer
    context = row.prompt_context or {}
    settings.model = context.get("model") or settings.model
    settings.context_window = context.get("contextWindow") or settings.context_window
    count, describe = _counter(settings, exact)
    overhead = usage_mod.overhead_counts(context, count)
    ledger = ThreadLedger(thread=thread, entries=[Entry(r.seq, json.loads(r.body), r.tokens, r.origin) for r in rows],
                          history_version=row.history_version, api_total=row.api_total, api_seq=row.api_seq,
                          prompt_context=context)
    # The gauge's overhead as the daemon last counted it (its counter may be better than ours).
    ledger.overhead_tokens = facts.get("overheadTokens", overhead.tokens)
    ledger.recount()
    usage = {**usage_snapshot(ledger, settings), **describe}
    groups: dict[str, int] = {}
    for entry in ledger.entries:
        group = item_group(entry.item)
        groups[group] = groups.get(group, 0) + entry.tokens
    return usage_mod.breakdown(model=settings.model, context_window=settings.effective_context_window(),
                               auto_compact_limit=settings.auto_compact_limit(), usage=usage,
                               overhead=overhead, message_groups=groups, has_messages=ledger.item_tokens > 0)


def render_short(breakdown: dict[str, Any]) -> str:
    usage = breakdown["usage"]
    window = breakdown["contextWindow"]
    used = usage["usedTokens"]
    percent = round(100 * used / window) if window else 0
    return f"{percent}% {format_tokens(used)}/{format_tokens(window)}"


def _paint(text: str, colour: int | None, on: bool) -> str:
    return f"\x1b[38;5;{colour}m{text}\x1b[0m" if on and colour is not None else text


def render_bar(categories: list[dict[str, Any]], width: int, colour: bool) -> str:
    cells = usage_mod.apportion(width, [c["tokens"] for c in categories])
    out = []
    for category, n in zip(categories, cells):
        empty = category["name"] in EMPTY_CATEGORIES
        out.append(_paint(("░" if empty else "█") * n, COLOURS.get(category["name"]), colour))
    return "".join(out)


def render_text(breakdown: dict[str, Any], detail: bool = False, colour: bool = False) -> str:
    window = breakdown["contextWindow"]
    model = breakdown["model"] or "(model not set)"
    categories = breakdown["categories"]
    lines = ["Context Usage", ""]
    if breakdown["mode"] == "estimated":
        lines += [
            "  No API response yet. Send a message to see actual usage.",
            "",
            "  Estimated pre-conversation overhead",
            f"  Model: {model}  Context window: {format_tokens(window)} tokens",
        ]
    else:
        total = breakdown["totalTokens"]
        percent = 100 * total / window if window else 0.0
        lines += [
            f"  {render_bar(categories, BAR_WIDTH, colour)}  {model}",
            f"  {format_tokens(total)}/{format_tokens(window)} tokens ({percent:.1f}%)"
            + (" estimated: no API response yet" if breakdown["usage"].get("source") == "estimate" else "")
            + (f", {format_tokens(breakdown['overflowTokens'])} over the window" if breakdown.get("overflowTokens") else ""),
            "",
            "  Usage by category",
        ]
    lines.append("")
    for category in categories:
        name = category["name"]
        marker = _paint("░" if name in EMPTY_CATEGORIES else "█", COLOURS.get(name), colour)
        lines.append(f"  {marker} {LABELS.get(name, name):<20}{format_tokens(category['tokens']):>7} tokens "
                     f"({category['percent']:.1f}%)")
        if detail:
            for item in category["details"]:
                lines.append(f"      {item['name'][:40]:<40}{format_tokens(item['tokens']):>7}")
    usage = breakdown["usage"]
    footer = (f"  Idle cost: {format_tokens(breakdown['idleCost'])} tokens per request"
              f"  ·  tokenizer: {usage.get('tokenizer')} ({usage.get('tokenizerStatus')})")
    lines += ["", footer]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxd usage", description="Show where a thread's context window goes.")
    parser.add_argument("--workspace", default=".", help="workspace folder (default: the current directory)")
    parser.add_argument("--thread", default="default")
    parser.add_argument("--detail", action="store_true", help="list each tool, MCP tool, skill and memory file")
    parser.add_argument("--format", choices=("text", "short", "json"), default="text")
    parser.add_argument("--state-dir", help="where the daemon keeps its state (default: as the daemon)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    return parser


def main(argv: list[str] | None = None, stdout: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = stdout or sys.stdout
    workspace = Path(args.workspace).expanduser().resolve()
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else None
    try:
        # A status bar polls `short` often: the estimator answers it without loading tiktoken.
        result = load_breakdown(workspace, args.thread, state_dir, exact=args.format != "short")
    except UsageError as error:
        print(f"ctxd usage: {error}", file=sys.stderr)
        return 1
    if args.format == "json":
        out.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    elif args.format == "short":
        out.write(render_short(result) + "\n")
    else:
        colour = args.color == "always" or (args.color == "auto" and out.isatty() and not os.environ.get("NO_COLOR"))
        out.write(render_text(result, args.detail, colour) + "\n")
    return 0
