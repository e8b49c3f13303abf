"""The real OpenCode 1.18.33 started again and again while ctxd follows its database: how many
starts exit with "database is locked", and how many reads of the database ctxd makes meanwhile.

OpenCode runs `PRAGMA journal_mode = WAL` before it sets its busy timeout, so a lock ctxd holds
at that moment makes it exit at once (docs/agents-research.md, "OpenCode 1.18.33"). Each round is
a fresh OpenCode home and three `opencode run` (the first makes the database) against the
scripted model server of tests/model_servers.py, with ctxd's follower (inotify, as the daemon
runs it) on that home, or without it (`--without-ctxd`, the floor).

Run: `python bench/opencode_starts.py [--rounds 10] [--without-ctxd]` (needs npm for OpenCode;
about 10 s a round). Exit status 1 when a start failed with ctxd following.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ctxd.agents import opencode  # noqa: E402
from ctxd.sessions.discovery import Source  # noqa: E402
from ctxd.sessions.follower import Follower  # noqa: E402
from tests.agents import OpenCode  # noqa: E402
from tests.model_servers import ChatCompletionsServer  # noqa: E402

RUNS_PER_ROUND = 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--without-ctxd", action="store_true", help="the floor: OpenCode alone")
    args = parser.parse_args()
    reads = [0]
    real_connect = opencode.connect

    def counted(db: Path) -> object:
        reads[0] += 1
        return real_connect(db)

    opencode.connect = counted  # type: ignore[assignment]  # counted, still the real reads
    locked = runs = 0
    with ChatCompletionsServer() as server, tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            base = Path(tmp) / f"round-{round_}"
            agent = OpenCode(base, server)
            cwd = base / "work"
            cwd.mkdir(parents=True)
            agent.data.mkdir(parents=True, exist_ok=True)
            follower = None
            if not args.without_ctxd:
                follower = Follower(lambda _update: None,
                                    [Source("opencode", agent.data, True, opencode.OpenCodeSessions(agent.data))],
                                    poll=False)
                follower.set_folders([cwd])
                follower.start()
            env = agent.env()
            env["PWD"] = str(cwd)
            try:
                for n in range(RUNS_PER_ROUND):
                    done = subprocess.run([str(agent.exe), "run", "--format", "json", f"hello {n}"], cwd=str(cwd),
                                          env=env, capture_output=True, text=True, timeout=180,
                                          stdin=subprocess.DEVNULL)
                    runs += 1
                    if "database is locked" in done.stdout + done.stderr:
                        locked += 1
                        print(f"  round {round_ + 1}, run {n + 1}: OpenCode exited 'database is locked'", flush=True)
            finally:
                if follower is not None:
                    follower.stop()
    who = "OpenCode alone" if args.without_ctxd else "with ctxd following"
    print(f"{who}: {locked} of {runs} starts failed 'database is locked'; ctxd read the database {reads[0]} times")
    return 1 if locked and not args.without_ctxd else 0


if __name__ == "__main__":
    raise SystemExit(main())
