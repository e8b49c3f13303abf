"""The daemon's short capture (ctxd/ghost/treewatch.py): only the paths its file watch saw change
are re-checked, and a checkpoint still never misses a change.

Each snapshot is compared with the working tree as it is on disk when the snapshot returns (the
test changes nothing meanwhile): every file, its bytes, its executable bit, symbolic links. The
daemon's log says how each capture read the tree, so the tests also check that the short path
was taken where it should be (on the code before it, every capture read the whole tree).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ghost_repo import Repo, isolated_git_env, make_repo
from tests.rpc import Client, start_daemon

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/sys/fs/inotify"), reason="inotify is Linux's; "
                                "elsewhere every capture reads the whole tree (the other ghost tests)")

SHORT = "capture re-checks"
FULL = "capture reads the whole tree"


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = isolated_git_env(tmp_path / "home")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        yield env


def daemon(tmp_path: Path, env: dict[str, str], name: str = "daemon") -> tuple[Client, Path]:
    """A daemon with the tests' state dir (several share it, as two editors' daemons do)."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    log = tmp_path / f"{name}.log"
    client = start_daemon(state, env=env, log_file=log)
    return client, log


def on_disk(repo: Repo) -> dict[str, str]:
    """What a snapshot must hold: every file but the ignored ones (`*.log`, `secret/`) and those
    of nested repositories (a submodule is its commit)."""
    def nested(path: str) -> bool:
        parts = path.split("/")
        return any((repo.root.joinpath(*parts[:n]) / ".git").exists() for n in range(1, len(parts)))

    found = {path: text for path, text in repo.files().items()
             if not path.endswith(".log") and not path.startswith("secret/") and not nested(path)}
    for line in repo.git("submodule", "status", "--recursive").splitlines():
        sha, path = line[1:].split()[:2]
        found[path] = sha
    return found


