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
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ctxd import isotime
from ctxd.ledger.cache import load_ledger
from ctxd.ledger.store import Store, database_path
from ctxd.settings import Problem, Settings, default_state_dir, load_settings
from ctxd.terminal import safe
from ctxd.tokens.counter import TOKENIZERS, Counter
from ctxd.usage import breakdown as usage_mod
from ctxd.usage.view import CounterFor, UsageView, with_facts

if TYPE_CHECKING:
    from ctxd.protocol.shapes import Breakdown, Category

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


def _counter_for(exact: bool) -> CounterFor:
    """The CLI loads the encoding in the foreground (it has nothing else to do), from the files the
    install ships; when it cannot, or for `short` (polled by status bars), it estimates."""

    def counter_for(settings: Settings) -> Counter:
        counter = TOKENIZERS.counter(settings.model, settings.tokenizer)
        if counter.slot is None:
            return counter
        if not exact:
            return Counter(None, counter.profile, None)
        counter.slot.wait()
        return counter

    return counter_for


def newest_thread(store: Store) -> str | None:
    """The thread the editors' gauge follows: the most recently active one with items (a followed
    session's last activity is its file's, not when ctxd wrote it)."""
    best: tuple[float, float, str] | None = None
    for thread, updated, _, _, _, items, _ in store.listing():
        if items <= 0:
            continue
        row = store.thread(thread)
        state = row.state if row is not None and isinstance(row.state, dict) else {}
        followed = state.get("followed") if isinstance(state.get("followed"), dict) else None
        when = isotime.seconds(followed.get("lastActivity")) if followed else None
        key = (when if when is not None else updated, updated, thread)
        if best is None or key > best:
            best = key
    return best[2] if best is not None else None


def load_breakdown(workspace: Path, thread: str | None, state_dir: Path | None = None, exact: bool = True) -> Breakdown:
    """The Breakdown of a thread from the persisted state, through the daemon's own read-only
    view (ctxd/usage/view.py), without writing anything. No `thread`: the newest (`newest_thread`),
    else "default"."""
    problems: list[Problem] = []
    settings = load_settings(workspace, None, problems)
    state = state_dir or settings.chosen_state_dir()
    path = database_path(state, workspace)
    if not path.exists():
        raise UsageError(f"no ctxd state for {workspace} (looked for {path})")
    store = Store(path, readonly=True)
    try:
        if thread is None:
            thread = newest_thread(store) or "default"
        if store.thread(thread) is None:
            raise UsageError(f"no thread {thread!r} in {workspace}")
        ledger = load_ledger(store, thread)
    finally:
        store.close()
    # What the daemon last used (it includes the editor's initialization options), else the
    # config files; the thread's prompt context wins over both (in the view).
    facts = (ledger.state or {}).get("usageSettings") or {}
    view = UsageView(with_facts(settings, facts), _counter_for(exact), counted_overhead=facts.get("overheadTokens"))
    return view.breakdown(ledger)


def render_short(breakdown: Breakdown) -> str:
    usage = breakdown["usage"]
    window = breakdown["contextWindow"]
    used = usage["usedTokens"]
    percent = round(100 * used / window) if window else 0
    return f"{percent}% {format_tokens(used)}/{format_tokens(window)}"


def _paint(text: str, colour: int | None, on: bool) -> str:
    return f"\x1b[38;5;{colour}m{text}\x1b[0m" if on and colour is not None else text


def render_bar(categories: list[Category], width: int, colour: bool) -> str:
    cells = usage_mod.apportion(width, [c["tokens"] for c in categories])
    out = []
    for category, n in zip(categories, cells):
        empty = category["name"] in EMPTY_CATEGORIES
        out.append(_paint(("░" if empty else "█") * n, COLOURS.get(category["name"]), colour))
    return "".join(out)


def render_text(breakdown: Breakdown, detail: bool = False, colour: bool = False) -> str:
    window = breakdown["contextWindow"]
    model = safe(breakdown["model"] or "(model not set)")
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
        total = breakdown["totalTokens"] or 0  # an int in "actual" mode
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
                lines.append(f"      {safe(item['name'])[:40]:<40}{format_tokens(item['tokens']):>7}")
    usage = breakdown["usage"]
    footer = (f"  Idle cost: {format_tokens(breakdown['idleCost'])} tokens per request"
              f"  ·  tokenizer: {safe(str(usage.get('tokenizer')))} ({usage.get('tokenizerStatus')})")
    lines += ["", footer]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxd usage", description="Show where a thread's context window goes.")
    parser.add_argument("--workspace", help="workspace folder (default: the one enclosing the current directory)")
    parser.add_argument("--thread", help="the thread (default: the most recently active one, as the editors' gauge)")
    parser.add_argument("--detail", action="store_true", help="list each tool, MCP tool, skill and memory file")
    parser.add_argument("--format", choices=("text", "short", "json"), default="text")
    parser.add_argument("--state-dir", help="where the daemon keeps its state (default: as the daemon)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    return parser


def main(argv: list[str] | None = None, stdout: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = stdout or sys.stdout
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else None
    from ctxd.places import NoFolder, asked_folder, find_workspace

    try:
        workspace = asked_folder(args.workspace)
    except NoFolder as error:
        print(f"ctxd usage: {safe(str(error))}", file=sys.stderr)
        return 2
    if args.workspace is None:  # from any folder inside a workspace
        workspace = find_workspace(workspace, state_dir or default_state_dir()).folder
    try:
        # A status bar polls `short` often: the estimator answers it without loading tiktoken.
        result = load_breakdown(workspace, args.thread, state_dir, exact=args.format != "short")
    except UsageError as error:
        print(f"ctxd usage: {safe(str(error))}", file=sys.stderr)
        return 1
    if args.format == "json":
        out.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    elif args.format == "short":
        out.write(render_short(result) + "\n")
    else:
        colour = args.color == "always" or (args.color == "auto" and out.isatty() and not os.environ.get("NO_COLOR"))
        out.write(render_text(result, args.detail, colour) + "\n")
    return 0
