"""The shapes of what ctxd sends: every result and notification of protocol v3, defined once.

TypedDicts, so that the domain builds plain dicts at no cost and a type checker holds it to these
shapes. `schema()` turns them into JSON Schema (`docs/protocol.schema.json`), the exchange format
from which the VS Code extension's TypeScript types are generated; a test fails when the checked-in
schema is stale. Request params are the pydantic models of `params.py` (`PARAMS`); the schema declares
them too, so that the editors' types of what they send come from the same place.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NotRequired

from pydantic import ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict

from ctxd.protocol.params import PARAMS

# A reply with a key its shape does not declare fails validation: the shapes stay complete.
STRICT = ConfigDict(extra="forbid")

Tier = Literal["ok", "warn", "compact"]
UsageSource = Literal["api", "estimate", "api+estimate"]
TokenizerStatus = Literal["exact", "loading", "unavailable", "estimate", "idle"]


@with_config(STRICT)
class UsageSnapshot(TypedDict):
    """How full a thread's context window is: the gauge's numbers."""

    usedTokens: int
    contextWindow: int
    percent: float
    autoCompactLimit: int
    tier: Tier
    source: UsageSource
    historyVersion: int
    tokenizer: NotRequired[str]
    tokenizerStatus: NotRequired[TokenizerStatus]


@with_config(STRICT)
class UsageChanged(UsageSnapshot):
    """`ctxd/usageChanged`."""

    workspace: str
    thread: str


@with_config(STRICT)
class Detail(TypedDict):
    name: str
    tokens: int


CategoryName = Literal["systemPrompt", "builtinTools", "mcpTools", "skills", "memoryFiles", "messages",
                       "freeSpace", "autocompactBuffer"]


@with_config(STRICT)
class Category(TypedDict):
    name: CategoryName
    tokens: int
    percent: float
    details: list[Detail]


@with_config(STRICT)
class Cost(TypedDict):
    currency: Literal["USD"]
    input: float
    cachedInput: float
    output: float
    total: float
    priced: bool
    cacheWrite: NotRequired[float]  # Anthropic's cache writes, at their own rate (docs/sessions.md)
    cacheWrite1h: NotRequired[float]  # the part of cacheWrite that was 1-hour cache writes (2x input)
    unpricedModels: NotRequired[list[str]]  # with priced false: the models the table has no price for


@with_config(STRICT)
class CompactionCost(TypedDict):
    """What one compaction cost in cache writes, and what it saves on each turn after it."""

    at: str  # ISO time of the compaction
    cacheWriteTokens: int  # the prompt the first request after it wrote to the cache
    cacheWriteCost: float | None  # USD; None when the model is unpriced
    savedTokensPerTurn: int  # the prompt tokens each later request no longer reads
    savedCostPerTurn: float | None  # USD per request, at the cached-read rate
    coldCache: NotRequired[bool]  # ctxd's own compaction: the cache had likely expired (its write replaced a re-write)


@with_config(STRICT)
class CacheState(TypedDict):
    """A thread's prompt cache, from the cache reads and writes its requests recorded."""

    state: Literal["warm", "cold", "unknown"]  # by the time since the last request against the lifetime
    lastRequestAt: str | None  # ISO time of the last request that reported usage
    lifetimeSeconds: int  # the provider's documented cache lifetime applied (300, 3600, ...)
    expiresAt: str | None  # ISO time the cache likely expires (past when cold)
    rewriteTokens: int  # what the next request writes to the cache when cold (the prompt so far)
    rewriteCost: float | None  # USD for those tokens at the cache-write rate; None when unpriced
    compactions: NotRequired[list[CompactionCost]]


@with_config(STRICT)
class Breakdown(TypedDict):
    """`ctxd/usage`: where the window's tokens go."""

    model: str | None
    contextWindow: int
    mode: Literal["estimated", "actual"]
    totalTokens: int | None
    usage: UsageSnapshot
    categories: list[Category]
    overheadTokens: int
    idleCost: int
    overflowTokens: NotRequired[int]
    cost: NotRequired[Cost]
    inferred: NotRequired[dict[str, str]]  # category -> how its number was inferred (followed sessions)
    limitSource: NotRequired[str]  # where the window and auto-compact point come from (a followed session, an unknown model)
    cache: NotRequired[CacheState]


