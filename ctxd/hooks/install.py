"""`ctxd hooks install | uninstall | status`: ctxd's entries in the agents' own configuration.

Claude Code (settings.json: `hooks`, `statusLine`; the MCP server in `.mcp.json` for a project,
`~/.claude.json` for the user) and Codex (config.toml: `[[hooks.*]]` tables, `notify`,
`[mcp_servers.ctxd]`). Every command names the `ctxd` executable by absolute path.

What was in a file besides ctxd's entries stays byte for byte:
- Codex's TOML is edited as text, never re-serialised: ctxd's tables are one block appended at
  the end and its `notify` one block inserted at the top (a top-level key must come before the
  first table), each between marker comments; uninstall cuts exactly those bytes out. The result
  is parsed before it is written: a file the block would break is left alone with an error.
- Claude's JSON is parsed (key order kept) and written back in the file's own indentation. A copy
  of the file as it was is kept in ctxd's state directory; uninstall writes it back byte for byte
  when the file is still what install wrote, else removes ctxd's entries from the JSON.
- A user's own `statusLine` is carried inside ctxd's command (base64 of its JSON): ctxd's status
  line runs it and prints its output after ctxd's; uninstall puts that entry back exactly.

Install never trusts anything on the user's behalf: it says what the user must do (Codex's hook
review, a trusted project, Claude's approval of a project's MCP servers).
"""

from __future__ import annotations

import argparse
import base64
import difflib
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLAUDE_EVENTS = {  # event -> matcher (None: every occurrence)
    "UserPromptSubmit": None,
    "PreToolUse": "Write|Edit|MultiEdit|NotebookEdit|Bash",
    "PostCompact": None,
    "SessionStart": "compact",
}
CODEX_EVENTS = {
    "UserPromptSubmit": None,
    "PreToolUse": "^(Bash|apply_patch|shell|local_shell|exec_command|unified_exec|write_stdin|shell_command)$",
    "PostCompact": None,
    "SessionStart": "compact",
}
HOOK_TIMEOUT_SECONDS = 10
"""What the agent waits at most (the hook itself returns within 2 s)."""
BLOCK_START = "# >>> ctxd: written by `ctxd hooks install`; `ctxd hooks uninstall` removes this block\n"
BLOCK_END = "# <<< ctxd\n"
NOTIFY_START = "# >>> ctxd notify: written by `ctxd hooks install`; `ctxd hooks uninstall` removes it\n"
NOTIFY_END = "# <<< ctxd notify\n"
_OURS = re.compile(r"ctxd\S*['\"]? hook (claude|codex) [A-Za-z]+$")
_STATUS = re.compile(r"ctxd\S*['\"]? statusline(?: --user ([A-Za-z0-9_=-]+))?$")


class InstallError(Exception):
    """A file ctxd cannot edit safely (not parseable, a conflicting entry): nothing is written."""


