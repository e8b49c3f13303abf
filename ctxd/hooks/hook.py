"""`ctxd hook <agent> <event>`: what the agents' hooks run. It never blocks or fails the agent.

It reads the hook's JSON on standard input and, in a git work tree or a folder ctxd knows
(`ctxd.hooks.locate`), unless the user's `hooks.exclude` names it:
- `UserPromptSubmit`: a checkpoint (trigger "turn") labelled with the turn's first words;
- `PreToolUse` of a tool that can change files (by name; a shell command always): a checkpoint
  (trigger "tool") labelled with the tool and the paths it names;
- `PostCompact`: notes the compaction for the session's usage;
- `SessionStart` with source "compact": one line of additional context telling the model that
  what was compacted can be recalled (only when ctxd's MCP server is installed for the agent).

Whatever happens it exits 0, within 2 s: the checkpoint runs in a child process that the hook
waits for until its deadline; past it, the hook returns and the child finishes alone. What went
wrong goes to ctxd's log (`<state dir>/hooks.log`), never to the agent. The configured API key
is redacted from the input before anything is cut from it or written, and the log escapes every
control character. Imports are lazy: the agent pays for this process at every tool call.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxd.ghost.checkpoint import Job
    from ctxd.hooks.locate import Located
    from ctxd.protocol.shapes import CheckpointTool, CheckpointTurn

DEADLINE_SECONDS = 1.5
"""The hook returns by then (the agent's bound is 2 s, and starting Python takes some of it)."""
HAND_OVER_MARGIN = 0.3
"""A daemon that has not answered this long before the hook's deadline is not waited for: the
hook's own checkpoint starts (it finds the tree unchanged if the daemon's lands first)."""
CHILD_SECONDS = 120
"""A checkpoint still running after this (a store locked for that long) gives up."""
MAX_INPUT_BYTES = 4 * 1024 * 1024
AGENTS = ("claude", "codex")
CHANGES_FILES = {
    "claude": {"Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"},
    "codex": {"Bash", "apply_patch", "shell", "local_shell", "exec_command", "unified_exec", "write_stdin",
              "shell_command"},
}
"""Tools that can change the working tree. A shell command can change anything: always one."""
SHELLS = {"Bash", "shell", "local_shell", "exec_command", "unified_exec", "write_stdin", "shell_command"}
_PATCH_PATH = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+?)\s*$", re.M)
RECALL_HINT = ("ctxd keeps this conversation's full history, including what the compaction summarised: "
               "call the `recall` tool of the `ctxd` MCP server to find earlier details.")


def _state_dir() -> Path:
    """`ctxd.settings.default_state_dir`, without importing the settings module for it."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ctxd"


def log(message: str) -> None:
    """One line in ctxd's hook log; a log that cannot be written is not the agent's problem. The
    message may quote the agent's cwd, prompt or command: the configured API key is redacted and
    every control character escaped (a newline would forge a line, an escape sequence act on the
    terminal that shows the log)."""
    from ctxd.redact import redact
    from ctxd.terminal import safe

    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {safe(redact(message))}\n".encode()
    try:
        path = _state_dir() / "hooks.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        # Never through a link, never blocking on a FIFO planted in its place (ENXIO), one write per line.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


def log_once(key: str, message: str) -> None:
    """`log(message)` the first time `key` is logged (a folder the hooks skip, a settings problem):
    an agent's every tool call must not add the same line."""
    from ctxd.hooks.marks import first_time

    try:
        first = first_time(_state_dir(), key)
    except OSError:
        first = True  # no marker can be written: nor, likely, the log
    if first:
        log(message)


def read_input(stream: Any = None, timeout: float = 1.0) -> dict[str, Any] | None:
    """The hook's JSON object, or None (nothing within `timeout`, too large, not a JSON object)."""
    import select

    stream = stream or sys.stdin.buffer
    chunks: list[bytes] = []
    size = 0
    end = time.monotonic() + timeout
    try:
        fd = stream.fileno()
        while size <= MAX_INPUT_BYTES:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except (OSError, ValueError):
        return None
    if size > MAX_INPUT_BYTES:
        log(f"hook input over {MAX_INPUT_BYTES} bytes: ignored")
        return None
    try:
        value = json.loads(b"".join(chunks))
    except ValueError:
        log("hook input is not JSON: ignored")
        return None
    if not isinstance(value, dict):
        log("hook input is not a JSON object: ignored")
        return None
    return value


def tool_paths(agent: str, name: str, tool_input: Any, cwd: Path, folder: Path) -> list[str]:
    """The paths a tool names, relative to the workspace folder where they are inside it."""
    if not isinstance(tool_input, dict):
        return []
    found: list[str] = []
    if name == "apply_patch":
        text = tool_input.get("command") or tool_input.get("input") or tool_input.get("patch")
        if isinstance(text, list):
            text = "\n".join(str(t) for t in text)
        if isinstance(text, str):
            found = _PATCH_PATH.findall(text)
    else:
        for key in ("file_path", "notebook_path", "path"):
            if isinstance(tool_input.get(key), str):
                found.append(tool_input[key])
    shown = []
    for raw in dict.fromkeys(found):
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


