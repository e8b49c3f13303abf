"""Ghost snapshots against real git repositories (the pure module, no daemon).

Every test checks that the user's index bytes, HEAD, refs (outside ctxd's namespace), config and
`git status` are the same before and after, as the issue requires.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from ctxd.errors import Cancelled, GitFailed, InvalidParams
from ctxd.ghost import api as ghost
from ctxd.ghost import capture
from ctxd.settings import GhostSettings
from tests.ghost_repo import Repo, isolated_git_env, make_repo


@pytest.fixture(autouse=True)
def _no_git_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in isolated_git_env(tmp_path / "home").items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path / "repo")


def store_dir(repo: Repo) -> Path:
    return Path(repo.git("rev-parse", "--path-format=absolute", "--git-common-dir").strip()) / "ctxd" / "store"


def without_undo(result: dict) -> dict:
    assert ghost.ID.fullmatch(result["undoId"])
    return {k: v for k, v in result.items() if k != "undoId"}


def snapshot_tree(repo: Repo, commit: str, prefix: str = "") -> dict[str, str]:
    """{path: "mode sha"} of a snapshot's files (under `prefix`)."""
    out = repo.store("ls-tree", "-r", "-z", "--full-tree", commit)
    entries = {}
    for record in out.split("\0"):
        if record:
            meta, path = record.split("\t", 1)
            mode, _kind, sha = meta.split()
            if path.startswith(prefix):
                entries[path] = f"{mode} {sha}"
    return entries


def test_snapshot_and_restore_leave_the_user_state_alone(repo: Repo) -> None:
    repo.write("src/app.py", "print('edited')\n")  # modified, unstaged
    repo.write("staged.txt", "staged\n")
    repo.git("add", "staged.txt")  # staged new file
    repo.write("notes.txt", "untracked\n")
    repo.write("debug.log", "ignored\n")
    repo.write("old name.txt", "to be renamed\n")
    before_files = repo.files()
    before = repo.state()

    snap = ghost.snapshot(repo.root, "before the agent")
    assert repo.state() == before
    assert snap["parent"] == repo.git("rev-parse", "HEAD").strip()
    assert snap["message"] == "before the agent"
    assert snap["fileCount"] == 7  # README, .gitignore, 2 in src, staged, notes, old name
    assert snap["skipped"] == []
    tree = snapshot_tree(repo, snap["id"])
    assert "debug.log" not in tree and "notes.txt" in tree and "staged.txt" in tree

    # The agent edits: modify, delete, rename, create; an ignored file changes too.
    repo.write("src/app.py", "print('agent')\n")
    (repo.root / "src/util.py").unlink()
    (repo.root / "old name.txt").rename(repo.root / "new name.txt")
    repo.write("created/by/agent.py", "new\n")
    repo.write("debug.log", "ignored, changed since\n")

    result = ghost.restore(repo.root, snap["id"])
    assert result["id"] == snap["id"]
    assert sorted(result["restored"]) == ["old name.txt", "src/app.py", "src/util.py"]
    assert sorted(result["removed"]) == ["created/by/agent.py", "new name.txt"]
    after_files = repo.files()
    assert after_files.pop("debug.log") == "ignored, changed since\n"  # ignored: never touched
    before_files.pop("debug.log")
    assert after_files == before_files
    assert not (repo.root / "created").exists()  # emptied directories go too
    assert repo.state() == before


def test_restore_of_the_current_state_changes_nothing(repo: Repo) -> None:
    repo.write("src/app.py", "edited\n")
    snap = ghost.snapshot(repo.root)
    before = repo.state()
    assert without_undo(ghost.restore(repo.root, snap["id"])) == {"id": snap["id"], "restored": [], "removed": []}
    assert repo.state() == before


def test_no_commits_yet(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "fresh", commit=False)
    repo.write("a.txt", "a\n")
    before = repo.state()
    snap = ghost.snapshot(repo.root)
    assert snap["parent"] is None and snap["fileCount"] == 1
    assert repo.state() == before
    repo.write("a.txt", "changed\n")
    repo.write("b.txt", "b\n")
    assert ghost.restore(repo.root, snap["id"])["removed"] == ["b.txt"]
    assert (repo.root / "a.txt").read_text() == "a\n"
    assert repo.state() == before


