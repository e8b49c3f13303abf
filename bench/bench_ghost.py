"""Ghost snapshots, restores and diffs against git's own commands, measured in the same run.

    python bench/bench_ghost.py [--files 20000] [--modified 1000] [--untracked 500] [--rounds 5]

Generates a repository in a temporary folder (20,000 committed files); each round gives 1,000 of
them new content and writes 500 new untracked files, times `git stash create` (git's own snapshot
of tracked changes only) on that, then does the same edit again with other content and times the
first ghost snapshot of it (nothing cached), then both again with nothing changed. Then an agent's
edit of 1,000 files is undone by `git restore --source=<commit> --worktree -- .` and, after the same
edit again, by a ghost restore (which also takes its undo snapshot); and `git diff --stat <commit>`
is timed against `ctxd/ghost/diff`. Prints medians and the ratios against the baseline. Goals
(issue #14): first <= 1.0x, again <= 0.5x, restore <= 1.2x, diff <= 1.2x; the exit status is 1
when one is missed. The very first snapshot of a repository (which copies the objects it borrows
into ctxd's store once) is printed on its own. Each edit starts after a `sync`: a timed step runs
after its edit's writes, not after the other side's too. (`git restore` also rewrites the 1,000
files of the round's own edit, which its index does not know match the commit: a user's would.)

The temporary folder is on $TMPDIR: set TMPDIR=/dev/shm to take the disk out of the comparison
(loose objects, which git writes one file each, are slow to create on some disks).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from table import Row, ms, report  # noqa: E402

from ctxd.ghost import api as ghost  # noqa: E402  (after the path tweak above)

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
       "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
       "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=ENV, check=True, capture_output=True,
                          text=True).stdout


LINE = "the quick brown fox jumps over the lazy dog %d\n"


def generate(repo: Path, files: int) -> None:
    """Files spread 100 to a directory, a few hundred bytes each, like source code."""
    git(repo, "init", "-q")
    for i in range(files):
        path = repo / f"src/d{i // 1000:02d}/m{i // 100 % 10}/f{i:05d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(LINE % (i * 7 + k) for k in range(8)))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "generated")


def edit(repo: Path, files: int, modified: int, untracked: int, round_: int) -> None:
    """New content for `modified` committed files and `untracked` new files (never seen before)."""
    settle()
    step = max(1, files // modified)
    for n in range(modified):
        i = n * step
        path = repo / f"src/d{i // 1000:02d}/m{i // 100 % 10}/f{i:05d}.py"
        path.write_text("".join(LINE % (i * 7 + k) for k in range(8)) + f"# edit {round_}\n")
    for n in range(untracked):
        path = repo / f"src/new{n // 100}/u{n:04d}.py"  # new directories of 100 files each
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(LINE % n + f"# round {round_}\n")
    time.sleep(1.1)  # out of the second the files were written in, as in an everyday edit
    git(repo, "update-index", "-q", "--refresh")  # as `git status` leaves the index


def settle() -> None:
    """Write back what the steps before wrote, before the next edit: each timed step then runs
    after that edit's writes alone, as it would for a user, and not after the other side's
    thousands of rewritten files too (the first `fsync`, the undo snapshot's pack, would wait for
    their write-back, and the ratio would measure the order of the steps)."""
    if hasattr(os, "sync"):
        os.sync()


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def agent_edit(repo: Path, files: int, modified: int, round_: int) -> None:
    """An agent rewrites `modified` committed files (other ones than `edit` touches)."""
    settle()
    step = max(1, files // modified)
    for n in range(modified):
        i = n * step + step // 2
        path = repo / f"src/d{i // 1000:02d}/m{i // 100 % 10}/f{i:05d}.py"
        path.write_text(f"# rewritten by the agent, round {round_}\n" + path.read_text())
    time.sleep(1.1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--modified", type=int, default=1_000)
    parser.add_argument("--untracked", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    base_first, base_again, firsts, agains = [], [], [], []
    base_restore, restores, base_diff, diffs = [], [], [], []
    info: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-ghost-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        print(f"{args.files} files, {args.modified} modified, {args.untracked} untracked, "
              f"{args.rounds} rounds")
        generate(repo, args.files)
        state = Path(tmp) / "state"
        store = repo / ".git" / "ctxd" / "store"
        very_first = timed(lambda: ghost.snapshot(repo, "the very first", state_dir=state))
        print(f"the very first snapshot of the repository (copies what it borrows): {ms(very_first)}")
        for round_ in range(args.rounds):
            # "First" means content no one has hashed yet: each side gets its own fresh edit, so
            # `git stash create` writes the modified blobs and the snapshot writes its own.
            edit(repo, args.files, args.modified, args.untracked, 2 * round_)
            base_first.append(timed(lambda: git(repo, "stash", "create")))
            edit(repo, args.files, args.modified, args.untracked, 2 * round_ + 1)
            for cached in store.glob("cache-*"):
                cached.unlink()  # nothing kept from the last round
            firsts.append(timed(lambda: info.update(ghost.snapshot(repo, "first", state_dir=state))))
            for _ in range(3):  # nothing changed any more: alternate the two
                base_again.append(timed(lambda: git(repo, "stash", "create")))
                agains.append(timed(lambda: ghost.snapshot(repo, "again", state_dir=state)))
            # Undo an agent's edit of 1,000 files, git's way and ctxd's way, from the same state.
            base = git(repo, "stash", "create").strip()
            snap = ghost.snapshot(repo, "before the agent", state_dir=state)["id"]
            agent_edit(repo, args.files, args.modified, 2 * round_)
            base_diff.append(timed(partial(git, repo, "diff", "--stat", base)))
            diffs.append(timed(partial(ghost.diff, repo, snap, state_dir=state)))
            base_restore.append(timed(partial(git, repo, "restore", f"--source={base}", "--worktree", "--", ".")))
            agent_edit(repo, args.files, args.modified, 2 * round_ + 1)
            done: dict[str, Any] = {}
            restores.append(timed(lambda: done.update(ghost.restore(repo, snap, state_dir=state))))  # noqa: B023 - called at once
            assert len(done["restored"]) == args.modified, len(done["restored"])
    median = statistics.median
    print(f"snapshot holds {info['fileCount']} files, skipped {len(info['skipped'])}")
    first, again, restore, diff = median(firsts), median(agains), median(restores), median(diffs)
    ratios = {"first": first / median(base_first), "again": again / median(base_again),
              "restore": restore / median(base_restore), "diff": diff / median(base_diff)}
    # The first `git stash create` of new content writes 1,000 loose objects, slow on some file
    # systems (snapshots write theirs into one pack); a stricter line: against a stash create
    # that has nothing left to write.
    print(f"first ghost snapshot against an again stash create: {first / median(base_again):5.2f}x")
    return report([
        Row(f"first ghost snapshot, {args.files} files, {args.modified} modified", ms(first),
            f"{ms(median(base_first))} (git stash create)", f"{ratios['first']:.2f}x", "<= 1.0x",
            ratios["first"] <= 1.0),
        Row("ghost snapshot again, nothing changed", ms(again), f"{ms(median(base_again))} (git stash create)",
            f"{ratios['again']:.2f}x", "<= 0.5x", ratios["again"] <= 0.5),
        Row(f"ghost restore of {args.modified} modified files (with its undo snapshot)", ms(restore),
            f"{ms(median(base_restore))} (git restore --source)", f"{ratios['restore']:.2f}x", "<= 1.2x",
            ratios["restore"] <= 1.2),
        Row(f"ctxd/ghost/diff of {args.modified} modified files", ms(diff),
            f"{ms(median(base_diff))} (git diff --stat)", f"{ratios['diff']:.2f}x", "<= 1.2x",
            ratios["diff"] <= 1.2),
    ])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
