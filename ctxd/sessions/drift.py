"""Format drift made visible: the kinds of record the readers skipped, per agent and version.

A new version of an agent that writes something ctxd does not read is seen here first; `ctxd/status`
carries it (`sources[].unread`) and the editors say it ("Codex 0.171.0 wrote 3 kinds of record ctxd
does not read"). Plain data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ctxd import agents
from ctxd.agents.session import Session, count_kind

if TYPE_CHECKING:
    from ctxd.protocol.shapes import UnreadRecords

def unread(sessions: Iterable[Session], agent: str) -> list[UnreadRecords]:
    """`[{version, kinds, records}]` for the agent's followed sessions that skipped a kind of
    record: `kinds` sorted, `records` how many lines of them; one entry per version, sorted."""
    by_version: dict[str | None, dict[str, int]] = {}
    for session in sessions:
        if session.agent != agent or not session.unknown:
            continue
        counts = by_version.setdefault(session.version, {})
        for kind, count in session.unknown.items():
            count_kind(counts, kind, count)
    return [{"version": version, "kinds": sorted(counts), "records": sum(counts.values())}
            for version, counts in sorted(by_version.items(), key=lambda kv: kv[0] or "")]


def sentence(agent: str, entry: UnreadRecords) -> str:
    """What the editors show, e.g. "Codex 0.171.0 wrote 3 kinds of record ctxd does not read"."""
    kinds = len(entry["kinds"])
    known = agents.find(agent)
    name = (known.title if known is not None else agent) + (f" {entry['version']}" if entry.get("version") else "")
    return f"{name} wrote {kinds} kind{'s' if kinds != 1 else ''} of record ctxd does not read"
