"""Issue #14: snapshots you can trust with your files, against real git repositories.

No loss on restore (skipped paths, newer edits, undo, dry run), diff and delete, no side effects
(hooks, filters, fsmonitor, end-of-line conversion, the daemon's environment), secrets, staying out
of the user's history views while surviving their gc, retention, folders that are not
repositories, and a restore cut short by `kill -9`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxd.errors import GitFailed, InvalidParams
from ctxd.ghost import api as ghost
from ctxd.settings import GhostSettings
from tests.ghost_repo import IDENTITY, Repo, isolated_git_env, make_repo

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in isolated_git_env(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path / "repo")


def store_dir(repo: Repo) -> Path:
    return Path(repo.git("rev-parse", "--path-format=absolute", "--git-common-dir").strip()) / "ctxd" / "store"


def raw_files(root: Path) -> dict[str, bytes]:
    """Every file and link under `root` but .git, byte for byte (links as their target, modes kept)."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = b"-> " + os.fsencode(os.readlink(path))
            else:
                found[rel] = (b"x:" if os.access(path, os.X_OK) else b"") + path.read_bytes()
    return found


# --- no data loss on restore --------------------------------------------------------------------


def test_paths_the_snapshot_skipped_are_never_deleted_or_changed(repo: Repo) -> None:
    settings = GhostSettings(max_untracked_file_bytes=2 * 1024 * 1024, max_untracked_dir_files=200)
    for i in range(201):
        repo.write(f"models/m{i:03d}.bin", f"weights {i}\n")
    (repo.root / "big.bin").write_bytes(b"b" * (2 * 1024 * 1024 + 1))
    repo.write("src/app.py", "before the agent\n")
    snap = ghost.snapshot(repo.root, settings=settings)
    assert {s["path"] for s in snap["skipped"]} == {"models/", "big.bin"}

    for i in range(11):  # the agent deletes a few: the folder is now under the limit
        (repo.root / f"models/m{i:03d}.bin").unlink()
    (repo.root / "big.bin").write_bytes(b"small now")  # and the big file shrank under it
    repo.write("src/app.py", "agent\n")
    result = ghost.restore(repo.root, snap["id"], settings=settings)
    assert result["restored"] == ["src/app.py"] and result["removed"] == []
    assert len(list((repo.root / "models").iterdir())) == 190
    assert (repo.root / "big.bin").read_bytes() == b"small now"
    assert (repo.root / "src/app.py").read_text() == "before the agent\n"


def test_ignored_files_that_existed_at_snapshot_time_survive_a_gitignore_change(repo: Repo) -> None:
    repo.write("debug.log", "ignored when the snapshot was taken\n")
    snap = ghost.snapshot(repo.root)
    repo.write(".gitignore", "secret/\n")  # no longer ignored: the current state now holds it
    result = ghost.restore(repo.root, snap["id"])
    assert "debug.log" not in result["removed"]
    assert (repo.root / "debug.log").read_text() == "ignored when the snapshot was taken\n"


def test_undo_puts_the_tree_back_exactly(repo: Repo) -> None:
    repo.write("notes.txt", "mine\n")
    snap = ghost.snapshot(repo.root)
    # Newer edits by the user: a change, a new untracked file, a deletion, a file now ignored.
    repo.write("src/app.py", "the user's newer edit\n")
    repo.write("new/idea.md", "not in any snapshot yet\n")
    (repo.root / "src/util.py").unlink()
    repo.write(".gitignore", "*.log\nsecret/\nnotes.txt\n")
    repo.write("notes.txt", "edited after it became ignored\n")
    before, files = repo.state(), raw_files(repo.root)

    result = ghost.restore(repo.root, snap["id"])
    assert sorted(result["removed"]) == ["new/idea.md"]
    assert (repo.root / "notes.txt").read_text() == "mine\n"
    assert [g["id"] for g in ghost.list_snapshots(repo.root)][0] == result["undoId"]

    undo = ghost.restore(repo.root, result["undoId"])
    assert raw_files(repo.root) == files
    assert repo.state() == before
    assert ghost.restore(repo.root, undo["undoId"])["id"] == undo["undoId"]  # and redo
    assert (repo.root / "notes.txt").read_text() == "mine\n" and not (repo.root / "new").exists()


def test_dry_run_changes_nothing_and_tells_what_a_restore_does(repo: Repo) -> None:
    snap = ghost.snapshot(repo.root)
    repo.write("src/app.py", "agent\n")
    repo.write("agent.txt", "new\n")
    (repo.root / "README.md").unlink()
    before, files, listed = repo.state(), raw_files(repo.root), ghost.list_snapshots(repo.root)
    dry = ghost.restore(repo.root, snap["id"], dry_run=True)
    assert raw_files(repo.root) == files and repo.state() == before
    assert ghost.list_snapshots(repo.root) == listed  # not even a safety snapshot
    assert dry == {"id": snap["id"], "restored": ["README.md", "src/app.py"], "removed": ["agent.txt"],
                   "dryRun": True}
    real = ghost.restore(repo.root, snap["id"])
    assert (real["restored"], real["removed"]) == (dry["restored"], dry["removed"])


def test_diff_lists_changes_and_gives_one_file_text(repo: Repo) -> None:
    (repo.root / "blob.bin").write_bytes(b"\0\1\2binary")
    snap = ghost.snapshot(repo.root)
    repo.write("src/app.py", "print('agent')\n")
    repo.write("added.txt", "new\n")
    (repo.root / "src/util.py").unlink()
    (repo.root / "blob.bin").write_bytes(b"\0\3changed")
    files = ghost.diff(repo.root, snap["id"])["files"]
    assert files == [
        {"path": "added.txt", "status": "added", "binary": False},
        {"path": "blob.bin", "status": "modified", "binary": True},
        {"path": "src/app.py", "status": "modified", "binary": False},
        {"path": "src/util.py", "status": "deleted", "binary": False},
    ]
    one = ghost.diff(repo.root, snap["id"], "src/app.py")
    assert one["files"] == [{"path": "src/app.py", "status": "modified", "binary": False,
                             "before": "print('app')\n", "after": "print('agent')\n"}]
    assert "before" not in ghost.diff(repo.root, snap["id"], "blob.bin")["files"][0]
    assert ghost.diff(repo.root, snap["id"], "src/util.py")["files"][0]["before"] == "def util():\n    return 1\n"
    with pytest.raises(InvalidParams):
        ghost.diff(repo.root, snap["id"], "../outside")


def test_delete_forgets_a_snapshot_and_gc_frees_it(repo: Repo) -> None:
    repo.write("only-here.txt", "unique content 8f3a\n")
    snap = ghost.snapshot(repo.root)
    blob = repo.store("rev-parse", f"{snap['id']}:only-here.txt").strip()
    (repo.root / "only-here.txt").unlink()
    assert ghost.delete(repo.root, snap["id"]) == {"deleted": True}
    assert ghost.list_snapshots(repo.root) == []
    with pytest.raises(InvalidParams, match="unknown snapshot"):
        ghost.restore(repo.root, snap["id"])
    with pytest.raises(InvalidParams):
        ghost.delete(repo.root, snap["id"])
    assert repo.store("cat-file", "-e", snap["id"], check=False) == ""
    missing = subprocess.run(["git", f"--git-dir={store_dir(repo)}", "cat-file", "-e", blob], capture_output=True)
    assert missing.returncode != 0  # its objects are gone from the store


# --- no side effects ---------------------------------------------------------------------------------


