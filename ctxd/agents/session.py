"""What a reader knows about one agent session, and what changed in the last read.

Plain data: no I/O, no wire code. The agents' readers (`ctxd/agents/<name>.py`) fill a `Session` as
bytes arrive; a `Change` says what one read added so a consumer can mirror it without diffing.
Plain classes, not dataclasses: an agent's module imports this, and `ctxd hook` imports the
agent's module on every tool call (`dataclasses` costs it more than everything here).
"""

from __future__ import annotations

from collections.abc import Iterable
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


def token_counts(report: dict[str, Any], ints_only: bool = False) -> dict[str, int]:
    """`tokens` of each of a report's values (`ints_only`: of those that are ints), in one pass: a
    summary reads one report per request."""
    return {key: (value if value <= MAX_TOKENS else MAX_TOKENS) if type(value) is int and value > 0 else 0
            for key, value in report.items() if not ints_only or type(value) is int}


def token_list(values: Iterable[Any]) -> list[int]:
    """`tokens` of each value, in one pass."""
    return [(value if value <= MAX_TOKENS else MAX_TOKENS) if type(value) is int and value > 0 else 0
            for value in values]


class Usage:
    """Tokens billed, split the way prices are quoted.

    `input` is input billed at the full rate (cache reads and cache writes excluded); `output`
    includes reasoning, which is billed as output; `reasoning` is the part of `output` that was
    reasoning, kept for display only. `cache_write_1h` is the part of `cache_write` written to
    Anthropic's 1-hour cache, billed at its own (higher) rate.
    """

    FIELDS = ("input", "cached_input", "cache_write", "output", "reasoning", "cache_write_1h")

    def __init__(self, input: int = 0, cached_input: int = 0, cache_write: int = 0, output: int = 0,
                 reasoning: int = 0, cache_write_1h: int = 0) -> None:
        self.input = input
        self.cached_input = cached_input
        self.cache_write = cache_write
        self.output = output
        self.reasoning = reasoning
        self.cache_write_1h = cache_write_1h

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Usage) and all(getattr(self, f) == getattr(other, f) for f in self.FIELDS)

    def __repr__(self) -> str:
        return f"Usage({', '.join(f'{f}={getattr(self, f)!r}' for f in self.FIELDS)})"

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def add(self, other: Usage, sign: int = 1) -> None:
        self.input += sign * other.input
        self.cached_input += sign * other.cached_input
        self.cache_write += sign * other.cache_write
        self.output += sign * other.output
        self.reasoning += sign * other.reasoning
        self.cache_write_1h += sign * other.cache_write_1h

    def values(self) -> tuple[int, ...]:
        """The counts in FIELDS' order (the arguments that make this usage again)."""
        return (self.input, self.cached_input, self.cache_write, self.output, self.reasoning, self.cache_write_1h)

    def as_dict(self) -> dict[str, int]:
        return {"input": self.input, "cachedInput": self.cached_input, "cacheWrite": self.cache_write,
                "cacheWrite1h": self.cache_write_1h, "output": self.output, "reasoning": self.reasoning}


class Turn:
    """A user turn: where it starts in the window (its count of items then), its text, and when it
    was written; `generation`: Session.generation when it started (a compaction starts a new one)."""

    def __init__(self, index: int, text: str, timestamp: str | None, generation: int) -> None:
        self.index = index
        self.text = text
        self.timestamp = timestamp
        self.generation = generation

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Turn) and (self.index, self.text, self.timestamp, self.generation) == (
            other.index, other.text, other.timestamp, other.generation)

    def __repr__(self) -> str:
        return f"Turn({self.index!r}, {self.text!r}, {self.timestamp!r}, {self.generation!r})"

    __hash__ = None  # type: ignore[assignment]