@with_config(STRICT)
class RecordResult(TypedDict):
    historyVersion: int
    itemCount: int
    usage: UsageSnapshot


@with_config(ConfigDict(extra="allow"))
class Item(TypedDict):
    """A ledger item as the model API spells it (snake_case, every field it came with): only its
    `type` is declared here; `ctxd/protocol/items.py` validates each type's fields when recorded."""

    type: str


class HistoryItem(Item):
    """An item of `ctxd/history`; with `includeArchived`, the ones a compaction replaced say so."""

    archived: NotRequired[bool]
    archivedBy: NotRequired[int]  # (v3) the history operation that took it out of the active history


@with_config(STRICT)
class PromptResult(TypedDict):
    items: list[Item]
    historyVersion: int
    estimatedTokens: int
    reinjectContext: bool


@with_config(STRICT)
class CompactResult(TypedDict):
    historyVersion: int
    tokensBefore: int
    tokensAfter: int
    strategy: Literal["llm", "remote", "offline"]
    summary: str
    trimmedItems: int
    fallbackReason: NotRequired[str | None]
    undoId: NotRequired[int]  # (v3) the compaction, as an operation `ctxd/undo` takes
    cacheCost: NotRequired[CompactionCost]  # what it will write to the prompt cache, and save per turn after


@with_config(STRICT)
class Compacted(TypedDict):
    """`ctxd/compacted`."""

    workspace: str
    thread: str
    tokensBefore: int
    tokensAfter: int
    strategy: str
    cacheCost: NotRequired[CompactionCost]  # as CompactResult.cacheCost


@with_config(STRICT)
class RollbackResult(TypedDict):
    """(v3) With `dryRun`, what the rollback would do, and nothing changed (`usage` is as it is)."""

    historyVersion: int
    removedItems: int
    usage: UsageSnapshot
    crossesCompaction: NotRequired[bool]
    tokensAfter: NotRequired[int]
    undoId: NotRequired[int]
    dryRun: NotRequired[bool]


@with_config(STRICT)
class UndoResult(TypedDict):
    """(v3) `ctxd/undo`: the history the operation replaced is back; `undoId` redoes it."""

    historyVersion: int
    usage: UsageSnapshot
    undoId: int
    removedItems: NotRequired[int]


OperationKind = Literal["compaction", "rollback", "restore", "undo"]


@with_config(STRICT)
class OperationRecord(TypedDict):
    """(v3) One history operation of a thread (`ctxd/history` with `includeArchived`)."""

    id: int
    kind: OperationKind
    createdAt: str
    itemsBefore: int
    itemsAfter: int
    tokensBefore: int | None
    tokensAfter: int | None
    undoneBy: NotRequired[int]


@with_config(STRICT)
class CompactionRecord(TypedDict):
    """One past compaction of a thread (`ctxd/history` with `includeArchived`). The items it
    replaced are the archived items whose `archivedBy` is its id (v3: rollbacks, restores and
    undos archive items too, so archived items no longer follow the compactions in turn)."""

    id: int
    createdAt: str
    strategy: str | None
    automatic: bool
    tokensBefore: int | None
    tokensAfter: int | None
    archivedItems: int
    writtenItems: int
    undoneBy: NotRequired[int]  # (v3) the undo, or the rollback that crossed it


@with_config(STRICT)
class HistoryResult(TypedDict):
    items: list[HistoryItem]
    historyVersion: int
    total: int
    compactions: NotRequired[list[CompactionRecord]]
    operations: NotRequired[list[OperationRecord]]


@with_config(STRICT)
class ThreadInfo(TypedDict):
    thread: str
    itemCount: int
    historyVersion: int
    updatedAt: str
    source: NotRequired[str]  # "client", a followed agent's name (ctxd/agents: "codex", "claude"...), or "acp"
    title: NotRequired[str | None]
    model: NotRequired[str | None]
    lastActivity: NotRequired[str | None]
    readOnly: NotRequired[bool]
    usage: NotRequired[UsageSnapshot]
    cost: NotRequired[Cost]  # a followed session's cost so far, as Breakdown.cost
    cache: NotRequired[CacheState]


@with_config(STRICT)
class ThreadsResult(TypedDict):
    threads: list[ThreadInfo]