def _marker_hooks(directory: Path, marker: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("reference-transaction", "post-index-change", "pre-commit", "post-checkout", "pre-auto-gc"):
        hook = directory / name
        hook.write_text(f"#!/bin/sh\necho {name} >> '{marker}'\nenv >> '{marker}'\n")
        hook.chmod(0o755)


@pytest.mark.parametrize("where", ["git-dir", "hooks-path", "global"])
def test_no_hook_ever_runs(repo: Repo, tmp_path: Path, where: str) -> None:
    marker = tmp_path / "hook-ran"
    if where == "git-dir":
        _marker_hooks(repo.git_dir / "hooks", marker)
    elif where == "hooks-path":
        _marker_hooks(tmp_path / "hooks", marker)
        repo.git("config", "core.hooksPath", str(tmp_path / "hooks"))
    else:
        _marker_hooks(tmp_path / "global-hooks", marker)
        Path(os.environ["GIT_CONFIG_GLOBAL"]).write_text(f"[core]\n\thooksPath = {tmp_path / 'global-hooks'}\n")
    repo.git("update-ref", "refs/heads/probe", "HEAD")  # the hooks work for git itself
    assert marker.exists()
    repo.git("update-ref", "-d", "refs/heads/probe")
    marker.unlink()
    repo.write("src/app.py", "edited\n")
    repo.write("new.txt", "untracked\n")
    snap = ghost.snapshot(repo.root)
    repo.write("src/app.py", "agent\n")
    ghost.diff(repo.root, snap["id"])
    result = ghost.restore(repo.root, snap["id"])
    ghost.restore(repo.root, result["undoId"])
    ghost.delete(repo.root, snap["id"])
    assert not marker.exists()


def test_bytes_are_kept_exactly_no_filter_no_fsmonitor_no_eol_conversion(repo: Repo, tmp_path: Path) -> None:
    marker = tmp_path / "command-ran"
    repo.write(".gitattributes", "*.txt text eol=crlf\n*.dat filter=shout\n* text=auto\n")
    repo.commit_all("attributes")
    repo.git("config", "core.autocrlf", "true")
    repo.git("config", "filter.shout.clean", f"sh -c 'echo clean >> {marker}; tr a-z A-Z'")
    repo.git("config", "filter.shout.smudge", f"sh -c 'echo smudge >> {marker}; tr A-Z a-z'")
    repo.git("config", "filter.shout.required", "true")
    fsmonitor = tmp_path / "fsmonitor.sh"
    fsmonitor.write_text(f"#!/bin/sh\necho fsmonitor >> '{marker}'\n")
    fsmonitor.chmod(0o755)
    repo.git("config", "core.fsmonitor", str(fsmonitor))
    contents = {
        "lf.txt": b"one\ntwo\n",
        "crlf.txt": b"one\r\ntwo\r\n",
        "mixed.py": b"a\r\nb\nc\r",
        "data.dat": b"lower case data\n",
        "ident.c": b"$Id$\n",
        "latin1.txt": "caf\xe9\n".encode("latin-1"),
    }
    for name, data in contents.items():
        (repo.root / name).write_bytes(data)
    snap = ghost.snapshot(repo.root)
    for name, data in contents.items():
        stored = subprocess.run(["git", f"--git-dir={store_dir(repo)}", "cat-file", "blob", f"{snap['id']}:{name}"],
                                capture_output=True, check=True).stdout
        assert stored == data, name
    expected = raw_files(repo.root)
    for name in contents:
        (repo.root / name).write_bytes(b"agent\n")
    (repo.root / "README.md").unlink()
    ghost.restore(repo.root, snap["id"])
    assert raw_files(repo.root) == expected  # every file, byte for byte
    assert not marker.exists()


def test_git_children_get_only_what_git_needs(repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = make_repo(tmp_path / "other")
    other_before = other.state()
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    log = tmp_path / "git-env.log"
    real_git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True).stdout.strip()
    shim = shim_dir / "git"
    shim.write_text(f"#!/bin/sh\nenv -0 >> '{log}'\nprintf '\\n---\\n' >> '{log}'\nexec '{real_git}' \"$@\"\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim_dir}{os.pathsep}{os.environ['PATH']}")
    poison = {
        "OPENAI_API_KEY": "sk-test-not-for-git", "GIT_DIR": str(other.git_dir), "GIT_WORK_TREE": str(other.root),
        "GIT_COMMON_DIR": str(other.git_dir), "GIT_OBJECT_DIRECTORY": str(other.git_dir / "objects"),
        "GIT_INDEX_FILE": str(other.git_dir / "index"), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(tmp_path),
        "GIT_CONFIG_PARAMETERS": "'core.hooksPath'='/nowhere'", "GIT_NAMESPACE": "elsewhere",
    }
    local_vars = set(subprocess.run([real_git, "rev-parse", "--local-env-vars"], capture_output=True, text=True,
                                    check=True).stdout.split())
    for key, value in poison.items():
        monkeypatch.setenv(key, value)
    repo.write("src/app.py", "edited\n")
    snap = ghost.snapshot(repo.root)
    repo.write("src/app.py", "agent\n")
    ghost.restore(repo.root, snap["id"])
    for key in poison:
        monkeypatch.delenv(key)
    assert (repo.root / "src/app.py").read_text() == "edited\n"
    assert other.state() == other_before
    entries = [e for e in log.read_bytes().split(b"\n---\n") if e.strip()]
    assert len(entries) >= 5
    for entry in entries:
        env = dict(item.decode().split("=", 1) for item in entry.split(b"\0") if b"=" in item)
        assert "OPENAI_API_KEY" not in env and "GIT_NAMESPACE" not in env
        for key in local_vars & set(env):
            assert env[key] != poison.get(key), key  # only what ctxd sets itself, never inherited
    assert repo.store("fsck", "--no-progress", check=False) is not None


# --- secrets ----------------------------------------------------------------------------------------


def test_secrets_are_never_captured_nor_touched(repo: Repo) -> None:
    repo.write("config/.env", "TRACKED_SECRET=1\n")
    repo.commit_all("a tracked .env")
    secrets = {".env": "KEY=1\n", ".env.local": "KEY=2\n", "env/bin/activate": "venv\n",
               "sub/.env/credentials": "KEY=3\n", "keys/id.pem": "PRIVATE\n", ".ctxd.toml": "[llm]\nkey='sk'\n",
               "config/.env": "TRACKED_SECRET=changed\n"}
    for path, text in secrets.items():
        repo.write(path, text)
    settings = GhostSettings(exclude=["*.pem"])
    snap = ghost.snapshot(repo.root, settings=settings)
    tree = repo.store("ls-tree", "-r", "--name-only", "--full-tree", snap["id"]).splitlines()
    assert not set(secrets) & set(tree), set(secrets) & set(tree)
    skipped = {s["path"] for s in snap["skipped"]}
    assert {".env", ".env.local", "env/", "sub/.env/", ".ctxd.toml", "config/.env"} <= skipped
    for path in secrets:
        (repo.root / path).write_text("changed after the snapshot\n")
    repo.write("src/app.py", "agent\n")
    ghost.restore(repo.root, snap["id"], settings=settings)
    for path in secrets:
        assert (repo.root / path).read_text() == "changed after the snapshot\n", path


# --- out of history views, yet surviving gc ---------------------------------------------------------


def test_snapshots_stay_out_of_history_views_and_survive_gc_and_rewrites(repo: Repo) -> None:
    repo.write("src/app.py", "work in progress\n")
    repo.write("draft.md", "untracked draft\n")
    repo.git("add", "src/app.py")
    snap = ghost.snapshot(repo.root)
    assert snap["id"] not in repo.git("log", "--all", "--format=%H %P")
    assert "ctxd" not in repo.git("for-each-ref") and "ctxd" not in repo.git("log", "--all", "--oneline")
    expected = raw_files(repo.root)

    # The user rewrites history: every commit the snapshot borrowed objects from goes away.
    repo.git("checkout", "-q", "--orphan", "rewritten")
    repo.git("rm", "-rq", "--cached", ".")
    for path in ("README.md", "src/app.py", "src/util.py", "draft.md"):
        (repo.root / path).unlink()
    repo.write("fresh.txt", "a new start\n")
    repo.git("add", "fresh.txt")
    repo.git("commit", "-qm", "fresh")
    repo.git("branch", "-D", "main")
    repo.git("reflog", "expire", "--expire=now", "--all")
    repo.git("gc", "-q", "--prune=now")
    assert repo.git("cat-file", "-e", "HEAD:fresh.txt", check=False) == ""
    assert "error" not in repo.git("fsck", "--no-progress", "--strict").lower()
    assert repo.store("fsck", "--no-progress", "--strict") == ""  # complete on its own

    ghost.restore(repo.root, snap["id"])
    assert raw_files(repo.root) == expected


# --- retention -------------------------------------------------------------------------------------


def test_keep_and_max_age_prune_old_snapshots(repo: Repo) -> None:
    settings = GhostSettings(keep=3, max_age_days=30)
    ids = []
    for i in range(5):
        repo.write("a.txt", f"{i}\n")
        ids.append(ghost.snapshot(repo.root, f"s{i}", settings=settings)["id"])
        refs = store_dir(repo) / "refs" / "ctxd"
        for ref in refs.rglob(ids[-1]):  # each one second older than the next, as in real use
            os.utime(ref, (time.time() - 10 + i, time.time() - 10 + i))
    assert [g["id"] for g in ghost.list_snapshots(repo.root)] == ids[:1:-1]
    old = next((store_dir(repo) / "refs" / "ctxd").rglob(ids[2]))
    os.utime(old, (time.time() - 31 * 86400,) * 2)
    repo.write("a.txt", "last\n")
    newest = ghost.snapshot(repo.root, settings=settings)["id"]
    assert [g["id"] for g in ghost.list_snapshots(repo.root)] == [newest, ids[4], ids[3]]


def _legacy_snapshot(repo: Repo, message: str, scope: str = "", created: str = "") -> str:
    """A snapshot as ctxd's first version took it: a commit of the user's repository whose parent is
    HEAD, its tree the working tree, its metadata in the message, kept by `refs/ctxd/ghost/<id>`."""
    index = repo.git_dir / "legacy.index"
    env = {**os.environ, **IDENTITY, "GIT_INDEX_FILE": str(index)}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo.root, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("read-tree", "HEAD")
    git("add", "-A")
    tree = git("write-tree")
    index.unlink()
    created = created or datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    meta = {"v": 1, "message": message, "createdAt": created, "scope": scope,
            "worktree": "", "fileCount": 4, "skipped": [], "durationMs": 7}
    commit = git("commit-tree", "--no-gpg-sign", tree, "-p", "HEAD", "-m",
                 f"{message}\n\nctxd-ghost: {json.dumps(meta)}\n")
    git("update-ref", "-m", "ctxd ghost snapshot", f"refs/ctxd/ghost/{commit}", commit)
    return commit


def test_snapshots_of_the_first_version_move_out_of_the_users_refs(repo: Repo) -> None:
    """The first version kept snapshots as refs of the user's repository (`git log --all` showed
    them). The first list moves them into the store: listed, restorable, under the same ids, and
    gone from the user's refs; no other ref changes and no hook runs."""
    repo.write("src/app.py", "print('legacy state')\n")
    created = (datetime.now(UTC) - timedelta(days=1)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    legacy = _legacy_snapshot(repo, "from the first version", created=created)
    repo.git("pack-refs", "--all")  # one packed (after the user's gc), one loose
    scoped = _legacy_snapshot(repo, "of the src folder", scope="src/")
    repo.write("src/app.py", "print('app')\n")
    repo.git("tag", "v1")
    repo.git("update-ref", "refs/ctxd/ghost/not-a-snapshot", "HEAD")  # no ctxd metadata: not ours to move
    assert legacy in repo.git("log", "--all", "--format=%H")
    other_refs = [line for line in repo.git("for-each-ref").splitlines()
                  if "refs/ctxd/ghost/" not in line or "not-a-snapshot" in line]
    assert len(other_refs) == 3
    hook = repo.git_dir / "hooks" / "reference-transaction"
    marker = repo.root.parent / "hook-ran"
    hook.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    hook.chmod(0o755)

    listed = ghost.list_snapshots(repo.root)
    assert [(g["id"], g["message"], g["createdAt"]) for g in listed] == [
        (legacy, "from the first version", created)]
    assert listed[0]["parent"] == repo.git("rev-parse", "HEAD").strip()
    assert repo.git("for-each-ref").splitlines() == other_refs
    assert legacy not in repo.git("log", "--all", "--format=%H") and not marker.exists()
    assert [g["id"] for g in ghost.list_snapshots(repo.root / "src")] == [scoped]

    # Restorable, also once the user's repository forgets them and the store runs its own gc.
    hook.unlink()  # the user's own gc would run it
    repo.git("reflog", "expire", "--expire=now", "--all")
    repo.git("gc", "-q", "--prune=now")
    assert repo.git("cat-file", "-t", legacy, check=False) == ""
    (repo.root / "src/app.py").write_text("agent\n")
    undo = ghost.restore(repo.root, legacy)["undoId"]
    assert (repo.root / "src/app.py").read_text() == "print('legacy state')\n"
    ghost.delete(repo.root, undo)  # runs the store's gc
    (repo.root / "src/app.py").write_text("agent again\n")
    ghost.restore(repo.root, legacy)
    assert (repo.root / "src/app.py").read_text() == "print('legacy state')\n"
    assert legacy in [g["id"] for g in ghost.list_snapshots(repo.root)]
    repo.git("fsck", "--no-progress", "--strict")  # fails on a dangling ref or a missing object


def test_moving_first_version_snapshots_survives_a_crash_midway(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut short after the store has them but before the user's refs are deleted (a crash, or the
    ref moved meanwhile): both places hold them, and the next call finishes the move."""
    legacy = _legacy_snapshot(repo, "first version")
    real_user = ghost.Site.user

    def crash_on_delete(site: ghost.Site, *args: str, **kwargs: object) -> tuple[int, bytes]:
        if args and args[0] == "update-ref":
            raise GitFailed("git update-ref failed: cut short")
        return real_user(site, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ghost.Site, "user", crash_on_delete)
    assert [g["id"] for g in ghost.list_snapshots(repo.root)] == [legacy]
    assert f"refs/ctxd/ghost/{legacy}" in repo.git("for-each-ref")
    monkeypatch.setattr(ghost.Site, "user", real_user)
    snap = ghost.snapshot(repo.root)
    assert "refs/ctxd/ghost/" not in repo.git("for-each-ref")
    assert [g["id"] for g in ghost.list_snapshots(repo.root)] == [snap["id"], legacy]


def test_first_version_snapshots_are_looked_for_once_when_the_store_opens(repo: Repo,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Moving the first version's snapshots belongs to opening a store (issue #37): once it is done,
    later verbs of the process do not look again (before, every snapshot's recovery checked)."""
    from ctxd.ghost import legacy

    legacy_id = _legacy_snapshot(repo, "first version")
    looked: list[str] = []
    real_marker = legacy._marker
    monkeypatch.setattr(legacy, "_marker", lambda site: looked.append(site.key) or real_marker(site))
    first = ghost.snapshot(repo.root)
    assert [g["id"] for g in ghost.list_snapshots(repo.root)] == [first["id"], legacy_id]
    after_first = len(looked)
    for n in range(5):
        repo.write("a.txt", f"step {n}\n")
        ghost.snapshot(repo.root)
    ghost.diff(repo.root, first["id"])
    assert after_first >= 1 and len(looked) == after_first


# --- folders that are not git repositories -----------------------------------------------------------


def test_a_plain_folder_gets_snapshots_in_the_state_dir(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    for i in range(600):  # a large tree: far over the untracked-folder limit of a repository
        (folder / f"lib/m{i // 100}").mkdir(parents=True, exist_ok=True)
        (folder / f"lib/m{i // 100}/f{i}.py").write_text(f"{i}\n")
    (folder / "node_modules/dep").mkdir(parents=True)
    (folder / "node_modules/dep/index.js").write_text("dep\n")
    (folder / ".env").write_text("KEY=1\n")
    nested = make_repo(folder / "nested")
    expected = raw_files(folder)
    snap = ghost.snapshot(folder)
    assert snap["fileCount"] == 600 and snap["parent"] is None
    assert {s["path"] for s in snap["skipped"]} == {"node_modules/", ".env", "nested/"}
    assert not (folder / ".git").exists()
    assert list((tmp_path / "state" / "ctxd" / "ghost").iterdir())

    for i in range(550):  # the agent deletes most of the tree, and edits the rest
        (folder / f"lib/m{i // 100}/f{i}.py").unlink()
    (folder / "lib/m5/f599.py").write_text("agent\n")
    (folder / "agent.txt").write_text("new\n")
    (folder / "node_modules/dep/index.js").write_text("changed dependency\n")
    result = ghost.restore(folder, snap["id"])
    assert len(result["restored"]) == 551 and result["removed"] == ["agent.txt"]
    expected["node_modules/dep/index.js"] = b"changed dependency\n"
    assert raw_files(folder) == expected
    assert (nested.root / ".git").is_dir() and nested.git("status", "--porcelain") == ""
    assert [g["id"] for g in ghost.list_snapshots(folder)] == [result["undoId"], snap["id"]]


@pytest.mark.parametrize("where", ["core.excludesFile", "XDG_CONFIG_HOME"])
def test_a_plain_folder_respects_the_users_global_excludes(tmp_path: Path, where: str) -> None:
    """What the user's git ignores everywhere (core.excludesFile, else $XDG_CONFIG_HOME/git/ignore)
    is left out of a plain folder's snapshots too, as it is in a repository's."""
    home = tmp_path / "home"
    if where == "core.excludesFile":
        (home / "my-ignores").write_text("*.tmp\nscratch/\n")
        subprocess.run(["git", "config", "--file", str(home / "gitconfig"), "core.excludesFile", "~/my-ignores"],
                       check=True)
    else:
        (home / ".config/git").mkdir(parents=True)
        (home / ".config/git/ignore").write_text("*.tmp\nscratch/\n")
    folder = tmp_path / "plain"
    (folder / "scratch").mkdir(parents=True)
    (folder / "scratch/notes.txt").write_text("scratch\n")
    (folder / "build.tmp").write_text("temporary\n")
    (folder / "kept.txt").write_text("kept\n")
    snap = ghost.snapshot(folder)
    assert snap["fileCount"] == 1
    (folder / "kept.txt").write_text("agent\n")
    result = ghost.restore(folder, snap["id"])
    assert result["restored"] == ["kept.txt"] and result["removed"] == []
    assert (folder / "build.tmp").read_text() == "temporary\n" and (folder / "scratch/notes.txt").exists()


def test_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(GitFailed) as caught:
        ghost.snapshot(tmp_path / "missing")
    assert caught.value.code == GitFailed.code


def test_restore_writes_only_changed_paths_never_through_a_link(repo: Repo, tmp_path: Path) -> None:
    """A restore rewrites just the changed paths (`checkout-index` of those alone): folders it
    empties go, a file and a folder swap places, and a folder the agent replaced by a link to
    somewhere else is put back without writing or deleting anything where the link pointed."""
    repo.write("docs/guide.md", "guide\n")
    repo.write("tool", "a file\n")
    snap = ghost.snapshot(repo.root)
    untouched = repo.root / "README.md"
    inode = untouched.stat().st_ino, untouched.stat().st_mtime_ns
    before = raw_files(repo.root)

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "app.py").write_text("not the repository's\n")
    for name in ("app.py", "util.py"):
        (repo.root / "src" / name).unlink()
    (repo.root / "src").rmdir()
    (repo.root / "src").symlink_to(outside)  # the folder is now a link out of the repository
    (repo.root / "tool").unlink()
    repo.write("tool/inner.txt", "a folder now\n")  # a file became a folder
    repo.write("deep/new/dirs/x.txt", "created\n")  # folders that only the restore's deletions empty
    (repo.root / "docs/guide.md").unlink()
    (repo.root / "docs").rmdir()
    repo.write("docs", "a file where a folder was\n")
    after_agent = raw_files(repo.root)

    result = ghost.restore(repo.root, snap["id"])
    assert raw_files(repo.root) == before
    assert not (repo.root / "deep").exists()  # emptied folders are removed, as `read-tree -u` does
    assert (outside / "app.py").read_text() == "not the repository's\n" and len(list(outside.iterdir())) == 1
    assert (untouched.stat().st_ino, untouched.stat().st_mtime_ns) == inode  # unchanged files are not rewritten
    assert sorted(result["restored"]) == ["docs/guide.md", "src/app.py", "src/util.py", "tool"]
    assert sorted(result["removed"]) == ["deep/new/dirs/x.txt", "docs", "src", "tool/inner.txt"]

    ghost.restore(repo.root, result["undoId"])
    assert raw_files(repo.root) == after_agent
    assert (repo.root / "src").is_symlink() and (outside / "app.py").read_text() == "not the repository's\n"


# --- kill -9 during a restore -------------------------------------------------------------------------

_RESTORER = """
import sys
from pathlib import Path
from ctxd.ghost import api as ghost
ghost.restore(Path(sys.argv[1]), sys.argv[2])
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_kill_during_a_restore_leaves_no_git_running_and_is_reported(repo: Repo) -> None:
    for i in range(3000):
        repo.write(f"gen/d{i // 100}/f{i}.txt", f"{i}\n" * 200)
    repo.commit_all("many files")
    snap = ghost.snapshot(repo.root)
    for i in range(3000):
        repo.write(f"gen/d{i // 100}/f{i}.txt", "agent\n")
    before_restore = raw_files(repo.root)
    site = ghost.open_site(repo.root, Path())
    assert site is not None
    journal = store_dir(repo) / f"journal-{site.key}.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _RESTORER, str(repo.root), snap["id"]], env=env)
    children: list[int] = []
    deadline = time.monotonic() + 60
    while not journal.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the restore never started writing"
        time.sleep(0.001)
    children = _children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.3)
    assert not [c for c in children if _alive(c)], "a git child outlived the daemon"
    settled = raw_files(repo.root)
    time.sleep(0.5)
    assert raw_files(repo.root) == settled  # nothing is still writing

    report = ghost.interrupted_restore(repo.root)
    assert report is not None and report["id"] == snap["id"] and report["undoId"]
    assert not list((store_dir(repo) / "ctxd-tmp").iterdir())  # leftovers cleaned
    assert not journal.exists()
    ghost.restore(repo.root, report["undoId"])
    assert raw_files(repo.root) == before_restore
    assert ghost.interrupted_restore(repo.root) is None


def test_the_store_is_private_to_ctxd(repo: Repo) -> None:
    ghost.snapshot(repo.root)
    store = store_dir(repo)
    assert (store / "info" / "attributes").read_text().startswith("* -text")
    assert not (store / "objects" / "info" / "alternates").exists()  # borrowing is never written down
    mode = stat.S_IMODE(store.stat().st_mode)
    assert mode & 0o700 == 0o700


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
def test_names_that_are_not_utf8_are_kept_exactly(repo: Repo) -> None:
    """The domain hands names over as `os.fsdecode` reads them; the wire escapes them (handlers)."""
    raw = b"caf\xe9.txt"
    name = os.fsdecode(raw)
    (repo.root / name).write_bytes(b"latin-1 name\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / name).write_bytes(b"agent\n")
    assert {"path": name, "status": "modified", "binary": False} in ghost.diff(repo.root, snap["id"])["files"]
    result = ghost.restore(repo.root, snap["id"])
    assert result["restored"] == [name] and os.fsencode(result["restored"][0]) == raw
    assert (repo.root / name).read_bytes() == b"latin-1 name\n"


# --- hand-made repositories, failures part-way, races -------------------------------------------


def test_a_work_tree_that_is_not_the_folder_is_refused(repo: Repo, tmp_path: Path) -> None:
    """`core.worktree` naming another repository, or a `.git` file naming another folder's `.git`:
    a snapshot would read that folder and a restore write it."""
    victim = make_repo(tmp_path / "victim")
    victim_files, victim_state = victim.files(), victim.state()
    repo.git("config", "core.worktree", str(victim.root))
    with pytest.raises(GitFailed, match="does not hold this folder"):
        ghost.snapshot(repo.root)
    repo.git("config", "--unset", "core.worktree")
    pointing = tmp_path / "pointing"
    pointing.mkdir()
    (pointing / ".git").write_text(f"gitdir: {victim.root / '.git'}\n")
    (pointing / "mine.txt").write_text("mine\n")
    with pytest.raises(GitFailed, match="repository of another folder"):
        ghost.snapshot(pointing)
    assert victim.files() == victim_files and victim.state() == victim_state
    assert not (victim.root / ".git" / "ctxd").exists()


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """git, started meanwhile, can write no file past `limit` bytes, as on a disk that fills up:
    its write fails with EFBIG (SIGXFSZ is ignored here, and git inherits that)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_restore_that_cannot_write_a_file_changes_nothing(repo: Repo) -> None:
    """Every new file is written under a temporary name first: one that cannot be (here a file
    size limit, EFBIG) stops the restore before any file the user sees changes."""
    (repo.root / "big.bin").write_bytes(b"\0" * (2 * 1024 * 1024))
    repo.commit_all("big")
    snap = ghost.snapshot(repo.root)
    repo.write("README.md", "agent\n")  # staged before big.bin, which then fails
    (repo.root / "big.bin").write_bytes(b"small now\n")
    repo.write("zz_new.txt", "the agent's, which the restore deletes\n")
    before, state = raw_files(repo.root), repo.state()
    with file_size_limit(1024 * 1024), pytest.raises(GitFailed, match="before changing any file .*File too large"
                                                     ".* writing big.bin.*the working tree is as it was"):
        ghost.restore(repo.root, snap["id"])
    assert raw_files(repo.root) == before and repo.state() == state  # no temporary left either
    assert ghost.interrupted_restore(repo.root) is None
    ghost.restore(repo.root, snap["id"])  # with room, it goes through
    assert (repo.root / "big.bin").stat().st_size == 2 * 1024 * 1024


def test_a_restore_that_cannot_write_a_file_deletes_nothing_first(repo: Repo) -> None:
    """The file the agent added (which the restore deletes) is still there when the snapshot's
    file cannot be written: deletions happen only once every new file is staged."""
    (repo.root / "big.bin").write_bytes(b"\0" * (2 * 1024 * 1024))
    repo.commit_all("big")
    snap = ghost.snapshot(repo.root)
    (repo.root / "big.bin").unlink()
    (repo.root / "mine.bin").write_bytes(b"\1" * (2 * 1024 * 1024))
    before = raw_files(repo.root)
    with file_size_limit(1024 * 1024), pytest.raises(GitFailed, match="the working tree is as it was"):
        ghost.restore(repo.root, snap["id"])
    assert raw_files(repo.root) == before and ghost.interrupted_restore(repo.root) is None
    result = ghost.restore(repo.root, snap["id"])
    assert result["removed"] == ["mine.bin"] and not (repo.root / "mine.bin").exists()
    ghost.restore(repo.root, result["undoId"])
    assert raw_files(repo.root) == before


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_local_edits_hidden_from_git_are_snapshotted_as_they_are(repo: Repo, flag: str) -> None:
    """Marking a tracked file keeps local edits out of `git add`; a snapshot must still hold them,
    or a restore overwrites them with nothing to undo to."""
    repo.git("update-index", flag, "src/app.py")
    repo.write("src/app.py", "my local settings\n")
    repo.write("src/util.py", "staged\n")
    repo.git("add", "src/util.py")  # the user's index changed since any snapshot
    snap = ghost.snapshot(repo.root)
    assert repo.store("show", f"{snap['id']}:src/app.py") == "my local settings\n"
    repo.write("src/app.py", "the agent's\n")
    ghost.restore(repo.root, snap["id"])
    assert (repo.root / "src/app.py").read_text() == "my local settings\n"


def test_deletions_never_follow_a_folder_swapped_for_a_link(repo: Repo, tmp_path: Path) -> None:
    """Another process flips a folder between itself and a link to a folder outside, with files of
    the same names, from the moment a restore starts writing (its journal appears) until it ends."""
    outside = tmp_path / "outside"
    outside.mkdir()
    names = [f"f{i}" for i in range(3000)]
    for name in names:
        (outside / name).write_text("not the workspace's\n")
    repo.write("d/keep", "tracked\n")
    repo.commit_all("d")
    snap = ghost.snapshot(repo.root)
    for name in names:
        repo.write(f"d/{name}", "agent\n")
    folder, aside, stop = repo.root / "d", repo.root / "d.real", tmp_path / "stop"
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(store_dir(repo)), str(folder), str(aside),
                                str(outside), str(stop)])
    try:
        with contextlib.suppress(GitFailed):
            ghost.restore(repo.root, snap["id"])
    finally:
        stop.touch()
        flipper.wait(timeout=30)
    assert sorted(p.name for p in outside.iterdir()) == sorted(names)