def ctxd_command() -> list[str]:
    """The `ctxd` executable by absolute path: the one running, else the one on PATH, else this
    Python running the package."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "ctxd" and os.path.isfile(argv0):
        return [os.path.abspath(argv0)]
    found = shutil.which("ctxd")
    if found:
        return [os.path.abspath(found)]
    return [os.path.abspath(sys.executable), "-m", "ctxd"]


def _shell(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


# --- where the files are ------------------------------------------------------------------------


def claude_home() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def claude_files(scope: str, project: Path) -> tuple[Path, Path]:
    """(settings.json, the file holding its MCP servers) for a scope."""
    if scope == "project":
        return project / ".claude" / "settings.json", project / ".mcp.json"
    home = claude_home()
    state = home / ".claude.json" if os.environ.get("CLAUDE_CONFIG_DIR") else Path.home() / ".claude.json"
    return home / "settings.json", state


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def codex_file(scope: str, project: Path) -> Path:
    return project / ".codex" / "config.toml" if scope == "project" else codex_home() / "config.toml"


# --- Claude Code: JSON ----------------------------------------------------------------------------


def _load_json(path: Path, text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        raise InstallError(f"{path}: not valid JSON ({error}); left unchanged") from None
    if not isinstance(value, dict):
        raise InstallError(f"{path}: not a JSON object; left unchanged")
    return value


def _dump_json(value: dict[str, Any], like: str | None) -> str:
    indent: int | str = 2
    if like:
        match = re.search(r"\n([ \t]+)\S", like)
        if match:
            indent = match.group(1) if "\t" in match.group(1) else len(match.group(1))
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return text + "\n" if like is None or like.endswith("\n") else text


def _is_ours(group: Any) -> bool:
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list) or not group["hooks"]:
        return False
    return all(isinstance(h, dict) and isinstance(h.get("command"), str) and _OURS.search(h["command"])
               for h in group["hooks"])


def claude_settings_add(settings: dict[str, Any], ctxd: list[str]) -> dict[str, Any]:
    hooks = settings.get("hooks")
    if hooks is None:
        hooks = settings["hooks"] = {}
    if not isinstance(hooks, dict):
        raise InstallError("settings.json: `hooks` is not an object; left unchanged")
    for event, matcher in CLAUDE_EVENTS.items():
        group: dict[str, Any] = {} if matcher is None else {"matcher": matcher}
        group["hooks"] = [{"type": "command", "command": _shell([*ctxd, "hook", "claude", event]),
                           "timeout": HOOK_TIMEOUT_SECONDS}]
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise InstallError(f"settings.json: `hooks.{event}` is not a list; left unchanged")
        mine = [i for i, g in enumerate(groups) if _is_ours(g)]
        if mine:
            groups[mine[0]] = group
        else:
            groups.append(group)
    line = settings.get("statusLine")
    user = None
    if isinstance(line, dict) and isinstance(line.get("command"), str) and (m := _STATUS.search(line["command"])):
        user = m.group(1)  # ctxd's already: keep the user's entry it carries
    elif line is not None:
        user = base64.urlsafe_b64encode(json.dumps(line, ensure_ascii=False).encode()).decode()
    command = [*ctxd, "statusline"] + (["--user", user] if user else [])
    settings["statusLine"] = {"type": "command", "command": _shell(command), "padding": 0}
    return settings


def claude_settings_remove(settings: dict[str, Any]) -> dict[str, Any]:
    hooks = settings.get("hooks")
    if isinstance(hooks, dict):
        for event in CLAUDE_EVENTS:
            groups = hooks.get(event)
            if isinstance(groups, list):
                groups[:] = [g for g in groups if not _is_ours(g)]
                if not groups:
                    del hooks[event]
        if not hooks:
            del settings["hooks"]
    line = settings.get("statusLine")
    if isinstance(line, dict) and isinstance(line.get("command"), str) and (m := _STATUS.search(line["command"])):
        if m.group(1):
            settings["statusLine"] = user_status_line(m.group(1))
        else:
            del settings["statusLine"]
    return settings


def user_status_line(encoded: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(encoded.encode()).decode())


def mcp_entry(ctxd: list[str]) -> dict[str, Any]:
    return {"type": "stdio", "command": ctxd[0], "args": [*ctxd[1:], "mcp"]}


def _is_our_mcp(entry: Any) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("command"), str)
            and isinstance(entry.get("args"), list) and entry["args"][-1:] == ["mcp"]
            and ("ctxd" in entry["command"] or "ctxd" in entry["args"]))


def claude_mcp_add(state: dict[str, Any], ctxd: list[str]) -> dict[str, Any]:
    servers = state.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError("`mcpServers` is not an object; left unchanged")
    if "ctxd" in servers and not _is_our_mcp(servers["ctxd"]):
        raise InstallError("an MCP server named `ctxd` that is not ctxd's is configured; left unchanged")
    servers["ctxd"] = mcp_entry(ctxd)
    return state


def claude_mcp_remove(state: dict[str, Any]) -> dict[str, Any]:
    servers = state.get("mcpServers")
    if isinstance(servers, dict) and _is_our_mcp(servers.get("ctxd")):
        del servers["ctxd"]
        if not servers:
            del state["mcpServers"]
    return state


# --- Codex: TOML, as text -------------------------------------------------------------------------


def _toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def codex_block(ctxd: list[str], with_mcp: bool) -> str:
    lines = ["\n", BLOCK_START]
    for event, matcher in CODEX_EVENTS.items():
        lines.append(f"[[hooks.{event}]]\n")
        if matcher is not None:
            lines.append(f"matcher = {_toml_str(matcher)}\n")
        lines.append(f"[[hooks.{event}.hooks]]\n")
        lines.append('type = "command"\n')
        lines.append(f"command = {_toml_str(_shell([*ctxd, 'hook', 'codex', event]))}\n")
        lines.append(f"timeout = {HOOK_TIMEOUT_SECONDS}\n\n")
    if with_mcp:
        lines.append("[mcp_servers.ctxd]\n")
        lines.append(f"command = {_toml_str(ctxd[0])}\n")
        lines.append(f"args = [{', '.join(_toml_str(a) for a in [*ctxd[1:], 'mcp'])}]\n")
    lines.append(BLOCK_END)
    return "".join(lines)


def notify_block(ctxd: list[str]) -> str:
    words = ", ".join(_toml_str(w) for w in [*ctxd, "hook", "codex", "notify"])
    return f"{NOTIFY_START}notify = [{words}]\n{NOTIFY_END}"


def _cut(text: str, start: str, end: str, lead: str = "") -> str:
    """`text` without the block between `lead + start` and `end` (the first of them), if any."""
    begin = text.find(lead + start)
    if begin < 0:
        return text
    finish = text.find(end, begin)
    if finish < 0:
        raise InstallError(f"ctxd's block starts but does not end (no {end.strip()!r}); left unchanged")
    return text[:begin] + text[finish + len(end):]


def codex_remove(text: str) -> str:
    text = _cut(text, BLOCK_START, BLOCK_END, lead="\n")
    return _cut(text, NOTIFY_START, NOTIFY_END)


def _parse_toml(path: Path, text: str) -> dict[str, Any]:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InstallError(f"{path}: not valid TOML ({error}); left unchanged") from None


def codex_add(path: Path, text: str | None, ctxd: list[str]) -> tuple[str, list[str]]:
    """The file with ctxd's blocks (replacing earlier ones), and notes for the user."""
    original = text or ""
    base = codex_remove(original)
    parsed = _parse_toml(path, base)
    notes = []
    with_mcp = "ctxd" not in (parsed.get("mcp_servers") or {})
    if not with_mcp:
        notes.append(f"{path}: an [mcp_servers.ctxd] of your own is configured; ctxd's was not added")
    result = base
    if "notify" in parsed:
        notes.append(f"{path}: you have a `notify` program of your own; ctxd's was not added (it is optional)")
    else:
        result = notify_block(ctxd) + result
    result += codex_block(ctxd, with_mcp)
    try:
        _parse_toml(path, result)
    except InstallError as error:
        raise InstallError(f"{path}: ctxd's hooks would not fit with what the file defines ({error}); "
                           "left unchanged") from None
    return result, notes


