"""A storm of ghost restores that fail part-way (issue #36), for bench/stress.py, against real git
and the real file systems.

Each cycle makes a random working tree (files of random sizes up to 1 MB in random folders,
executable bits, links), snapshots it, changes it as an agent would (files shrunk, grown, deleted
and added, a file made a folder and the reverse, a link retargeted, a mode dropped), then
restores the snapshot in one of four ways, in turn:

- full: on a 16 MB tmpfs left with a random 0-3 MB free (root only: it mounts);
- filled: on a tmpfs that another process fills as soon as the restore's journal appears (root only);
- fsize: under a random RLIMIT_FSIZE of 32 KB to 1.5 MB (SIGXFSZ ignored: writes fail with EFBIG);
- killed: in another process, killed (SIGKILL) at a random moment once its journal appears; the
  next call recovers.

Half the cycles use a git repository (the snapshot store is then on the same file system), half a
plain folder. Counts: paths neither as they were nor as the snapshot has them, temporaries left in
the working tree, wrong answers (anything but 1002, a 1002 whose message does not say the working
tree is as it was or name the undo snapshot, an interrupted restore not reported). Every bad count
must be 0.

    from bench.round3_restore import restore_failed, restore_storm
    report = {"restore": restore_storm(Path(tmp), 40)}
    failed = restore_failed(report)   # names of the missed goals, [] when all are met
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ctxd.errors import GitFailed  # noqa: E402
from ctxd.ghost import api as ghost  # noqa: E402
from ctxd.ghost.gitstore import open_site  # noqa: E402
from ctxd.settings import default_state_dir  # noqa: E402
from tests.ghost_repo import make_repo  # noqa: E402

MODES = ("full", "filled", "fsize", "killed")
KIB, MIB = 1024, 1024 * 1024
SIZES = (0, 10, 300, 4 * KIB, 40 * KIB, 200 * KIB, 700 * KIB, MIB)

_RESTORER = """
import sys
from pathlib import Path
from ctxd.ghost import api as ghost
ghost.restore(Path(sys.argv[1]), sys.argv[2])
"""

_FILLER = """
import os, sys, time
store, filler, stop = sys.argv[1:]
print("ready", flush=True)
while not any(n.startswith("journal-") for n in os.listdir(store)) and not os.path.exists(stop):
    time.sleep(0.0002)
with open(filler, "wb") as handle:
    while True:
        try:
            os.posix_fallocate(handle.fileno(), os.fstat(handle.fileno()).st_size, 64 * 1024)
        except OSError:
            break
"""


def tree(root: Path) -> dict[str, bytes]:
    """Every file and link under `root` but .git, byte for byte, with its executable bit; empty
    folders too. Temporary names of a restore are left out (`temporaries` counts them)."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git" and not d.startswith(".ctxd-")]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            if name.startswith(".ctxd-"):
                continue
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = b"-> " + os.fsencode(os.readlink(path))
            else:
                found[rel] = (b"x:" if os.access(path, os.X_OK) else b"") + path.read_bytes()
        if not dirnames and not filenames and Path(dirpath) != root:
            found[Path(dirpath).relative_to(root).as_posix() + "/"] = b"(empty folder)"
    return found


def temporaries(root: Path) -> int:
    return sum(1 for _d, dirs, files in os.walk(root) for n in dirs + files if n.startswith(".ctxd-"))


def neither(now: dict[str, bytes], old: dict[str, bytes], new: dict[str, bytes]) -> list[str]:
    return sorted(p for p in set(old) | set(new) | set(now) if now.get(p) not in (old.get(p), new.get(p)))


