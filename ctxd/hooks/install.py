"""`ctxd hooks install | uninstall | status`: ctxd's entries in the agents' own configuration.

Claude Code (settings.json: `hooks`, `statusLine`; the MCP server in `.mcp.json` for a project,
`~/.claude.json` for the user) and Codex (config.toml: `[[hooks.*]]` tables, `[mcp_servers.ctxd]`
and, for the user only, `notify`: Codex refuses a project's). Every command names the `ctxd`
executable by absolute path.

What was in a file besides ctxd's entries stays byte for byte, line ends included:
- Codex's TOML is edited as text, never re-serialised (`ctxd.hooks.codex_toml`): uninstall removes
  ctxd's own tables and keys wherever Codex's editor moved them, and nothing else.
- Claude's JSON is parsed (key order kept) and written back in the file's own indentation and line
  ends. A copy of the file as it was is kept in ctxd's state directory; uninstall writes it back
  byte for byte when the file is still what install wrote, else removes ctxd's entries from the
  JSON. A file with nothing of ctxd's in it is not rewritten.
- A status line of the user's is carried inside ctxd's command (base64 of its JSON): ctxd's status
  line runs it and prints its output after ctxd's; uninstall puts that entry back exactly. At
  project scope, with no status line of the project's own, the user's (from ~/.claude/settings.json,
  which the project's would hide) is carried, and uninstall leaves the project without one.

Files are read and written by `ctxd.hooks.config_files`: bounded reads of regular files, no link
followed out of a project, all or nothing. Install never trusts anything on the user's behalf: it
says what the user must do (Codex's hook review, a trusted project, Claude's approval of a
project's MCP servers).
"""

from __future__ import annotations

import argparse
import base64
import copy
import difflib
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ctxd.hooks import codex_toml
from ctxd.hooks.codex_toml import TomlEditError, is_our_hook, is_our_mcp
from ctxd.hooks.config_files import CLAUDE_STATE_LIMIT, LIMIT, InstallError, Write, read, write_all

__all__ = ["InstallError", "mcp_installed", "main", "user_status_line"]

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
INHERITED = "ctxdFromUserSettings"
"""The key wrapping a carried status line that came from the user's settings, not the file's."""
BOM = "\ufeff"


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


def _read(path: Path, scope: str, project: Path) -> str | None:
    limit = CLAUDE_STATE_LIMIT if scope == "user" and path.name == ".claude.json" else LIMIT
    return read(path, project if scope == "project" else None, limit)


# --- Claude Code: JSON ----------------------------------------------------------------------------


def _line_end(text: str) -> str:
    return "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"


def _load_json(path: Path, text: str | None) -> dict[str, Any]:
    if text is None or not text.strip().removeprefix(BOM):
        return {}
    try:
        value = json.loads(text.removeprefix(BOM))
    except ValueError as error:
        raise InstallError(f"{path}: not valid JSON ({error}); left unchanged") from None
    except RecursionError:
        raise InstallError(f"{path}: not a configuration (values nested too deep to read); left unchanged") from None
    if not isinstance(value, dict):
        raise InstallError(f"{path}: not a JSON object; left unchanged")
    return value


def _dump_json(value: dict[str, Any], like: str | None) -> str:
    """`value` as the file `like` was written: its indentation, line ends, final line end, BOM."""
    indent: int | str = 2
    if like:
        match = re.search(r"\n([ \t]+)\S", like)
        if match:
            indent = match.group(1) if "\t" in match.group(1) else len(match.group(1))
    text = json.dumps(value, indent=indent, ensure_ascii=False)  # no raw line end inside: safe to swap
    if like is None:
        return text + "\n"
    nl = _line_end(like)
    text = text.replace("\n", nl) + (nl if like.endswith("\n") else "")
    return (BOM if like.startswith(BOM) else "") + text


def _hook_entry(ctxd: list[str], event: str) -> dict[str, Any]:
    return {"type": "command", "command": _shell([*ctxd, "hook", "claude", event]), "timeout": HOOK_TIMEOUT_SECONDS}


def _group(event: str, ctxd: list[str]) -> dict[str, Any]:
    matcher = CLAUDE_EVENTS[event]
    group: dict[str, Any] = {} if matcher is None else {"matcher": matcher}
    group["hooks"] = [_hook_entry(ctxd, event)]
    return group


def _groups(hooks: dict[str, Any], event: str) -> list[Any]:
    groups = hooks.get(event)
    return groups if isinstance(groups, list) else []


def _handlers(group: Any) -> list[Any] | None:
    return group["hooks"] if isinstance(group, dict) and isinstance(group.get("hooks"), list) else None


