from typing import Any

def run(data: bytes, rows: list[tuple[Any, ...]], i: int, layout: tuple[int, ...], most: int, state: tuple[Any, ...],
        /) -> tuple[Any, ...] | None: ...