def in_snapshot(repo: Repo, commit: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in repo.store("ls-tree", "-r", "-z", "--full-tree", commit).split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, _kind, sha = meta.split()
        body = repo.store("cat-file", "-p", sha) if mode != "160000" else sha
        found[path] = {"120000": "-> " + body, "100755": "x " + body}.get(mode, body)
    return found


def snapshot(client: Client, repo: Repo, message: str) -> str:
    return str(client.request("ctxd/ghost/snapshot", {"workspace": repo.root.as_uri(), "message": message})["id"])


def log_count(log: Path, text: str) -> int:
    return log.read_text("utf-8", "replace").count(text) if log.exists() else 0


def warmed(client: Client, repo: Repo, log: Path) -> None:
    """Open the folder and snapshot until a capture is short: the first one starts the watch,
    the second is the first whose dirty set is complete, the third is short."""
    client.initialize([repo.root])
    for n in range(10):  # the daemon starts using watches once it has warmed up, after `initialize`
        probe = repo.write("src/probe.txt", f"probe {n}\n")
        assert in_snapshot(repo, snapshot(client, repo, f"probe {n}")) == on_disk(repo)
        if log_count(log, SHORT):
            break
    probe.unlink()
    assert log_count(log, SHORT) >= 1, "the short capture was never taken"


def edit(repo: Repo, rng: random.Random, step: int) -> str:
    """One change of the kind an agent or a user makes, chosen at random; what it was."""
    files = sorted(p for p in on_disk(repo) if not p.startswith(".ctxd"))
    kind = rng.choice(["modify", "modify", "append", "create", "delete", "chmod", "link", "rename", "same-size"])
    target = rng.choice(files) if files else "src/app.py"
    path = repo.root / target
    if kind in ("modify", "append", "same-size", "chmod", "delete", "rename") and path.is_symlink():
        kind = "create"
    if kind == "modify":
        path.write_text(f"modified at step {step}\n")
    elif kind == "append":
        with path.open("a") as handle:
            handle.write(f"line {step}\n")
    elif kind == "same-size":  # the same size, within the same clock tick most likely: only content differs
        data = bytearray(path.read_bytes() or b"x")
        data[0] = ord("A") + step % 26 if data[0] != ord("A") + step % 26 else ord("z")
        path.write_bytes(bytes(data))
    elif kind == "create":
        target = f"src/new{step % 3}/file{step}.txt"
        repo.write(target, f"new at {step}\n")
    elif kind == "delete":
        path.unlink()
    elif kind == "chmod":
        path.chmod(path.stat().st_mode ^ 0o111)
    elif kind == "link":
        target = f"src/link{step}"
        os.symlink(f"target-{step}", repo.root / target)
    elif kind == "rename":
        new = path.with_name(f"renamed{step}-{path.name}")
        path.rename(new)
        target = f"{target} -> {new.relative_to(repo.root)}"
    return f"{kind} {target}"


def test_a_change_just_before_a_checkpoint_is_never_missed(tmp_path: Path, env: dict[str, str]) -> None:
    """Write, then checkpoint at once, many rounds: each snapshot is the tree on disk, and the
    captures were short ones (a handful of paths re-checked, not the whole tree)."""
    repo = make_repo(tmp_path / "repo")
    for n in range(30):
        repo.write(f"src/pkg{n % 5}/mod{n}.py", f"module {n}\n")
    repo.commit_all("more files")
    client, log = daemon(tmp_path, env)
    try:
        warmed(client, repo, log)
        short_before = log_count(log, SHORT)
        rng = random.Random(25)
        for step in range(60):
            done = [edit(repo, rng, step * 10 + i) for i in range(rng.choice([1, 1, 2, 3]))]
            snap = snapshot(client, repo, f"step {step}")
            assert in_snapshot(repo, snap) == on_disk(repo), f"step {step} after {done}"
        assert log_count(log, SHORT) - short_before >= 55, "most captures should have been short"
    finally:
        client.shutdown(timeout=10)


def test_folders_renamed_made_deleted_and_moved_in(tmp_path: Path, env: dict[str, str]) -> None:
    """Whole folders change at once: every file under them is re-checked, and a folder made (or
    moved in) is watched before the capture, so a later write inside it is seen too."""
    repo = make_repo(tmp_path / "repo")
    for n in range(12):
        repo.write(f"lib/deep/er/f{n}.txt", f"file {n}\n")
    repo.commit_all("lib")
    outside = tmp_path / "outside"
    client, log = daemon(tmp_path, env)
    try:
        warmed(client, repo, log)
        steps = [
            lambda: (repo.root / "lib").rename(repo.root / "lib2"),
            lambda: (repo.root / "lib2" / "deep" / "er" / "f3.txt").write_text("changed after the move\n"),
            lambda: repo.write("fresh/a/b/c.txt", "made with its folders\n"),
            lambda: (repo.root / "fresh" / "a" / "b" / "c.txt").write_text("changed in the new folder\n"),
            lambda: shutil.rmtree(repo.root / "lib2" / "deep"),
            lambda: (outside / "x").mkdir(parents=True) or (outside / "x" / "y.txt").write_text("from outside\n"),
            lambda: (outside / "x").rename(repo.root / "moved-in"),
            lambda: (repo.root / "moved-in" / "y.txt").write_text("changed after moving in\n"),
            lambda: (repo.root / "moved-in").rename(outside / "moved-out"),
            lambda: (repo.root / "src").rename(repo.root / "src-renamed"),
            lambda: (repo.root / "src-renamed" / "app.py").write_text("same folder, new name\n"),
        ]
        for n, step in enumerate(steps):
            step()
            assert in_snapshot(repo, snapshot(client, repo, f"step {n}")) == on_disk(repo), f"step {n}"
    finally:
        client.shutdown(timeout=10)


def _wait_until_stopped(pid: int) -> None:
    """Until every thread of `pid` is stopped (state T): SIGSTOP takes effect asynchronously."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = [(Path(f"/proc/{pid}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()[0])
                  for task in os.listdir(f"/proc/{pid}/task")]
        if all(state == "T" for state in states):
            return
        time.sleep(0.001)
    raise AssertionError(f"process {pid} did not stop")


def test_queue_overflow_means_a_full_pass_and_new_folders_are_watched(tmp_path: Path, env: dict[str, str]) -> None:
    """The daemon is stopped while more events than the kernel queues are made (IN_Q_OVERFLOW),
    a folder among them: the next capture reads the whole tree, and a later change inside the
    folder made during the overflow is still seen by a short capture."""
    repo = make_repo(tmp_path / "repo")
    client, log = daemon(tmp_path, env)
    try:
        warmed(client, repo, log)
        limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
        a, b = repo.root / "src" / "app.py", repo.root / "src" / "util.py"
        os.kill(client.daemon_pid, signal.SIGSTOP)
        try:
            _wait_until_stopped(client.daemon_pid)  # else its reader may still drain events meanwhile
            with a.open("ab") as first, b.open("ab") as second:
                for _ in range(limit // 2 + 100):  # alternating: consecutive events are not merged
                    first.write(b"a")
                    first.flush()
                    second.write(b"b")
                    second.flush()
            # The queue is full: this folder's creation is lost, only a walk finds it.
            repo.write("src/made-meanwhile/inner.txt", "made while the daemon was stopped\n")
        finally:
            os.kill(client.daemon_pid, signal.SIGCONT)
        short_before = log_count(log, SHORT)
        assert in_snapshot(repo, snapshot(client, repo, "after the overflow")) == on_disk(repo)
        assert log_count(log, SHORT) == short_before, "an overflow must never mean a short pass"
        # A change inside the folder made during the overflow is seen by a short capture (its watch
        # was added by the walk). On a loaded machine a capture may still read everything (a
        # barrier not seen in time): the change is made again until a short capture took one.
        for n in range(5):
            short_before = log_count(log, SHORT)
            (repo.root / "src" / "made-meanwhile" / "inner.txt").write_text(f"changed, same folder {n}\n")
            assert in_snapshot(repo, snapshot(client, repo, f"inside the folder {n}")) == on_disk(repo)
            if log_count(log, SHORT) > short_before:
                break
        assert log_count(log, SHORT) == short_before + 1, "no short capture inside the folder made meanwhile"
    finally:
        client.shutdown(timeout=10)


def test_changes_while_no_daemon_ran_and_a_second_daemon(tmp_path: Path, env: dict[str, str]) -> None:
    """A daemon's dirty set covers only what happened while it watched: the index another
    process kept (a daemon before a restart, a second daemon) makes the capture read everything.
    Two processes capture one tree when each serves alone (`CTXD_OWNER=0`) or they are the
    owners of two state dirs: the second and third daemons here serve alone."""
    repo = make_repo(tmp_path / "repo")
    first, first_log = daemon(tmp_path, env, "first")
    try:
        warmed(first, repo, first_log)
    finally:
        first.shutdown(timeout=10)
    repo.write("src/app.py", "changed while no daemon ran\n")
    alone = {**env, "CTXD_OWNER": "0"}
    second, second_log = daemon(tmp_path, alone, "second")
    third, third_log = daemon(tmp_path, alone, "third")
    try:
        second.initialize([repo.root])
        third.initialize([repo.root])
        settle = time.monotonic() + 10  # each daemon's capture ahead of the first checkpoint (when it got the lock)
        while time.monotonic() < settle and not (log_count(second_log, FULL) and log_count(third_log, FULL)):
            time.sleep(0.05)
        assert in_snapshot(repo, snapshot(second, repo, "after the restart")) == on_disk(repo)
        assert in_snapshot(repo, snapshot(third, repo, "the other daemon")) == on_disk(repo)
        short = log_count(second_log, SHORT), log_count(third_log, SHORT)
        full = log_count(second_log, FULL), log_count(third_log, FULL)
        for n in range(3):
            repo.write("src/util.py", f"round {n} of two daemons\n")
            assert in_snapshot(repo, snapshot(second, repo, f"second {n}")) == on_disk(repo)
            repo.write("src/app.py", f"round {n}, the other file\n")
            assert in_snapshot(repo, snapshot(third, repo, f"third {n}")) == on_disk(repo)
        assert (log_count(second_log, SHORT), log_count(third_log, SHORT)) == short, \
            "each daemon's captures kept an index the other then used: never short"
        assert (log_count(second_log, FULL), log_count(third_log, FULL)) == (full[0] + 3, full[1] + 3)
    finally:
        second.shutdown(timeout=10)
        third.shutdown(timeout=10)


def test_submodule_commit_and_hard_linked_file(tmp_path: Path, env: dict[str, str]) -> None:
    """Two changes no folder watch of the work tree sees: a commit inside a submodule (its HEAD
    lives in the superproject's `.git/modules`) and a write through a hard link kept outside."""
    sub = make_repo(tmp_path / "sub-origin")
    repo = make_repo(tmp_path / "repo")
    repo.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub.root), "vendor/sub")
    repo.commit_all("with a submodule")
    outside = tmp_path / "linked.txt"
    outside.write_text("linked, before\n")
    os.link(outside, repo.root / "linked.txt")
    client, log = daemon(tmp_path, env)
    try:
        warmed(client, repo, log)
        inner = Repo(repo.root / "vendor" / "sub")
        inner.write("README.md", "moved on in the submodule\n")
        inner.commit_all("submodule moves")
        snap = snapshot(client, repo, "after the submodule commit")
        assert in_snapshot(repo, snap)["vendor/sub"] == inner.git("rev-parse", "HEAD").strip()
        inner.git("commit", "-q", "--allow-empty", "-m", "only the submodule's .git changes")
        snap = snapshot(client, repo, "after an empty submodule commit")
        assert in_snapshot(repo, snap)["vendor/sub"] == inner.git("rev-parse", "HEAD").strip()
        with outside.open("a") as handle:  # the same file, written through its other name
            handle.write("written from outside\n")
        snap = snapshot(client, repo, "after the write through the other link")
        assert in_snapshot(repo, snap)["linked.txt"] == "linked, before\nwritten from outside\n"
        assert log_count(log, SHORT) >= 4
    finally:
        client.shutdown(timeout=10)