def claude_settings_add(settings: dict[str, Any], ctxd: list[str], inherited: Any = None) -> dict[str, Any]:
    """ctxd's hooks and status line in `settings`; `inherited`: the user's own status line to
    carry when `settings` has none (project scope)."""
    hooks = settings.get("hooks")
    if hooks is None:
        hooks = settings["hooks"] = {}
    if not isinstance(hooks, dict):
        raise InstallError("settings.json: `hooks` is not an object; left unchanged")
    for event in CLAUDE_EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise InstallError(f"settings.json: `hooks.{event}` is not a list; left unchanged")
        placed = False
        for index, group in enumerate(groups):
            handlers = _handlers(group)
            if handlers is None or not any(is_our_hook(h) for h in handlers):
                continue
            if all(is_our_hook(h) for h in handlers) and not placed:
                groups[index] = _group(event, ctxd)  # ctxd's own group, as this ctxd writes it
            elif not placed:  # ctxd's entry in a group the user added to: in place, the rest kept
                first = next(i for i, h in enumerate(handlers) if is_our_hook(h))
                handlers[:] = [h for i, h in enumerate(handlers) if i == first or not is_our_hook(h)]
                handlers[first] = _hook_entry(ctxd, event)
            else:  # a second copy of ctxd's entry
                handlers[:] = [h for h in handlers if not is_our_hook(h)]
            placed = True
        groups[:] = [g for g in groups if _handlers(g) != []]
        if not placed:
            groups.append(_group(event, ctxd))
    line = settings.get("statusLine")
    carried = None
    if ours := _our_status_line(line):
        carried = ours.carried  # ctxd's already: the entry it carries stays
    elif line is not None:
        carried = _encode(line)
    elif inherited is not None:
        carried = _encode({INHERITED: inherited})
    command = [*ctxd, "statusline"] + (["--user", carried] if carried else [])
    settings["statusLine"] = {"type": "command", "command": _shell(command), "padding": 0}
    return settings


@dataclass
class OurStatusLine:
    carried: str | None  # the status line it carries (`--user`), encoded


def _our_status_line(line: Any) -> OurStatusLine | None:
    """ctxd's status line (`<ctxd> statusline [--user <entry>]`), or None."""
    words = codex_toml.command_words(line.get("command")) if isinstance(line, dict) else []
    if len(words) >= 2 and words[-1] == "statusline" and codex_toml.runs_ctxd(words[:-1]):
        return OurStatusLine(None)
    if (len(words) >= 4 and words[-3:-1] == ["statusline", "--user"] and re.fullmatch(r"[A-Za-z0-9_=-]+", words[-1])
            and codex_toml.runs_ctxd(words[:-3])):
        return OurStatusLine(words[-1])
    return None


def _encode(entry: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(entry, ensure_ascii=False).encode()).decode()


