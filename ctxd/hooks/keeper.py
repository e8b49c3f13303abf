"""The hooks' keeper: a daemon-like process for a workspace no editor has open.

With no daemon of the workspace to hand its checkpoint to (`ctxd.hooks.link`), a hook must read
every file's stat data to find what changed, even when nothing did. So a hook that took its
checkpoint alone then becomes a keeper of the workspace (its child process, already detached
from the agent, runs this module): it watches the folder (`ctxd.ghost.treewatch`), listens on
the hooks' socket folder as a daemon does, and takes the checkpoints the following hooks hand
it, re-checking only the paths that changed. Hooks ask a daemon first (its socket name sorts
before a keeper's), so an editor opened meanwhile takes over.

One keeper per workspace folder and state dir (a lock file held while it runs). It exits when
no hook asked for `CTXD_HOOK_KEEPER_SECONDS` (default 600) seconds, when its folder is gone or
replaced, or when its state dir is gone. `CTXD_HOOK_KEEPER=0` (or `CTXD_TREE_WATCH=0`) in the
agent's environment starts none: every hook then reads the whole tree. Linux only, as the link.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxd.settings import Settings

IDLE_SECONDS = 600.0
TICK_SECONDS = 2.0
PREFIX = "keeper-"
"""The keeper's socket is `keeper-<pid>.sock`: after every daemon's `<pid>.sock` in a hook's order."""


def wanted() -> bool:
    """Whether a hook that took its checkpoint alone should start a keeper."""
    from ctxd.hooks import link

    return (link.available() and os.environ.get("CTXD_HOOK_KEEPER") != "0"
            and os.environ.get("CTXD_TREE_WATCH") != "0")


def idle_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("CTXD_HOOK_KEEPER_SECONDS") or IDLE_SECONDS))
    except ValueError:
        return IDLE_SECONDS


def command(folder: Path, state_dir: Path) -> list[str]:
    return [sys.executable, "-m", "ctxd.hooks.keeper", str(folder), str(state_dir)]


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


class KeptFolder:
    """The workspace as `link.daemon_checkpoint` takes it: its settings are read afresh for each
    job (the user may change them while the keeper runs)."""

    def __init__(self, root: Path, state_dir: Path) -> None:
        self.root = root
        self.state_dir = state_dir
        self.identity = _identity(root)

    @property
    def settings(self) -> Settings:
        from ctxd.settings import load_settings

        return load_settings(self.root)

    def opened_root(self) -> Path:
        from ctxd.errors import GitFailed

        if _identity(self.root) != self.identity:
            raise GitFailed(f"{self.root} was replaced or moved since the keeper started")
        return self.root


class Jobs:
    """When the last job ended, and how many run now: the keeper never exits during one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = 0
        self.last = time.monotonic()

    def take(self, folder: KeptFolder, job: dict[str, Any]) -> dict[str, Any]:
        from ctxd.hooks.link import daemon_checkpoint

        with self._lock:
            self.running += 1
        try:
            return {**daemon_checkpoint(lambda: [folder], job), "by": "keeper"}
        finally:
            with self._lock:
                self.running -= 1
                self.last = time.monotonic()

    def idle_for(self) -> float:
        with self._lock:
            return 0.0 if self.running else time.monotonic() - self.last


def _lock(state_dir: Path, folder: Path) -> int | None:
    """The keeper's lock for this folder, held until the process ends; None when another has it."""
    keepers = state_dir / "hooks" / "keepers"
    keepers.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(os.fsencode(os.path.realpath(folder))).hexdigest()[:24]
    fd = os.open(keepers / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def keep(folder: Path, state_dir: Path) -> str:
    """Serve the folder's hooks until there is no reason to; returns why it stopped."""
    from ctxd.ghost import snapshots as ghost
    from ctxd.ghost import treewatch
    from ctxd.hooks.link import Listener

    if _lock(state_dir, folder) is None:
        return "another keeper has this folder"
    kept = KeptFolder(folder, state_dir)
    settings = kept.settings.ghost
    if settings.auto == "off":
        return "ghost.auto is off"
    treewatch.enable()
    jobs = Jobs()
    listener = Listener(state_dir, lambda job: jobs.take(kept, job), prefix=PREFIX)
    listener.start()
    try:
        ghost.prime(kept.opened_root(), settings=settings, state_dir=state_dir)  # starts the folder's watch
        idle = idle_seconds()
        while True:
            time.sleep(min(TICK_SECONDS, idle))
            if jobs.idle_for() > idle:
                return f"no hook for {idle:g} s"
            if _identity(folder) != kept.identity:
                return "its folder was replaced or removed"
            if listener.path is None or not listener.path.exists():
                return "its socket or state dir was removed"
    finally:
        listener.stop()
        treewatch.release(folder)


def main(argv: list[str]) -> int:
    from ctxd.hooks.hook import describe, log

    if len(argv) != 2:
        return 2
    folder, state_dir = Path(argv[0]), Path(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a clean end: the socket goes with it
    log(f"keeper of {folder}: started")
    try:
        why = keep(folder, state_dir)
    except SystemExit:
        why = "terminated"
    except BaseException as error:  # noqa: BLE001 - hooks then take their checkpoints alone again
        why = describe(error)
    log(f"keeper of {folder}: stopped ({why})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
