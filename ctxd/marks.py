"""What ctxd's hooks remember between two runs: the turn a session is in, and what they have
already said in their log.

One small JSON file per session in the state directory (`ctxd.places.marks_dir`). Its presence also tells the daemon's
file-watching checkpoint that this session's hooks take its checkpoints (so none is taken twice).
The hooks' folder (`<state dir>/hooks`) is made the user's alone (0700).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ctxd.places import hooks_dir, marks_dir
from ctxd.safefile import read_text_bounded, write_whole

MAX_MARK_BYTES = 64 * 1024


def _path(state_dir: Path, thread: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_.:" else "_" for ch in thread)[:200].replace(":", "-")
    return marks_dir(state_dir) / f"{safe}.json"


def hooked(state_dir: Path | None, thread: str) -> bool:
    """Whether ctxd's hooks have run for this session (its checkpoints are theirs)."""
    if state_dir is None:
        from ctxd.places import default_state_dir

        state_dir = default_state_dir()
    return _path(state_dir, thread).exists()


def read(state_dir: Path, thread: str) -> dict[str, Any]:
    try:
        value = json.loads(read_text_bounded(_path(state_dir, thread), MAX_MARK_BYTES))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def write(state_dir: Path, thread: str, value: dict[str, Any]) -> None:
    path = _path(state_dir, thread)
    hooks_dir(state_dir)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    write_whole(path, json.dumps(value).encode("utf-8"))  # 0600 whatever the umask, never through a link


def first_time(state_dir: Path, key: str) -> bool:
    """True once for each `key` (a marker file in `<state dir>/hooks/told`), then False."""
    folder = hooks_dir(state_dir) / "told"
    folder.mkdir(mode=0o700, exist_ok=True)
    name = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    try:
        os.close(os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        return False
    return True