# --- the plan: files and their new text -----------------------------------------------------------


@dataclass
class Change:
    path: Path
    before: str | None  # None: the file does not exist
    after: str | None  # None: remove the file (it was created by install and is now empty)


def _read(path: Path) -> str | None:
    try:
        return path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise InstallError(f"{path}: cannot be read ({error}); left unchanged") from None


def _backup_path(state_dir: Path, path: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(path.absolute())).hexdigest()[:24]
    return state_dir / "hooks" / "backups" / f"{path.name}-{digest}.json"


def _json_install(path: Path, edit: Any, ctxd: list[str]) -> Change:
    before = _read(path)
    value = edit(_load_json(path, before), ctxd)
    return Change(path, before, _dump_json(value, before))


def _json_uninstall(path: Path, edit: Any, state_dir: Path) -> Change:
    before = _read(path)
    if before is None:
        return Change(path, None, None)
    value = edit(_load_json(path, before))
    backup = _read_backup(state_dir, path) or {}
    original = backup.get("original")
    if backup.get("installed") == before:  # untouched since install: exactly what was there
        if not backup.get("existed"):
            return Change(path, before, None)
        if original is not None:
            return Change(path, before, original)
    if original is not None:
        try:
            if json.dumps(json.loads(original)) == json.dumps(value):
                return Change(path, before, original)  # changed since, and changed back
        except ValueError:
            pass
    if backup and not backup.get("existed") and not value:
        return Change(path, before, None)  # install created it and only ctxd's entries were left
    return Change(path, before, _dump_json(value, before))


