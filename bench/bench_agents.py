"""What ctxd costs the agents (issue #37): the real Claude Code 2.1.332 and Codex CLI 0.171.0 run
the same scripted session with nothing of ctxd's installed, with ctxd's hooks, and with its hooks
and its MCP server.

    python bench/bench_agents.py [--rounds 3] [--latency 0.3] [--agents claude codex] [--no-instant]
                                 [--keep FOLDER]

The session: a first turn of three file-changing tool calls (Claude Code: Write, Edit, Bash;
Codex: apply_patch twice and a shell command) and an answer, then a second turn that resumes the
session (a Write or a patch, a shell command, an answer). The model is the scripted server of
tests/model_servers.py on 127.0.0.1, **answering each request after 0.3 s** (`--latency`): a model
that answers at once makes ctxd's share look larger than any real one would. Each run is timed from
the agent's start to its exit, both turns added up. Its CPU time is printed beside (not judged,
and steadier than the time on a busy machine): the agent's processes and the ones it waited for
(hooks, its MCP server), and ctxd's owner.

The setups, each in a home of its own (tests/agents.py: nothing leaves the machine):
- **nothing installed**: the agent alone, the floor;
- **hooks**: `ctxd hooks install --agent <agent>` at user scope (hooks, and the status line),
  its MCP server taken out again (`claude -p` runs no status line: bench_hooks.py times it);
- **hooks + MCP**: the same with `ctxd mcp` configured (Claude Code starts it beside the session,
  Codex before its first turn).
- **hooks + bare MCP** (not judged): the same with ctxd's MCP server replaced by
  bench/bare_mcp.py, which lists the same tools and does nothing else: what any Python MCP server
  costs the agent, so that what ctxd's own costs shows beside it.
The owner of the setup's state dir runs (docs/processes.md): a warm-up session before the timed
rounds starts it as a user's first session does (and fills the agents' caches), and it stays for
the rounds (`CTXD_OWNER_IDLE_SECONDS`); it is stopped at the end. The rounds alternate the setups
(nothing, hooks, hooks + MCP, then again) so that a change of the machine's load falls on all of
them; the figure is the median of `--rounds` (3). ctxd runs as an installed package does
(`installed_python`: its bytecode cached, no development install's import hook).

Goals (issue #37), as ratios to "nothing installed" measured in the same run: hooks <= 1.10x,
hooks + MCP <= 1.15x. The exit status is 1 on a miss. With `--instant` (the default; `--no-instant`
skips it) the same rounds run again with a model that answers at once: printed, not judged.

The code measured is this tree's (`ctxd` on the agents' PATH runs it from here): to measure another
tree, copy this file and tests/ into it and run it there. `--keep FOLDER` works there and keeps the
homes, hooks.log and the owners' logs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from table import Row, report  # noqa: E402

from tests.agents import Claude, Codex, Run  # noqa: E402
from tests.ghost_repo import IDENTITY, make_repo  # noqa: E402
from tests.model_servers import MessagesServer, Reply, ResponsesServer, apply_patch, shell, tool  # noqa: E402

SETUPS = ("nothing installed", "hooks", "hooks + MCP", "hooks + bare MCP")
GOALS = {"hooks": 1.10, "hooks + MCP": 1.15}
""""hooks + bare MCP" is not judged: ctxd's MCP server replaced by bench/bare_mcp.py, which lists
the same tools and does nothing else, shows what any Python MCP server costs the agent."""
IDLE = "3600"  # the owner stays for the whole bench; stopped at its end


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Slow:
    """A scripted model server that answers each model request after `latency` seconds."""

    latency = 0.0

    def _handle(self, handler: Any, body: Any) -> None:
        path = handler.path.split("?")[0].rstrip("/")
        if handler.command == "POST" and path.endswith(("/messages", "/responses", "/responses/compact")):
            time.sleep(self.latency)
        super()._handle(handler, body)  # type: ignore[misc]


class SlowMessages(Slow, MessagesServer):
    pass


class SlowResponses(Slow, ResponsesServer):
    pass


def installed_python(folder: Path) -> Path:
    """A Python that sees ctxd as an installed package does: a virtual environment of the bench's
    own whose path holds this tree and the packages of the environment running the bench. That
    environment's own start-up files are not read: a development install's import hook (an
    editable install, `pip install -e`) costs each Python process tens of milliseconds that an
    installed ctxd does not have."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                         capture_output=True, text=True).stdout.strip()
    packages = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (Path(own) / "ctxd-bench.pth").write_text("\n".join([str(ROOT), *packages]) + "\n")
    return python


