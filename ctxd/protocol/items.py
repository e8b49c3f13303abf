"""Ledger items as the protocol defines them (OpenAI Responses API shapes), validated once at the edge.

Items are checked here once, against models of the Responses API item types; the ledger then
stores each item exactly as it came (unknown fields the API returned included). Request params are
parsed into typed models with camelCase wire names. Everything that fails becomes `InvalidParams`
with a message that names where the problem is.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ctxd.errors import InvalidParams
from ctxd.protocol.rawjson import RawItem

# --- items ---------------------------------------------------------------------------------------


class _Item(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="allow", strict=True)


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


ContentPart = Annotated[InputText | InputImage | Refusal, Field(discriminator="type")]


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
    MessageItem | FunctionCall | FunctionCallOutput | CustomToolCall | CustomToolCallOutput | Reasoning | GhostSnapshot | Compaction,
    Field(discriminator="type"),
]
ITEM_TYPES = ("message", "function_call", "function_call_output", "custom_tool_call",
              "custom_tool_call_output", "reasoning", "ghost_snapshot", "compaction")


@functools.cache
def _item_adapter() -> TypeAdapter[Any]:
    """Built on first use: pydantic's schema building is most of the daemon's start-up time."""
    return TypeAdapter(Item)
_TAGS = frozenset(ITEM_TYPES) | {"input_text", "output_text", "input_image", "refusal", "reasoning_text"}


def describe_error(error: ValidationError, skip: int = 0) -> str:
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
        _check(index, item)
    return raw


def record_items(raw: Any) -> list[dict[str, Any]] | Iterator[dict[str, Any]]:
    """`validate_items` of a `ctxd/record`'s items. Those of a huge frame, kept as texts
    (`RawItem`, ctxd/server/bigframe.py), are parsed and checked one at a time as they are taken,
    and never held parsed all at once: a bad one raises when it is reached, before anything is
    stored (`Workspace.record` makes every row first)."""
    if isinstance(raw, list) and raw and isinstance(raw[0], RawItem):
        return _taken(raw)
    return validate_items(raw)


def _taken(raw: list[Any]) -> Iterator[dict[str, Any]]:
    for index, item in enumerate(raw):
        yield _check(index, item.take() if isinstance(item, RawItem) else item)


def _check(index: int, item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidParams(f"items[{index}]: must be an object")
    kind = item.get("type")
    if kind not in ITEM_TYPES:
        raise InvalidParams(f"items[{index}]: unknown item type {kind!r}; expected one of {', '.join(ITEM_TYPES)}")
    try:
        _item_adapter().validate_python(item)
    except ValidationError as error:
        raise InvalidParams(f"items[{index}] ({kind}): {describe_error(error)}") from None
    return item
