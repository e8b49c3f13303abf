"""`ctxd hook <agent> <event>`: what the agents' hooks run. It never blocks or fails the agent.

It reads the hook's JSON on standard input and, in a git work tree or a folder ctxd knows
(`ctxd.places.find_workspace`), unless the user's `hooks.exclude` names it, does what the agent's
module (ctxd/agents) maps the event to:
- "turn" (Claude Code's and Codex's `UserPromptSubmit`): a checkpoint (trigger "turn") labelled
  with the turn's first words;
- "tool" (`PreToolUse`) of a tool that can change files (by name; a shell command always): a
  checkpoint (trigger "tool") labelled with the tool and the paths it names;
- "compacted" (`PostCompact`): notes the compaction for the session's usage;
- "after-compaction" (`SessionStart` with source "compact"): what the agent shows the model after
  its compaction, telling it that what was compacted can be recalled (only when ctxd's MCP server
  is installed for the agent); and the compaction noted.

Whatever happens it exits 0, within 2 s: the checkpoint runs in a child process that the hook
waits for until its deadline; past it, the hook returns and the child finishes alone. What went
wrong goes to ctxd's log (`<state dir>/hooks.log`), never to the agent. The configured API key
is redacted from the input before anything is cut from it or written, and the log escapes every
control character. Imports are lazy: the agent pays for this process at every tool call.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.hookio import describe, log, log_once, read_input

if TYPE_CHECKING:
    from ctxd.agents.base import Agent, HookInput
    from ctxd.ghost.checkpoint import Job
    from ctxd.places import Located
    from ctxd.protocol.shapes import CheckpointTool, CheckpointTurn

DEADLINE_SECONDS = 1.5
"""The hook returns by then (the agent's bound is 2 s, and starting Python takes some of it)."""
HAND_OVER_MARGIN = 0.3
"""A daemon that has not answered this long before the hook's deadline is not waited for: the
hook's own checkpoint starts (it finds the tree unchanged if the daemon's lands first)."""
CHILD_SECONDS = 120
"""A checkpoint still running after this (a store locked for that long) gives up."""
RECALL_HINT = ("ctxd keeps this conversation's full history, including what the compaction summarised: "
               "call the `recall` tool of the `ctxd` MCP server to find earlier details.")


def _state_dir() -> Path:
    """The default state dir (`ctxd.places`: no settings module imported for it)."""
    from ctxd.places import default_state_dir

    return default_state_dir()


def tool_paths(agent: Agent, name: str, tool_input: Any, cwd: Path, folder: Path) -> list[str]:
    """The paths a tool names, relative to the workspace folder where they are inside it."""
    if not isinstance(tool_input, dict):
        return []
    shown = []
    for raw in dict.fromkeys(agent.tool_paths(name, tool_input)):
        path = Path(raw) if os.path.isabs(raw) else cwd / raw
        try:
            shown.append(os.path.relpath(os.path.normpath(path), folder) if _inside(path, folder) else raw)
        except ValueError:
            shown.append(raw)
    return shown


def _inside(path: Path, folder: Path) -> bool:
    normal = os.path.normpath(path)
    return normal == str(folder) or normal.startswith(str(folder).rstrip(os.sep) + os.sep)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def user_settings() -> list[str]:
    """`hooks.exclude` from the user's own config file. Loading the settings also registers the
    configured API key's value (`ctxd.redact`), so that nothing the hooks write holds it. With no
    config file (the usual case) the defaults apply: the settings module, which costs as much as
    half a Python start to import, is not imported for them."""
    from ctxd import redact
    from ctxd.places import user_config_path

    if not os.path.lexists(user_config_path()):
        redact.register(os.environ.get(redact.DEFAULT_KEY_ENV))
        return []
    from ctxd.settings import load_settings

    problems: list[Any] = []
    settings = load_settings(None, problems=problems)
    for problem in problems:
        log_once(f"settings {problem}", f"{problem}")
    return settings.hooks.exclude


def covered(agent: str, event: str, cwd: str, located: Located, exclude: list[str]) -> bool:
    """Whether the hooks act for `cwd`: in a git work tree, or a folder ctxd knows, unless
    `hooks.exclude` names it. Why not is logged once per folder."""
    from ctxd.places import MAX_POINTER_BYTES

    entry = excluded(Path(cwd), exclude)
    if entry is not None:
        kind, why = "excluded", f"{cwd} is excluded by hooks.exclude ({entry!r}): nothing done"
    elif located.known or located.git:
        return True
    elif (located.folder / ".git").exists():
        kind, why = "not followed", (f"{cwd}: the .git of {located.folder} is not followed (not a regular file of "
                                     f"at most {MAX_POINTER_BYTES} bytes naming a folder, or its commondir is not): "
                                     "nothing done")
    else:
        kind, why = "uncovered", (f"{cwd} is neither in a git work tree nor in a folder ctxd knows: nothing done "
                                  "(docs/hooks.md, which folders get checkpoints)")
    log_once(f"{kind} {cwd}", f"{agent} {event}: {why}")
    return False


def plan(agent: Agent, event: str, hook: HookInput, state_dir: Path, exclude: list[str]) -> Job | None:
    """What to do for this hook: a checkpoint to take, or None (nothing to do). `hook`: its input
    (redacted) as the agent's module read it; `state_dir` is the default one, the workspace's
    daemon may use another (`ctxd.places.find_workspace`); `exclude`: `hooks.exclude`."""
    from ctxd import marks
    from ctxd.places import find_workspace
    from ctxd.redact import redact

    action = hook.action
    session, cwd = hook.session_id, hook.cwd
    if not session or cwd is None or not os.path.isabs(cwd):
        log(f"{agent.name} {event}: no session_id or absolute cwd in the hook input: nothing done")
        return None
    located = find_workspace(Path(cwd), state_dir)
    if not covered(agent.name, event, cwd, located, exclude):
        return None
    thread = agent.thread(session)
    state_dir = located.state_dir  # a daemon's own stateDir, when it named one for this workspace
    mark = marks.read(state_dir, thread)
    if action == "turn":
        prompt = hook.prompt or ""
        turn: CheckpointTurn = {"index": int(mark.get("turn") or 0) + 1, "text": _short(prompt, 200)}
        marks.write(state_dir, thread, {**mark, "turn": turn["index"], "text": turn["text"]})
        from ctxd.ghost.checkpoint import Job  # here: most hooks (a tool that reads) take no checkpoint

        return Job(located.folder, state_dir, thread, "turn", turn=turn, message=_short(prompt, 72) or f"turn {turn['index']}")
    if action == "tool":
        name, tool_input = hook.tool_name, hook.tool_input
        if name is None or not agent.changes_files(name, tool_input):
            if not mark:
                marks.write(state_dir, thread, {"turn": 0})
            return None
        tool: CheckpointTool = {"name": name}
        if hook.tool_id is not None:
            tool["callId"] = hook.tool_id
        paths = tool_paths(agent, name, tool_input, Path(cwd), located.folder)
        if paths:
            tool["paths"] = paths
        command = agent.shell_command(name, tool_input)
        if command is not None:
            shown = _short(command, 60) if command else ""
            label = f"before {name}: {shown}" if shown else f"before {name}"
        else:
            label = f"before {name} {', '.join(paths)}".rstrip()
        in_turn: CheckpointTurn | None = (
            {"index": int(mark["turn"]), "text": redact(str(mark.get("text") or ""))} if mark.get("turn") else None)
        if not mark:
            marks.write(state_dir, thread, {"turn": 0})
        from ctxd.ghost.checkpoint import Job

        return Job(located.folder, state_dir, thread, "tool", turn=in_turn, tool=tool, message=label)
    if action in ("compacted", "after-compaction"):
        # A running daemon drops the thread's pre-compaction usage on seeing this (ctxd.sessions.hook_watch).
        marks.write(state_dir, thread, {**mark, "thread": thread, "compactedAt": time.time()})
    return None


def take_checkpoint(job: Job) -> bool:
    """Take the job's checkpoint in this process (`ctxd.ghost.checkpoint.take` decides and says
    what happened in the hooks' log); False when none was taken."""
    from ctxd.ghost.checkpoint import take

    return take(job, log=log).commit is not None


def handed_to_owner(job: Job, deadline: float) -> bool:
    """Whether the owner of the workspace's state dir took the checkpoint (docs/processes.md):
    it watches the folder, so its capture re-checks only what changed. A folder whose ledger is
    in a state dir of its own (its `.ctxd.toml`'s) is open in the owner of the default one."""
    from ctxd import ownerlink
    from ctxd.ghost.checkpoint import Outcome

    started = time.monotonic()
    message = {"op": "checkpoint", "job": job.to_wire()}
    answer = None
    for state_dir in dict.fromkeys([job.state_dir, _state_dir()]):
        try:
            answer = ownerlink.ask(state_dir, message, max(0.05, deadline - time.monotonic()))
        except ownerlink.Unsafe as error:
            log_once(f"owner refused {error}", f"{job.thread}: the owner is not asked: {error}")
            return False
        if answer is not None and answer.get("taken"):
            break
    if answer is None or not answer.get("taken"):
        return False
    log(Outcome.from_answer(answer, int((time.monotonic() - started) * 1000)).line(job, by="the owner"))
    return True


def owner_wanted() -> bool:
    """Whether a hook that took its checkpoint alone should start an owner for the hooks after it
    (`CTXD_OWNER=0`, `CTXD_HOOK_KEEPER=0` or `CTXD_TREE_WATCH=0` in the agent's environment: no)."""
    from ctxd import ownerlink

    return ownerlink.available() and all(os.environ.get(name) != "0"
                                         for name in ("CTXD_OWNER", "CTXD_HOOK_KEEPER", "CTXD_TREE_WATCH"))


def run_bounded(job: Job, deadline: float) -> None:
    """The checkpoint in a child process; wait for it until `deadline`, then leave it to finish.
    The child, done, goes on as the owner of the state dir when one is wanted (docs/processes.md),
    watching the folder for the hooks after it: detached from the agent already, it closes its
    end of the pipe, which ends the wait."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no stdio of the agent's, a session of its own, a bound of its own
        try:
            os.close(read_end)
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            import signal

            signal.alarm(CHILD_SECONDS)
            if take_checkpoint(job) and owner_wanted():
                signal.alarm(0)
                os.closerange(3, 1 << 16)  # the pipe (the hook returns) and whatever the agent passed on
                args = [sys.executable, "-m", "ctxd", "owner", "--state-dir", str(job.state_dir),
                        "--keep", str(job.folder)]
                try:
                    os.execv(args[0], args)  # it leaves at once when an owner already runs
                except OSError as error:
                    log(f"{job.thread}: no owner: {describe(error)}")
        except BaseException as error:  # noqa: BLE001 - everything is logged, nothing reaches the agent
            log(f"{job.thread}: no checkpoint: {describe(error)}")
        finally:
            os._exit(0)
    os.close(write_end)
    import select

    try:
        left = max(0.0, deadline - time.monotonic())
        if select.select([read_end], [], [], left)[0]:
            os.waitpid(pid, os.WNOHANG)  # done; or the owner now, which outlives this process
        else:
            log(f"{job.thread}: the checkpoint goes on after the hook returned (over {DEADLINE_SECONDS:g} s)")
    finally:
        os.close(read_end)


def compaction_context(agent: Agent, cwd: str | None) -> str | None:
    """The hook output after a compaction: what the agent shows the model, naming `recall`, when
    ctxd's MCP server is installed for this agent."""
    from ctxd.places import default_state_dir, find_workspace

    if not isinstance(cwd, str) or not agent.mcp_installed(find_workspace(Path(cwd), default_state_dir()).folder):
        return None
    return agent.compaction_notice(RECALL_HINT)


def main(argv: list[str]) -> int:
    started = time.monotonic()
    try:
        from ctxd import agents

        agent = agents.find(argv[0]) if len(argv) >= 2 else None
        if agent is None or not agent.hook_events:
            names = "|".join(a.name for a in agents.with_hooks())
            log(f"usage: ctxd hook {names} <event> (got {argv[:2]!r})")
            return 0
        event = argv[1]
        if agent.hook_events.get(event) == "ignore":
            return 0  # (Codex's after-turn `notify`: the turn's checkpoints are taken before it)
        data = read_input()
        if data is None:
            return 0
        seen = agent.hook_input(event, data)
        if seen is None or seen.action == "ignore":
            return 0
        from ctxd.redact import redact_json

        exclude = user_settings()  # (it also registers the configured key's value: redacted below)
        hook = agent.hook_input(event, redact_json(data))
        if hook is None:
            return 0
        if hook.action == "after-compaction":
            if line := compaction_context(agent, hook.cwd):
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            plan(agent, event, hook, _state_dir(), exclude)  # the compaction, should PostCompact not run
            return 0
        job = plan(agent, event, hook, _state_dir(), exclude)
        if job is not None and not handed_to_owner(job, started + DEADLINE_SECONDS - HAND_OVER_MARGIN):
            run_bounded(job, started + DEADLINE_SECONDS)
    except BaseException as error:  # noqa: BLE001 - a hook of ctxd's never fails the agent
        log(f"hook {argv[:2]!r}: {describe(error)}")
    return 0


def excluded(folder: Path, patterns: list[str]) -> str | None:
    """The entry of `hooks.exclude` that `folder` is, or is below; None when there is none. An
    entry is a folder or a glob pattern (`fnmatch`, where `*` also crosses `/`), absolute once a
    leading `~` is expanded; `folder` is matched as given and with its links resolved."""
    if not patterns:
        return None
    from fnmatch import fnmatchcase

    names = {os.path.abspath(folder), os.path.realpath(folder)}
    candidates = {str(p) for name in names for p in (Path(name), *Path(name).parents)}
    for entry in patterns:
        pattern = os.path.normpath(os.path.expanduser(entry))
        forms = {pattern} if any(c in pattern for c in "*?[") else {pattern, os.path.realpath(pattern)}
        if any(name == form or fnmatchcase(name, form) for name in candidates for form in forms):
            return entry
    return None