def ctxd_bin(folder: Path, python: Path) -> Path:
    """`ctxd` on the agents' PATH, started as pip's console script starts it: this tree's code. It
    runs `ctxd hooks install`, which names ctxd by its launcher (`ctxd.places.ctxd_command`: this
    Python and the tree's ctxd/launch.py), as it does for a user."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "ctxd"
    script.write_text(f"#!{python}\nimport re\nimport sys\nfrom ctxd.entry import main\nif __name__ == '__main__':\n"
                      "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(main())\n")
    script.chmod(0o755)
    return folder


@dataclass
class Sample:
    """One session: its time, and the CPU time it cost."""

    wall: float
    cpu: float  # the agent and every process it waited for (its hooks, its MCP server)
    owner_cpu: float  # ctxd's processes outside the agent's (the owner; a tree from before it: the keeper)


@dataclass
class Place:
    """One agent in one setup: its repository, homes and state dir."""

    agent: str
    setup: str
    root: Path
    samples: dict[float, list[Sample]] = field(default_factory=dict)  # by the model's latency

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def home(self) -> Path:
        return self.root / "agent-home"

    @property
    def state(self) -> Path:
        """The default one (tests/agents.py sets HOME and XDG_STATE_HOME to the place's home):
        Codex passes its MCP servers HOME but not XDG_STATE_HOME."""
        return self.root / "home" / ".local" / "state"


def base_env(bin_dir: Path, cache: Path) -> dict[str, str]:
    """What the bench adds to the agent's environment (which its hooks and MCP server inherit).
    Python's bytecode is written and reused (an empty PYTHONDONTWRITEBYTECODE is unset), as an
    installed package's is: else every hook would compile what it imports."""
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(cache), "CTXD_OWNER_IDLE_SECONDS": IDLE,
            "CTXD_HOOK_KEEPER_SECONDS": IDLE, **IDENTITY}


def install(place: Place, agent_env: dict[str, str], bin_dir: Path) -> None:
    """`ctxd hooks install` at user scope in the agent's home; for "hooks", the MCP server taken out."""
    if place.setup == "nothing installed":
        return
    done = subprocess.run([str(bin_dir / "ctxd"), "hooks", "install", "--agent", place.agent, "--scope", "user"], cwd=place.repo,
                          env=agent_env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"ctxd hooks install failed: {done.stderr}")
    if place.setup in ("hooks", "hooks + bare MCP"):
        bare = None
        if place.setup == "hooks + bare MCP":
            tools = place.root / "tools.json"
            tools.write_text(json.dumps(ctxd_tools()))
            python = bin_dir.parent / "venv" / "bin" / "python"  # ctxd's own (installed_python)
            bare = [str(python), str(HERE / "bare_mcp.py"), str(tools)]
        if place.agent == "claude":
            path = Path(agent_env["CLAUDE_CONFIG_DIR"]) / ".claude.json"
            state = json.loads(path.read_text())
            del state["mcpServers"]["ctxd"]
            if bare:
                state["mcpServers"]["ctxd"] = {"type": "stdio", "command": bare[0], "args": bare[1:]}
            path.write_text(json.dumps(state, indent=2) + "\n")
        else:
            path = Path(agent_env["CODEX_HOME"]) / "config.toml"
            text = path.read_text()
            server = f"[mcp_servers.ctxd]\ncommand = {json.dumps(bare[0])}\nargs = {json.dumps(bare[1:])}\n" if bare else ""
            without = re.sub(r"(?m)^\[mcp_servers\.ctxd\]\n(?:(?!\[|# <<<).*\n)*", lambda _: server, text)
            assert without != text, text
            path.write_text(without)


def ctxd_tools() -> list[dict[str, Any]]:
    """The tools `ctxd mcp` lists (bench/bare_mcp.py lists them too)."""
    from ctxd.mcp.server import tools

    class Unused:
        def __getattr__(self, name: str) -> Callable[..., None]:
            return lambda **arguments: None

    return [tool.listing() for tool in tools(Unused())]