def test_empty_repository_and_empty_folder(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "empty", commit=False)
    snap = ghost.snapshot(repo.root)
    assert snap["fileCount"] == 0
    repo.write("later.txt")
    assert ghost.restore(repo.root, snap["id"])["removed"] == ["later.txt"]


def test_detached_head(repo: Repo) -> None:
    repo.write("README.md", "second\n")
    repo.commit_all("second")
    repo.git("checkout", "-q", "--detach", "HEAD~1")
    repo.write("README.md", "detached edit\n")
    before = repo.state()
    snap = ghost.snapshot(repo.root)
    assert snap["parent"] == repo.git("rev-parse", "HEAD").strip()
    repo.write("README.md", "agent\n")
    ghost.restore(repo.root, snap["id"])
    assert (repo.root / "README.md").read_text() == "detached edit\n"
    assert repo.state() == before


def _conflict(repo: Repo) -> None:
    """A merge stopped on a conflict in src/app.py."""
    repo.git("checkout", "-q", "-b", "other")
    repo.write("src/app.py", "print('other')\n")
    repo.commit_all("other")
    repo.git("checkout", "-q", "main")
    repo.write("src/app.py", "print('main')\n")
    repo.commit_all("main")
    repo.git("merge", "other", check=False)
    assert "UU src/app.py" in repo.git("status", "--porcelain")


def test_merge_in_progress(repo: Repo) -> None:
    _conflict(repo)
    merge_head = (repo.git_dir / "MERGE_HEAD").read_bytes()
    before = repo.state()
    conflicted = (repo.root / "src/app.py").read_text()
    snap = ghost.snapshot(repo.root)
    assert repo.state() == before
    repo.write("src/app.py", "resolved by the agent\n")
    repo.write("extra.py", "x\n")
    ghost.restore(repo.root, snap["id"])
    assert (repo.root / "src/app.py").read_text() == conflicted
    assert not (repo.root / "extra.py").exists()
    assert repo.state() == before
    assert (repo.git_dir / "MERGE_HEAD").read_bytes() == merge_head


def test_merge_in_progress_with_a_subdirectory_workspace(repo: Repo) -> None:
    repo.write("docs/guide.md", "guide\n")
    repo.commit_all("docs")
    _conflict(repo)  # the conflict is outside the workspace folder
    before = repo.state()
    snap = ghost.snapshot(repo.root / "docs")
    repo.write("docs/guide.md", "edited\n")
    ghost.restore(repo.root / "docs", snap["id"])
    assert (repo.root / "docs/guide.md").read_text() == "guide\n"
    assert repo.state() == before


def test_rebase_in_progress(repo: Repo) -> None:
    repo.git("checkout", "-q", "-b", "topic")
    repo.write("src/app.py", "print('topic')\n")
    repo.commit_all("topic")
    repo.git("checkout", "-q", "main")
    repo.write("src/app.py", "print('main moved')\n")
    repo.commit_all("main moved")
    repo.git("checkout", "-q", "topic")
    repo.git("rebase", "main", check=False)
    assert (repo.git_dir / "rebase-merge").is_dir() or (repo.git_dir / "rebase-apply").is_dir()
    before = repo.state()
    snap = ghost.snapshot(repo.root)
    repo.write("src/app.py", "agent\n")
    ghost.restore(repo.root, snap["id"])
    assert repo.state() == before


def test_awkward_paths(repo: Repo) -> None:
    names = ["with space.txt", "ünïcödé/ファイル.txt", "new\nline.txt", "tab\there.txt", "-dash.txt",
             "star*.txt", ":colon.txt", "quote\"d.txt"]
    for name in names[:4]:
        repo.write(name, f"tracked {name}\n")
    repo.commit_all("awkward")
    for name in names:
        repo.write(name, f"before {name}\n")
    before = repo.state()
    snap = ghost.snapshot(repo.root)
    assert set(names) <= set(snapshot_tree(repo, snap["id"]))
    for name in names:
        (repo.root / name).unlink()
    repo.write("another\nnew line.txt", "created since\n")
    result = ghost.restore(repo.root, snap["id"])
    assert set(result["restored"]) == set(names)
    assert result["removed"] == ["another\nnew line.txt"]
    for name in names:
        assert (repo.root / name).read_text() == f"before {name}\n"
    assert repo.state() == before


