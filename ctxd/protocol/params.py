"""Validation at the protocol edge.

Items are checked here once, against models of the Responses API item types; the ledger then
stores each item exactly as it came (unknown fields the API returned included). Request params are
parsed into typed models with camelCase wire names. Everything that fails becomes `InvalidParams`
with a message that names where the problem is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from ctxd.errors import InvalidParams

# --- items ---------------------------------------------------------------------------------------


class _Item(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class InputText(_Item):
    type: Literal["input_text", "output_text"]
    text: str


class InputImage(_Item):
    type: Literal["input_image"]
    image_url: str
    detail: str | None = None


class Refusal(_Item):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[Union[InputText, InputImage, Refusal], Field(discriminator="type")]


class MessageItem(_Item):
    type: Literal["message"]
    role: Literal["user", "assistant", "developer", "system"]
    content: str | list[ContentPart]


class FunctionCall(_Item):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutput(_Item):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]


class CustomToolCall(_Item):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str


class CustomToolCallOutput(_Item):
    type: Literal["custom_tool_call_output"]
    call_id: str
    output: str | list[ContentPart]


class SummaryText(_Item):
    type: Literal["summary_text"]
    text: str


class ReasoningText(_Item):
    type: Literal["reasoning_text", "text"]
    text: str


class Reasoning(_Item):
    type: Literal["reasoning"]
    summary: list[SummaryText]
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None


class GhostCommitRef(_Item):
    id: str
    parent: str | None = None
    created_at: str | int | None = None


class GhostSnapshot(_Item):
    type: Literal["ghost_snapshot"]
    ghost_commit: GhostCommitRef


class Compaction(_Item):
    type: Literal["compaction"]
    encrypted_content: str


Item = Annotated[
    Union[
        MessageItem,
        FunctionCall,
        FunctionCallOutput,
        CustomToolCall,
        CustomToolCallOutput,
        Reasoning,
        GhostSnapshot,
        Compaction,
    ],
    Field(discriminator="type"),
]
ITEM_TYPES = ("message", "function_call", "function_call_output", "custom_tool_call",
              "custom_tool_call_output", "reasoning", "ghost_snapshot", "compaction")
_item_adapter: TypeAdapter[Any] = TypeAdapter(Item)
_TAGS = frozenset(ITEM_TYPES) | {"input_text", "output_text", "input_image", "refusal", "reasoning_text"}


def _describe(error: ValidationError, skip: int = 0) -> str:
    """The most specific problem of a pydantic error (deepest location), as `where: what`."""
    first = max(error.errors(include_url=False), key=lambda e: len(e["loc"]))
    loc: list[Any] = []
    after_index = True
    for part in first["loc"][skip:]:
        if str(part).startswith(("list[", "str")):
            continue  # union branch names
        if after_index and part in _TAGS:
            after_index = False
            continue  # a discriminator tag, which follows the item or list index it describes
        after_index = isinstance(part, int)
        loc.append(part)
    where = ".".join(str(part) for part in loc)
    if first["type"] == "missing":
        return f"missing required field '{where}'"
    if first["type"] == "union_tag_invalid":
        kind = first["input"].get("type") if isinstance(first.get("input"), dict) else None
        return f"{where + ': ' if where else ''}unknown type {kind!r}"
    return f"{where}: {first['msg']}" if where else first["msg"]


def validate_items(raw: Any) -> list[dict[str, Any]]:
    """Check every item; return them unchanged. One bad item refuses the whole request."""
    if not isinstance(raw, list):
        raise InvalidParams("items: must be a list of items")
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise InvalidParams(f"items[{index}]: must be an object")
        kind = item.get("type")
        if kind not in ITEM_TYPES:
            raise InvalidParams(f"items[{index}]: unknown item type {kind!r}; expected one of {', '.join(ITEM_TYPES)}")
        try:
            _item_adapter.validate_python(item)
        except ValidationError as error:
            raise InvalidParams(f"items[{index}] ({kind}): {_describe(error)}") from None
    return raw


# --- params --------------------------------------------------------------------------------------


class Params(BaseModel):
    """Fields every `ctxd/*` request carries. Unknown fields are ignored, as LSP servers do."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, strict=True, extra="ignore")

    workspace: str
    thread: str = Field(default="default", min_length=1, max_length=256)
    work_done_token: int | str | None = None


class RecordParams(Params):
    items: list[Any]


# Counts are stored in SQLite INTEGER columns (8 bytes); any real count is far below this, and
# JavaScript clients cannot send a larger integer exactly anyway.
MAX_COUNT = 2**53 - 1


class TokenUsage(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, strict=True, extra="ignore")

    input_tokens: int = Field(ge=0, le=MAX_COUNT)
    cached_input_tokens: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    output_tokens: int = Field(default=0, ge=0, le=MAX_COUNT)
    reasoning_output_tokens: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    total_tokens: int = Field(ge=0, le=MAX_COUNT)


class ReportTokenUsageParams(Params):
    usage: TokenUsage


class ToolDeclaration(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    name: str
    kind: Literal["builtin", "mcp", "skill"] = "builtin"
    schema_: Any = Field(default=None, alias="schema")
    server: str | None = None


class MemoryFile(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    path: str
    content: str


class Skill(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

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
    turns: int = Field(ge=1)


class HistoryParams(Params):
    offset: int = Field(default=0, ge=0)
    limit: int | None = Field(default=None, ge=0)
    include_archived: bool = False


class ThreadsParams(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, strict=True, extra="ignore")

    workspace: str


class CompactParams(Params):
    strategy: Literal["auto", "llm", "remote", "offline"] = "auto"


class GhostSnapshotParams(Params):
    message: str | None = Field(default=None, max_length=10_000)


class GhostListParams(ThreadsParams):
    pass


class GhostRestoreParams(Params):
    id: str
    conversation: bool = False


def parse_params(model: type[BaseModel], raw: Any) -> Any:
    """Parse request params into `model`, or raise InvalidParams naming the field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidParams("params: must be an object")
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise InvalidParams(_describe(error)) from None