def reset(repo: Path) -> None:
    """The repository as committed (what the last session changed undone)."""
    for args in (["checkout", "-q", "--", "."], ["clean", "-fdq"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env={**os.environ, **IDENTITY})


class BenchCodex(Codex):
    def __init__(self, *args: Any, extra_env: dict[str, str], project: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.extra_env = extra_env
        with open(self.home / "config.toml", "a") as config:  # the user trusts the project (Codex asks once)
            config.write(f'\n[projects.{json.dumps(str(project))}]\ntrust_level = "trusted"\n')

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.extra_env}

    def exec(self, prompt: str, cwd: Path, resume: str | None = None) -> Run:
        # The hooks' review a user does once in `/hooks`, by Codex's flag for automation (every setup).
        flags = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--json",
                 "--dangerously-bypass-hook-trust"]
        args = ["exec", "resume", *flags, resume, prompt] if resume else ["exec", *flags, "-C", str(cwd), prompt]
        return self._run(args, cwd)


PATCH_ADD = "*** Begin Patch\n*** Add File: one.txt\n+one\n*** End Patch\n"
PATCH_EDIT = "*** Begin Patch\n*** Update File: one.txt\n@@\n-one\n+two\n*** End Patch\n"
PATCH_TWO = "*** Begin Patch\n*** Add File: two.txt\n+two\n*** End Patch\n"


def claude_session(place: Place, server: SlowMessages, agent: Claude) -> float:
    ws = place.repo
    server.script(
        Reply(calls=[tool("t1", "Write", file_path=str(ws / "one.txt"), content="one\n")]),
        Reply(calls=[tool("t2", "Edit", file_path=str(ws / "one.txt"), old_string="one", new_string="two")]),
        Reply(calls=[tool("t3", "Bash", command="echo three >> one.txt", description="append")]),
        Reply(text="one.txt is written."))
    start = time.perf_counter()
    session = agent.prompt("Write one.txt and change it twice", ws).json()["session_id"]
    first = time.perf_counter() - start
    server.script(
        Reply(calls=[tool("t4", "Write", file_path=str(ws / "two.txt"), content="two\n")]),
        Reply(calls=[tool("t5", "Bash", command="sed -i s/two/2/ two.txt", description="change")]),
        Reply(text="two.txt is written."))
    start = time.perf_counter()
    agent.prompt("Write two.txt and change it", ws, resume=session)
    took = first + time.perf_counter() - start
    assert server.pending == 0 and (ws / "two.txt").read_text() == "2\n", "the session did not run as scripted"
    return took


def codex_session(place: Place, server: SlowResponses, agent: BenchCodex) -> float:
    ws = place.repo
    server.script(Reply(calls=[apply_patch("c1", PATCH_ADD)]), Reply(calls=[apply_patch("c2", PATCH_EDIT)]),
                  Reply(calls=[shell("c3", "echo three >> one.txt")]), Reply(text="one.txt is written."))
    start = time.perf_counter()
    session = Codex.thread_id(agent.exec("Write one.txt and change it twice", ws))
    first = time.perf_counter() - start
    server.script(Reply(calls=[apply_patch("c4", PATCH_TWO)]), Reply(calls=[shell("c5", "sed -i s/two/2/ two.txt")]),
                  Reply(text="two.txt is written."))
    start = time.perf_counter()
    agent.exec("Write two.txt and change it", ws, resume=session)
    took = first + time.perf_counter() - start
    assert server.pending == 0 and (ws / "two.txt").read_text() == "2\n", "the session did not run as scripted"
    return took


