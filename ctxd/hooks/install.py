"""`ctxd hooks install | uninstall | status`: ctxd's entries in the agents' own configuration.

Every agent with hooks (ctxd/agents) says which files hold its hooks, its status line and ctxd's MCP
server, per scope, and how ctxd's entries go in and out (`Agent.config_changes`); here they are
planned together, shown (`--dry-run`), and written all or nothing with a backup of each file
(`ctxd.agents.config.plan`), one install or uninstall at a time (`one_at_a_time`: two at once left
some files of each). Every command starts ctxd by absolute path (`ctxd.places.ctxd_command`).

What was in a file besides ctxd's entries stays byte for byte, line ends included:
- a TOML file (Codex's config.toml) is edited as text, never re-serialised
  (`ctxd.agents.config.codex_toml`): uninstall removes ctxd's own tables and keys wherever the
  agent's editor moved them, and nothing else;
- a JSON file (Claude Code's settings) is parsed (key order kept) and written back in the file's
  own indentation and line ends (`ctxd.agents.config.json_settings`). A copy of the file as it was
  is kept in ctxd's state directory; uninstall writes it back byte for byte when the file is still
  what install wrote, else removes ctxd's entries from the JSON. A file with nothing of ctxd's in
  it is not rewritten;
- a status line of the user's is carried inside ctxd's command (base64 of its JSON): ctxd's
  status line runs it and prints its output after ctxd's; uninstall puts that entry back exactly.

Files are read and written by `ctxd.agents.config.files`: bounded reads of regular files, no link
followed out of a project, all or nothing. Install never trusts anything on the user's behalf: it
says what the user must do (Codex's hook review, a trusted project, Claude's approval of a
project's MCP servers).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ctxd import agents
from ctxd.agents.config.files import InstallError
from ctxd.agents.config.plan import apply, diff, one_at_a_time
from ctxd.places import ctxd_command

if TYPE_CHECKING:
    from ctxd.agents.base import Action, Agent, Scope
    from ctxd.agents.config.plan import ConfigChange

__all__ = ["InstallError", "main"]


def plan(action: Action, chosen: list[Agent], scope: Scope, project: Path, state_dir: Path,
         ctxd: list[str]) -> tuple[list[ConfigChange], list[str]]:
    """Every chosen agent's changes (those that change something) and its notes."""
    changes: list[ConfigChange] = []
    notes: list[str] = []
    for agent in chosen:
        more, said = agent.config_changes(action, scope, project, state_dir, ctxd)
        changes += more
        notes += said
    return [c for c in changes if c.before != c.after], notes


def status(chosen: list[Agent], project: Path) -> list[str]:
    """Each agent's line per scope, ending with whether the agent is on this machine: the editors
    offer the agents that are, as `install` with no `--agent` does."""
    scopes: tuple[Scope, ...] = ("user", "project")
    return [f"{line}; {here_clause(agent)}" for agent in chosen for scope in scopes
            if (line := agent.config_status(scope, project))]


def here_clause(agent: Agent) -> str:
    """`on this machine yes`, or `on this machine no (no folder …)`: the last clause of a status line."""
    if agent.present(os.environ):
        return "on this machine yes"
    return f"on this machine no ({no_folder(agent)})"


def no_folder(agent: Agent) -> str:
    return f"no folder {' or '.join(map(str, agent.marks(os.environ)))}"


def present(hooked: list[Agent]) -> tuple[list[Agent], list[Agent]]:
    """(the agents on this machine, the others): what `install` with no `--agent` installs into.
    Uninstall and status always cover every agent, so nothing of ctxd's is left behind."""
    here = [agent for agent in hooked if agent.present(os.environ)]
    return here, [agent for agent in hooked if agent not in here]


