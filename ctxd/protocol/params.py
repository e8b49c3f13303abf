"""Request params: one pydantic model per `ctxd/*` method, camelCase on the wire.

Everything that fails to parse becomes `InvalidParams` with a message that names the field.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from ctxd.errors import InvalidParams
from ctxd.protocol import methods
from ctxd.protocol.items import describe_error
from ctxd.protocol.threadnames import SESSION_ID_CHARS, THREAD_CHARS, acp_thread

log = logging.getLogger(__name__)

# --- params --------------------------------------------------------------------------------------


class Params(BaseModel):
    """Fields every `ctxd/*` request carries. Unknown fields are ignored, as LSP servers do."""

    model_config = ConfigDict(defer_build=True, alias_generator=to_camel, populate_by_name=True, strict=True, extra="ignore")

    workspace: str
    thread: str = Field(default="default", min_length=1, max_length=THREAD_CHARS)
    work_done_token: int | str | None = None


class UsageParams(Params):
    pass


class RecordParams(Params):
    items: list[Any]  # validated one by one by `items.validate_items`, whose errors name the item


# Counts (tokens, turns, offsets) are stored in or compared with SQLite INTEGER columns (8 bytes); any
# real count is far below this, and JavaScript clients cannot send a larger integer exactly anyway.
MAX_COUNT = 2**53 - 1


class TokenUsage(BaseModel):
    model_config = ConfigDict(defer_build=True, alias_generator=to_camel, populate_by_name=True, strict=True, extra="ignore")

    input_tokens: int = Field(ge=0, le=MAX_COUNT)
    cached_input_tokens: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    output_tokens: int = Field(default=0, ge=0, le=MAX_COUNT)
    reasoning_output_tokens: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    total_tokens: int = Field(ge=0, le=MAX_COUNT)


class ReportTokenUsageParams(Params):
    usage: TokenUsage


class ToolDeclaration(BaseModel):
    model_config = ConfigDict(defer_build=True, strict=True, extra="allow")

    name: str
    kind: Literal["builtin", "mcp", "skill"] = "builtin"
    schema_: Any = Field(default=None, alias="schema")
    server: str | None = None


class MemoryFile(BaseModel):
    model_config = ConfigDict(defer_build=True, strict=True, extra="allow")

    path: str
    content: str


class Skill(BaseModel):
    model_config = ConfigDict(defer_build=True, strict=True, extra="allow")

    name: str
    description: str = ""


class SetPromptContextParams(Params):
    model: str | None = None
    context_window: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    base_instructions: str | None = None
    tools: list[ToolDeclaration] | None = None
    memory_files: list[MemoryFile] | None = None
    skills: list[Skill] | None = None


class PromptParams(Params):
    input_modalities: list[Literal["text", "image", "audio"]] = ["text", "image"]


class RollbackParams(Params):
    turns: int = Field(ge=1, le=MAX_COUNT)
    dry_run: bool = False


class UndoParams(Params):
    id: int = Field(ge=1, le=MAX_COUNT)  # an operation id: a compaction's, rollback's or undo's `undoId`


class HistoryParams(Params):
    offset: int = Field(default=0, ge=0, le=MAX_COUNT)
    limit: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    include_archived: bool = False


class ThreadsParams(BaseModel):
    model_config = ConfigDict(defer_build=True, alias_generator=to_camel, populate_by_name=True, strict=True, extra="ignore")

    workspace: str


class ThreadsListParams(ThreadsParams):
    # Only these threads (an editor told which changed by `ctxd/threadsChanged`); absent: every one.
    threads: list[Annotated[str, Field(max_length=256)]] | None = Field(default=None, max_length=10_000)


class CompactParams(Params):
    strategy: Literal["auto", "llm", "remote", "offline"] = "auto"


class GhostSnapshotParams(Params):
    message: str | None = Field(default=None, max_length=10_000)
    record: bool = True  # v4: false takes the snapshot without recording it in the thread (ctxd's own tools)


class GhostListParams(ThreadsParams):
    pass


class GhostRestoreParams(Params):
    id: str
    conversation: bool = False
    dry_run: bool = False


class GhostDiffParams(Params):
    id: str
    path: str | None = None


class GhostDeleteParams(Params):
    id: str


class StatusParams(ThreadsParams):
    pass


class RecallParams(Params):
    query: str = Field(min_length=1, max_length=10_000)
    limit: int = Field(default=10, ge=1, le=100)
    scope: Literal["thread", "workspace"] = "thread"


class ItemParams(Params):
    seq: int = Field(ge=1, le=MAX_COUNT)


def _session_digested(raw: Any) -> Any:
    """A record or checkpoint whose thread is named by a session id too long for the bound (a proxy
    of an earlier version sent it, its spool kept it), as the proxy names it now
    (`threadnames.acp_thread`): refused, it lost its items, and so did the session's later ones."""
    thread = raw.get("thread") if isinstance(raw, dict) else None
    if not isinstance(thread, str) or not thread.startswith("acp:") or len(thread) <= THREAD_CHARS:
        return raw
    named = acp_thread(thread[4:])
    log.warning("%s: a session id over %d characters: its thread is named by a digest of it", named, SESSION_ID_CHARS)
    return {**raw, "thread": named}