def owners(places: list[Place]) -> dict[int, float]:
    """The owners (in a tree from before them, the hooks' keepers) the sessions started, with the
    CPU time each has used: the ctxd processes whose command line names a setup's state dir."""
    marks = [str(p.state) for p in places]
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if "ctxd" in command and any(mark in command for mark in marks):
            found[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return found


def measured(place: Place, session: Callable[[], float]) -> Sample:
    before, owned = resource.getrusage(resource.RUSAGE_CHILDREN), owners([place])
    wall = session()
    after, now = resource.getrusage(resource.RUSAGE_CHILDREN), owners([place])
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Sample(wall, cpu, sum(used - owned.get(pid, 0.0) for pid, used in now.items()))


def stop_owners(places: list[Place]) -> None:
    """SIGTERM to the owners the sessions started (they would leave when idle)."""
    for pid in owners(places):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.3, help="seconds before the model answers")
    parser.add_argument("--agents", nargs="+", choices=("claude", "codex"), default=["claude", "codex"])
    parser.add_argument("--no-instant", dest="instant", action="store_false",
                        help="skip the rounds with a model that answers at once")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (homes, logs) instead of a "
                        "temporary one")
    args = parser.parse_args(argv)
    if shutil.which("npm") is None:
        print("npm is not installed: the bench installs the pinned agents with it (tests/agents.py)")
        return 1
    latencies = [args.latency] + ([0.0] if args.instant else [])
    places: list[Place] = []
    with (contextlib.nullcontext(str(args.keep)) if args.keep else tempfile.TemporaryDirectory(
            prefix="ctxd-bench-agents-")) as tmp, SlowMessages() as messages, SlowResponses() as responses:
        bin_dir = ctxd_bin(Path(tmp) / "bin", installed_python(Path(tmp) / "venv"))
        cache = Path(tmp) / "pycache"
        sessions: dict[tuple[str, str], Callable[[], float]] = {}
        try:
            for agent in args.agents:
                for setup in SETUPS:
                    place = Place(agent, setup, Path(tmp) / agent / setup.replace(" ", "").replace("+", "-"))
                    place.root.mkdir(parents=True)
                    repo = make_repo(place.repo)
                    repo.write("app.py", "print('v1')\n")
                    repo.commit_all("base")
                    extra = base_env(bin_dir, cache)
                    if agent == "claude":
                        claude = Claude(place.root, place.home, messages, extra_env=extra)
                        install(place, claude.env(), bin_dir)
                        sessions[agent, setup] = lambda p=place, a=claude: claude_session(p, messages, a)
                    else:
                        codex = BenchCodex(place.root, place.home, responses, extra_env=extra, project=place.repo)
                        install(place, codex.env(), bin_dir)
                        sessions[agent, setup] = lambda p=place, a=codex: codex_session(p, responses, a)
                    places.append(place)
            print(f"load average {load_average()}; warm-up: one session per agent and setup "
                  "(the agents' caches, the owner's start)", flush=True)
            for place in places:
                messages.latency = responses.latency = 0.0
                sessions[place.agent, place.setup]()
                reset(place.repo)
            for latency in latencies:
                messages.latency = responses.latency = latency
                for round_ in range(args.rounds):
                    for agent in args.agents:
                        for place in [p for p in places if p.agent == agent]:
                            sample = measured(place, sessions[place.agent, place.setup])
                            reset(place.repo)
                            place.samples.setdefault(latency, []).append(sample)
                            print(f"  model {latency:g} s, round {round_ + 1}: {agent}, {place.setup}: "
                                  f"{sample.wall:.2f} s (CPU: {sample.cpu:.2f} s in the agent's processes, "
                                  f"{sample.owner_cpu:.2f} s in the owner's)", flush=True)
        finally:
            stop_owners(places)
    print(f"load average {load_average()}")
    rows: list[Row] = []
    for agent in args.agents:
        name = {"claude": "Claude Code 2.1.332", "codex": "Codex CLI 0.171.0"}[agent]
        mine = {p.setup: p for p in places if p.agent == agent}
        for latency in latencies:
            def median(setup: str, what: str) -> float:
                return statistics.median(getattr(sample, what) for sample in mine[setup].samples[latency])

            floor = median("nothing installed", "wall")
            shown = [f"{name}, model {latency:g} s: nothing installed {floor:.2f} s"]
            for setup in SETUPS[1:]:
                value = median(setup, "wall")
                ratio = value / floor
                shown.append(f"{setup} {value:.2f} s ({ratio:.2f}x)")
                if latency == args.latency and setup in GOALS:
                    rows.append(Row(f"{name}: two-turn session, {setup}, model {latency:g} s, median of "
                                    f"{args.rounds}", f"{value:.2f} s", f"{floor:.2f} s (nothing installed)",
                                    f"{ratio:.2f}x", f"<= {GOALS[setup]:.2f}x", ratio <= GOALS[setup]))
            print("; ".join(shown) + ("" if latency == args.latency else " (not judged)")
                  + "; hooks + bare MCP is not judged")
            print("  CPU time, medians: " + "; ".join(
                f"{setup} {median(setup, 'cpu'):.2f} s in the agent's processes + {median(setup, 'owner_cpu'):.2f} s "
                "in the owner's" for setup in SETUPS))
    return report(rows)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
