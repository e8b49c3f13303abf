"""`ctxd sessions`: the workspace's agent sessions (every agent ctxd follows), newest first.

Reads the agents' folders (read-only, the same readers and privacy rule as the daemon) and
prints agent, title, model, fill, cost and last activity; `--format json` prints the same as a
JSON list. Each file's summary is kept in the state dir (ctxd/sessions/summaries.py, shared with
the owner): a file that did not change is not read again, one that grew is read from where its
summary stopped, and a first run reads in one process per core.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from ctxd import agents, isotime, redact
from ctxd.agents.base import AgentConfig, AgentLimits
from ctxd.agents.session import Session
from ctxd.redact import redact_json
from ctxd.sessions import cachecost, discovery, drift, pricing, summaries
from ctxd.settings import Problem, load_settings
from ctxd.terminal import safe
from ctxd.tokens import prompt_cache


def agent_limits(session: Session, config: AgentConfig | None = None) -> AgentLimits:
    """The session's window and its agent's auto-compact point (the daemon's rule)."""
    return agents.get(session.agent).limits(session.model, session.context_window, config or AgentConfig())


def used_tokens(session: Session, tail: list[dict[str, Any]] | None = None) -> int | None:
    """The fill (`summaries.fill`): the agent's latest report and ctxd's count of what came after."""
    return summaries.fill(session, tail)


def summary(session: Session, prices: dict[str, pricing.Price] | None = None,
            config: AgentConfig | None = None, used: int | None = None,
            limits: AgentLimits | None = None, cache_facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """One session as `ctxd sessions --format json` prints it (`config`: its agent's own); `used`:
    its fill, when known (else counted from the session's items after its latest report);
    `limits`: its `agent_limits`, when known; `cache_facts`: its `cachecost.facts`, when known."""
    agent = limits if limits is not None else agent_limits(session, config)
    window = agent.window or None
    if used is None:
        used = used_tokens(session)
    return {
        "thread": session.thread, "agent": session.agent, "id": session.id, "title": session.title,
        "cwd": session.cwd, "model": session.model, "contextWindow": window, "usedTokens": used,
        "autoCompactLimit": agent.limit,
        "percent": round(100 * used / window, 1) if used is not None and window else None,
        "cost": pricing.cost(session.cumulative, prices), "usage": session.total_usage().as_dict(),
        "lastActivity": session.last_activity, "started": session.started, "turns": session.turn_total,
        "compactions": session.compactions, "path": session.path,
        "cache": prompt_cache.state(cache_facts if cache_facts is not None else cachecost.facts(session, prices), used or 0),
    }


def collect(folder: Path, sources: list[discovery.Source], state_dir: Path | None = None,
            workers: int = 1, show: summaries.Shower | None = None) -> list[summaries.Found]:
    """The sessions of `folder`, newest first: from their summaries in `state_dir` where their
    files did not change, else read (and their summaries written back); `show`: made of each
    read as it arrives (`Found.shown`)."""
    found = summaries.collect(folder, sources, state_dir, used_tokens, workers, show)
    return sorted(found, key=lambda f: f.session.last_activity or "", reverse=True)


def _money(cost: dict[str, Any]) -> str:
    """The total and the parts that make it, in cents that add up (pricing.cents)."""
    return pricing.parts_text(cost)


def _fill(row: dict[str, Any]) -> str:
    if row["percent"] is None:
        return "-"
    return f"{row['percent']:.0f}% {row['usedTokens'] // 1000}k/{row['contextWindow'] // 1000}k"


def _cache(state: dict[str, Any] | None) -> str:
    """The cache's state, and the compactions' cache writes against what they save per turn."""
    if not state:
        return "-"
    shown = prompt_cache.text(state)
    spent = [c["cacheWriteCost"] for c in state.get("compactions") or [] if c.get("cacheWriteCost") is not None]
    saved = [c["savedCostPerTurn"] for c in state.get("compactions") or [] if c.get("savedCostPerTurn") is not None]
    if spent:
        shown += f"; compactions wrote ${sum(spent):.2f}, save ${sum(saved):.4f}/turn"
    return shown


def _either(words: list[str]) -> str:
    """"a", "a or b", "a, b or c": every agent named once, however many there are."""
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 2 else words)


class Printed(NamedTuple):
    """A session as `ctxd sessions` prints it: its row (`summary`; None when shown from what was
    kept of it), its table's cells or its JSON line, as the format asks, and what is kept of it
    (`Shown.kept`)."""

    row: dict[str, Any] | None
    cells: tuple[str, ...]
    line: str
    kept: str


# The version of what `Shown` keeps: a new one when its shape changes (`kept_key`).
KEPT_VERSION = 1


class Shown:
    """Makes `Printed`, as each session is read (summaries.Shower), while the others are. Keeps of
    each what its format prints (the table's cells, the JSON line) but its cache, whose state depends
    on the time (kept too once it cannot change: a cold or an unknown cache), beside its summary, and
    shows it again from there while the file, the prices, the agents' configurations, ctxd's own
    files and the format are the same (`key`): the 3,000 rows of a heavy history were a third of a
    run with nothing changed (0.34 s). A kept row is a line of JSON (the cache's facts, the fill, the
    cache kept), then the cells (separated by US, which `safe` never leaves in a cell) or the line."""

    def __init__(self, prices: dict[str, pricing.Price], configs: dict[str, AgentConfig], table: bool) -> None:
        self.prices, self.configs, self.table = prices, configs, table
        # Each agent's limits for a model and a stated window, looked up once: thousands of
        # sessions share a few (a third of the rows' time with nothing changed: 0.29 s of CPU for
        # 3,000 rows, 0.18 s so).
        self._looked_up: dict[tuple[str, str | None, int | None], AgentLimits] = {}
        self.key = kept_key(prices, configs, table)

    def __call__(self, session: Session, used: int | None) -> Printed:
        config = self.configs.get(session.agent)
        facts = cachecost.facts(session, self.prices)
        # Redacted as it is shown: a summary stored before the key was configured holds it as typed.
        row = redact_json(summary(session, self.prices, config, used, self._limits(session, config), facts))
        cache = row["cache"]
        static = None
        if cache["state"] == "unknown" or (cache["state"] == "cold" and cache["expiresAt"] is not None):
            # (past its expiry it stays cold: from the next second on, as `expiresAt` is written)
            after = isotime.seconds(cache["expiresAt"]) if cache["state"] == "cold" else None
            static = [after + 1 if after is not None else None, _cache(cache) if self.table else json.dumps(cache)]
        head = json.dumps([facts, row["usedTokens"], static])
        if self.table:
            made = cells(row)
            return Printed(row, made, "", f"{head}\n{_US.join((*made[:5], made[6]))}")
        del row["cache"]
        # (each JSON line made by json's C encoder: `indent` would make every row in Python, 3x slower)
        line = json.dumps(row)  # less its cache, kept so: the line with it is this one with it added at its end
        row["cache"] = cache
        return Printed(row, (), _with_cache(line, json.dumps(cache)), f"{head}\n{line}")

    def kept(self, shown: Printed) -> str:
        return shown.kept

    def taken_up(self, kept: str) -> Printed | None:
        """What was kept, with its cache's state now (the one kept when it cannot have changed)."""
        head, _, printed = kept.partition("\n")
        try:
            facts, used, static = json.loads(head)
        except (ValueError, TypeError):
            return None
        if not isinstance(facts, dict) or not (static is None or isinstance(static, list) and len(static) == 2
                                               and (static[0] is None or type(static[0]) in (int, float)) and isinstance(static[1], str)):
            return None
        if static is not None and (static[0] is None or time.time() >= static[0]):
            cache = static[1]
        else:
            state = prompt_cache.state(facts, used if type(used) is int else 0)
            cache = _cache(state) if self.table else json.dumps(state)
        made = printed.split(_US) if self.table else []
        if self.table and len(made) == 6:
            return Printed(None, (*made[:5], cache, made[5]), "", kept)
        if not self.table and printed.endswith("}"):
            return Printed(None, (), _with_cache(printed, cache), kept)
        return None

    def _limits(self, session: Session, config: AgentConfig | None) -> AgentLimits:
        if not isinstance(session.model, str | None) or not isinstance(session.context_window, int | None):
            return agent_limits(session, config)  # (a damaged summary's: looked up as they are)
        key = (session.agent, session.model, session.context_window)
        limits = self._looked_up.get(key)
        if limits is None:
            limits = self._looked_up[key] = agent_limits(session, config)
        return limits


def cells(row: dict[str, Any]) -> tuple[str, ...]:
    """A row as the table prints it."""
    return (row["agent"], safe(row["title"] or "(no prompt yet)")[:48], safe(row["model"] or "-"), _fill(row),
            _money(row["cost"]), _cache(row.get("cache")), safe(row["lastActivity"] or "-")[:19].replace("T", " "))


_US = "\x1f"  # between a kept row's cells (`Shown`)


def _with_cache(line: str, cache: str) -> str:
    """A row's JSON line less its cache (`line`), with it (`cache`, JSON): as json.dumps writes the row."""
    return f'{line[:-1]}, "cache": {cache}}}'


def kept_key(prices: dict[str, pricing.Price], configs: dict[str, AgentConfig], table: bool) -> str:
    """What a kept row depends on besides its file (`Shown`): the prices, the agents'
    configurations, the format, the keys configured (a row is kept as redacted with them; only
    this hash of them all is kept), the summaries' and the kept rows' versions, and ctxd's own
    files (each one's size and modification time: any change to ctxd makes every row again)."""
    import hashlib

    parts = [summaries.VERSION, KEPT_VERSION, table, sorted((name, repr(price)) for name, price in prices.items()),
             sorted((name, repr(config)) for name, config in configs.items()), sorted(redact.secrets()),
             _files_stamp()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _files_stamp() -> list[list[Any]]:
    """Each file of the ctxd package (but its compiled bytecode): its path, size and mtime."""
    root = Path(__file__).resolve().parent.parent
    stamp: list[list[Any]] = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
        for name in sorted(files):
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                st = os.stat(path)
                stamp.append([os.path.relpath(path, root), st.st_size, st.st_mtime_ns])
    return stamp


def render(rows: list[dict[str, Any]], folder: Path | None = None, made: list[tuple[str, ...]] | None = None) -> str:
    """The table of `rows`, or of their `cells` made already (`made`)."""
    made = made if made is not None else [cells(row) for row in rows]
    if not made:
        where = safe(str(folder)) if folder is not None else "this workspace"
        titles = _either([agent.title for agent in agents.every()])
        commands = _either([f"`{name}`" for name in agents.names()])
        return (f"No {titles} sessions in {where} yet.\n"
                f"Start one here ({commands}): ctxd follows it at once, with its fill, its cost and a\n"
                "checkpoint of your files before each turn. For a checkpoint before every edit, the status line\n"
                "and `recall` inside the agents, run `ctxd hooks install` (docs/hooks.md).\n")
    table = [("AGENT", "TITLE", "MODEL", "FILL", "COST", "CACHE", "LAST ACTIVITY"), *made]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in table)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ctxd sessions", description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", help="the workspace folder (default: the one enclosing the current directory)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    for agent in agents.every():
        parser.add_argument(f"--{agent.name}-home", help=f"{agent.title}'s home (default: its own, as "
                            "`sources.<agent>_home` in ctxd's settings says)")
    parser.add_argument("--state-dir", help="where the sessions' summaries are kept (default: as the owner)")
    args = parser.parse_args(argv)
    from ctxd.places import NoFolder, asked_folder, default_state_dir, find_workspace

    try:
        folder = asked_folder(args.workspace)
    except NoFolder as error:
        print(safe(f"ctxd sessions: {error}"), file=sys.stderr)
        return 2
    if args.workspace is None:  # from any folder inside a workspace
        folder = find_workspace(folder, default_state_dir()).folder
    if not folder.is_dir():
        print(f"ctxd sessions: {folder} is not a folder", file=sys.stderr)
        return 2
    problems: list[Problem] = []
    # The user's settings (never a workspace's). Loading them registers the configured API key's
    # value (`ctxd.redact`): a title, a prompt or a summary that holds it shows and stores "[redacted]".
    settings = load_settings(None, problems=problems)
    prices = pricing.price_table(settings.prices, problems)
    for problem in problems:
        print(safe(f"ctxd sessions: {problem.source}: {problem.message}"), file=sys.stderr)
    homes = {agent.name: getattr(args, f"{agent.name}_home") or settings.sources.home(agent.name)
             for agent in agents.every()}
    sources = discovery.sources(homes, enabled={agent.name: settings.sources.follows(agent.name) for agent in agents.every()})
    configs = {agent.name: agent.read_config(agent.home(os.environ, homes[agent.name])) for agent in agents.every()}
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else settings.chosen_state_dir()
    show = Shown(prices, configs, args.format == "table")
    # The collector would pass over every row kept until they are printed, and find nothing to free:
    # a tenth of a first run's CPU in this process on 3,000 sessions (0.11 s). (Its workers collect.)
    gc.disable()
    try:
        found = collect(folder, sources, state_dir, workers=os.cpu_count() or 1, show=show)
        printed: list[Printed] = [f.shown if f.shown is not None else show(f.session, f.used) for f in found]
        sessions = [f.session for f in found]
        for name in agents.names():  # format drift, on stderr: the output stays the table or JSON
            for entry in drift.unread(sessions, name):
                print(safe(f"ctxd sessions: {drift.sentence(name, entry)}: {', '.join(entry['kinds'])}"),
                      file=sys.stderr)
        if args.format == "json":  # a JSON array, a session a line
            sys.stdout.write("[\n" + ",\n".join(p.line for p in printed) + "\n]\n" if printed else "[]\n")
        else:
            sys.stdout.write(render([], folder, [p.cells for p in printed]))
    finally:
        gc.enable()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
