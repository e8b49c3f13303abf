from collections.abc import Callable, Mapping
from typing import Any

def run(data: bytes, rows: list[tuple[Any, ...]], i: int, layout: tuple[int, ...], limits: tuple[int, int],
        messages: Mapping[str, Any], lines: Mapping[str, Any], state: tuple[Any, ...],
        user_text: Callable[[bytes, Any], tuple[str, bool] | None], /) -> tuple[Any, ...] | None: ...