def _read_backup(state_dir: Path, path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(_backup_path(state_dir, path).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and value.get("path") == str(path.absolute()) else None


def plan(action: str, agents: list[str], scope: str, project: Path, state_dir: Path,
         ctxd: list[str]) -> tuple[list[Change], list[str]]:
    changes: list[Change] = []
    notes: list[str] = []
    for agent in agents:
        if agent == "claude":
            settings, mcp = claude_files(scope, project)
            if action == "install":
                changes.append(_json_install(settings, claude_settings_add, ctxd))
                changes.append(_json_install(mcp, claude_mcp_add, ctxd))
                if scope == "project":
                    notes.append("Claude Code asks once whether to use the MCP servers of this project's .mcp.json: "
                                 "approve `ctxd` (or run `claude mcp list` to see its state).")
            else:
                changes.append(_json_uninstall(settings, claude_settings_remove, state_dir))
                changes.append(_json_uninstall(mcp, claude_mcp_remove, state_dir))
        else:
            path = codex_file(scope, project)
            before = _read(path)
            after: str | None
            if action == "install":
                after, more = codex_add(path, before, ctxd)
                notes += more
                notes.append("Codex runs a hook only once you have trusted it: start `codex` here and open `/hooks` "
                             "to review and trust ctxd's hooks (a changed hook needs trusting again).")
                if scope == "project":
                    notes.append(f"Codex reads {path} only in a trusted project: accept Codex's prompt to trust "
                                 f"{project}, or add [projects.{_toml_str(str(project))}] trust_level = \"trusted\" "
                                 f"to {codex_home() / 'config.toml'} yourself.")
            else:
                after = codex_remove(before) if before is not None else None
                backup = _read_backup(state_dir, path)
                if before is not None and after == "" and backup is not None and not backup.get("existed"):
                    after = None  # install created it: nothing of the user's in it
            changes.append(Change(path, before, after))
    return [c for c in changes if c.before != c.after], notes


def apply(changes: list[Change], action: str, state_dir: Path) -> None:
    for change in changes:
        if action == "install":
            backup = _backup_path(state_dir, change.path)
            known = _read_backup(state_dir, change.path)
            if known and known.get("installed") == change.before:  # installed again over ctxd's own
                existed, original = known.get("existed", True), known.get("original")
            else:  # the file as the user left it; unknown when it holds ctxd's entries already
                existed = change.before is not None
                original = None if change.before is None or _holds_ours(change) else change.before
            backup.parent.mkdir(parents=True, exist_ok=True)
            backup.write_text(json.dumps({"path": str(change.path.absolute()), "existed": existed,
                                          "original": original, "installed": change.after}), "utf-8")
        if change.after is None:
            change.path.unlink(missing_ok=True)
            continue
        target = Path(os.path.realpath(change.path))  # a linked file (dotfiles) is written where it lives
        target.parent.mkdir(parents=True, exist_ok=True)
        pending = target.with_name(f".{target.name}.ctxd-tmp")
        pending.write_text(change.after, "utf-8")
        if target.exists():
            os.chmod(pending, target.stat().st_mode & 0o7777)
        os.replace(pending, target)


def _holds_ours(change: Change) -> bool:
    """Whether a file holds ctxd's entries already (put there by an install this one cannot
    undo byte for byte)."""
    text = change.before or ""
    if change.path.suffix == ".toml":
        return BLOCK_START in text or NOTIFY_START in text
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    shown = json.dumps(value)
    return json.dumps(claude_mcp_remove(claude_settings_remove(value))) != shown


def diff(changes: list[Change]) -> str:
    out: list[str] = []
    for change in changes:
        out += difflib.unified_diff((change.before or "").splitlines(keepends=True),
                                    (change.after or "").splitlines(keepends=True),
                                    fromfile=str(change.path) if change.before is not None else "/dev/null",
                                    tofile=str(change.path) if change.after is not None else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)


# --- status and the hook's question --------------------------------------------------------------


def status(agents: list[str], project: Path) -> list[str]:
    lines = []
    for agent in agents:
        for scope in ("user", "project"):
            if agent == "claude":
                settings, mcp = claude_files(scope, project)
                try:
                    value = _load_json(settings, _read(settings))
                    hooks = value.get("hooks")
                    if not isinstance(hooks, dict):
                        hooks = {}
                    events = [e for e in CLAUDE_EVENTS if any(_is_ours(g) for g in hooks.get(e) or [])]
                    line = value.get("statusLine")
                    status_line = isinstance(line, dict) and bool(_STATUS.search(str(line.get("command"))))
                    servers = _load_json(mcp, _read(mcp)).get("mcpServers") or {}
                    has_mcp = isinstance(servers, dict) and _is_our_mcp(servers.get("ctxd"))
                except InstallError as error:
                    lines.append(f"claude {scope}: {error}")
                    continue
                lines.append(f"claude {scope}: hooks {', '.join(events) or 'none'}; status line "
                             f"{'yes' if status_line else 'no'}; MCP server {'yes' if has_mcp else 'no'} ({settings})")
            else:
                path = codex_file(scope, project)
                text = _read(path) or ""
                installed = BLOCK_START in text
                lines.append(f"codex {scope}: hooks and MCP server {'yes' if installed else 'no'}; notify "
                             f"{'yes' if NOTIFY_START in text else 'no'} ({path})"
                             + ("; trust them in Codex's /hooks" if installed else ""))
    return lines


def mcp_installed(agent: str, cwd: Path) -> bool:
    """Whether ctxd's MCP server is configured for the agent in `cwd` (user or project scope)."""
    from ctxd.hooks.locate import find_workspace
    from ctxd.settings import default_state_dir

    project = find_workspace(cwd, default_state_dir()).folder
    for scope in ("project", "user"):
        try:
            if agent == "claude":
                servers = _load_json(claude_files(scope, project)[1],
                                     _read(claude_files(scope, project)[1])).get("mcpServers") or {}
                if isinstance(servers, dict) and _is_our_mcp(servers.get("ctxd")):
                    return True
            elif "ctxd" in (_parse_toml(codex_file(scope, project), _read(codex_file(scope, project)) or "")
                            .get("mcp_servers") or {}):
                return True
        except InstallError:
            continue
    return False


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ctxd hooks", description="ctxd's hooks, status line and MCP server "
                                     "in Claude Code's and Codex's own configuration.")
    parser.add_argument("action", choices=("install", "uninstall", "status"))
    parser.add_argument("--agent", choices=("claude", "codex", "all"), default="all")
    parser.add_argument("--scope", choices=("user", "project"), default="user")
    parser.add_argument("--dry-run", action="store_true", help="print the change as a diff; write nothing")
    args = parser.parse_args(argv)
    from ctxd.hooks.locate import find_workspace
    from ctxd.settings import default_state_dir

    state_dir = default_state_dir()
    agents = ["claude", "codex"] if args.agent == "all" else [args.agent]
    project = find_workspace(Path.cwd(), state_dir).folder
    if args.action == "status":
        print("\n".join(status(agents, project)))
        return 0
    try:
        changes, notes = plan(args.action, agents, args.scope, project, state_dir, ctxd_command())
    except InstallError as error:
        print(f"ctxd hooks {args.action}: {error}", file=sys.stderr)
        return 1
    if args.dry_run:
        sys.stdout.write(diff(changes) or "nothing to change\n")
        return 0
    apply(changes, args.action, state_dir)
    if args.action == "install" and args.scope == "project":
        _know(project, state_dir)
    for change in changes:
        print(f"{'wrote' if change.after is not None else 'removed'} {change.path}")
    if not changes:
        print("nothing to change")
    if args.action == "install":
        for note in notes:
            print(f"note: {note}")
    return 0


def _know(project: Path, state_dir: Path) -> None:
    """Create the project's snapshot store, so that its hooks know the workspace from the start."""
    from ctxd.errors import CtxdError
    from ctxd.ghost.store import open_site

    try:
        open_site(project, state_dir)
    except CtxdError as error:
        print(f"note: no snapshot store for {project}: {error.message}", file=sys.stderr)
