"""Ghost snapshots through the daemon, over stdio, on real repositories in temporary folders.

Each case checks that the user's index bytes, HEAD, refs, config and `git status` are identical
before and after the snapshot and after the restore.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ghost_repo import Repo, isolated_git_env, make_repo
from tests.helpers import assistant, user
from tests.rpc import Client, RpcError, start_daemon

GitCase = Callable[[Path], tuple[Repo, Path]]


def _plain(base: Path) -> tuple[Repo, Path]:
    repo = make_repo(base)
    repo.write("src/app.py", "edited, not staged\n")
    repo.write("notes.txt", "untracked\n")
    return repo, repo.root


def _unborn(base: Path) -> tuple[Repo, Path]:
    repo = make_repo(base, commit=False)
    repo.write("src/app.py", "first file\n")
    repo.write("README.md", "readme\n")
    return repo, repo.root


def _detached(base: Path) -> tuple[Repo, Path]:
    repo = make_repo(base)
    repo.write("README.md", "second\n")
    repo.commit_all("second")
    repo.git("checkout", "-q", "--detach", "HEAD~1")
    return repo, repo.root


def _merging(base: Path) -> tuple[Repo, Path]:
    repo = make_repo(base)
    repo.git("checkout", "-q", "-b", "other")
    repo.write("README.md", "other\n")
    repo.commit_all("other")
    repo.git("checkout", "-q", "main")
    repo.write("README.md", "main\n")
    repo.commit_all("main")
    repo.git("merge", "other", check=False)
    return repo, repo.root


def _rebasing(base: Path) -> tuple[Repo, Path]:
    repo = make_repo(base)
    repo.git("checkout", "-q", "-b", "topic")
    repo.write("README.md", "topic\n")
    repo.commit_all("topic")
    repo.git("checkout", "-q", "main")
    repo.write("README.md", "main moved\n")
    repo.commit_all("main moved")
    repo.git("checkout", "-q", "topic")
    repo.git("rebase", "main", check=False)
    return repo, repo.root


def _awkward(base: Path) -> tuple[Repo, Path]:
    repo = make_repo(base)
    for name in ("a file with spaces.txt", "ünïcödé/日本.txt", "line\nbreak.txt"):
        repo.write(name, f"{name}\n")
    repo.commit_all("awkward")
    repo.write("ünïcödé/new one.txt", "untracked\n")
    return repo, repo.root


def _links_and_modes(base: Path) -> tuple[Repo, Path]:
    repo = make_repo(base)
    os.symlink("README.md", repo.root / "link")
    repo.write("run.sh", "#!/bin/sh\n").chmod(0o755)
    repo.commit_all("links")
    os.symlink("src", repo.root / "untracked-link")
    return repo, repo.root


def _submodule(base: Path) -> tuple[Repo, Path]:
    library = make_repo(base.parent / f"{base.name}-library")
    repo = make_repo(base)
    repo.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library.root), "vendor/lib")
    repo.commit_all("submodule")
    return repo, repo.root


def _subdirectory(base: Path) -> tuple[Repo, Path]:
    repo = make_repo(base)
    repo.write("pkg/mod.py", "mod\n")
    repo.commit_all("pkg")
    repo.write("outside.txt", "outside the workspace folder\n")
    return repo, repo.root / "pkg"


def _worktree(base: Path) -> tuple[Repo, Path]:
    main = make_repo(base)
    main.git("worktree", "add", "-q", "-b", "wt", str(base.parent / f"{base.name}-wt"))
    wt = Repo(base.parent / f"{base.name}-wt")
    wt.write("src/app.py", "worktree edit\n")
    return wt, wt.root


CASES: dict[str, GitCase] = {
    "plain": _plain, "no-commits": _unborn, "detached": _detached, "merge": _merging, "rebase": _rebasing,
    "paths": _awkward, "symlinks-and-modes": _links_and_modes, "submodule": _submodule,
    "subdirectory": _subdirectory, "worktree": _worktree,
}


@pytest.fixture(scope="module")
def git_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """No git identity anywhere: not for the daemon, not for the tests' own git calls."""
    env = isolated_git_env(tmp_path_factory.mktemp("home"))
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        yield env