def claude_settings_remove(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` without ctxd's hook entries (from any group: a group goes only when ctxd's
    entries were all it held) and its status line (the one it carried put back)."""
    hooks = settings.get("hooks")
    if isinstance(hooks, dict):
        for event in list(hooks):
            groups = hooks[event]
            if not isinstance(groups, list):
                continue
            touched = False
            for group in groups:
                handlers = _handlers(group)
                if handlers and any(is_our_hook(h) for h in handlers):
                    handlers[:] = [h for h in handlers if not is_our_hook(h)]
                    touched = True
            if touched:
                groups[:] = [g for g in groups if _handlers(g) != []]
                if not groups:
                    del hooks[event]
                    if not hooks:
                        del settings["hooks"]
    if ours := _our_status_line(settings.get("statusLine")):
        carried = ours.carried
        entry, inherited = _decode(carried) if carried else (None, True)
        if inherited:
            del settings["statusLine"]
        else:
            settings["statusLine"] = entry
    return settings


def _decode(encoded: str) -> tuple[Any, bool]:
    """The carried status line, and whether it came from the user's settings (not the file's own)."""
    try:
        entry = json.loads(base64.urlsafe_b64decode(encoded.encode()).decode())
    except (ValueError, RecursionError):  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise InstallError("ctxd's status line carries an entry that cannot be read; left unchanged") from None
    if isinstance(entry, dict) and list(entry) == [INHERITED]:
        return entry[INHERITED], True
    return entry, False


def user_status_line(encoded: str) -> Any:
    """The status line ctxd's carries (what `ctxd statusline --user` runs)."""
    return _decode(encoded)[0]


def user_scope_status_line() -> Any:
    """The status line of the user's own settings (not ctxd's: the one ctxd's carries, if any)."""
    try:
        settings = _load_json(claude_home() / "settings.json", _read(claude_home() / "settings.json", "user", Path()))
    except InstallError:
        return None
    line = settings.get("statusLine")
    if ours := _our_status_line(line):
        try:
            return _decode(ours.carried)[0] if ours.carried else None
        except InstallError:
            return None
    return line


def mcp_entry(ctxd: list[str]) -> dict[str, Any]:
    return {"type": "stdio", "command": ctxd[0], "args": [*ctxd[1:], "mcp"]}


def claude_mcp_add(state: dict[str, Any], ctxd: list[str]) -> dict[str, Any]:
    servers = state.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError("`mcpServers` is not an object; left unchanged")
    if "ctxd" in servers and not is_our_mcp(servers["ctxd"]):
        raise InstallError("an MCP server named `ctxd` that is not ctxd's is configured; left unchanged")
    servers["ctxd"] = mcp_entry(ctxd)
    return state


def claude_mcp_remove(state: dict[str, Any]) -> dict[str, Any]:
    servers = state.get("mcpServers")
    if isinstance(servers, dict) and is_our_mcp(servers.get("ctxd")):
        del servers["ctxd"]
        if not servers:
            del state["mcpServers"]
    return state


# --- Codex: TOML, as text -------------------------------------------------------------------------


def _toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def codex_add(path: Path, text: str | None, ctxd: list[str], scope: str) -> tuple[str, list[str]]:
    """The file with ctxd's entries (replacing earlier ones), and notes for the user."""
    try:
        base = codex_toml.remove_ours(text or "")
        parsed = codex_toml.parse(base)
    except TomlEditError as error:
        raise InstallError(f"{path}: {error}; left unchanged") from None
    notes = []
    servers = parsed.get("mcp_servers") or {}
    with_mcp = not (isinstance(servers, dict) and "ctxd" in servers)
    if not with_mcp:
        notes.append(f"{path}: an [mcp_servers.ctxd] of your own is configured; ctxd's was not added")
    notify = None
    if scope == "user":
        if "notify" in parsed:
            notes.append(f"{path}: you have a `notify` program of your own; ctxd's was not added (it is optional)")
        else:
            notify = [*ctxd, "hook", "codex", "notify"]
    hooks = [codex_toml.Hook(event, matcher, _shell([*ctxd, "hook", "codex", event]), HOOK_TIMEOUT_SECONDS)
             for event, matcher in CODEX_EVENTS.items()]
    result = codex_toml.add_ours(base, hooks, [*ctxd, "mcp"] if with_mcp else None, notify)
    try:
        wanted = codex_toml.parse(result)
    except TomlEditError as error:
        raise InstallError(f"{path}: ctxd's hooks would not fit with what the file defines ({error}); "
                           "left unchanged") from None
    if text is not None and "ctxd" in text and codex_toml.parse(text) == wanted:
        result = text  # installed already, as this ctxd would write it (maybe moved by Codex's editor)
    return result, notes


def codex_remove(text: str) -> str:
    """`text` without ctxd's entries (wherever Codex's editor put them) and nothing else."""
    try:
        return codex_toml.remove_ours(text)
    except TomlEditError as error:
        raise InstallError(f"{error}; left unchanged") from None


# --- the plan: files and their new text -----------------------------------------------------------


@dataclass
class Change:
    path: Path
    before: str | None  # None: the file does not exist
    after: str | None  # None: remove the file (it was created by install and is now empty)


def _backup_path(state_dir: Path, path: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(path.absolute())).hexdigest()[:24]
    return state_dir / "hooks" / "backups" / f"{path.name}-{digest}.json"


def _json_install(path: Path, before: str | None, edit: Any) -> Change:
    parsed = _load_json(path, before)
    value = edit(copy.deepcopy(parsed))
    if before is not None and value == parsed:
        return Change(path, before, before)  # installed already: not even reformatted
    return Change(path, before, _dump_json(value, before))


def _json_uninstall(path: Path, before: str | None, edit: Any, state_dir: Path) -> Change:
    if before is None:
        return Change(path, None, None)
    parsed = _load_json(path, before)
    value = edit(copy.deepcopy(parsed))
    if value == parsed:
        return Change(path, before, before)  # nothing of ctxd's: not even reformatted
    backup = _read_backup(state_dir, path) or {}
    original = backup.get("original")
    if backup.get("installed") == before:  # untouched since install: exactly what was there
        if not backup.get("existed"):
            return Change(path, before, None)
        if original is not None:
            return Change(path, before, original)
    if original is not None:
        try:
            if json.loads(original.removeprefix(BOM)) == value:
                return Change(path, before, original)  # changed since, and changed back
        except (ValueError, RecursionError):
            pass
    if backup and not backup.get("existed") and not value:
        return Change(path, before, None)  # install created it and only ctxd's entries were left
    return Change(path, before, _dump_json(value, before))


def _read_backup(state_dir: Path, path: Path) -> dict[str, Any] | None:
    try:
        text = read(_backup_path(state_dir, path), limit=4 * CLAUDE_STATE_LIMIT)
        value = json.loads(text) if text else None
    except (InstallError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and value.get("path") == str(path.absolute()) else None


def plan(action: str, agents: list[str], scope: str, project: Path, state_dir: Path,
         ctxd: list[str]) -> tuple[list[Change], list[str]]:
    changes: list[Change] = []
    notes: list[str] = []
    for agent in agents:
        if agent == "claude":
            settings, mcp = claude_files(scope, project)
            settings_text, mcp_text = _read(settings, scope, project), _read(mcp, scope, project)
            if action == "install":
                inherited = user_scope_status_line() if scope == "project" else None
                changes.append(_json_install(settings, settings_text, partial(claude_settings_add, ctxd=ctxd,
                                                                              inherited=inherited)))
                changes.append(_json_install(mcp, mcp_text, lambda v: claude_mcp_add(v, ctxd)))
                if scope == "project":
                    notes.append("Claude Code asks once whether to use the MCP servers of this project's .mcp.json: "
                                 "approve `ctxd` (or run `claude mcp list` to see its state).")
            else:
                changes.append(_json_uninstall(settings, settings_text, claude_settings_remove, state_dir))
                changes.append(_json_uninstall(mcp, mcp_text, claude_mcp_remove, state_dir))
        else:
            path = codex_file(scope, project)
            before = _read(path, scope, project)
            after: str | None
            if action == "install":
                after, more = codex_add(path, before, ctxd, scope)
                notes += more
                notes.append("Codex runs a hook only once you have trusted it: start `codex` here and open `/hooks` "
                             "to review and trust ctxd's hooks (a changed hook needs trusting again); "
                             "`ctxd hooks status` says when Codex has.")
                if scope == "project":
                    notes.append(f"Codex reads {path} only in a trusted project: accept Codex's prompt to trust "
                                 f"{project}, or add [projects.{_toml_str(str(project))}] trust_level = \"trusted\" "
                                 f"to {codex_home() / 'config.toml'} yourself.")
            elif before is None:
                after = None
            else:
                try:
                    after = codex_toml.remove_ours(before)
                except TomlEditError as error:
                    raise InstallError(f"{path}: {error}; left unchanged") from None
                backup = _read_backup(state_dir, path)
                if after != before and not after.strip() and backup is not None and not backup.get("existed"):
                    after = None  # install created it: nothing of the user's in it
            changes.append(Change(path, before, after))
    return [c for c in changes if c.before != c.after], notes


def apply(changes: list[Change], action: str, state_dir: Path) -> None:
    """Every change and its backup, or none of them (InstallError)."""
    writes: list[Write] = []
    for change in changes:
        if action == "install":
            backup = _backup_path(state_dir, change.path)
            known = _read_backup(state_dir, change.path)
            if known and known.get("installed") == change.before:  # installed again over ctxd's own
                existed, original = known.get("existed", True), known.get("original")
            else:  # the file as the user left it; unknown when it holds ctxd's entries already
                existed = change.before is not None
                original = None if change.before is None or _holds_ours(change) else change.before
            record = json.dumps({"path": str(change.path.absolute()), "existed": existed,
                                 "original": original, "installed": change.after})
            writes.append(Write(backup, None, record, check_unchanged=False))
        writes.append(Write(change.path, change.before, change.after))
    write_all(writes)


def _holds_ours(change: Change) -> bool:
    """Whether a file holds ctxd's entries already (put there by an install this one cannot
    undo byte for byte)."""
    text = change.before or ""
    if change.path.suffix == ".toml":
        try:
            parsed = codex_toml.parse(text)
        except TomlEditError:
            return False
        return codex_toml.without_ours(parsed) != codex_toml.tidy(copy.deepcopy(parsed))
    try:
        value = json.loads(text.removeprefix(BOM))
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict):
        return False
    return claude_mcp_remove(claude_settings_remove(copy.deepcopy(value))) != value


def diff(changes: list[Change]) -> str:
    out: list[str] = []
    for change in changes:
        out += difflib.unified_diff((change.before or "").splitlines(keepends=True),
                                    (change.after or "").splitlines(keepends=True),
                                    fromfile=str(change.path) if change.before is not None else "/dev/null",
                                    tofile=str(change.path) if change.after is not None else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)


# --- status and the hook's question --------------------------------------------------------------


def _claude_status(scope: str, project: Path) -> str:
    settings, mcp = claude_files(scope, project)
    try:
        value = _load_json(settings, _read(settings, scope, project))
        hooks = value.get("hooks")
        if not isinstance(hooks, dict):
            hooks = {}
        events = [e for e in CLAUDE_EVENTS
                  if any(is_our_hook(h) for g in _groups(hooks, e) for h in (_handlers(g) or []))]
        servers = _load_json(mcp, _read(mcp, scope, project)).get("mcpServers") or {}
    except InstallError as error:
        return f"claude {scope}: {error}"
    has_mcp = isinstance(servers, dict) and is_our_mcp(servers.get("ctxd"))
    return (f"claude {scope}: hooks {', '.join(events) or 'none'}; status line "
            f"{'yes' if _our_status_line(value.get('statusLine')) else 'no'}; MCP server "
            f"{'yes' if has_mcp else 'no'} ({settings})")


def _codex_status(scope: str, project: Path) -> str:
    path = codex_file(scope, project)
    user_path = codex_file("user", project)
    try:
        config = codex_toml.parse(_read(path, scope, project) or "")
        user = config if scope == "user" else codex_toml.parse(_read(user_path, "user", project) or "")
    except (InstallError, TomlEditError) as error:
        return f"codex {scope}: {error}" if isinstance(error, InstallError) else f"codex {scope}: {path}: {error}"
    sources = list(dict.fromkeys([str(path), os.path.realpath(path)]))
    trust = codex_toml.our_hooks_trust(config, sources, user)
    events = list(dict.fromkeys(t.event for t in trust))
    servers = config.get("mcp_servers")
    has_mcp = isinstance(servers, dict) and is_our_mcp(servers.get("ctxd"))
    line = f"codex {scope}: hooks {', '.join(events) or 'none'}"
    if trust:
        line += f" ({_trust_words(trust)})"
    line += f"; MCP server {'yes' if has_mcp else 'no'}"
    if scope == "user":
        line += f"; notify {'yes' if codex_toml.is_our_notify(config.get('notify')) else 'no'}"
    elif trust or has_mcp:
        projects = user.get("projects")
        entry = projects.get(str(project)) if isinstance(projects, dict) else None
        if not (isinstance(entry, dict) and entry.get("trust_level") == "trusted"):
            line += "; Codex reads the file only once you trust the project"
    return line + f" ({path})"


def _trust_words(trust: list[codex_toml.HookTrust]) -> str:
    states = [t.state for t in trust]
    if all(s == "trusted" for s in states):
        return "trusted"
    if all(s == "untrusted" for s in states):
        return "installed, not trusted yet: review them in Codex's /hooks"
    if "changed" in states:
        return (f"{states.count('trusted')} of {len(states)} trusted; changed since you trusted them: "
                "trust them again in Codex's /hooks")
    if "disabled" in states:
        return f"{states.count('disabled')} of {len(states)} turned off in Codex's /hooks"
    return f"{states.count('trusted')} of {len(states)} trusted; review the others in Codex's /hooks"


def status(agents: list[str], project: Path) -> list[str]:
    return [(_claude_status if agent == "claude" else _codex_status)(scope, project)
            for agent in agents for scope in ("user", "project")]


def mcp_installed(agent: str, cwd: Path) -> bool:
    """Whether ctxd's MCP server is configured for the agent in `cwd` (user or project scope).
    Quick whatever the folder holds: bounded reads of regular files, no link out of the project."""
    from ctxd.hooks.locate import find_workspace
    from ctxd.settings import default_state_dir

    project = find_workspace(cwd, default_state_dir()).folder
    for scope in ("project", "user"):
        try:
            if agent == "claude":
                path = claude_files(scope, project)[1]
                servers = _load_json(path, _read(path, scope, project)).get("mcpServers") or {}
                if isinstance(servers, dict) and is_our_mcp(servers.get("ctxd")):
                    return True
            else:
                path = codex_file(scope, project)
                servers = codex_toml.parse(_read(path, scope, project) or "").get("mcp_servers") or {}
                if isinstance(servers, dict) and "ctxd" in servers:
                    return True
        except (InstallError, TomlEditError):
            continue
    return False


def covered_line() -> str:
    """Which folders hooks installed for the user act in, and how to leave one out."""
    from ctxd.settings import user_config_path

    return ("covered: every git work tree (and every folder ctxd knows) an agent works in; to leave one out, "
            f"add it to hooks.exclude in {user_config_path()}")


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
        if args.dry_run:
            sys.stdout.write(diff(changes) or "nothing to change\n")
            return 0
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