class Session:
    """One session as its reader has it so far. `agent`: the agent's name (ctxd/agents)."""

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
    # items: list[dict[str, Any]]: the window, in ctxd's item shape (set in __init__), held only by
    # a reader that keeps it (`Reader.holds_window`: tests and one-off reads); the daemon's readers
    # hand the items on in each `Change` and keep only `window`, their count, and `tail`, the ones
    # after the baseline (the store holds the window).
    window: int = 0
    # The API baseline: tokens of the latest request as the agent's model API reported them
    # (docs/sessions.md has the rule per agent); None when unknown (new session, after a compaction).
    baseline: int | None = None
    baseline_items: int = 0  # how many of the window's items the baseline covers (the rest came after it)
    last_usage: dict[str, int] | None = None  # the raw latest report, for display
    # The first request's reported input and the estimate of the messages it carried: the rest is
    # the agent's fixed overhead (system prompt, tools), which its files do not state whole.
    first_request: dict[str, int] | None = None
    turn_count: int = 0
    compactions: int = 0
    generation: int = 0  # bumped whenever `items` is replaced rather than appended to
    bad_lines: int = 0  # lines that are not JSON objects
    sidechain_lines: int = 0
    rewinds: int = 0  # Claude: a prompt edited and resent (the branch after it is dropped)
    # The prompt cache (ctxd/tokens/prompt_cache.py): when the latest main-chain request was made, and
    # whether the latest cache writes went to Anthropic's 1-hour cache.
    last_request_at: str | None = None
    cache_1h: bool = False

    def __init__(self, agent: str, path: str) -> None:
        self.agent = agent
        self.path = path
        self.items: list[dict[str, Any]] = []
        self.tail: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []  # tool declarations the file states
        self.cumulative: dict[str, Usage] = {}  # per model, for cost
        self.turns: list[Turn] = []  # every turn when the window is held, else the latest
        # The agent's own compactions, oldest first: {"trigger", "tokensBefore", "tokensAfter", "at"}
        # (tokensAfter None until the first report after it).
        self.agent_compactions: list[dict[str, Any]] = []
        self.unknown: dict[str, int] = {}  # record types skipped, by type

    def __repr__(self) -> str:
        return f"Session({self.agent!r}, {self.path!r}, id={self.id!r})"

    @property
    def thread(self) -> str:
        return f"{self.agent}:{self.id}"

    def total_usage(self) -> Usage:
        total = Usage()
        for usage in self.cumulative.values():
            total.add(usage)
        return total

    def count_unknown(self, kind: str, records: int = 1) -> None:
        """One more record of a kind this reader skips (format drift)."""
        count_kind(self.unknown, kind, records)

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

    def bill(self, model: str, usage: Usage) -> None:
        """`usage` billed to `model` (its cost)."""
        into = self.cumulative.get(model)
        if into is None:
            into = self.cumulative[model] = Usage()
        into.add(usage)

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

    @property
    def size(self) -> int:
        """Items in the window: counted (`window`) by a reader that hands them on, else those it
        holds (a reader that appends to `items` alone counts none)."""
        return max(self.window, len(self.items))

    @property
    def turn_total(self) -> int:
        """Turns so far: counted (`turn_count`) by a reader that keeps only the latest, else those held."""
        return max(self.turn_count, len(self.turns))

    def after_report(self) -> list[dict[str, Any]]:
        """The window's items after the agent's latest report: `tail` where the reader keeps one
        (`add_item`), else those held after `baseline_items`."""
        return self.tail if self.window else self.items[self.baseline_items:]

    def last_turn(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def to_state(self) -> dict[str, Any]:
        """Everything but the window's items, as JSON (a summary, a reader resumed later), redacted:
        it is written to the state dir (a key in the agent's instructions or a prompt never is)."""
        from ctxd.redact import redact_json

        state = {name: getattr(self, name) for name in _SCALARS}
        state["cumulative"] = {model: usage.as_dict() for model, usage in self.cumulative.items()}
        state["turns"] = [[t.index, t.text, t.timestamp, t.generation] for t in self.turns[-1:]]
        redacted: dict[str, Any] = redact_json(state)
        return redacted

    @classmethod
    def from_state(cls, agent: str, path: str, state: dict[str, Any]) -> Session:
        session = cls(agent=agent, path=path)
        for name in _SCALARS:
            if name in state:
                setattr(session, name, state[name])
        session.cumulative = usages(state.get("cumulative"))
        session.unknown = {}
        unknown = state.get("unknown")
        for kind, records in unknown.items() if isinstance(unknown, dict) else ():  # (one kept before the bound: bounded)
            if type(records) is int:
                session.count_unknown(str(kind), records)
        session.turns = [Turn(*turn) for turn in state.get("turns") or []]
        return session


# Format drift's kinds, as `count_kind` names them.
MAX_UNKNOWN_KINDS = 32
MAX_KIND_CHARS = 64
OTHER_KINDS = "(other kinds)"


def count_kind(counts: dict[str, int], kind: str, records: int) -> None:
    """`records` more of `kind` in `counts` (format drift: a session's, or an agent version's). The
    first MAX_UNKNOWN_KINDS kinds are named, each cut to MAX_KIND_CHARS; any other counts as
    OTHER_KINDS: a hostile file of 200,000 made-up kinds (44 MB) made a summary as large as itself,
    and `ctxd sessions` printed every one of them."""
    kind = kind[:MAX_KIND_CHARS]
    if kind not in counts and len(counts) >= MAX_UNKNOWN_KINDS:
        kind = OTHER_KINDS
    counts[kind] = counts.get(kind, 0) + records


# What `Session.to_state` keeps besides the usage and the latest turn: plain JSON values.
_SCALARS = ("id", "version", "cwd", "model", "context_window", "title", "started", "last_activity",
            "base_instructions", "forked_from", "window", "tail", "baseline", "baseline_items", "last_usage",
            "first_request", "tools", "turn_count", "compactions", "agent_compactions", "generation", "unknown",
            "bad_lines", "sidechain_lines", "rewinds", "last_request_at", "cache_1h")
_USAGE_FIELDS = {"input": "input", "cachedInput": "cached_input", "cacheWrite": "cache_write",
                 "cacheWrite1h": "cache_write_1h", "output": "output", "reasoning": "reasoning"}


def usages(saved: Any) -> dict[str, Usage]:
    """Per model, the usage `Usage.as_dict` saved (a state's `cumulative`)."""
    return {model: Usage(**{_USAGE_FIELDS[k]: int(v) for k, v in usage.items() if k in _USAGE_FIELDS})
            for model, usage in (saved or {}).items()}


# A read stops after a replacement once the replacements it holds name this many items in all:
# a hostile file of many compactions (each a copy of the window's user messages) or rewinds
# cannot make one read hold the window again and again. The rest is read at once, in another read.
MAX_HELD_ITEMS = 100_000


class Step:
    """One step of a read, in the file's order: `items` appended to the window, or (`replace`) the
    window replaced by `items`: the agent's compaction number `compaction` of the session (0 for
    its first), or a rewind (`compaction` None), which keeps the window's first `keep` items (and
    `items` is empty: the consumer holds the window). `rebuild`: the replacement is the window's
    real user messages, then `items` (Codex's compaction without its replacement history). `at`:
    the file's time of a replacement. `compactions_before`: the agent's compactions in the file
    before this step."""

    def __init__(self, items: list[dict[str, Any]], replace: bool = False, compaction: int | None = None,
                 at: str | None = None, compactions_before: int = 0, keep: int | None = None,
                 rebuild: bool = False) -> None:
        self.items = items
        self.replace = replace
        self.compaction = compaction
        self.at = at
        self.compactions_before = compactions_before
        self.keep = keep
        self.rebuild = rebuild

    def __repr__(self) -> str:
        return (f"Step({len(self.items)} items, replace={self.replace!r}, compaction={self.compaction!r}, "
                f"at={self.at!r}, compactions_before={self.compactions_before!r}, keep={self.keep!r}, "
                f"rebuild={self.rebuild!r})")


class Change:
    """What one read changed: `steps`, in order (the mirror replays them, so that what a
    compaction or a rewind took out of the window is archived, never lost). `from_start`: the read
    began at the file's first byte (its steps are the session's whole history). `meta`: id, cwd,
    model, window or title changed; `held`: items named by the replacements in `steps`
    (MAX_HELD_ITEMS)."""

    def __init__(self, from_start: bool = False) -> None:
        self.steps: list[Step] = []
        self.turns: list[Turn] = []
        self.usage = False
        self.meta = False
        self.lines = 0
        self.from_start = from_start
        self.held = 0

    def __repr__(self) -> str:
        return (f"Change(steps={self.steps!r}, turns={self.turns!r}, usage={self.usage!r}, meta={self.meta!r}, "
                f"lines={self.lines!r}, from_start={self.from_start!r}, held={self.held!r})")

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
    if usage is not None and not (usage.input or usage.cached_input or usage.cache_write):
        usage = None  # no prompt sent: no cache facts (Codex's markers never get here: agents/codex.py)
    if usage is None:
        note_reports(session, used)
        return
    note_reports(session, used, (model or "", usage.input, usage.cache_write, usage.cache_write_1h),
                 at if isinstance(at, str) and len(at) <= 64 else None,
                 usage.cache_write_1h > 0 if usage.cache_write else None)


def note_reports(session: Session, used: int, prompted: tuple[str, int, int, int] | None = None,
                 at: str | None = None, cache_1h: bool | None = None) -> None:
    """`note_report` of one or more reports in a row (claude.py reads runs of them at once): `used`,
    the first one's fill; `prompted`, the first that sent a prompt (model, input, cache write, its
    1-hour part); `at`, the latest such request's time; `cache_1h`, where the latest write went."""
    latest = session.agent_compactions[-1] if session.agent_compactions else None
    if latest is not None and latest["tokensAfter"] is None:
        latest["tokensAfter"] = used
    if latest is not None and prompted is not None and "firstRequest" not in latest:
        model, sent, written, hour = prompted
        latest["firstRequest"] = {"model": model, "input": sent, "cacheWrite": written, "cacheWrite1h": hour}
    if at is not None:
        session.last_request_at = at
    if cache_1h is not None:
        session.cache_1h = cache_1h


def first_request(reported: int, items: list[dict[str, Any]], carried: int = 0) -> dict[str, int]:
    """The first request: the input its API reported and an estimate of the messages it carried
    (the ledger's per-item estimate of `items`, ctxd/tokens/approx.py, and `carried`: that of the
    items before them, counted as they came)."""
    from ctxd.tokens.approx import item_tokens

    return {"tokens": reported, "messages": carried + sum(item_tokens(i) for i in items)}


def shorten(text: str, limit: int = TITLE_CHARS) -> str:
    """One line, at most `limit` characters: a title or a checkpoint label. The API key is taken out
    first (a key cut in half by the limit would no longer be recognised)."""
    line = " ".join(redact(text).split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