FLIPPER = """
import os, sys, time
from pathlib import Path
store, folder, aside, outside, stop = map(Path, sys.argv[1:])
while not any(store.glob("journal-*.json")) and not stop.exists():
    time.sleep(0.0002)
while not stop.exists():
    try:
        os.rename(folder, aside)
        os.symlink(outside, folder)
        os.unlink(folder)
        os.rename(aside, folder)
    except OSError:
        pass
"""


def test_a_restore_never_deletes_a_nested_repository_where_the_snapshot_has_a_file(repo: Repo,
                                                                                     tmp_path: Path) -> None:
    """A snapshot taken when `vendor/lib` was a file; it is a nested repository now, held by the
    outer one as a gitlink. The change is one of type ("M"), and only new paths were looked
    into: the restore put the file in the folder's place and deleted the folder, its `.git`,
    commits, edits and untracked files with it, which no snapshot holds. It is refused."""
    state = tmp_path / "st"
    repo.write("vendor/lib", "it was a file\n")
    repo.commit_all("vendor/lib is a file")
    snap = ghost.snapshot(repo.root, "file era", state_dir=state)
    repo.git("rm", "-q", "vendor/lib")
    inner = make_repo(repo.root / "vendor" / "lib")
    inner.write("work.py", "uncommitted edit\n")
    repo.git("add", "vendor/lib")
    repo.git("commit", "-q", "-m", "vendor/lib is a repository now")
    assert "160000" in repo.git("ls-files", "-s", "vendor/lib")
    for dry_run in (True, False):
        with pytest.raises(GitFailed, match="would delete files that are not in any snapshot: vendor/lib/"):
            ghost.restore(repo.root, snap["id"], state_dir=state, dry_run=dry_run)
    assert (repo.root / "vendor/lib/work.py").read_text() == "uncommitted edit\n"
    assert (repo.root / "vendor/lib/.git").is_dir()


