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

The work is the owner's (docs/processes.md): this process reads its input, redacts it and hands
it over, so the agent waits for a Python start and the checkpoint, not for ctxd's imports
(`ctxd.hookplan` is what the owner runs). Only when no owner answers does the hook plan it
itself (`ctxd.hookplan`, the same code).

Whatever happens it exits 0, within 2 s: its own checkpoint runs in a child process that the hook
waits for until its deadline; past it, the hook returns and the child finishes alone. What went
wrong goes to ctxd's log (`<state dir>/hooks.log`), never to the agent. The configured API key
is redacted from the input before anything is cut from it or written, and the log escapes every
control character. Imports are lazy: the agent pays for this process at every tool call.
"""

from __future__ import annotations

import os
import sys
import time

from ctxd.hookio import describe, log, log_once, read_input
from ctxd.hookplan import compaction_context, log_usage, plan, read_hook, user_settings

TYPE_CHECKING = False  # (no typing nor pathlib on the way to the owner: each costs the agent milliseconds)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ctxd.ghost.checkpoint import Job

DEADLINE_SECONDS = 1.5
"""The hook returns by then (the agent's bound is 2 s, and starting Python takes some of it)."""
HAND_OVER_MARGIN = 0.3
"""A daemon that has not answered this long before the hook's deadline is not waited for: the
hook's own checkpoint starts (it finds the tree unchanged if the daemon's lands first)."""
CHILD_SECONDS = 120
"""A checkpoint still running after this (a store locked for that long) gives up."""


def _state_dir() -> Path:
    """The default state dir (`ctxd.places`: no settings module imported for it)."""
    from ctxd.places import default_state_dir

    return default_state_dir()


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

            def expired(_signal: int, _frame: object) -> None:  # said, and nothing of it left running (a git on a FIFO)
                log(f"{job.thread}: no checkpoint: not done after {CHILD_SECONDS} s; stopped")
                os.killpg(0, signal.SIGKILL)

            signal.signal(signal.SIGALRM, expired)
            signal.alarm(CHILD_SECONDS)
            if take_checkpoint(job) and owner_wanted():
                signal.alarm(0)
                os.closerange(3, 1 << 16)  # the pipe (the hook returns) and whatever the agent passed on
                from ctxd.places import ctxd_command  # (not `-m ctxd`: this runs in the agent's folder)

                args = [*ctxd_command(), "owner", "--state-dir", str(job.state_dir), "--keep", str(job.folder)]
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


def given_to_owner(agent: str, event: str, data: Any, exclude: list[str], deadline: float) -> Job | bool:
    """Whether the owner of the default state dir did the hook's work (`ctxd.server.owner`, op
    "hook"); or the checkpoint job it planned for a folder whose ledger is in a state dir of its
    own (its `.ctxd.toml`'s), for that one's owner. False: no owner did it by `deadline` (none
    runs, it is leaving or hangs, the input is too large to hand over), and the hook does it
    itself."""
    from ctxd import ownerlink
    from ctxd.places import state_dir_name

    message = {"op": "hook", "agent": agent, "event": event, "input": data, "exclude": exclude}
    try:
        conn = ownerlink.reach(state_dir_name(), max(0.05, deadline - time.monotonic()), start=False)
    except ownerlink.Unsafe as error:
        log_once(f"owner refused {error}", f"{agent} {event}: the owner is not asked: {error}")
        return False
    if conn is None:
        return False
    try:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        ownerlink.send(conn, message)
        answer = ownerlink.read_line(conn, deadline)
    except OSError:  # (a Write of a large file is over the owner's bound: planned here)
        return False
    finally:
        conn.close()
    if answer is None:  # it crashed, or hangs: the hook's own checkpoint (it finds the tree unchanged if one lands)
        if time.monotonic() >= deadline:
            log(f"{agent} {event}: the owner did not answer in time; the hook does it itself")
        return False
    if isinstance(answer.get("line"), str):
        log(answer["line"])
    if answer.get("done") is True:
        return True
    if answer.get("job") is not None:
        from ctxd.ghost.checkpoint import Job

        try:
            return Job.from_wire(answer["job"])
        except ValueError:
            return False
    return False


def main(argv: list[str]) -> int:
    started = time.monotonic()
    try:
        if len(argv) < 2:
            log_usage(argv)
            return 0
        agent_name, event = argv[0], argv[1]
        data = read_input()
        if data is None:
            return 0
        from ctxd.redact import redact_json

        exclude = user_settings()  # (it also registers the configured key's value: redacted here, before it goes anywhere)
        data = redact_json(data)
        given = given_to_owner(agent_name, event, data, exclude, started + DEADLINE_SECONDS - HAND_OVER_MARGIN)
        if given is True:
            return 0
        if given is not False:
            job: Job | None = given
        else:
            found = read_hook(agent_name, event, data)
            if found is None:
                return 0
            agent, hook = found
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