def test_symlinks_are_restored_as_links_and_never_followed(repo: Repo, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me\n")
    os.symlink("README.md", repo.root / "link-to-readme")
    repo.write("lib/mod.py", "mod\n")
    repo.commit_all("links")
    os.symlink("src", repo.root / "untracked-link")
    before = repo.state()
    snap = ghost.snapshot(repo.root)
    assert snapshot_tree(repo, snap["id"])["untracked-link"].startswith("120000 ")

    (repo.root / "link-to-readme").unlink()
    os.symlink(str(outside / "precious.txt"), repo.root / "link-to-readme")  # now points outside
    shutil.rmtree(repo.root / "lib")
    os.symlink(str(outside), repo.root / "lib")  # a directory replaced by a link out of the workspace
    (repo.root / "untracked-link").unlink()

    ghost.restore(repo.root, snap["id"])
    assert os.readlink(repo.root / "link-to-readme") == "README.md"
    assert os.readlink(repo.root / "untracked-link") == "src"
    assert (repo.root / "lib").is_dir() and not (repo.root / "lib").is_symlink()
    assert (repo.root / "lib/mod.py").read_text() == "mod\n"
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert (outside / "precious.txt").read_text() == "keep me\n"
    assert repo.state() == before


def test_executable_bits(repo: Repo) -> None:
    script = repo.write("run.sh", "#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    repo.commit_all("script")
    tool = repo.write("tool.sh", "#!/bin/sh\n")
    tool.chmod(0o755)
    before = repo.state()
    snap = ghost.snapshot(repo.root)
    assert snapshot_tree(repo, snap["id"])["tool.sh"].startswith("100755 ")
    script.chmod(0o644)
    tool.chmod(0o644)
    ghost.restore(repo.root, snap["id"])
    assert os.access(script, os.X_OK) and os.access(tool, os.X_OK)
    assert repo.state() == before


def test_submodules_are_not_descended_into(repo: Repo, tmp_path: Path) -> None:
    library = make_repo(tmp_path / "library")
    repo.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library.root), "vendor/lib")
    repo.commit_all("submodule")
    sub = Repo(repo.root / "vendor/lib")
    sub.write("inside.txt", "untracked inside the submodule\n")
    before, sub_before = repo.state(), sub.state()
    snap = ghost.snapshot(repo.root)
    tree = snapshot_tree(repo, snap["id"])
    assert tree["vendor/lib"].startswith("160000 ")
    assert not any(path.startswith("vendor/lib/") for path in tree)
    sub.write("README.md", "changed inside the submodule\n")
    repo.write("src/app.py", "agent\n")
    ghost.restore(repo.root, snap["id"])
    assert (repo.root / "src/app.py").read_text() == "print('app')\n"
    assert (sub.root / "README.md").read_text() == "changed inside the submodule\n"  # left alone
    assert (sub.root / "inside.txt").exists()
    sub.write("README.md", "hello\n")
    assert repo.state() == before and sub.state() == sub_before


def test_subdirectory_workspace_is_a_scope(repo: Repo) -> None:
    repo.write("pkg/a.py", "a\n")
    repo.write("pkg/deep/b.py", "b\n")
    repo.commit_all("pkg")
    folder = repo.root / "pkg"
    repo.write("pkg/new.py", "untracked in scope\n")
    repo.write("outside.txt", "untracked outside\n")
    before = repo.state()
    snap = ghost.snapshot(folder)
    assert snap["fileCount"] == 3
    assert repo.state() == before
    tree = snapshot_tree(repo, snap["id"])
    assert "pkg/new.py" in tree and "outside.txt" not in tree

    repo.write("pkg/a.py", "agent\n")
    repo.write("pkg/agent.py", "agent\n")
    repo.write("src/app.py", "edited outside the workspace\n")
    repo.write("outside2.txt", "created outside\n")
    result = ghost.restore(folder, snap["id"])
    assert without_undo(result) == {"id": snap["id"], "restored": ["a.py"], "removed": ["agent.py"]}  # folder-relative
    assert (repo.root / "src/app.py").read_text() == "edited outside the workspace\n"
    assert (repo.root / "outside2.txt").exists()

    # The snapshot belongs to the folder: the repository root neither lists nor restores it.
    assert [g["id"] for g in ghost.list_snapshots(folder)] == [result["undoId"], snap["id"]]
    assert ghost.list_snapshots(repo.root) == []
    with pytest.raises(InvalidParams):
        ghost.restore(repo.root, snap["id"])


