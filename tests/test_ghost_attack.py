"""Attacks on ghost snapshots' restore and undo: a file another program writes while a restore
runs, inside a folder the restore replaces."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxd.errors import GitFailed
from ctxd.ghost import api as ghost
from tests.ghost_repo import Repo, isolated_git_env, make_repo


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in isolated_git_env(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path / "repo")


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
    import os
    import stat

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