def test_the_first_turn_after_a_write_through_the_follower(tmp_path: Path, env: dict[str, str]) -> None:
    """The automatic checkpoint of a followed session's turn, written right after a file: the
    file's new bytes are in it (the barrier orders the write before the capture)."""
    from tests import session_fixtures as fx

    repo = make_repo(tmp_path / "repo")
    codex_home = tmp_path / "codex"
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(repo.root))
    state = tmp_path / "state"
    state.mkdir()
    client = start_daemon(state, env={**env, "CODEX_HOME": str(codex_home)}, log_file=tmp_path / "daemon.log")
    try:
        warmed(client, repo, tmp_path / "daemon.log")
        for n in range(8):
            repo.write("src/app.py", f"the agent's edit {n}\n")
            sid = f"0199a213-dddd-7800-8aa1-{n:012d}"
            path = fx.codex_path(codex_home, sid, day="2025/10/07")
            path.parent.mkdir(parents=True, exist_ok=True)
            lines = [fx.codex_meta(repo.root, sid), *fx.codex_turn(f"turn {n}", "2025-10-07T10:00:00.000Z",
                                                                   cwd=str(repo.root))]
            path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in lines))
            found = wait_for_snapshot(client, repo, f"turn {n}")
            assert in_snapshot(repo, found)["src/app.py"] == f"the agent's edit {n}\n"
    finally:
        client.shutdown(timeout=10)