@with_config(STRICT)
class SyncResult(TypedDict):
    idle: bool  # every followed session file was read and mirrored (false: still at it after the wait)


@with_config(STRICT)
class Problem(TypedDict):
    source: str
    key: NotRequired[str]
    message: str


@with_config(STRICT)
class TokenizerState(TypedDict):
    name: str
    status: TokenizerStatus


@with_config(STRICT)
class UnreadRecords(TypedDict):
    """Kinds of record an agent's version wrote that ctxd's reader skipped (format drift)."""

    version: str | None
    kinds: list[str]
    records: int


Watching = Literal["inotify", "polling", "off"]


@with_config(STRICT)
class SourceState(TypedDict):
    agent: str
    version: NotRequired[str]  # the agent's version whose formats ctxd's module follows
    root: str
    enabled: bool
    sessions: int
    watching: NotRequired[Watching]  # how the session files are watched
    unread: NotRequired[list[UnreadRecords]]  # per version of the agent; absent or [] when none


@with_config(STRICT)
class Status(TypedDict):
    """`ctxd/status`."""

    version: str
    protocolVersion: int
    stateDir: str
    trusted: bool
    problems: list[Problem]
    tokenizers: list[TokenizerState]
    sources: list[SourceState]


@with_config(STRICT)
class Skipped(TypedDict):
    path: str
    reason: str
    pathEncoding: NotRequired[Literal["escaped"]]


@with_config(STRICT)
class CheckpointTurn(TypedDict):
    """(v3) The user turn a checkpoint precedes, counted from 1; its text shortened."""

    index: int
    text: str


@with_config(STRICT)
class CheckpointTool(TypedDict):
    """(v3) The tool a checkpoint was taken before, and the paths it names."""

    name: str
    callId: NotRequired[str]
    paths: NotRequired[list[str]]


@with_config(STRICT)
class GhostCommit(TypedDict):
    id: str
    parent: str | None
    createdAt: str | None
    message: str
    fileCount: int
    skipped: list[Skipped]
    durationMs: int
    trigger: Literal["manual", "turn", "tool", "restore"]
    thread: str | None
    turn: NotRequired[CheckpointTurn]
    tool: NotRequired[CheckpointTool]


@with_config(STRICT)
class InterruptedRestore(TypedDict):
    """A restore a crash cut short: restoring `undoId` goes back to the state before it."""

    id: str | None
    undoId: str | None
    startedAt: str | None
    message: str


@with_config(STRICT)
class GhostListResult(TypedDict):
    snapshots: list[GhostCommit]
    interruptedRestore: NotRequired[InterruptedRestore]


@with_config(STRICT)
class RestoreResult(TypedDict):
    id: str
    restored: list[str]
    removed: list[str]
    removedItems: NotRequired[int]
    undoId: NotRequired[str | None]
    operationId: NotRequired[int]  # (v3) with the conversation: the history operation, for `ctxd/undo`
    dryRun: NotRequired[bool]
    pathEncoding: NotRequired[Literal["escaped"]]


@with_config(STRICT)
class RestoreFailure(TypedDict):
    """`data` of a restore's 1002, when it says more than its message: `needBytes` and `freeBytes`
    when the new files would not fit (nothing was written); `undoId`, `restored` and `removed`
    when it stopped part-way and could not put everything back (the paths are as the snapshot has
    them, every other file as it was; restoring `undoId` goes back)."""

    undoId: NotRequired[str]
    restored: NotRequired[list[str]]
    removed: NotRequired[list[str]]
    needBytes: NotRequired[int]
    freeBytes: NotRequired[int]
    pathEncoding: NotRequired[Literal["escaped"]]


@with_config(STRICT)
class FileChange(TypedDict):
    path: str
    status: Literal["modified", "added", "deleted"]
    binary: bool
    before: NotRequired[str | None]
    after: NotRequired[str | None]
    pathEncoding: NotRequired[Literal["escaped"]]


@with_config(STRICT)
class DiffResult(TypedDict):
    id: str
    files: list[FileChange]


@with_config(STRICT)
class DeleteResult(TypedDict):
    deleted: bool


@with_config(STRICT)
class TurnRef(TypedDict):
    """The user turn an item belongs to: its index counted from 1, and its text shortened."""

    index: int
    text: str