def test_untracked_workspace_folder(repo: Repo) -> None:
    folder = repo.root / "newproject"
    for i in range(5):
        repo.write(f"newproject/f{i}.py", f"{i}\n")
    snap = ghost.snapshot(folder, settings=GhostSettings(max_untracked_dir_files=3))
    assert snap["fileCount"] == 5 and snap["skipped"] == []  # the folder itself is not "a directory"
    (folder / "f0.py").unlink()
    ghost.restore(folder, snap["id"])
    assert (folder / "f0.py").exists()


def test_workspace_folder_deep_inside_an_untracked_directory(repo: Repo) -> None:
    repo.write("outer/sibling.txt", "not in the workspace\n")
    repo.write("outer/inner/mine.txt", "in the workspace\n")
    snap = ghost.snapshot(repo.root / "outer" / "inner")
    assert snap["fileCount"] == 1
    assert set(snapshot_tree(repo, snap["id"], "outer/")) == {"outer/inner/mine.txt"}
    (repo.root / "outer/sibling.txt").unlink()
    repo.write("outer/inner/new.txt")
    assert ghost.restore(repo.root / "outer" / "inner", snap["id"])["removed"] == ["new.txt"]


def test_linked_worktree(repo: Repo, tmp_path: Path) -> None:
    repo.git("worktree", "add", "-q", "-b", "wt", str(tmp_path / "wt"))
    wt = Repo(tmp_path / "wt")
    assert (wt.root / ".git").is_file()
    wt.write("src/app.py", "worktree edit\n")
    before, main_before = wt.state(), repo.state()
    snap = ghost.snapshot(wt.root)
    assert [g["id"] for g in ghost.list_snapshots(wt.root)] == [snap["id"]]
    assert ghost.list_snapshots(repo.root) == []  # refs are shared, snapshots are per worktree
    wt.write("src/app.py", "agent\n")
    ghost.restore(wt.root, snap["id"])
    assert (wt.root / "src/app.py").read_text() == "worktree edit\n"
    assert wt.state() == before and repo.state() == main_before
    with pytest.raises(InvalidParams):
        ghost.restore(repo.root, snap["id"])


def test_skips_are_reported_and_never_deleted(repo: Repo) -> None:
    settings = GhostSettings(max_untracked_file_bytes=1000, max_untracked_dir_files=10)
    repo.write("big.bin", "x" * 2000)
    repo.write("small.bin", "x" * 10)
    for i in range(12):
        repo.write(f"generated/f{i}.txt", "g\n")
    for i in range(9):
        repo.write(f"fewfiles/f{i}.txt", "f\n")
    repo.write("node_modules/pkg/index.js", "dep\n")
    repo.write("web/node_modules/pkg/index.js", "dep\n")
    repo.write("web/app.js", "app\n")
    repo.write("src/__pycache__/app.cpython-311.pyc", "bytecode")
    repo.write(".venv/bin/python", "venv\n")
    nested = make_repo(repo.root / "nested")
    before = repo.state()
    snap = ghost.snapshot(repo.root, settings=settings)
    skipped = {s["path"]: s["reason"] for s in snap["skipped"]}
    assert set(skipped) == {"big.bin", "generated/", "node_modules/", "web/node_modules/",
                            "src/__pycache__/", ".venv/", "nested/"}
    assert "MiB" in skipped["big.bin"] and "12 files" in skipped["generated/"]
    assert skipped["nested/"] == "nested git repository"
    tree = snapshot_tree(repo, snap["id"])
    assert {"small.bin", "fewfiles/f0.txt", "web/app.js"} <= set(tree)
    assert not any(p.startswith(("generated/", "node_modules/", "nested/", ".venv/")) for p in tree)
    assert repo.state() == before

    repo.write("small.bin", "changed")
    repo.write("big.bin", "y" * 3000)
    result = ghost.restore(repo.root, snap["id"], settings=settings)
    assert result["restored"] == ["small.bin"] and result["removed"] == []
    assert (repo.root / "big.bin").read_text() == "y" * 3000
    assert len(list((repo.root / "generated").iterdir())) == 12
    assert (repo.root / "node_modules/pkg/index.js").exists()
    assert (repo.root / ".venv/bin/python").exists()
    assert (nested.root / "README.md").exists()
    assert repo.state() == before


