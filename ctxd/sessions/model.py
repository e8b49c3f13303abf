"""What a reader knows about one agent session, and what changed in the last read.

Plain data: no I/O, no wire code. The readers (`codex.py`, `claude.py`) fill a `Session` as bytes
arrive; a `Change` says what one read added so a consumer can mirror it without diffing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxd.redact import redact

TITLE_CHARS = 80
# A token count above this is clamped to it: no real session comes near, and a hostile count
# (10**308, 10**400) must not make a cost of Infinity or an integer too large for a float.
MAX_TOKENS = 10**10


def tokens(value: Any) -> int:
    """A token count as the file reports it: a positive int, clamped to MAX_TOKENS; else 0."""
    if type(value) is not int or value <= 0:
        return 0
    return min(value, MAX_TOKENS)


@dataclass
class Usage:
    """Tokens billed, split the way prices are quoted.

    `input` is input billed at the full rate (cache reads and cache writes excluded); `output`
    includes reasoning, which is billed as output; `reasoning` is the part of `output` that was
    reasoning, kept for display only. `cache_write_1h` is the part of `cache_write` written to
    Anthropic's 1-hour cache, billed at its own (higher) rate.
    """

    input: int = 0
    cached_input: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0
    cache_write_1h: int = 0

    def add(self, other: Usage, sign: int = 1) -> None:
        self.input += sign * other.input
        self.cached_input += sign * other.cached_input
        self.cache_write += sign * other.cache_write
        self.output += sign * other.output
        self.reasoning += sign * other.reasoning
        self.cache_write_1h += sign * other.cache_write_1h

    def as_dict(self) -> dict[str, int]:
        return {"input": self.input, "cachedInput": self.cached_input, "cacheWrite": self.cache_write,
                "cacheWrite1h": self.cache_write_1h, "output": self.output, "reasoning": self.reasoning}


@dataclass
class Turn:
    """A user turn: where it starts in the window (its count of items then), its text, and when it
    was written."""

    index: int
    text: str
    timestamp: str | None
    generation: int  # Session.generation when it started (a compaction starts a new one)


@dataclass
class Session:
    agent: str  # "codex" or "claude"
    path: str
    id: str | None = None
    version: str | None = None  # the agent's version that wrote the file (the latest stated)
    cwd: str | None = None
    model: str | None = None
    context_window: int | None = None  # only where the file states it
    title: str | None = None
    started: str | None = None
    last_activity: str | None = None
    base_instructions: str | None = None
    forked_from: str | None = None
    # The window's items, held only by a reader that keeps them (`Reader.holds_window`: tests and
    # one-off reads); the daemon's readers hand them on in each `Change` and keep only `window`,
    # their count, and `tail`, the ones after the baseline (the store holds the window).
    items: list[dict[str, Any]] = field(default_factory=list)
    window: int = 0
    tail: list[dict[str, Any]] = field(default_factory=list)
    # The API baseline: tokens of the latest request as the agent's model API reported them
    # (docs/sessions.md has the rule per agent); None when unknown (new session, after a compaction).
    baseline: int | None = None
    baseline_items: int = 0  # how many of the window's items the baseline covers (the rest came after it)
    last_usage: dict[str, int] | None = None  # the raw latest report, for display
    # The first request's reported input and the estimate of the messages it carried: the rest is
    # the agent's fixed overhead (system prompt, tools), which its files do not state whole.
    first_request: dict[str, int] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)  # tool declarations the file states
    cumulative: dict[str, Usage] = field(default_factory=dict)  # per model, for cost
    turns: list[Turn] = field(default_factory=list)  # every turn when the window is held, else the latest
    turn_count: int = 0
    compactions: int = 0
    # The agent's own compactions, oldest first: {"trigger", "tokensBefore", "tokensAfter", "at"}
    # (tokensAfter None until the first report after it).
    agent_compactions: list[dict[str, Any]] = field(default_factory=list)
    generation: int = 0  # bumped whenever `items` is replaced rather than appended to
    unknown: dict[str, int] = field(default_factory=dict)  # record types skipped, by type
    bad_lines: int = 0  # lines that are not JSON objects
    sidechain_lines: int = 0
    rewinds: int = 0  # Claude: a prompt edited and resent (the branch after it is dropped)
    # The prompt cache (ctxd/tokens/cache.py): when the latest main-chain request was made, and
    # whether the latest cache writes went to Anthropic's 1-hour cache.
    last_request_at: str | None = None
    cache_1h: bool = False

    @property
    def thread(self) -> str:
        return f"{self.agent}:{self.id}"

    def total_usage(self) -> Usage:
        total = Usage()
        for usage in self.cumulative.values():
            total.add(usage)
        return total

    def count_unknown(self, kind: str) -> None:
        self.unknown[kind] = self.unknown.get(kind, 0) + 1

    def add_item(self, item: dict[str, Any], holding: bool) -> None:
        """`item` joins the window (kept in `items` when `holding`)."""
        self.window += 1
        if holding:
            self.items.append(item)
        if self.baseline is not None:
            self.tail.append(item)

    def add_turn(self, turn: Turn, holding: bool) -> None:
        self.turn_count += 1
        if holding:
            self.turns.append(turn)
        else:
            self.turns[:] = [turn]

    def reported(self, used: int) -> None:
        """The agent reported `used` tokens for everything in the window up to now."""
        self.baseline = used
        self.baseline_items = self.window
        self.tail = []

    def replace_window(self, items: list[dict[str, Any]], holding: bool) -> None:
        """The window is `items` now (a compaction): the report before it describes the old one."""
        self.items = list(items) if holding else []
        self.window = len(items)
        self.baseline = None
        self.tail = []

    def last_turn(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def to_state(self) -> dict[str, Any]:
        """Everything but the window's items, as JSON (a summary, a reader resumed later)."""
        state = {name: getattr(self, name) for name in _SCALARS}
        state["cumulative"] = {model: usage.as_dict() for model, usage in self.cumulative.items()}
        state["turns"] = [[t.index, t.text, t.timestamp, t.generation] for t in self.turns[-1:]]
        return state

    @classmethod
    def from_state(cls, agent: str, path: str, state: dict[str, Any]) -> Session:
        session = cls(agent=agent, path=path)
        for name in _SCALARS:
            if name in state:
                setattr(session, name, state[name])
        session.cumulative = {model: Usage(**{_USAGE_FIELDS[k]: int(v) for k, v in usage.items() if k in _USAGE_FIELDS})
                              for model, usage in (state.get("cumulative") or {}).items()}
        session.turns = [Turn(*turn) for turn in state.get("turns") or []]
        return session