def _content(rng: random.Random, size: int) -> bytes:
    if rng.random() < 0.3:
        return rng.randbytes(size)  # incompressible: the store holds it whole
    line = b"%06d a line of the file, like source %06d\n" % (rng.randrange(10**6), rng.randrange(10**6))
    return (line * (size // len(line) + 1))[:size]


def _write(path: Path, data: bytes, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, 0o755 if executable else 0o644)


def make_tree(rng: random.Random, root: Path) -> None:
    """A random working tree: 4-24 files in up to three levels of folders, a link or two, and a
    file `tool` and a folder `docs` for the agent to swap."""
    for n in range(rng.randint(4, 24)):
        depth = rng.randint(0, 3)
        folder = "/".join(f"d{rng.randrange(3)}" for _ in range(depth))
        _write(root / folder / f"f{n}.txt", _content(rng, rng.choice(SIZES)), rng.random() < 0.15)
    _write(root / "tool", b"a file\n")
    _write(root / "docs" / "guide.md", _content(rng, rng.choice(SIZES)))
    (root / "link").symlink_to("tool")


def agent_changes(rng: random.Random, root: Path) -> None:
    """What an agent does to the tree, at random."""
    files = sorted(p for p in root.rglob("f*.txt") if ".git" not in p.parts)
    for path in files:
        roll = rng.random()
        if roll < 0.35:
            path.write_bytes(_content(rng, rng.choice((0, 10, 100))))  # shrunk
        elif roll < 0.55:
            path.write_bytes(_content(rng, rng.choice(SIZES)))
        elif roll < 0.7:
            path.unlink()
        elif roll < 0.8:
            os.chmod(path, 0o644 if os.access(path, os.X_OK) else 0o755)
    for n in range(rng.randint(0, 4)):
        _write(root / f"d{rng.randrange(4)}" / f"new{n}.txt", _content(rng, rng.choice(SIZES)))
    if rng.random() < 0.5:
        (root / "tool").unlink()
        _write(root / "tool" / "inner.txt", b"a folder now\n")
    if rng.random() < 0.5:
        shutil.rmtree(root / "docs")
        _write(root / "docs", b"a file where a folder was\n")
    if rng.random() < 0.5:
        (root / "link").unlink()
        (root / "link").symlink_to("elsewhere")


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True, capture_output=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def _fill(where: Path, leave: int) -> None:
    fs = os.statvfs(where)
    with open(where / "filler", "wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, max(fs.f_bfree * fs.f_frsize - leave, 1))


def _store(folder: Path) -> Path:
    site = open_site(folder, default_state_dir())
    assert site is not None
    return site.store


def _answer_is_right(error: GitFailed, figures: dict[str, Any], mode: str) -> bool:
    """A failed restore's answer: 1002 saying the tree is as it was, or naming its undo snapshot."""
    text = error.message
    if ("as it was" in text or "nothing was changed" in text) and "could not be put back" not in text:
        figures["modes"][mode]["as_it_was"] += 1
        return True
    undo = error.data.get("undoId") if isinstance(error.data, dict) else None
    if undo and undo in text:
        figures["modes"][mode]["named_undo"] += 1
        return True
    return False


def _one_cycle(cycle: int, mode: str, base: Path, rng: random.Random, figures: dict[str, Any]) -> None:
    plain = cycle // len(MODES) % 2 == 1  # each mode on both kinds of folder
    folder = base / "ws"
    if plain:
        folder.mkdir()
        (folder / ".keep").write_bytes(b"")
    else:
        make_repo(folder)
    make_tree(rng, folder)
    snap = ghost.snapshot(folder)
    new = tree(folder)
    agent_changes(rng, folder)
    old = tree(folder)
    counts = figures["modes"][mode]
    counts["cycles"] += 1
    try:
        if mode == "full":
            _fill(base, leave=rng.randrange(3 * MIB))
            ghost.restore(folder, snap["id"])
        elif mode == "filled":
            stop = base.parent / f"{base.name}.stop"
            filler = subprocess.Popen([sys.executable, "-c", _FILLER, str(_store(folder)), str(base / "filler"),
                                       str(stop)], stdout=subprocess.PIPE)
            assert filler.stdout is not None and filler.stdout.readline() == b"ready\n"
            try:
                ghost.restore(folder, snap["id"])
            finally:
                stop.touch()
                filler.wait(timeout=120)
        elif mode == "fsize":
            with file_size_limit(rng.randrange(32 * KIB, 3 * MIB // 2)):
                ghost.restore(folder, snap["id"])
        else:
            _killed(folder, snap["id"], rng, figures)
            counts["restored" if tree(folder) == new else "interrupted"] += 1
            return
        counts["restored"] += 1
    except GitFailed as error:
        counts["failed_1002"] += 1
        if not _answer_is_right(error, figures, mode):
            figures["wrong_answers"] += 1
            figures["examples"].append(f"{mode}: {error.message[:200]}")
    except Exception as error:  # noqa: BLE001 - counted: only 1002 is a right answer
        figures["wrong_answers"] += 1
        figures["examples"].append(f"{mode}: {type(error).__name__}: {str(error)[:200]}")
    finally:
        with contextlib.suppress(OSError):
            (base / "filler").unlink()
        wrong = neither(tree(folder), old, new)
        figures["neither_old_nor_new"] += len(wrong)
        if wrong:
            figures["examples"].append(f"{mode}: neither old nor new: {wrong[:5]}")
        left = temporaries(folder)
        if mode == "killed":
            ghost.interrupted_restore(folder)  # what the next start does: the leftovers go
            left = temporaries(folder)
        figures["temporaries_left"] += left


def _killed(folder: Path, snap: str, rng: random.Random, figures: dict[str, Any]) -> None:
    """The restore in another process, killed at a random moment once its journal appears; then
    the interrupted restore must be reported (unless it had finished)."""
    store = _store(folder)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _RESTORER, str(folder), snap], env=env)
    deadline = time.monotonic() + 60
    while not list(store.glob("journal-*.json")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0005)
    time.sleep(rng.choice((0, 0.001, 0.003, 0.01, 0.03)))
    finished = proc.poll() is not None
    proc.kill()
    proc.wait()
    if not finished and list(store.glob("journal-*.json")) and ghost.interrupted_restore(folder) is None:
        figures["wrong_answers"] += 1
        figures["examples"].append("killed: the interrupted restore was not reported")


def restore_storm(root: Path, cycles: int, seed: int = 36) -> dict[str, Any]:
    """`cycles` restores that fail part-way, the modes in turn (see the module's docstring)."""
    root = Path(root)
    state = root / "state"
    state.mkdir(parents=True, exist_ok=True)
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(state)
    can_mount = os.geteuid() == 0
    figures: dict[str, Any] = {
        "cycles": 0, "neither_old_nor_new": 0, "temporaries_left": 0, "wrong_answers": 0,
        "modes": {m: {"cycles": 0, "restored": 0, "failed_1002": 0, "as_it_was": 0, "named_undo": 0,
                      "interrupted": 0} for m in MODES},
        "skipped": [] if can_mount else ["full and filled: mounting a tmpfs needs root"],
        "examples": [],
    }
    try:
        for cycle in range(cycles):
            mode = MODES[cycle % len(MODES)]
            if mode in ("full", "filled") and not can_mount:
                mode = "fsize" if mode == "full" else "killed"
            rng = random.Random(seed * 1000 + cycle)
            base = root / f"c{cycle}"
            if mode in ("full", "filled"):
                with tmpfs(base, "16m"):
                    _one_cycle(cycle, mode, base, rng, figures)
            else:
                base.mkdir()
                _one_cycle(cycle, mode, base, rng, figures)
            shutil.rmtree(base, ignore_errors=True)
            figures["cycles"] += 1
    finally:
        if saved is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = saved
    figures["examples"] = figures["examples"][:10]
    return figures


def restore_failed(report: dict[str, Any]) -> list[str]:
    """The goals `report["restore"]` (a `restore_storm` result) misses: every bad count is 0."""
    figures = report.get("restore")
    if not figures:
        return []
    failed = []
    if figures["neither_old_nor_new"]:
        failed.append(f"restore ({figures['neither_old_nor_new']} paths neither as they were nor as the snapshot has them)")
    if figures["temporaries_left"]:
        failed.append(f"restore ({figures['temporaries_left']} temporaries left in working trees)")
    if figures["wrong_answers"]:
        failed.append(f"restore ({figures['wrong_answers']} wrong answers)")
    return failed


if __name__ == "__main__":
    import json
    import tempfile

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    with tempfile.TemporaryDirectory(prefix="ctxd-restore-storm-") as tmp:
        result = {"restore": restore_storm(Path(tmp), count)}
    print(json.dumps(result, indent=2))
    missed = restore_failed(result)
    print("FAILED: " + ", ".join(missed) if missed else "all goals met")
    raise SystemExit(1 if missed else 0)