def test_restore_refuses_to_delete_files_in_a_directory_it_needs(repo: Repo) -> None:
    repo.write("out", "a file at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "out").unlink()
    repo.write("out/run.log", "ignored, would be lost\n")
    before_files = repo.files()
    with pytest.raises(GitFailed, match="out/run.log"):
        ghost.restore(repo.root, snap["id"])
    assert repo.files() == before_files


def test_restore_replaces_a_directory_of_files_created_since(repo: Repo) -> None:
    repo.write("out", "a file at snapshot time\n")
    snap = ghost.snapshot(repo.root)
    (repo.root / "out").unlink()
    repo.write("out/a.txt", "created since\n")
    result = ghost.restore(repo.root, snap["id"])
    assert without_undo(result) == {"id": snap["id"], "restored": ["out"], "removed": ["out/a.txt"]}
    assert (repo.root / "out").read_text() == "a file at snapshot time\n"


def test_snapshots_survive_gc_and_are_listed_newest_first(repo: Repo) -> None:
    repo.write("a.txt", "one\n")
    first = ghost.snapshot(repo.root, "one")
    repo.write("a.txt", "two\n")
    second = ghost.snapshot(repo.root, "two")
    assert not repo.git("branch", "--list", "ctxd*").strip() and not repo.git("tag").strip()
    repo.git("-c", "gc.reflogExpire=now", "-c", "gc.reflogExpireUnreachable=now", "gc", "-q", "--prune=now")
    repo.store("cat-file", "-e", f"{first['id']}^{{tree}}")
    listed = ghost.list_snapshots(repo.root)  # read back from git alone, as after a restart
    assert [g["id"] for g in listed] == [second["id"], first["id"]]
    assert listed[1] == first
    repo.write("a.txt", "three\n")
    ghost.restore(repo.root, first["id"])
    assert (repo.root / "a.txt").read_text() == "one\n"


def test_loose_objects_piling_up_make_the_store_repack(repo: Repo) -> None:
    """Short captures write their blobs loose (no pack to sync): the store is repacked when git's own
    estimate of loose objects (those in `objects/17`) says there are many, not only on many packs."""
    import hashlib

    repo.write("a.txt", "one\n")
    first = ghost.snapshot(repo.root, "one")
    store = repo.root / ".git" / "ctxd" / "store"
    sample = store / "objects" / "17"
    contents, n = [], 0
    while len(contents) < 30:  # blobs whose ids start with 17, as a long session's loose objects do
        data = f"loose {n}\n".encode()
        if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest().startswith("17"):
            contents.append(data)
        n += 1
    for i, data in enumerate(contents):
        (repo.root.parent / f"loose{i}").write_bytes(data)
    repo.store("hash-object", "-w", *[str(repo.root.parent / f"loose{i}") for i in range(len(contents))])
    assert len(os.listdir(sample)) >= 30
    repo.write("a.txt", "two\n")
    second = ghost.snapshot(repo.root, "two")
    assert not sample.exists() or len(os.listdir(sample)) <= 1  # repacked: the unreferenced ones are gone
    for snap, text in ((first, "one\n"), (second, "two\n")):
        ghost.restore(repo.root, snap["id"])
        assert (repo.root / "a.txt").read_text() == text


def test_the_kept_index_is_split_and_counted_right_through_many_captures(repo: Repo) -> None:
    """ctxd's own indexes are split (a shared index in the store, the index file what changed):
    the entry count read from the two files (`index_entry_count`, used for `fileCount`) must be
    git's own, whatever was added, changed and deleted; shared files no kept index names go."""
    import random
    import subprocess
    import time as clock

    from ctxd.ghost.gitstore import SHARED_INDEX_GRACE_SECONDS

    store = repo.root / ".git" / "ctxd" / "store"
    rng = random.Random(7)
    for n in range(60):
        repo.write(f"many/f{n:03d}.txt", f"{n}\n")
    repo.git("add", "-A")
    repo.git("commit", "-qm", "many")
    names = [f"many/f{n:03d}.txt" for n in range(60)]
    for step in range(25):
        for _ in range(rng.randint(1, 6)):
            action = rng.choice(("add", "change", "delete"))
            if action == "add" or not names:
                names.append(f"new/s{step}_{rng.randint(0, 10**6)}.txt")
                repo.write(names[-1], "new\n")
            elif action == "change":
                repo.write(rng.choice(names), f"changed {step}\n")
            else:
                victim = names.pop(rng.randrange(len(names)))
                (repo.root / victim).unlink()
        snap = ghost.snapshot(repo.root, f"step {step}")
        kept = next(store.glob("cache-*.index"))
        listed = subprocess.run(["git", f"--git-dir={store}", "ls-files", "-z"], env={**os.environ,
                                "GIT_INDEX_FILE": str(kept)}, capture_output=True, check=True).stdout.count(b"\0")
        assert capture.index_entry_count(kept, store) == listed
        in_tree = repo.store("ls-tree", "-r", "--name-only", snap["id"]).splitlines()
        assert snap["fileCount"] == len(in_tree) == listed
    assert b"link" in kept.read_bytes()  # split: the kept index names its shared index
    live = set(store.glob("sharedindex.*"))
    stale = store / ("sharedindex." + "ab" * 20)
    stale.write_bytes(b"DIRC")
    old = clock.time() - SHARED_INDEX_GRACE_SECONDS - 10
    for path in (*live, stale):
        os.utime(path, (old, old))
    repo.write("a.txt", "after\n")
    ghost.snapshot(repo.root, "after")
    assert not stale.exists()
    remaining = set(store.glob("sharedindex.*"))
    assert remaining and all(capture.index_entry_count(k, store) > 0 for k in store.glob("cache-*.index"))


@pytest.mark.parametrize("bad", ["--all", "-p", "HEAD", "main", "", "abc123", "a" * 40, "A" * 40,
                                 "0" * 39 + "g", "../../etc/passwd", None, 42])
def test_bad_ids_are_refused_and_nothing_changes(repo: Repo, bad: object) -> None:
    ghost.snapshot(repo.root)
    repo.write("src/app.py", "agent\n")
    before, files = repo.state(), repo.files()
    with pytest.raises(InvalidParams):
        ghost.restore(repo.root, bad)  # type: ignore[arg-type]
    assert repo.state() == before and repo.files() == files


def test_a_commit_that_is_not_a_snapshot_is_refused(repo: Repo) -> None:
    head = repo.git("rev-parse", "HEAD").strip()
    with pytest.raises(InvalidParams, match="unknown snapshot"):
        ghost.restore(repo.root, head)


def test_index_lock_held_by_another_process(repo: Repo) -> None:
    snap = ghost.snapshot(repo.root)
    repo.write("src/app.py", "agent\n")
    lock = repo.git_dir / "index.lock"
    lock.write_bytes(b"held by someone else")
    before_files = repo.files()
    again = ghost.snapshot(repo.root)  # reading is fine: the user's index is not written
    assert snapshot_tree(repo, again["id"])["src/app.py"] != snapshot_tree(repo, snap["id"])["src/app.py"]
    with pytest.raises(GitFailed, match="index.lock"):
        ghost.restore(repo.root, snap["id"])
    assert repo.files() == before_files
    assert lock.read_bytes() == b"held by someone else"


def test_gpg_signing_configured_is_ignored(repo: Repo) -> None:
    repo.git("config", "commit.gpgSign", "true")
    repo.git("config", "gpg.program", "false")
    snap = ghost.snapshot(repo.root)
    assert snap["id"]


def test_cancel_and_progress(repo: Repo) -> None:
    cancel = threading.Event()
    steps: list[str] = []

    def progress(message: str) -> None:
        steps.append(message)
        if message.startswith("adding"):
            cancel.set()

    with pytest.raises(Cancelled):
        ghost.snapshot(repo.root, progress=progress, cancel=cancel)
    assert steps and ghost.list_snapshots(repo.root) == []
    assert not list((store_dir(repo) / "ctxd-tmp").glob("tmp-*"))


@pytest.mark.parametrize("scope", ["", "src"])
def test_the_cached_index_gives_the_same_trees(repo: Repo, scope: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sequence of edits to the working tree and the user's index, each snapshot taken with the
    previous one's index as its seed, must give exactly the tree a cold snapshot gives."""
    folder = repo.root / scope
    used: list[bool] = []
    usable = capture._Cache.usable
    monkeypatch.setattr(capture._Cache, "usable", classmethod(
        lambda cls, meta, user, settings: used.append(usable(meta, user, settings)) or used[-1]))
    edits = [
        lambda: repo.write("src/app.py", "edited\n"),
        lambda: repo.write("src/new.py", "untracked\n"),
        lambda: (repo.root / "src/util.py").unlink(),  # tracked file deleted ...
        lambda: repo.write("src/util.py", "... and back\n"),  # ... and created again
        lambda: repo.write(".gitignore", "*.log\nsecret/\nnew.py\n"),  # an untracked file now ignored
        lambda: repo.git("add", "-f", "src/new.py"),  # then force-added by the user
        lambda: repo.git("rm", "-q", "--cached", "src/app.py"),  # tracked becomes untracked
        lambda: repo.write("src/app.py", "x" * 5000),  # and too big
        lambda: repo.git("commit", "-q", "-m", "user commit"),
        lambda: (repo.root / "src/new.py").unlink(),
        lambda: repo.write("src/deep/er/file.txt", "deep\n"),
    ]
    settings = GhostSettings(max_untracked_file_bytes=4000)
    ghost.snapshot(folder, settings=settings)
    for edit in edits:
        edit()
        warm = ghost.snapshot(folder, settings=settings)
        warm_tree = repo.store("rev-parse", warm["id"] + "^{tree}").strip()
        for cached in store_dir(repo).glob("cache-*"):
            cached.unlink()
        cold = ghost.snapshot(folder, settings=settings)
        assert warm_tree == repo.store("rev-parse", cold["id"] + "^{tree}").strip()
        assert warm["skipped"] == cold["skipped"] and warm["fileCount"] == cold["fileCount"]
    # Every warm capture reused the kept index but the two after `add -f` and `rm --cached` changed
    # the user's index entries (a commit leaves them as they are).
    assert used.count(True) == len(edits) - 2


def test_split_index(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `core.splitIndex` the user's index keeps most entries in `.git/sharedindex.<id>`: a
    capture still starts from it (staged new files included, unchanged files not hashed again),
    and leaves the user's index, its shared part and the store as they were."""
    repo.git("config", "core.splitIndex", "true")
    repo.git("update-index", "--split-index")
    repo.write("staged.txt", "staged, never committed\n")
    repo.git("add", "staged.txt")  # lives in the split index, not in HEAD
    repo.write("src/app.py", "edited\n")
    shared = sorted(repo.git_dir.glob("sharedindex.*"))
    assert shared and b"link" in (repo.git_dir / "index").read_bytes()
    before = repo.state()
    # (Reading a split index, as `git status` or `git ls-files` does, refreshes its shared part's
    # mtime, so that git's own expiry keeps it: only its bytes are compared.)
    shared_before = {p.name: p.read_bytes() for p in shared}
    colds: list[bool] = []
    real_capture = capture._capture
    monkeypatch.setattr(capture, "_capture", lambda run: colds.append(run.cold) or real_capture(run))

    snap = ghost.snapshot(repo.root)
    tree = snapshot_tree(repo, snap["id"])
    assert "staged.txt" in tree and snap["fileCount"] == 5
    assert colds == [False]  # the user's index was used as it is, not rebuilt from HEAD
    assert repo.state() == before
    assert {p.name: p.read_bytes() for p in repo.git_dir.glob("sharedindex.*")} == shared_before
    assert not {p.name for p in store_dir(repo).glob("sharedindex.*")} & set(shared_before)  # its copy is gone

    repo.write("second.txt", "staged later\n")
    repo.git("add", "second.txt")  # the user's git writes a new split index
    (repo.root / "staged.txt").write_text("agent\n")
    again = ghost.snapshot(repo.root)
    assert "second.txt" in snapshot_tree(repo, again["id"]) and colds == [False, False]
    result = ghost.restore(repo.root, snap["id"])
    assert result["restored"] == ["staged.txt"] and result["removed"] == ["second.txt"]
    assert (repo.root / "staged.txt").read_text() == "staged, never committed\n"
    # A capture from scratch (the kept index unusable) starts from the user's entries, not HEAD's.
    site = ghost.open_site(repo.root, Path())
    assert site is not None
    state = capture.capture(site, capture.CaptureOptions(GhostSettings()), cold=True)
    try:
        assert "staged.txt" in site.paths("ls-files", "-z", index=state.index)
    finally:
        state.index.unlink()


def test_temporary_files_stay_inside_the_git_dir(repo: Repo) -> None:
    repo.write("notes.txt")
    snap = ghost.snapshot(repo.root)
    ghost.restore(repo.root, snap["id"])
    assert not list((store_dir(repo) / "ctxd-tmp").iterdir())
    assert "ctxd" not in repo.git("status", "--porcelain", "--ignored")


def test_wire_shape(repo: Repo) -> None:
    snap = ghost.snapshot(repo.root, "multi\nline\0message")
    assert set(snap) == {"id", "parent", "createdAt", "message", "fileCount", "skipped", "durationMs", "trigger",
                         "thread"}
    assert snap["trigger"] == "manual" and snap["thread"] is None
    assert snap["message"] == "multi\nlinemessage"
    assert snap["createdAt"].endswith("Z") and isinstance(snap["durationMs"], int)
    assert ghost.list_snapshots(repo.root) == [snap]
    body = repo.store("cat-file", "commit", snap["id"])
    assert "author ctxd <ctxd@localhost>" in body


def test_concurrent_snapshots_of_one_repository(repo: Repo) -> None:
    for i in range(20):
        repo.write(f"src/gen{i}.py", f"{i}\n")
    before = repo.state()
    results: list[dict] = []
    errors: list[BaseException] = []

    def take() -> None:
        try:
            results.append(ghost.snapshot(repo.root))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    workers = [threading.Thread(target=take) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors
    trees = {repo.store("rev-parse", r["id"] + "^{tree}").strip() for r in results}
    assert len(results) == 4 and len(trees) == 1
    assert repo.state() == before


def _cold_tree(repo: Repo) -> str:
    """The tree a capture from nothing gives now (no kept index to seed it)."""
    for cached in store_dir(repo).glob("cache-*"):
        cached.unlink()
    return repo.store("rev-parse", ghost.snapshot(repo.root)["id"] + "^{tree}").strip()


def test_the_kept_index_follows_the_user_to_another_branch_and_captures_exactly(repo: Repo) -> None:
    """The private index ctxd keeps between captures is only a seed: after the user checks out
    another branch (their index and files change under it) the capture is still exactly the
    working tree, and the user's index, HEAD and refs are as the user left them."""
    repo.git("checkout", "-q", "-b", "other")
    repo.write("src/app.py", "on the other branch\n")
    repo.write("only-here.txt", "other\n")
    repo.commit_all("other branch")
    repo.git("checkout", "-q", "-")
    repo.write("src/app.py", "edited on the first branch\n")
    repo.git("stash", "-q")
    ghost.snapshot(repo.root)  # keeps its index
    repo.git("checkout", "-q", "other")
    repo.write("untracked.txt", "new\n")
    before = repo.state()
    warm = ghost.snapshot(repo.root)
    assert repo.state() == before
    tree = snapshot_tree(repo, warm["id"])
    assert "only-here.txt" in tree and "untracked.txt" in tree
    assert repo.store("rev-parse", warm["id"] + "^{tree}").strip() == _cold_tree(repo)


def test_a_damaged_kept_index_is_rebuilt_and_the_capture_is_exact(repo: Repo) -> None:
    """A kept index whose bytes were damaged (same size, same stamp, so it still looks like the
    one recorded) makes git fail: the capture starts again from the user's index and is exact."""
    ghost.snapshot(repo.root)
    kept = next(store_dir(repo).glob("cache-*.index"))
    stamp = kept.stat()
    data = bytearray(kept.read_bytes())
    data[12:40] = b"\xff" * 28  # the first entry's stat data and more: git's checksum no longer holds
    with open(kept, "r+b") as handle:  # in place: the same inode
        handle.write(bytes(data))
    os.utime(kept, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    repo.write("src/app.py", "after the damage\n")
    snap = ghost.snapshot(repo.root)
    assert snapshot_tree(repo, snap["id"])["src/app.py"].split()[1] == repo.git(
        "hash-object", "src/app.py").strip()
    again = next(store_dir(repo).glob("cache-*.index"))
    assert again.read_bytes() != bytes(data)  # a sound index is kept now
    assert repo.store("rev-parse", snap["id"] + "^{tree}").strip() == _cold_tree(repo)