@pytest.fixture(scope="module")
def daemon(git_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """One daemon for the module: each test opens its own folders in it (daemons are slow to start)."""
    state = tmp_path_factory.mktemp("state")
    client = start_daemon(state, env=git_env, log_file=state / "daemon.log")
    client.initialize([])
    yield client
    client.shutdown(timeout=5)


def open_folders(client: Client, *folders: Path, settings: str | None = None) -> None:
    """Add workspace folders to a running daemon; `settings` goes to each folder's `.ctxd.toml`."""
    for folder in folders:
        if settings is not None:
            (folder / ".ctxd.toml").write_text(settings)
            exclude = Path(Repo(folder).git_dir, "info", "exclude")
            exclude.parent.mkdir(exist_ok=True)
            with exclude.open("a") as handle:
                handle.write("/.ctxd.toml\n")
    client.notify("workspace/didChangeWorkspaceFolders", {"event": {
        "added": [{"uri": f.as_uri(), "name": f.name} for f in folders], "removed": []}})
    for folder in folders:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.request("ctxd/history", {"workspace": folder.as_uri()})
                break
            except RpcError:
                assert time.monotonic() < deadline, f"{folder} never opened"
                time.sleep(0.02)


def _request(client: Client, method: str, folder: Path, **params: Any) -> Any:
    return client.request(method, {"workspace": folder.as_uri(), **params})


def _agent_edits(folder: Path) -> None:
    """What an agent does: edit and delete what is there, add a file and a directory."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
                   and ".git" not in p.relative_to(folder).parts and "vendor" not in p.parts)
    files[0].write_text("edited by the agent\n")
    files[-1].unlink()
    (folder / "agent.txt").write_text("new\n")
    (folder / "agent_dir").mkdir()
    (folder / "agent_dir" / "x.py").write_text("x\n")


def test_every_repository_kind(daemon: Client, tmp_path: Path) -> None:
    made = {name: case(tmp_path / name) for name, case in CASES.items()}
    open_folders(daemon, *(folder for _repo, folder in made.values()))
    for name, (repo, folder) in made.items():
        before, files = repo.state(), repo.files()
        snap = _request(daemon, "ctxd/ghost/snapshot", folder, message=f"before {name}")
        assert repo.state() == before, name
        _agent_edits(folder)
        result = _request(daemon, "ctxd/ghost/restore", folder, id=snap["id"])
        assert "agent.txt" in result["removed"] and "agent_dir/x.py" in result["removed"], name
        assert repo.state() == before, name
        assert repo.files() == files, name
        listed = [g["id"] for g in _request(daemon, "ctxd/ghost/list", folder)["snapshots"]]
        assert listed == [result["undoId"], snap["id"]], name


def test_snapshot_is_a_zero_token_item_kept_out_of_the_prompt(daemon: Client, tmp_path: Path) -> None:
    repo, folder = _plain(tmp_path / "repo")
    open_folders(daemon, folder)
    _request(daemon, "ctxd/record", folder, items=[user("fix it"), assistant("on it")])
    used = _request(daemon, "ctxd/usage", folder)["usage"]["usedTokens"]
    snap = _request(daemon, "ctxd/ghost/snapshot", folder, message="turn 1")
    assert set(snap) >= {"id", "parent", "createdAt", "message", "fileCount", "skipped", "durationMs"}
    assert snap["parent"] == repo.git("rev-parse", "HEAD").strip() and snap["fileCount"] == 5
    item = _request(daemon, "ctxd/history", folder)["items"][-1]
    assert item["type"] == "ghost_snapshot"
    assert item["ghost_commit"]["id"] == snap["id"] and item["ghost_commit"]["parent"] == snap["parent"]
    assert item["ghost_commit"]["created_at"] == snap["createdAt"]
    assert _request(daemon, "ctxd/usage", folder)["usage"]["usedTokens"] == used
    prompt = _request(daemon, "ctxd/prompt", folder)
    assert all(i["type"] != "ghost_snapshot" for i in prompt["items"])

    # Compaction keeps it (offline: no model needed).
    _request(daemon, "ctxd/record", folder, items=[user("two"), assistant("b" * 4000), user("three")])
    _request(daemon, "ctxd/compact", folder, strategy="offline")
    items = _request(daemon, "ctxd/history", folder)["items"]
    assert [i["ghost_commit"]["id"] for i in items if i["type"] == "ghost_snapshot"] == [snap["id"]]


def test_restore_with_the_conversation(daemon: Client, tmp_path: Path) -> None:
    repo, folder = _plain(tmp_path / "repo")
    open_folders(daemon, folder)
    _request(daemon, "ctxd/record", folder, thread="t", items=[user("add a feature")])
    snap = _request(daemon, "ctxd/ghost/snapshot", folder, thread="t")
    _request(daemon, "ctxd/record", folder, thread="t", items=[assistant("added feature.py"), user("thanks")])
    repo.write("feature.py", "work to undo\n")
    before_history = _request(daemon, "ctxd/history", folder, thread="t")["items"]

    # Another thread never recorded this snapshot: refused, and nothing changes.
    with pytest.raises(RpcError) as caught:
        _request(daemon, "ctxd/ghost/restore", folder, thread="other", id=snap["id"], conversation=True)
    assert caught.value.code == -32602 and (repo.root / "feature.py").exists()

    result = _request(daemon, "ctxd/ghost/restore", folder, thread="t", id=snap["id"], conversation=True)
    assert result["removed"] == ["feature.py"] and result["removedItems"] == 2
    items = _request(daemon, "ctxd/history", folder, thread="t")["items"]
    assert items == before_history[:2]  # the request and the snapshot: the model forgets the rest
    # Without the conversation the thread is left as it is.
    result = _request(daemon, "ctxd/ghost/restore", folder, thread="t", id=snap["id"])
    assert "removedItems" not in result
    assert len(_request(daemon, "ctxd/history", folder, thread="t")["items"]) == 2


BAD_IDS = ["--hard", "-c", "HEAD", "main", "HEAD~1", "deadbeef", "f" * 40, "F" * 40, " " + "a" * 40,
           "a" * 41, 7, None]


def test_bad_ids_change_nothing(daemon: Client, tmp_path: Path) -> None:
    repo, folder = _plain(tmp_path / "repo")
    open_folders(daemon, folder)
    _request(daemon, "ctxd/ghost/snapshot", folder)
    repo.write("src/app.py", "agent\n")
    before, files = repo.state(), repo.files()
    history = _request(daemon, "ctxd/history", folder)
    for bad in BAD_IDS:
        for conversation in (False, True):
            params = {} if bad is None else {"id": bad}
            with pytest.raises(RpcError) as caught:
                _request(daemon, "ctxd/ghost/restore", folder, conversation=conversation, **params)
            assert caught.value.code == -32602, bad
            assert repo.state() == before and repo.files() == files, bad
    assert _request(daemon, "ctxd/history", folder) == history


def test_a_folder_that_is_not_a_repository(daemon: Client, tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.c").write_text("int main;\n")
    (folder / ".env").write_text("KEY=1\n")
    open_folders(daemon, folder)
    snap = _request(daemon, "ctxd/ghost/snapshot", folder)
    assert snap["fileCount"] == 1 and snap["parent"] is None and snap["skipped"][0]["path"] == ".env"
    (folder / "src" / "main.c").write_text("agent\n")
    (folder / "agent.txt").write_text("new\n")
    result = _request(daemon, "ctxd/ghost/restore", folder, id=snap["id"])
    assert (result["restored"], result["removed"]) == (["src/main.c"], ["agent.txt"])
    assert (folder / "src" / "main.c").read_text() == "int main;\n" and (folder / ".env").exists()
    assert not (folder / ".git").exists()
    listed = _request(daemon, "ctxd/ghost/list", folder)["snapshots"]
    assert [g["id"] for g in listed] == [result["undoId"], snap["id"]]


def test_preview_undo_diff_and_delete(daemon: Client, tmp_path: Path) -> None:
    repo, folder = _plain(tmp_path / "repo")
    open_folders(daemon, folder)
    snap = _request(daemon, "ctxd/ghost/snapshot", folder)
    repo.write("src/app.py", "the agent's version\n")
    repo.write("agent.txt", "new\n")
    files = repo.files()

    diff = _request(daemon, "ctxd/ghost/diff", folder, id=snap["id"])
    assert diff == {"id": snap["id"], "files": [
        {"path": "agent.txt", "status": "added", "binary": False},
        {"path": "src/app.py", "status": "modified", "binary": False}]}
    one = _request(daemon, "ctxd/ghost/diff", folder, id=snap["id"], path="src/app.py")["files"][0]
    assert (one["before"], one["after"]) == ("edited, not staged\n", "the agent's version\n")

    dry = _request(daemon, "ctxd/ghost/restore", folder, id=snap["id"], dryRun=True)
    assert dry == {"id": snap["id"], "restored": ["src/app.py"], "removed": ["agent.txt"], "dryRun": True}
    assert repo.files() == files

    done = _request(daemon, "ctxd/ghost/restore", folder, id=snap["id"])
    assert (done["restored"], done["removed"]) == (dry["restored"], dry["removed"])
    _request(daemon, "ctxd/ghost/restore", folder, id=done["undoId"])
    assert repo.files() == files  # undone exactly

    assert _request(daemon, "ctxd/ghost/delete", folder, id=snap["id"]) == {"deleted": True}
    assert snap["id"] not in [g["id"] for g in _request(daemon, "ctxd/ghost/list", folder)["snapshots"]]
    for method in ("ctxd/ghost/delete", "ctxd/ghost/diff", "ctxd/ghost/restore"):
        with pytest.raises(RpcError) as caught:
            _request(daemon, method, folder, id=snap["id"])
        assert caught.value.code == -32602 and snap["id"] in caught.value.message, method
    assert repo.files() == files


def test_a_restore_that_would_lose_data_is_refused_with_1002(daemon: Client, tmp_path: Path) -> None:
    repo, folder = _plain(tmp_path / "repo")
    repo.write("out", "a file at snapshot time\n")
    open_folders(daemon, folder)
    snap = _request(daemon, "ctxd/ghost/snapshot", folder)
    (repo.root / "out").unlink()
    repo.write("out/run.log", "ignored, would be lost\n")
    files = repo.files()
    with pytest.raises(RpcError) as caught:
        _request(daemon, "ctxd/ghost/restore", folder, id=snap["id"])
    assert caught.value.code == 1002 and "out/run.log" in caught.value.message
    assert repo.files() == files


def test_progress_and_slow_warning(daemon: Client, tmp_path: Path) -> None:
    _repo, slow = _plain(tmp_path / "slow")
    _repo, quiet = _plain(tmp_path / "quiet")
    open_folders(daemon, slow, settings="[ghost]\nwarn_after_seconds = 0\n")
    open_folders(daemon, quiet)
    _request(daemon, "ctxd/ghost/snapshot", slow, workDoneToken="snap-1")
    kinds = [n["value"]["kind"] for n in daemon.notes("$/progress") if n["token"] == "snap-1"]
    assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds
    warning = daemon.wait_for_notification("window/showMessage", lambda p: str(slow) in p["message"])
    assert warning["type"] == 2 and "large untracked files" in warning["message"].lower()
    # Without a token there is no progress, and at the default threshold no warning.
    progress_before = len(daemon.notes("$/progress"))
    _request(daemon, "ctxd/ghost/snapshot", quiet)
    assert len(daemon.notes("$/progress")) == progress_before
    assert not [n for n in daemon.notes("window/showMessage") if str(quiet) in n["message"]]


def test_skipped_files_are_reported_and_kept(daemon: Client, tmp_path: Path) -> None:
    repo, folder = _plain(tmp_path / "repo")
    repo.write("data.bin", "x" * 4096)
    for i in range(6):
        repo.write(f"generated/{i}.txt", "g\n")
    repo.write("node_modules/dep/index.js", "dep\n")
    open_folders(daemon, folder, settings="[ghost]\nmax_untracked_file_bytes = 1024\nmax_untracked_dir_files = 5\n")
    before = repo.state()
    snap = _request(daemon, "ctxd/ghost/snapshot", folder)
    assert {s["path"] for s in snap["skipped"]} == {"data.bin", "generated/", "node_modules/"}
    _agent_edits(folder)
    _request(daemon, "ctxd/ghost/restore", folder, id=snap["id"])
    assert (repo.root / "data.bin").exists() and len(list((repo.root / "generated").iterdir())) == 6
    assert (repo.root / "node_modules/dep/index.js").exists()
    assert repo.state() == before


def test_listed_after_a_restart_and_gc(daemon_factory: Callable[..., Client], tmp_path: Path,
                                       git_env: dict[str, str]) -> None:
    repo, folder = _plain(tmp_path / "repo")
    first = daemon_factory([folder], env=git_env)
    one = _request(first, "ctxd/ghost/snapshot", folder, message="one")
    repo.write("notes.txt", "changed\n")
    two = _request(first, "ctxd/ghost/snapshot", folder, message="two")
    first.shutdown()
    repo.git("-c", "gc.reflogExpire=now", "-c", "gc.reflogExpireUnreachable=now", "gc", "-q", "--prune=now")
    assert repo.git("branch", "--list").split() == ["*", "main"] and repo.git("tag") == ""
    assert repo.git("stash", "list") == ""
    second = daemon_factory([folder], env=git_env)
    listed = _request(second, "ctxd/ghost/list", folder)["snapshots"]
    assert [(g["id"], g["message"]) for g in listed] == [(two["id"], "two"), (one["id"], "one")]
    before = repo.state()
    _request(second, "ctxd/ghost/restore", folder, id=one["id"])
    assert (repo.root / "notes.txt").read_text() == "untracked\n"
    assert repo.state()["index"] == before["index"]
    assert "ctxd" not in repo.git("log", "--all", "--oneline") + repo.git("for-each-ref")
    assert "error" not in repo.git("fsck", "--no-progress").lower()


def test_daemon_environment_and_hooks_never_reach_git(daemon_factory: Callable[..., Client], tmp_path: Path,
                                                     git_env: dict[str, str]) -> None:
    repo, folder = _plain(tmp_path / "repo")
    other = make_repo(tmp_path / "other")
    other_before = other.state()
    marker = tmp_path / "hook-ran"
    hooks = repo.git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("reference-transaction", "post-index-change", "post-checkout"):
        (hooks / name).write_text(f"#!/bin/sh\nenv >> '{marker}'\n")
        (hooks / name).chmod(0o755)
    repo.git("config", "core.autocrlf", "true")
    client = daemon_factory([folder], env={**git_env, "OPENAI_API_KEY": "sk-never-for-git",
                                           "GIT_DIR": str(other.git_dir), "GIT_WORK_TREE": str(other.root),
                                           "GIT_INDEX_FILE": str(other.git_dir / "index"),
                                           "GIT_OBJECT_DIRECTORY": str(other.git_dir / "objects")})
    (repo.root / "crlf.txt").write_bytes(b"a\r\nb\n")
    snap = _request(client, "ctxd/ghost/snapshot", folder)
    files = repo.files()
    repo.write("src/app.py", "agent\n")
    (repo.root / "crlf.txt").write_bytes(b"agent\n")
    _request(client, "ctxd/ghost/diff", folder, id=snap["id"])
    undo = _request(client, "ctxd/ghost/restore", folder, id=snap["id"])["undoId"]
    assert repo.files() == files and (repo.root / "crlf.txt").read_bytes() == b"a\r\nb\n"
    _request(client, "ctxd/ghost/delete", folder, id=undo)
    assert not marker.exists()
    assert other.state() == other_before


def test_a_restore_killed_midway_is_reported_at_the_next_start(daemon_factory: Callable[..., Client],
                                                                tmp_path: Path, git_env: dict[str, str]) -> None:
    repo, folder = _plain(tmp_path / "repo")
    for i in range(3000):
        repo.write(f"gen/d{i // 100}/f{i}.txt", f"{i}\n" * 200)
    repo.commit_all("many files")
    first = daemon_factory([folder], env=git_env)
    snap = _request(first, "ctxd/ghost/snapshot", folder)
    for i in range(3000):
        repo.write(f"gen/d{i // 100}/f{i}.txt", "agent\n")
    before = repo.files()
    store = repo.git_dir / "ctxd" / "store"
    first.request_async("ctxd/ghost/restore", {"workspace": folder.as_uri(), "id": snap["id"]})
    deadline = time.monotonic() + 60
    while not list(store.glob("journal-*.json")):
        assert time.monotonic() < deadline and first.proc.poll() is None, "the restore never began writing"
        time.sleep(0.001)
    first.kill()
    time.sleep(0.5)
    settled = repo.files()
    time.sleep(0.5)
    assert repo.files() == settled  # no orphaned git child is still rewriting the tree

    second = daemon_factory([folder], env=git_env)
    note = second.wait_for_notification("window/showMessage", lambda p: "interrupted" in p["message"])
    listed = _request(second, "ctxd/ghost/list", folder)
    report = listed["interruptedRestore"]
    assert report["id"] == snap["id"] and report["undoId"][:12] in note["message"]
    assert not list((store / "ctxd-tmp").iterdir())  # leftovers (temporary index, .lock) are gone
    _request(second, "ctxd/ghost/restore", folder, id=report["undoId"])
    assert repo.files() == before
    assert "interruptedRestore" not in _request(second, "ctxd/ghost/list", folder)


def test_names_that_are_not_utf8_are_sent_escaped(daemon: Client, tmp_path: Path) -> None:
    repo, folder = _plain(tmp_path / "repo")
    name = os.fsdecode(b"caf\xe9.txt")
    (repo.root / name).write_bytes(b"latin-1 name\n")
    open_folders(daemon, folder)
    snap = _request(daemon, "ctxd/ghost/snapshot", folder)
    (repo.root / name).write_bytes(b"agent\n")
    files = _request(daemon, "ctxd/ghost/diff", folder, id=snap["id"])["files"]
    assert {"path": "caf\\xe9.txt", "status": "modified", "binary": False, "pathEncoding": "escaped"} in files
    result = _request(daemon, "ctxd/ghost/restore", folder, id=snap["id"])
    assert result["restored"] == ["caf\\xe9.txt"] and result["pathEncoding"] == "escaped"
    assert (repo.root / name).read_bytes() == b"latin-1 name\n"


def test_a_folder_replaced_after_it_was_opened_is_refused(daemon: Client, tmp_path: Path) -> None:
    """The opened folder swapped for a link to another folder: snapshots and restores must not
    follow it there (they would copy its files into the store, and write them back)."""
    repo, _ = _plain(tmp_path / "repo")
    folder = repo.root / "src"
    open_folders(daemon, folder)
    snap = _request(daemon, "ctxd/ghost/snapshot", folder)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa").write_text("private key\n")
    folder.rename(repo.root / "src.real")
    folder.symlink_to(outside)
    for method, params in (("ctxd/ghost/snapshot", {}), ("ctxd/ghost/restore", {"id": snap["id"]}),
                           ("ctxd/ghost/list", {})):
        with pytest.raises(RpcError, match="no longer the folder that was opened") as caught:
            _request(daemon, method, folder, **params)
        assert caught.value.code == 1002, method
    assert sorted(os.listdir(outside)) == ["id_rsa"] and (outside / "id_rsa").read_text() == "private key\n"