def skipped_lines(skipped: list[Agent], scope: Scope, found: bool) -> list[str]:
    """Which agents the default install left out, why, and how to install into one anyway."""
    if not skipped:
        return []
    lines = [f"skipped {agent.title}: not on this machine ({no_folder(agent)})" for agent in skipped]
    if not found:
        lines.append("no agent found on this machine: nothing to install")
    where = " --scope project" if scope == "project" else ""
    lines.append(f"to install into one anyway: ctxd hooks install --agent NAME{where} "
                 f"(NAME: {', '.join(agent.name for agent in skipped)}; --agent all: every agent)")
    return lines


def covered_line() -> str:
    """Which folders hooks installed for the user act in, and how to leave one out."""
    from ctxd.places import user_config_path

    return ("covered: every git work tree (and every folder ctxd knows) an agent works in; to leave one out, "
            f"add it to hooks.exclude in {user_config_path()}")


def main(argv: list[str]) -> int:
    # By the names users know, whatever the registry's order: Claude Code before Codex, as ctxd hooks
    # always listed them (the editors show this order).
    hooked = sorted(agents.with_hooks(), key=lambda agent: agent.title)
    parser = argparse.ArgumentParser(prog="ctxd hooks", description="ctxd's hooks, status line and MCP server "
                                     f"in the agents' own configuration ({', '.join(a.title for a in hooked)}).")
    parser.add_argument("action", choices=("install", "uninstall", "status"))
    parser.add_argument("--agent", choices=(*(a.name for a in hooked), "all"), default=None,
                        help="one agent, or all of them, present or not (default: install into the agents on this "
                        "machine; uninstall and status: all)")
    parser.add_argument("--scope", choices=("user", "project"), default="user")
    parser.add_argument("--dry-run", action="store_true", help="print the change as a diff; write nothing")
    args = parser.parse_args(argv)
    from ctxd.places import NoFolder, asked_folder, default_state_dir, find_workspace

    state_dir = default_state_dir()
    chosen = hooked if args.agent in (None, "all") else [agents.get(args.agent)]
    try:
        project = find_workspace(asked_folder(None), state_dir).folder
    except NoFolder as error:
        from ctxd.terminal import safe

        print(safe(f"ctxd hooks {args.action}: {error}"), file=sys.stderr)
        return 2
    if args.action == "status":
        print("\n".join(status(chosen, project)))
        return 0
    if args.action == "install" and args.agent is None:
        chosen, skipped = present(chosen)
        for line in skipped_lines(skipped, args.scope, found=bool(chosen)):
            print(line)
        if not chosen:
            return 0
    try:
        if args.dry_run:  # (the files' lines around the change: a key kept in one is not printed)
            from ctxd import redact
            from ctxd.settings import load_settings

            changes, notes = plan(args.action, chosen, args.scope, project, state_dir, ctxd_command())
            load_settings(None, {}, [])  # registers the configured API key
            sys.stdout.write(redact.redact(diff(changes)) or "nothing to change\n")
            return 0
        with one_at_a_time(state_dir):  # (another install's files are read once it has written them all)
            changes, notes = plan(args.action, chosen, args.scope, project, state_dir, ctxd_command())
            apply(changes, args.action, state_dir)
    except InstallError as error:
        print(f"ctxd hooks {args.action}: {error}", file=sys.stderr)
        return 1
    if args.action == "install" and args.scope == "project":
        _know(project, state_dir)
    for change in changes:
        print(f"{'wrote' if change.after is not None else 'removed'} {change.path}")
    if not changes:
        print("nothing to change")
    if args.action == "install":
        if args.scope == "user":
            print(covered_line())
        for note in notes:
            print(f"note: {note}")
    return 0


def _know(project: Path, state_dir: Path) -> None:
    """Create the project's snapshot store, so that its hooks know the workspace from the start."""
    from ctxd.errors import CtxdError
    from ctxd.ghost.gitstore import open_site

    try:
        open_site(project, state_dir)
    except CtxdError as error:
        print(f"note: no snapshot store for {project}: {error.message}", file=sys.stderr)
