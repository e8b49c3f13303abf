"""Ghost snapshot time against `git stash create`, measured in the same run.

    python bench/bench_ghost.py [--files 20000] [--modified 1000] [--untracked 500] [--rounds 5]

Generates a repository in a temporary folder (20,000 committed files); each round gives 1,000 of
them new content and writes 500 new untracked files, times `git stash create` (git's own snapshot
of tracked changes only) on that, then does the same edit again with other content and times the
first ghost snapshot of it (nothing cached), then both again with nothing changed. Prints medians
and the ratios against the baseline. Goals: first <= 1.2x, second <= 1.0x; the exit status is 1
when one is missed.

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
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from table import Row, ms, report  # noqa: E402

from ctxd.ghost import snapshots as ghost  # noqa: E402  (after the path tweak above)

ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
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


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--modified", type=int, default=1_000)
    parser.add_argument("--untracked", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    base_first, base_again, firsts, agains = [], [], [], []
    info: dict = {}
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-ghost-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        print(f"{args.files} files, {args.modified} modified, {args.untracked} untracked, "
              f"{args.rounds} rounds")
        generate(repo, args.files)
        for round_ in range(args.rounds):
            # "First" means content no one has hashed yet: each side gets its own fresh edit, so
            # `git stash create` writes the modified blobs and the snapshot writes its own.
            edit(repo, args.files, args.modified, args.untracked, 2 * round_)
            base_first.append(timed(lambda: git(repo, "stash", "create")))
            edit(repo, args.files, args.modified, args.untracked, 2 * round_ + 1)
            for cached in (repo / ".git" / "ctxd").glob("cache-*"):
                cached.unlink()  # nothing kept from the last round
            firsts.append(timed(lambda: info.update(ghost.snapshot(repo, "first"))))
            for _ in range(3):  # nothing changed any more: alternate the two
                base_again.append(timed(lambda: git(repo, "stash", "create")))
                agains.append(timed(lambda: ghost.snapshot(repo, "again")))
    median = statistics.median
    print(f"snapshot holds {info['fileCount']} files, skipped {len(info['skipped'])}")
    first, again = median(firsts), median(agains)
    # The first `git stash create` of new content writes 1,000 loose objects, slow on some file
    # systems (snapshots write theirs into one pack); a stricter line: against a stash create
    # that has nothing left to write.
    print(f"first ghost snapshot against an again stash create: {first / median(base_again):5.2f}x")
    return report([
        Row(f"first ghost snapshot, {args.files} files, {args.modified} modified", ms(first),
            f"{ms(median(base_first))} (git stash create)", f"{first / median(base_first):.2f}x", "<= 1.2x",
            first / median(base_first) <= 1.2),
        Row("ghost snapshot again, nothing changed", ms(again), f"{ms(median(base_again))} (git stash create)",
            f"{again / median(base_again):.2f}x", "<= 1.0x", again / median(base_again) <= 1.0),
    ])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
