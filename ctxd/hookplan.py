"""What a hook does, from the agent's input to a checkpoint job (`ctxd.ghost.checkpoint.Job`) or
nothing: which workspace the folder is in and whether the hooks cover it (`hooks.exclude`), the
turn's index and label, the tool's paths. The owner runs this for the hooks it is handed
(docs/processes.md), and a hook runs it itself only when no owner answers: so the hook process
itself imports neither the agents' modules nor ctxd's checkpoint code."""

from __future__ import annotations

import os
import time

from ctxd.hookio import log, log_once

TYPE_CHECKING = False  # (a hook imports this for `user_settings`: no typing, no pathlib on its way to the owner)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ctxd.agents.base import Agent, HookInput
    from ctxd.ghost.checkpoint import Job
    from ctxd.places import Located
    from ctxd.protocol.shapes import CheckpointTool, CheckpointTurn

MAX_TOOL_PATHS = 50
"""The paths of a tool a checkpoint keeps (`ctxd.ghost.take.checkpoint_meta`): a patch naming tens of
thousands of files cost the hook a second before its deadline counted, and wrote megabytes of label
into the log at each call."""
RECALL_HINT = ("ctxd keeps this conversation's full history, including what the compaction summarised: "
               "call the `recall` tool of the `ctxd` MCP server to find earlier details.")


def tool_paths(agent: Agent, name: str, tool_input: Any, cwd: Path, folder: Path) -> list[str]:
    """The paths a tool names, relative to the workspace folder where they are inside it."""
    from pathlib import Path

    if not isinstance(tool_input, dict):
        return []
    shown = []
    for raw in list(dict.fromkeys(agent.tool_paths(name, tool_input)))[:MAX_TOOL_PATHS]:
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
    from ctxd.places import config_file_name

    if not os.path.lexists(config_file_name()):
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
    from pathlib import Path

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
    from pathlib import Path

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
            label = _short(f"before {name} {', '.join(paths)}".rstrip(), 200)
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


def log_usage(got: list[str]) -> None:
    """How `ctxd hook` is run, in the hooks' log (never to the agent)."""
    from ctxd import agents

    names = "|".join(a.name for a in agents.with_hooks())
    log(f"usage: ctxd hook {names} <event> (got {got!r})")


def read_hook(agent_name: str, event: str, data: Any) -> tuple[Agent, HookInput] | None:
    """The agent's module's reading of a hook's input (redacted already); None when there is
    nothing to do: no agent of that name with hooks (logged), an event it ignores, or not its input."""
    from ctxd import agents

    agent = agents.find(agent_name)
    if agent is None or not agent.hook_events:
        log_usage([agent_name, event])
        return None
    if agent.hook_events.get(event) == "ignore":
        return None
    hook = agent.hook_input(event, data)
    if hook is None or hook.action == "ignore":
        return None
    return agent, hook


def compaction_context(agent: Agent, cwd: str | None) -> str | None:
    """The hook output after a compaction: what the agent shows the model, naming `recall`, when
    ctxd's MCP server is installed for this agent."""
    from pathlib import Path

    from ctxd.places import default_state_dir, find_workspace

    if not isinstance(cwd, str) or not agent.mcp_installed(find_workspace(Path(cwd), default_state_dir()).folder):
        return None
    return agent.compaction_notice(RECALL_HINT)


def excluded(folder: Path, patterns: list[str]) -> str | None:
    """The entry of `hooks.exclude` that `folder` is, or is below; None when there is none. An
    entry is a folder or a glob pattern (`fnmatch`, where `*` also crosses `/`), absolute once a
    leading `~` is expanded; `folder` is matched as given and with its links resolved."""
    if not patterns:
        return None
    from fnmatch import fnmatchcase
    from pathlib import Path

    names = {os.path.abspath(folder), os.path.realpath(folder)}
    candidates = {str(p) for name in names for p in (Path(name), *Path(name).parents)}
    for entry in patterns:
        pattern = os.path.normpath(os.path.expanduser(entry))
        forms = {pattern} if any(c in pattern for c in "*?[") else {pattern, os.path.realpath(pattern)}
        if any(name == form or fnmatchcase(name, form) for name in candidates for form in forms):
            return entry
    return None
