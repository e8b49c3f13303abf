"""What ctxd's hooks remember of a session between two runs: the turn it is in.

One small JSON file per session in the state directory. Its presence also tells the daemon's
file-watching checkpoint that this session's hooks take its checkpoints (so none is taken twice).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _path(state_dir: Path, thread: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_.:" else "_" for ch in thread)[:200].replace(":", "-")
    return Path(state_dir) / "hooks" / "sessions" / f"{safe}.json"


def hooked(state_dir: Path | None, thread: str) -> bool:
    """Whether ctxd's hooks have run for this session (its checkpoints are theirs)."""
    if state_dir is None:
        from ctxd.settings import default_state_dir

        state_dir = default_state_dir()
    return _path(state_dir, thread).exists()


def read(state_dir: Path, thread: str) -> dict[str, Any]:
    try:
        value = json.loads(_path(state_dir, thread).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def write(state_dir: Path, thread: str, value: dict[str, Any]) -> None:
    path = _path(state_dir, thread)
    path.parent.mkdir(parents=True, exist_ok=True)
    pending = path.with_name(f".{path.name}.{os.urandom(16).hex()}.tmp")
    pending.write_text(json.dumps(value), "utf-8")
    os.replace(pending, path)