def test_an_ignored_link_to_a_folder_a_restore_replaces_is_in_its_undo(repo: Repo, tmp_path: Path) -> None:
    """The snapshot has a file `data`; it is now an ignored link to a folder. The files a restore
    replaces that the capture left out are added to its undo snapshot, but a link to a folder was
    taken for a folder (`isdir` follows it): restore, then undo, lost the link."""
    state = tmp_path / "st"
    repo.write("data", "old data file\n")
    snap = ghost.snapshot(repo.root, "with data file", state_dir=state)
    (repo.root / "data").unlink()
    outside = tmp_path / "bigdata"
    outside.mkdir()
    os.symlink(outside, repo.root / "data")
    (repo.root / ".git" / "info").mkdir(exist_ok=True)
    (repo.root / ".git" / "info" / "exclude").write_text("data\n")
    undo = ghost.restore(repo.root, snap["id"], state_dir=state)["undoId"]
    assert (repo.root / "data").read_text() == "old data file\n"
    ghost.restore(repo.root, undo, state_dir=state)
    assert (repo.root / "data").is_symlink() and os.readlink(repo.root / "data") == str(outside)


def test_a_restore_keeps_who_may_read_a_file_it_rewrites(repo: Repo, tmp_path: Path) -> None:
    """A 0600 file a restore rewrote came back 0644 (git's mode less the umask), and its undo
    left it so: a key file readable by every local user. The file's own permissions stay; the
    snapshot says only whether it is executable."""
    state = tmp_path / "st"
    old = os.umask(0o022)
    try:
        key = repo.write("config/credentials.json", '{"token": "v1"}\n')
        key.chmod(0o600)
        snap = ghost.snapshot(repo.root, "v1", state_dir=state)
        key.write_text('{"token": "v2"}\n')
        undo = ghost.restore(repo.root, snap["id"], state_dir=state)["undoId"]
        assert key.read_text() == '{"token": "v1"}\n' and stat.S_IMODE(key.stat().st_mode) == 0o600
        ghost.restore(repo.root, undo, state_dir=state)
        assert key.read_text() == '{"token": "v2"}\n' and stat.S_IMODE(key.stat().st_mode) == 0o600
        tool = repo.write("run.sh", "echo v1\n")
        tool.chmod(0o700)
        snap = ghost.snapshot(repo.root, "executable", state_dir=state)
        tool.write_text("echo v2\n")
        tool.chmod(0o600)
        ghost.restore(repo.root, snap["id"], state_dir=state)
        assert stat.S_IMODE(tool.stat().st_mode) == 0o700  # executable again, and still the user's alone
    finally:
        os.umask(old)