def wait_for_snapshot(client: Client, repo: Repo, message: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for snap in client.request("ctxd/ghost/list", {"workspace": repo.root.as_uri()})["snapshots"]:
            if snap["message"] == message:
                return str(snap["id"])
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint {message!r} in {timeout} s")


def _inotify_watches(fd: int) -> int:
    """The watches the kernel holds for an inotify descriptor of this process."""
    return sum(line.startswith("inotify wd:") for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines())


def test_a_tree_over_the_watch_budget_gives_its_watches_back(tmp_path: Path) -> None:
    from ctxd.ghost import treewatch

    tree = tmp_path / "tree"
    for n in range(12):
        (tree / f"d{n}" / "inner").mkdir(parents=True)
    tracker = treewatch.Tracker(root=tree, prefix="", barrier_dir=tmp_path / "store" / "ctxd-watch", _max_dirs=10)
    tracker.start()
    try:
        deadline = time.monotonic() + 30
        while tracker._broken is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert tracker._broken is not None and "more than 10 folders" in tracker._broken
        assert tracker.begin().dirty is None  # captures read the whole tree
        assert _inotify_watches(tracker._fd) <= 1  # only the barrier's; the folders' are given back
    finally:
        tracker.stop()
    assert treewatch.max_dirs() <= treewatch.MAX_DIRS


def test_each_daemon_owns_its_watch(tmp_path: Path, env: dict[str, str], caplog: pytest.LogCaptureFixture,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The file watch is the daemon's own (issue #37): two daemons in one process (sessions served in
    memory) each have theirs, and the first one closing leaves the other's captures short. When the
    watch was module state, one daemon's close switched it off for every daemon of the process."""
    import logging
    import threading

    from ctxd.server.app import CtxdServer
    from ctxd.server.connection import memory

    for name in ("XDG_STATE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    caplog.set_level(logging.INFO, logger="ctxd")
    repos = {name: make_repo(tmp_path / name) for name in ("first", "second")}
    sessions = {}
    for name, repo in repos.items():
        connection, client = memory()
        server = CtxdServer(connection, tmp_path / "state")
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        sessions[name] = (server, client, thread)
        client.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "processId": None, "capabilities": {}, "workspaceFolders": [{"uri": repo.root.as_uri(), "name": name}]}})
        assert "result" in client.receive(30)
        client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        server.daemon.wait_warmed()
    ids = iter(range(2, 1000))

    def short_captures(repo: Repo) -> int:
        return sum(SHORT in r.getMessage() and str(repo.root) in r.getMessage() for r in caplog.records)

    def checkpoint(name: str, n: int) -> None:
        server, client, _ = sessions[name]
        repos[name].write("src/probe.txt", f"probe {n}\n")
        msg_id = next(ids)
        client.send({"jsonrpc": "2.0", "id": msg_id, "method": "ctxd/ghost/snapshot",
                     "params": {"workspace": repos[name].root.as_uri(), "message": f"probe {n}"}})
        while True:
            answer = client.receive(60)
            if answer.get("id") == msg_id:
                assert "result" in answer, answer
                return

    for n in range(10):  # the first capture starts the watch, the second completes its set
        checkpoint("second", n)
        if short_captures(repos["second"]):
            break
    assert short_captures(repos["second"]) >= 1, "the short capture was never taken"
    _, first, thread = sessions["first"]
    first.send({"jsonrpc": "2.0", "id": 99, "method": "shutdown"})
    first.send({"jsonrpc": "2.0", "method": "exit"})
    thread.join(30)
    assert not thread.is_alive()
    before = short_captures(repos["second"])
    checkpoint("second", 100)
    assert short_captures(repos["second"]) == before + 1, "the second daemon's watch stopped with the first daemon"
    _, second, thread = sessions["second"]
    second.close()
    thread.join(30)