class AcpRecordParams(Params):
    """The proxy's view of its ACP session (`ctxd/acp/record`): items to append, what the thread
    listing shows, and the agent's own gauge when it sent one (`usage_update`). `proxy` and `seq`
    name the record (its proxy's id, its number there from 1): one sent again is stored once."""

    items: list[Any]
    title: str | None = Field(default=None, max_length=1_000)
    agent: str | None = Field(default=None, max_length=200)
    model: str | None = Field(default=None, max_length=200)
    used: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    size: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    replay: bool = False  # the history an agent replays at `session/load`: stored only into an empty thread
    proxy: str | None = Field(default=None, min_length=1, max_length=100)
    seq: int | None = Field(default=None, ge=1, le=MAX_COUNT)

    @model_validator(mode="before")
    @classmethod
    def _over_bounds_left_out(cls, raw: Any) -> Any:
        """What the listing shows of the session and the agent's gauge, over their bounds: a title
        is cut, an agent's or model's name and a count are left out; logged by name, never quoted.
        Refused, they lost the record's items with them (the agent's turn)."""
        raw = _session_digested(raw)
        if not isinstance(raw, dict):
            return raw
        fixed: dict[str, Any] = {}  # field -> its value now (None: left out)
        why: list[str] = []
        for name in ("title", "agent", "model"):
            value, bound = raw.get(name), cls.model_fields[name].metadata[0].max_length
            if isinstance(value, str) and len(value) > bound:
                fixed[name] = value[:bound - 1] + "…" if name == "title" else None
                why.append(f"{name} {'cut' if name == 'title' else 'left out'} ({len(value)} characters, "
                           f"the bound is {bound})")
        for name, least in (("used", 0), ("size", 1)):
            value = raw.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and not least <= value <= MAX_COUNT:
                fixed[name] = None
                why.append(f"{name} left out (not within {least}..{MAX_COUNT})")
        if not fixed:
            return raw
        log.warning("ctxd/acp/record of %.300s: %s; its items are stored", raw.get("thread"), ", ".join(why))
        return {**raw, **fixed}


class AcpCheckpointParams(Params):
    """A checkpoint the proxy takes before a turn or a change (`ctxd/acp/checkpoint`)."""

    trigger: Literal["turn", "tool"]
    message: str = Field(default="", max_length=10_000)
    turn: dict[str, Any] | None = None
    tool: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _long_session_digested(cls, raw: Any) -> Any:
        return _session_digested(raw)


# What each method takes (`shapes.RESULTS` says what it answers): the handlers parse with these, and
# the schema the editors' types come from declares them.
PARAMS: dict[str, type[BaseModel]] = {
    methods.RECORD: RecordParams,
    methods.REPORT_TOKEN_USAGE: ReportTokenUsageParams,
    methods.SET_PROMPT_CONTEXT: SetPromptContextParams,
    methods.USAGE: UsageParams,
    methods.PROMPT: PromptParams,
    methods.COMPACT: CompactParams,
    methods.ROLLBACK: RollbackParams,
    methods.HISTORY: HistoryParams,
    methods.THREADS: ThreadsListParams,
    methods.STATUS: StatusParams,
    methods.GHOST_SNAPSHOT: GhostSnapshotParams,
    methods.GHOST_LIST: GhostListParams,
    methods.GHOST_RESTORE: GhostRestoreParams,
    methods.GHOST_DIFF: GhostDiffParams,
    methods.GHOST_DELETE: GhostDeleteParams,
    methods.UNDO: UndoParams,
    methods.RECALL: RecallParams,
    methods.ITEM: ItemParams,
    methods.SESSIONS_SYNC: ThreadsParams,
    methods.ACP_RECORD: AcpRecordParams,
    methods.ACP_CHECKPOINT: AcpCheckpointParams,
}


def parse_params(model: type[BaseModel], raw: Any) -> Any:
    """Parse request params into `model`, or raise InvalidParams naming the field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidParams("params: must be an object")
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise InvalidParams(describe_error(error)) from None