def test_a_fifo_as_the_repositorys_alternates_is_refused_at_once(repo: Repo, tmp_path: Path) -> None:
    """`objects/info/alternates` is read by the first git ctxd runs (`HEAD^{commit}`) and by every
    store command that borrows the repository's objects: as a FIFO, each waited for ever."""
    state = tmp_path / "st"
    ghost.snapshot(repo.root, "first", state_dir=state)
    info = repo.root / ".git" / "objects" / "info"
    info.mkdir(exist_ok=True)
    os.mkfifo(info / "alternates")
    repo.write("src/app.py", "changed\n")
    with pytest.raises(GitFailed, match="alternates: not a regular file"):  # (before any git: none waited on it)
        ghost.snapshot(repo.root, "second", state_dir=state)


def test_a_file_saved_while_a_restore_runs_is_not_overwritten(repo: Repo, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Another program saves a file after the restore captured the current state (its undo) and
    before it puts the snapshot's file there: the save was renamed over, and no snapshot held it.
    The restore now fails and puts back everything, the save included."""
    from ctxd.ghost import treewrite

    state = tmp_path / "st"
    snap = ghost.snapshot(repo.root, "v1", state_dir=state)
    repo.write("src/app.py", "version 2\n")
    staging = treewrite.stage

    def stage(*args: object, **kwargs: object) -> None:
        (repo.root / "src" / "app.py").write_text("saved by the editor meanwhile\n")
        staging(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(treewrite, "stage", stage)
    with pytest.raises(GitFailed, match="changed by another program while the restore ran"):
        ghost.restore(repo.root, snap["id"], state_dir=state)
    assert (repo.root / "src" / "app.py").read_text() == "saved by the editor meanwhile\n"
    monkeypatch.setattr(treewrite, "stage", staging)
    ghost.restore(repo.root, snap["id"], state_dir=state)  # (retried: the save is in its undo)
    assert (repo.root / "src" / "app.py").read_text() != "saved by the editor meanwhile\n"


def test_a_file_saved_between_the_restores_check_and_its_second_name_is_not_overwritten(
        repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An editor saves a file (a new file renamed over it) after the restore checked it unchanged
    and before it gave it a second name to put back: the second name was the save's, the snapshot's
    file was renamed over the save, and the save was deleted with the second name at the end. The
    restore now fails and leaves the save where it was; retried, it restores (the save in its undo)."""
    from ctxd.ghost import treewrite

    state = tmp_path / "st"
    snap = ghost.snapshot(repo.root, "v1", state_dir=state)
    repo.write("src/app.py", "version 2\n")
    linking = treewrite._link

    def saved_first(home: int, name: str, aside: str) -> bool:
        if name == "app.py":
            (repo.root / "src" / "app.py.tmp").write_text("saved by the editor meanwhile\n")
            os.replace(repo.root / "src" / "app.py.tmp", repo.root / "src" / "app.py")
        return linking(home, name, aside)

    names = sorted(p.name for p in (repo.root / "src").iterdir())
    monkeypatch.setattr(treewrite, "_link", saved_first)
    with pytest.raises(GitFailed, match="changed by another program while the restore ran"):
        ghost.restore(repo.root, snap["id"], state_dir=state)
    assert (repo.root / "src" / "app.py").read_text() == "saved by the editor meanwhile\n"
    assert sorted(p.name for p in (repo.root / "src").iterdir()) == names  # (no second name left)
    monkeypatch.setattr(treewrite, "_link", linking)
    result = ghost.restore(repo.root, snap["id"], state_dir=state)
    assert (repo.root / "src" / "app.py").read_text() != "saved by the editor meanwhile\n"
    ghost.restore(repo.root, result["undoId"], state_dir=state)
    assert (repo.root / "src" / "app.py").read_text() == "saved by the editor meanwhile\n"


# --- restores raced by another program, and their undo (found by an attack run) -------------------


@pytest.mark.parametrize("edit", ["changed", "added", "added deeper"])
def test_a_file_saved_inside_a_folder_the_restore_replaces_is_not_lost(repo: Repo, edit: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot has a file where a folder is now. Another program saves a file in that folder
    after the restore captured its undo: the folder was moved aside and deleted with the save in it,
    which no snapshot holds. The restore must fail and leave the folder, save included."""
    from ctxd.ghost import treewrite

    repo.write("out", "a file at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "out").unlink()
    repo.write("out/a.txt", "created since\n")
    repo.write("out/sub/old.txt", "created since\n")
    staging = treewrite.stage
    name = {"changed": "a.txt", "added": "b.txt", "added deeper": "sub/c.txt"}[edit]

    def stage(*args: object, **kwargs: object) -> None:
        (repo.root / "out" / name).write_text("saved by the editor meanwhile\n")
        staging(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(treewrite, "stage", stage)
    with pytest.raises(GitFailed, match="changed by another program while the restore ran"):
        ghost.restore(repo.root, snap["id"])
    assert (repo.root / "out" / name).read_text() == "saved by the editor meanwhile\n"


def test_undo_of_a_restore_brings_back_each_files_mode(repo: Repo) -> None:
    """A restore deletes files the snapshot lacks and rewrites those it has otherwise; its undo
    must bring each back with the mode it had. Git records only 644 or 755: a private 0600 file
    the restore deleted came back 0644 (readable by everyone), a read-only 0400 file 0600."""
    repo.write("kept.txt", "at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    modes = {"private.txt": 0o600, "readonly.txt": 0o400, "owner-only.sh": 0o700, "group.txt": 0o640,
             "kept.txt": 0o400, "sub/private.txt": 0o600}
    for name, mode in modes.items():
        repo.write(name, f"{name} now\n")
        os.chmod(repo.root / name, mode)
    before = {name: (stat.S_IMODE(os.lstat(repo.root / name).st_mode), (repo.root / name).read_text())
              for name in modes}
    result = ghost.restore(repo.root, snap["id"])
    assert not (repo.root / "private.txt").exists()
    ghost.restore(repo.root, result["undoId"])
    after = {name: (stat.S_IMODE(os.lstat(repo.root / name).st_mode), (repo.root / name).read_text())
             for name in modes}
    assert {k: oct(v[0]) for k, v in after.items()} == {k: oct(v[0]) for k, v in before.items()}
    assert after == before


def test_a_restore_cut_short_before_it_wrote_keeps_the_users_empty_folders(repo: Repo,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore is cut short (a kill) after its journal is written and before it puts anything in
    `logs/`, an empty folder of the user's where the snapshot has a file. The next verb's clean-up
    removed `logs/` (and `data/` above `data/empty/`) as if the restore had emptied them: no snapshot
    holds an empty folder, so the undo could not bring them back."""
    from ctxd.ghost import treewrite

    repo.write("logs/a.txt", "at snapshot time\n")
    repo.write("data/empty/b.txt", "at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "logs" / "a.txt").unlink()
    (repo.root / "data" / "empty" / "b.txt").unlink()

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # (as a kill: nothing after the journal runs)

    staging = treewrite.stage
    monkeypatch.setattr(treewrite, "stage", killed)
    with pytest.raises(KeyboardInterrupt):
        ghost.restore(repo.root, snap["id"])
    monkeypatch.setattr(treewrite, "stage", staging)
    interrupted = ghost.interrupted_restore(repo.root)
    assert interrupted is not None and interrupted["id"] == snap["id"]
    assert (repo.root / "logs").is_dir() and (repo.root / "data" / "empty").is_dir()
    ghost.restore(repo.root, interrupted["undoId"])
    assert (repo.root / "logs").is_dir() and (repo.root / "data" / "empty").is_dir()


# --- modes and empty folders an undo gives back exactly (found by an attack run) ------------------


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _perm(path: Path) -> str:
    return oct(stat.S_IMODE(os.lstat(path).st_mode))


@pytest.mark.parametrize(("restore_mask", "undo_mask"), [(0o002, 0o002), (0o022, 0o002), (0o002, 0o022)])
def test_undo_gives_back_git_default_modes_whatever_the_umask(repo: Repo, restore_mask: int, undo_mask: int) -> None:
    """Modes were recorded only when they were not 644 or 755, and the undo made the others with
    the umask: under umask 002 a 0644 file the restore deleted came back 0664 (and a 0664 one
    0644 under umask 022). The undo gives back each file's exact mode."""
    snap = ghost.snapshot(repo.root)
    modes = {"plain.txt": 0o644, "tool.sh": 0o755, "shared.txt": 0o664, "shared.sh": 0o775,
             "src/app.py": 0o644, "README.md": 0o664}
    for name, mode in modes.items():
        repo.write(name, f"{name} now\n")
        os.chmod(repo.root / name, mode)
    before = {name: (_perm(repo.root / name), (repo.root / name).read_text()) for name in modes}
    with _umask(restore_mask):
        result = ghost.restore(repo.root, snap["id"])
    assert not (repo.root / "plain.txt").exists()
    with _umask(undo_mask):
        ghost.restore(repo.root, result["undoId"])
    assert {name: (_perm(repo.root / name), (repo.root / name).read_text()) for name in modes} == before


def test_undo_gives_back_an_empty_folder_a_file_replaced(repo: Repo) -> None:
    """The snapshot has a file where an empty folder (git keeps none) is now: the restore replaced
    the folder, and its undo deleted the file without giving the folder back."""
    repo.write("out", "a file at snapshot time\n")
    repo.write("logs", "a file at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "out").unlink()
    (repo.root / "out").mkdir(mode=0o700)
    (repo.root / "logs").unlink()
    (repo.root / "logs" / "a" / "b").mkdir(parents=True)  # only empty folders inside
    (repo.root / "logs" / "c").mkdir()
    os.chmod(repo.root / "logs", 0o750)
    os.chmod(repo.root / "logs" / "a", 0o711)
    os.chmod(repo.root / "logs" / "a" / "b", 0o500)
    before = {p: _perm(repo.root / p) for p in ("out", "logs", "logs/a", "logs/a/b", "logs/c")}
    result = ghost.restore(repo.root, snap["id"])
    assert (repo.root / "out").read_text() == "a file at snapshot time\n"
    assert (repo.root / "logs").read_text() == "a file at snapshot time\n"
    ghost.restore(repo.root, result["undoId"])
    assert {p: (repo.root / p).is_dir() and _perm(repo.root / p) for p in before} == before
    assert not list((repo.root / "out").iterdir()) and not list((repo.root / "logs" / "a" / "b").iterdir())
    assert not [p for p in repo.root.rglob(".ctxd-*")]


def test_undo_gives_back_the_mode_of_a_folder_the_restore_emptied_and_removed(repo: Repo) -> None:
    """The restore deleted every file of a private folder, then the folder: its undo made it again
    with the umask's mode (0755), readable by everyone."""
    snap = ghost.snapshot(repo.root)
    repo.write("private/deep/key.txt", "secret\n")
    os.chmod(repo.root / "private" / "deep", 0o700)
    os.chmod(repo.root / "private", 0o710)
    result = ghost.restore(repo.root, snap["id"])
    assert not (repo.root / "private").exists()
    ghost.restore(repo.root, result["undoId"])
    assert (_perm(repo.root / "private"), _perm(repo.root / "private" / "deep")) == ("0o710", "0o700")
    assert (repo.root / "private" / "deep" / "key.txt").read_text() == "secret\n"


def test_undo_keeps_an_empty_folder_the_restore_wrote_a_file_into(repo: Repo) -> None:
    """The snapshot has `logs/a.txt` where an empty folder `logs/` of the user's is now: the restore
    wrote the file into it, and its undo deleted the file and then the folder it left empty."""
    repo.write("logs/a.txt", "at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "logs" / "a.txt").unlink()
    os.chmod(repo.root / "logs", 0o700)
    result = ghost.restore(repo.root, snap["id"])
    assert (repo.root / "logs" / "a.txt").read_text() == "at snapshot time\n"
    ghost.restore(repo.root, result["undoId"])
    assert (repo.root / "logs").is_dir() and not list((repo.root / "logs").iterdir())
    assert _perm(repo.root / "logs") == "0o700"


def test_undo_of_a_restore_that_deletes_thousands_of_files_keeps_every_mode(repo: Repo) -> None:
    """The undo snapshot's message holds the mode of every file the restore deletes: passed to git
    as an argument, one of more than 128 KiB (a few thousand files) failed (E2BIG), and the restore
    could not start."""
    snap = ghost.snapshot(repo.root)
    names = [f"generated/part_{i // 100:02d}/module_{i:05d}_{'with_a_long_name_' * 4}.py" for i in range(1600)]
    for name in names:
        repo.write(name, "x\n")
    repo.commit_all("generated")  # (tracked: no limit on how many files an untracked folder holds)
    os.chmod(repo.root / names[0], 0o600)
    result = ghost.restore(repo.root, snap["id"])
    assert not (repo.root / "generated").exists()
    ghost.restore(repo.root, result["undoId"])
    assert _perm(repo.root / names[0]) == "0o600" and _perm(repo.root / names[-1]) == _perm(repo.root / names[1])
    assert all((repo.root / name).read_text() == "x\n" for name in names)


# --- a file another program makes where the restore puts one (the RENAME_NOREPLACE gap) -----------


@contextlib.contextmanager
def _made_meanwhile(makes: dict[str, tuple[str, Callable[[], None]]]) -> Iterator[list[str]]:
    """Another program makes files at the worst moments of the restore's placing: for each name,
    right after the restore's last look found nothing there (`"lstat"`), or right after it moved
    what was there aside (`"rename"`), and before it renames something in. Only `os` is hooked:
    the restore itself runs as it is. Yields the names made so far."""
    from ctxd.ghost import treewrite

    placing, made, lstat, rename, placed = [False], [], os.lstat, os.rename, treewrite.place

    def meanwhile(name: object, moment: str) -> None:
        if placing[0] and isinstance(name, str) and name not in made and makes.get(name, ("", None))[0] == moment:
            made.append(name)
            makes[name][1]()

    def place(*args: object, **kwargs: object) -> None:
        placing[0] = True
        try:
            placed(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            placing[0] = False

    def hooked_lstat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        try:
            return lstat(path, *args, **kwargs)  # type: ignore[arg-type]
        except FileNotFoundError:
            if "dir_fd" in kwargs:
                meanwhile(path, "lstat")
            raise

    def hooked_rename(src: object, dst: object, *args: object, **kwargs: object) -> None:
        rename(src, dst, *args, **kwargs)  # type: ignore[arg-type]
        meanwhile(src, "rename")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(treewrite, "place", place)
        patch.setattr(os, "lstat", hooked_lstat)
        patch.setattr(os, "rename", hooked_rename)
        yield made


def test_a_file_made_where_the_restore_puts_a_new_one_is_not_replaced(repo: Repo) -> None:
    """The snapshot has `docs/guide.md`, which is gone now. Another program makes it after the
    restore looked (nothing there) and before the restore renamed its own in: the rename replaced
    it, and no snapshot held it. The restore must fail, put back what it did, and keep that file."""
    repo.write("docs/guide.md", "at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "docs" / "guide.md").unlink()
    repo.write("src/app.py", "edited since\n")
    guide = repo.root / "docs" / "guide.md"
    files = raw_files(repo.root)

    with _made_meanwhile({"guide.md": ("lstat", lambda: guide.write_text("written by another program\n"))}) as made:
        with pytest.raises(GitFailed, match="another program while the restore ran.*the working tree is as it was"):
            ghost.restore(repo.root, snap["id"])
    assert made == ["guide.md"]
    assert raw_files(repo.root) == {**files, "docs/guide.md": b"written by another program\n"}
    assert not [p for p in repo.root.rglob(".ctxd-*")]

    result = ghost.restore(repo.root, snap["id"])  # (retried: the file is in its undo)
    assert guide.read_text() == "at snapshot time\n"
    ghost.restore(repo.root, result["undoId"])
    assert guide.read_text() == "written by another program\n"


def test_a_file_made_where_the_restore_moved_a_folder_aside_is_not_replaced(repo: Repo) -> None:
    """The snapshot has a file `out` where a folder is now. The restore moves the folder aside, and
    another program makes a file `out` before the restore renames the snapshot's in: that file was
    replaced unseen. The restore must fail and keep it; what it could not put back (the folder:
    its name is taken) is in the undo snapshot it names."""
    repo.write("out", "a file at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "out").unlink()
    repo.write("out/a.txt", "made since\n")
    out = repo.root / "out"

    with _made_meanwhile({"out": ("rename", lambda: out.write_text("written by another program\n"))}) as made:
        with pytest.raises(GitFailed, match="another program while the restore ran") as failed:
            ghost.restore(repo.root, snap["id"])
    assert made == ["out"]
    assert out.read_text() == "written by another program\n"
    assert not [p for p in repo.root.rglob(".ctxd-*")]
    assert isinstance(failed.value.data, dict) and failed.value.data["removed"] == ["out/a.txt"]
    back = ghost.restore(repo.root, failed.value.data["undoId"])
    assert (out / "a.txt").read_text() == "made since\n"
    ghost.restore(repo.root, back["undoId"])
    assert out.read_text() == "written by another program\n"


def test_a_file_made_where_a_failed_restore_puts_back_a_deleted_one_is_not_replaced(repo: Repo) -> None:
    """The restore moves aside `extra.txt` (the snapshot lacks it), another program makes a new
    `extra.txt`, and the restore then fails (on `docs/guide.md`): renaming the old one back replaced
    the new one unseen. It must keep the new one; the old one is in the undo snapshot it names."""
    repo.write("docs/guide.md", "at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "docs" / "guide.md").unlink()
    repo.write("extra.txt", "made since the snapshot\n")
    extra, guide = repo.root / "extra.txt", repo.root / "docs" / "guide.md"

    with _made_meanwhile({"extra.txt": ("rename", lambda: extra.write_text("written by another program\n")),
                          "guide.md": ("lstat", lambda: guide.write_text("written by another program\n"))}) as made:
        with pytest.raises(GitFailed, match="another program while the restore ran.*could not be put back") as failed:
            ghost.restore(repo.root, snap["id"])
    assert made == ["extra.txt", "guide.md"]
    assert extra.read_text() == guide.read_text() == "written by another program\n"
    assert not [p for p in repo.root.rglob(".ctxd-*")]
    assert isinstance(failed.value.data, dict) and failed.value.data["removed"] == ["extra.txt"]
    ghost.restore(repo.root, failed.value.data["undoId"])
    assert extra.read_text() == "made since the snapshot\n" and not guide.exists()


def test_a_file_system_without_rename_noreplace_still_restores(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the file system refuses RENAME_NOREPLACE (EINVAL: some network and FUSE ones) or the
    kernel has no renameat2 (ENOSYS), a restore renames as before instead of failing."""
    import ctypes

    from ctxd.ghost import treewrite

    repo.write("docs/guide.md", "at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "docs" / "guide.md").unlink()
    for code in (errno.EINVAL, errno.ENOSYS):
        def refused(*args: object, code: int = code) -> int:
            ctypes.set_errno(code)
            return -1

        monkeypatch.setattr(treewrite, "_renameat2", refused)
        result = ghost.restore(repo.root, snap["id"])
        assert (repo.root / "docs" / "guide.md").read_text() == "at snapshot time\n"
        ghost.restore(repo.root, result["undoId"])
        assert not (repo.root / "docs" / "guide.md").exists()


def test_a_dry_run_lists_the_empty_folders_an_undo_makes_again(repo: Repo) -> None:
    """A restore replaced empty folders (`logs/`, `out/` holding only `keep/`) with the snapshot's
    files; its undo makes them again, but the undo's dry run did not say so (nor did the undo)."""
    repo.write("logs", "a file at snapshot time\n")
    repo.write("out", "a file at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "logs").unlink()
    (repo.root / "out").unlink()
    (repo.root / "logs").mkdir()
    (repo.root / "out" / "keep").mkdir(parents=True)
    result = ghost.restore(repo.root, snap["id"])
    assert (repo.root / "logs").is_file() and (repo.root / "out").is_file()

    files = raw_files(repo.root)
    dry = ghost.restore(repo.root, result["undoId"], dry_run=True)
    assert raw_files(repo.root) == files
    assert (dry["restored"], dry["removed"]) == (["logs/", "out/keep/"], ["logs", "out"])
    real = ghost.restore(repo.root, result["undoId"])
    assert (real["restored"], real["removed"]) == (dry["restored"], dry["removed"])
    assert (repo.root / "logs").is_dir() and (repo.root / "out" / "keep").is_dir()
