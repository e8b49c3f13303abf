from collections.abc import Mapping
from typing import Any

def run(data: bytes, rows: list[tuple[Any, ...]], i: int, layout: tuple[int, ...], limits: tuple[int, int],
        messages: Mapping[str, Any], lines: Mapping[str, Any], state: tuple[Any, ...], /) -> tuple[Any, ...] | None: ...