def test_a_restores_undo_holds_a_write_the_watch_did_not_see(tmp_path: Path, env: dict[str, str]) -> None:
    """A write through a hard link made outside the tree after the watch began is not seen by the
    folders' watch: the checkpoints after it may miss it until the next full pass. The capture a
    restore takes first (its undo) read only what the watch saw change, so restore, then undo,
    lost the write. That capture reads the whole tree."""
    repo = make_repo(tmp_path / "repo")
    client, log = daemon(tmp_path, env)
    try:
        warmed(client, repo, log)
        before = snapshot(client, repo, "before")
        repo.write("src/app.py", "version 2\n")
        snapshot(client, repo, "v2")
        outside = tmp_path / "elsewhere.py"
        os.link(repo.root / "src" / "app.py", outside)
        snapshot(client, repo, "after link")
        with outside.open("a") as handle:
            handle.write("# written through the other name\n")
        on_disk = (repo.root / "src" / "app.py").read_text()
        ws = repo.root.as_uri()
        undo = client.request("ctxd/ghost/restore", {"workspace": ws, "id": before})["undoId"]
        client.request("ctxd/ghost/restore", {"workspace": ws, "id": undo})
        assert (repo.root / "src" / "app.py").read_text() == on_disk
    finally:
        client.shutdown(timeout=10)