# What `Session.to_state` keeps besides the usage and the latest turn: plain JSON values.
_SCALARS = ("id", "version", "cwd", "model", "context_window", "title", "started", "last_activity",
            "base_instructions", "forked_from", "window", "tail", "baseline", "baseline_items", "last_usage",
            "first_request", "tools", "turn_count", "compactions", "agent_compactions", "generation", "unknown",
            "bad_lines", "sidechain_lines", "rewinds", "last_request_at", "cache_1h")
_USAGE_FIELDS = {"input": "input", "cachedInput": "cached_input", "cacheWrite": "cache_write",
                 "cacheWrite1h": "cache_write_1h", "output": "output", "reasoning": "reasoning"}


# A read stops after a replacement once the replacements it holds name this many items in all:
# a hostile file of many compactions (each a copy of the window's user messages) or rewinds
# cannot make one read hold the window again and again. The rest is read at once, in another read.
MAX_HELD_ITEMS = 100_000


@dataclass
class Step:
    """One step of a read, in the file's order: `items` appended to the window, or (`replace`) the
    window replaced by `items`: the agent's compaction number `compaction` of the session (0 for
    its first), or a rewind (`compaction` None), which keeps the window's first `keep` items (and
    `items` is empty: the consumer holds the window). `rebuild`: the replacement is the window's
    real user messages, then `items` (Codex's compaction without its replacement history). `at`:
    the file's time of a replacement. `compactions_before`: the agent's compactions in the file
    before this step."""

    items: list[dict[str, Any]]
    replace: bool = False
    compaction: int | None = None
    at: str | None = None
    compactions_before: int = 0
    keep: int | None = None
    rebuild: bool = False