def _user_config() -> Path:
    """`ctxd.settings.user_config_path`, without importing the settings module for it."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ctxd" / "config.toml"


def user_settings() -> list[str]:
    """`hooks.exclude` from the user's own config file. Loading the settings also registers the
    configured API key's value (`ctxd.redact`), so that nothing the hooks write holds it. With no
    config file (the usual case) the defaults apply: the settings module, which costs as much as
    half a Python start to import, is not imported for them."""
    from ctxd import redact

    if not os.path.lexists(_user_config()):
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
    from ctxd.hooks.locate import MAX_POINTER_BYTES, excluded

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


def plan(agent: str, event: str, data: dict[str, Any], state_dir: Path) -> Job | None:
    """What to do for this hook: a checkpoint to take, or None (nothing to do). `state_dir` is the
    default one; the workspace's daemon may use another (`ctxd.hooks.locate`). Every text of the
    hook input is redacted before anything is cut from it or written."""
    from ctxd.hooks import marks
    from ctxd.hooks.locate import find_workspace
    from ctxd.redact import redact, redact_json

    exclude = user_settings()
    data = redact_json(data)
    session = data.get("session_id")
    cwd = data.get("cwd")
    if not isinstance(session, str) or not session or not isinstance(cwd, str) or not os.path.isabs(cwd):
        log(f"{agent} {event}: no session_id or absolute cwd in the hook input: nothing done")
        return None
    located = find_workspace(Path(cwd), state_dir)
    if not covered(agent, event, cwd, located, exclude):
        return None
    thread = f"{agent}:{session}"
    state_dir = located.state_dir  # a daemon's own stateDir, when it named one for this workspace
    mark = marks.read(state_dir, thread)
    if event == "UserPromptSubmit":
        raw_prompt = data.get("prompt")
        prompt = raw_prompt if isinstance(raw_prompt, str) else ""
        turn: CheckpointTurn = {"index": int(mark.get("turn") or 0) + 1, "text": _short(prompt, 200)}
        marks.write(state_dir, thread, {**mark, "turn": turn["index"], "text": turn["text"]})
        from ctxd.ghost.checkpoint import Job  # here: most hooks (a tool that reads) take no checkpoint

        return Job(located.folder, state_dir, thread, "turn", turn=turn, message=_short(prompt, 72) or f"turn {turn['index']}")
    if event == "PreToolUse":
        name = data.get("tool_name")
        if not isinstance(name, str) or name not in CHANGES_FILES[agent]:
            if not mark:
                marks.write(state_dir, thread, {"turn": 0})
            return None
        tool: CheckpointTool = {"name": name}
        if isinstance(data.get("tool_use_id"), str):
            tool["callId"] = data["tool_use_id"]
        tool_input = data.get("tool_input")
        paths = tool_paths(agent, name, tool_input, Path(cwd), located.folder)
        if paths:
            tool["paths"] = paths
        if name in SHELLS:
            command = tool_input.get("command") if isinstance(tool_input, dict) else None
            if isinstance(command, list):
                command = " ".join(str(c) for c in command)
            shown = _short(command, 60) if isinstance(command, str) and command else ""
            label = f"before {name}: {shown}" if shown else f"before {name}"
        else:
            label = f"before {name} {', '.join(paths)}".rstrip()
        in_turn: CheckpointTurn | None = (
            {"index": int(mark["turn"]), "text": redact(str(mark.get("text") or ""))} if mark.get("turn") else None)
        if not mark:
            marks.write(state_dir, thread, {"turn": 0})
        from ctxd.ghost.checkpoint import Job

        return Job(located.folder, state_dir, thread, "tool", turn=in_turn, tool=tool, message=label)
    if event == "PostCompact":
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


def describe(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return f"{type(error).__name__}: {message}"


def compaction_context(agent: str, data: dict[str, Any]) -> str | None:
    """The hook output after a compaction: additional context naming `recall`, when ctxd's MCP
    server is installed for this agent."""
    from ctxd.hooks.install import mcp_installed

    cwd = data.get("cwd")
    if not isinstance(cwd, str) or not mcp_installed(agent, Path(cwd)):
        return None
    return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": RECALL_HINT}})


def main(argv: list[str]) -> int:
    started = time.monotonic()
    try:
        if len(argv) < 2 or argv[0] not in AGENTS:
            log(f"usage: ctxd hook claude|codex <event> (got {argv[:2]!r})")
            return 0
        agent, event = argv[0], argv[1]
        if agent == "codex" and event == "notify":
            return 0  # Codex's after-turn program: the turn's checkpoints are taken before it
        data = read_input()
        if data is None:
            return 0
        if event == "SessionStart":
            if data.get("source") == "compact":
                if line := compaction_context(agent, data):
                    sys.stdout.write(line + "\n")
                    sys.stdout.flush()
                plan(agent, "PostCompact", data, _state_dir())  # the compaction, should PostCompact not run
            return 0
        job = plan(agent, event, data, _state_dir())
        if job is not None and not handed_to_owner(job, started + DEADLINE_SECONDS - HAND_OVER_MARGIN):
            run_bounded(job, started + DEADLINE_SECONDS)
    except BaseException as error:  # noqa: BLE001 - a hook of ctxd's never fails the agent
        log(f"hook {argv[:2]!r}: {describe(error)}")
    return 0