@with_config(STRICT)
class RecallHit(TypedDict):
    """One match of `ctxd/recall`: where the item is (`seq` in `thread`), what it is, the part of
    its text that matched (at most 400 characters), and whether a compaction replaced it.
    `placeholderSeq`: the match was the placeholder a compaction left of this tool output (its
    seq there); the hit is the output itself."""

    thread: str
    seq: int
    type: str
    role: NotRequired[str]
    snippet: str
    createdAt: NotRequired[str | None]
    archived: bool
    turn: NotRequired[TurnRef]
    placeholderSeq: NotRequired[int]


@with_config(STRICT)
class RecallResult(TypedDict):
    results: list[RecallHit]
    total: int


@with_config(STRICT)
class ItemResult(TypedDict):
    """`placeholderSeq`: the seq asked for holds a compaction's placeholder for this tool output."""

    item: Item
    archived: bool
    seq: int
    placeholderSeq: NotRequired[int]


@with_config(STRICT)
class ThreadsChanged(TypedDict):
    """`ctxd/threadsChanged`."""

    workspace: str
    # v4: the threads whose listing changed (`ctxd/threads` with `threads` lists just them); absent:
    # any of the workspace's may have, list them all again.
    threads: NotRequired[list[str]]


@with_config(STRICT)
class GhostChanged(TypedDict):
    """`ctxd/ghostChanged` (v3): the workspace's snapshots changed, e.g. a hook took a checkpoint."""

    workspace: str


@with_config(STRICT)
class AcpCheckpointResult(TypedDict):
    """`ctxd/acp/checkpoint` (v4): the checkpoint's id, or why none was taken (`ghost.auto` off)."""

    id: str | None
    skipped: NotRequired[str]


# What each method answers and each notification carries; the schema's top level lists them.
RESULTS: dict[str, Any] = {
    "ctxd/record": RecordResult,
    "ctxd/reportTokenUsage": UsageSnapshot,
    "ctxd/setPromptContext": UsageSnapshot,
    "ctxd/usage": Breakdown,
    "ctxd/prompt": PromptResult,
    "ctxd/compact": CompactResult,
    "ctxd/rollback": RollbackResult,
    "ctxd/history": HistoryResult,
    "ctxd/threads": ThreadsResult,
    "ctxd/status": Status,
    "ctxd/ghost/snapshot": GhostCommit,
    "ctxd/ghost/list": GhostListResult,
    "ctxd/ghost/restore": RestoreResult,
    "ctxd/ghost/diff": DiffResult,
    "ctxd/ghost/delete": DeleteResult,
    "ctxd/undo": UndoResult,
    "ctxd/recall": RecallResult,
    "ctxd/item": ItemResult,
    "ctxd/sessions/sync": SyncResult,
    "ctxd/acp/record": RecordResult,
    "ctxd/acp/checkpoint": AcpCheckpointResult,
}
NOTIFICATIONS: dict[str, Any] = {
    "ctxd/usageChanged": UsageChanged,
    "ctxd/compacted": Compacted,
    "ctxd/threadsChanged": ThreadsChanged,
    "ctxd/ghostChanged": GhostChanged,
}


def schema() -> dict[str, Any]:
    """JSON Schema of every shape, with one property per method and notification naming its shape."""
    fields = {name.replace("/", "_"): shape for name, shape in {**RESULTS, **NOTIFICATIONS}.items()}
    fields |= {name.replace("/", "_") + "_params": model for name, model in PARAMS.items()}
    protocol = TypedDict("CtxdProtocol", fields)  # type: ignore[misc]  # fields built at run time, not a literal
    result = TypeAdapter(protocol).json_schema(ref_template="#/$defs/{model}")
    # Record's items are parsed as plain JSON and validated one by one (`items.validate_items`).
    result["$defs"]["RecordParams"]["properties"]["items"]["items"] = {"$ref": "#/$defs/Item"}
    for definition in [result, *result["$defs"].values()]:
        for prop in definition.get("properties", {}).values():
            prop.pop("title", None)  # a title per field would become a type alias per field in TypeScript
    result["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    result["title"] = "CtxdProtocol"
    result["description"] = ("Results, notifications and request params of the ctxd wire protocol, version 3 "
                             "(generated from ctxd/protocol/shapes.py by `python -m ctxd.protocol.shapes`).")
    return result


def schema_text() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