@dataclass
class Change:
    """What one read changed: `steps`, in order (the mirror replays them, so that what a
    compaction or a rewind took out of the window is archived, never lost). `from_start`: the read
    began at the file's first byte (its steps are the session's whole history)."""

    steps: list[Step] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    usage: bool = False
    meta: bool = False  # id, cwd, model, window or title changed
    lines: int = 0
    from_start: bool = False
    held: int = 0  # items named by the replacements in `steps` (MAX_HELD_ITEMS)

    @property
    def replaced(self) -> bool:
        """The window was replaced (a compaction or a rewind): `Session.items` must be taken whole."""
        return any(step.replace for step in self.steps)

    @property
    def appended(self) -> list[dict[str, Any]]:
        """The items appended to the window, when it was not replaced."""
        if self.replaced:
            return []
        return self.steps[0].items if len(self.steps) == 1 else [i for step in self.steps for i in step.items]

    @property
    def empty(self) -> bool:
        return not (self.steps or self.turns or self.usage or self.meta)

    def add(self, item: dict[str, Any], session: Session) -> None:
        """`item` was appended to the window."""
        last = self.steps[-1] if self.steps else None
        if last is None or last.replace:
            last = Step([], compactions_before=session.compactions)
            self.steps.append(last)
        last.items.append(item)

    def add_to_replacement(self, item: dict[str, Any], session: Session) -> None:
        """`item` belongs to the replacement just made (Claude's summary after its boundary)."""
        last = self.steps[-1] if self.steps else None
        if last is not None and last.replace and last.compaction is not None:
            last.items.append(item)
            self.held += 1
        else:
            self.add(item, session)

    def replace(self, session: Session, items: list[dict[str, Any]], compaction: int | None, at: str | None,
                keep: int | None = None, rebuild: bool = False) -> None:
        """The window was replaced: by `items`, the agent's compaction (its number), or cut back
        to its first `keep` items (a rewind). See `Step`."""
        self.steps.append(Step(list(items), True, compaction, at,
                               compaction if compaction is not None else session.compactions, keep, rebuild))
        self.held += len(items)

    def extend(self, other: Change) -> None:
        """`other`, read after this one, added to it."""
        for step in other.steps:
            last = self.steps[-1] if self.steps else None
            if last is not None and not last.replace and not step.replace:
                last.items.extend(step.items)
            else:
                self.steps.append(step)
        self.turns.extend(other.turns)
        self.usage = self.usage or other.usage
        self.meta = self.meta or other.meta
        self.lines += other.lines
        self.held += other.held


def note_report(session: Session, used: int, usage: Usage | None = None, model: str | None = None,
                at: str | None = None) -> None:
    """A usage report: the fill after the agent's latest compaction, if it was not known yet, with
    what that first request wrote to the cache; and the cache's latest request."""
    if not used:
        return
    latest = session.agent_compactions[-1] if session.agent_compactions else None
    if latest is not None and latest["tokensAfter"] is None:
        latest["tokensAfter"] = used
    if usage is not None and not (usage.input or usage.cached_input or usage.cache_write):
        usage = None  # no prompt sent: no cache facts (Codex's markers never get here: codex.py)
    if latest is not None and usage is not None and "firstRequest" not in latest:
        latest["firstRequest"] = {"model": model or "", "input": usage.input, "cacheWrite": usage.cache_write,
                                  "cacheWrite1h": usage.cache_write_1h}
    if usage is not None:
        if isinstance(at, str) and len(at) <= 64:
            session.last_request_at = at
        if usage.cache_write:
            session.cache_1h = usage.cache_write_1h > 0


def first_request(reported: int, items: list[dict[str, Any]]) -> dict[str, int]:
    """The first request: the input its API reported and an estimate of the messages it carried
    (the ledger's per-item estimate, ctxd/tokens/approx.py)."""
    from ctxd.tokens.approx import item_tokens

    return {"tokens": reported, "messages": sum(item_tokens(i) for i in items)}


def shorten(text: str, limit: int = TITLE_CHARS) -> str:
    """One line, at most `limit` characters: a title or a checkpoint label. The API key is taken out
    first (a key cut in half by the limit would no longer be recognised)."""
    line = " ".join(redact(text).split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
