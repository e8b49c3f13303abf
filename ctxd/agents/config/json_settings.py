"""An agent's JSON settings as ctxd edits them: hook groups in the schema Claude Code set (and
qwen-code and Gemini CLI share), a status-line command, `mcpServers` entries.

The file is parsed (key order kept) and written back in its own indentation, line ends, final line
end and BOM (`dump`). ctxd's entries are recognised by what they run (`ctxd.agents.config.ours`):
added, they replace ctxd's earlier ones in place; removed, they go from any group, and a group goes
only when ctxd's entries were all it held. A status line of the user's is carried inside ctxd's
command (base64 of its JSON, `--user`): ctxd's status line runs it and prints its output after
ctxd's; removing ctxd's puts that entry back exactly.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxd.agents.config.files import InstallError
from ctxd.agents.config.ours import command_words, is_our_hook, is_our_mcp, runs_ctxd

BOM = "\ufeff"
INHERITED = "ctxdFromUserSettings"
"""The key wrapping a carried status line that came from the user's settings, not the file's."""
_AGENT_NAME = re.compile(r"[a-z][a-z0-9]*")


def line_end(text: str) -> str:
    return "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"


def load(path: Path, text: str | None) -> dict[str, Any]:
    """The file's JSON object ({} for none, or an empty file); InstallError when it is not one."""
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


_SURROGATE = re.compile("[\ud800-\udfff]")


def dump(value: dict[str, Any], like: str | None) -> str:
    """`value` as the file `like` was written: its indentation, line ends, final line end, BOM."""
    indent: int | str = 2
    if like:
        match = re.search(r"\n([ \t]+)\S", like)
        if match:
            indent = match.group(1) if "\t" in match.group(1) else len(match.group(1))
    text = json.dumps(value, indent=indent, ensure_ascii=False)  # no raw line end inside: safe to swap
    # A lone surrogate (only a `\\udXXX` escape in the file makes one) stays an escape: as a
    # character no UTF-8 file can hold it (install wrote some files, then failed on that one).
    text = _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
    if like is None:
        return text + "\n"
    nl = line_end(like)
    text = text.replace("\n", nl) + (nl if like.endswith("\n") else "")
    return (BOM if like.startswith(BOM) else "") + text


def holds(text: str, remove: Callable[[dict[str, Any]], dict[str, Any]],
          load: Callable[[str], Any] = json.loads) -> bool:
    """Whether the JSON `text` (read by `load`: JSONC's reader for OpenCode) holds ctxd's entries
    (what `remove` takes out)."""
    import copy

    try:
        value = load(text.removeprefix(BOM))
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict):
        return False
    return remove(copy.deepcopy(value)) != value


# --- hook groups: {"hooks": {"<Event>": [{"matcher"?, "hooks": [{"type": "command", ...}]}]}} --------


@dataclass(frozen=True)
class Hooks:
    """ctxd's hook entries for one agent: event -> matcher (None: every occurrence), the command
    each runs, and the timeout written beside it (in the agent's unit)."""

    events: Mapping[str, str | None]
    command: Callable[[str], str]
    timeout: int
    file: str = "settings.json"  # how error messages name the file

    def entry(self, event: str) -> dict[str, Any]:
        return {"type": "command", "command": self.command(event), "timeout": self.timeout}

    def group(self, event: str) -> dict[str, Any]:
        matcher = self.events[event]
        group: dict[str, Any] = {} if matcher is None else {"matcher": matcher}
        group["hooks"] = [self.entry(event)]
        return group


def groups(hooks: dict[str, Any], event: str) -> list[Any]:
    found = hooks.get(event)
    return found if isinstance(found, list) else []


def handlers(group: Any) -> list[Any] | None:
    return group["hooks"] if isinstance(group, dict) and isinstance(group.get("hooks"), list) else None


def hooks_add(settings: dict[str, Any], spec: Hooks) -> dict[str, Any]:
    """ctxd's hook entries in `settings`, one per event, in place of ctxd's earlier ones."""
    hooks = settings.get("hooks")
    if hooks is None:
        hooks = settings["hooks"] = {}
    if not isinstance(hooks, dict):
        raise InstallError(f"{spec.file}: `hooks` is not an object; left unchanged")
    for event in spec.events:
        found = hooks.setdefault(event, [])
        if not isinstance(found, list):
            raise InstallError(f"{spec.file}: `hooks.{event}` is not a list; left unchanged")
        placed = False
        emptied = []  # the groups ctxd's entries were all of (a user's empty group stays)
        for index, group in enumerate(found):
            entries = handlers(group)
            if entries is None or not any(is_our_hook(h) for h in entries):
                continue
            if all(is_our_hook(h) for h in entries) and not placed:
                found[index] = spec.group(event)  # ctxd's own group, as this ctxd writes it
            elif not placed:  # ctxd's entry in a group the user added to: in place, the rest kept
                first = next(i for i, h in enumerate(entries) if is_our_hook(h))
                entries[:] = [h for i, h in enumerate(entries) if i == first or not is_our_hook(h)]
                entries[first] = spec.entry(event)
            else:  # a second copy of ctxd's entry
                entries[:] = [h for h in entries if not is_our_hook(h)]
                if not entries:
                    emptied.append(group)
            placed = True
        found[:] = [g for g in found if not any(g is e for e in emptied)]
        if not placed:
            found.append(spec.group(event))
    return settings


def hooks_remove(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` without ctxd's hook entries (from any group: a group goes only when ctxd's
    entries were all it held)."""
    hooks = settings.get("hooks")
    if isinstance(hooks, dict):
        for event in list(hooks):
            found = hooks[event]
            if not isinstance(found, list):
                continue
            emptied = []  # the groups ctxd's entries were all of (a user's empty group stays)
            for group in found:
                entries = handlers(group)
                if entries and any(is_our_hook(h) for h in entries):
                    entries[:] = [h for h in entries if not is_our_hook(h)]
                    if not entries:
                        emptied.append(group)
            if emptied:
                found[:] = [g for g in found if not any(g is e for e in emptied)]
                if not found:
                    del hooks[event]
                    if not hooks:
                        del settings["hooks"]
    return settings


def hooks_installed(settings: dict[str, Any], events: Mapping[str, Any]) -> list[str]:
    """The events of `events` that have ctxd's hook entry in `settings`."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        hooks = {}
    return [e for e in events if any(is_our_hook(h) for g in groups(hooks, e) for h in (handlers(g) or []))]


# --- the status line: {"type": "command", "command": "<ctxd> statusline [--agent A] [--user E]"} ----


@dataclass
class OurStatusLine:
    carried: str | None  # the status line it carries (`--user`), encoded


def our_status_line(line: Any) -> OurStatusLine | None:
    """ctxd's status line (`<ctxd> statusline [--agent <name>] [--user <entry>]`), or None."""
    words = command_words(line.get("command")) if isinstance(line, dict) else []
    carried = None
    if len(words) >= 2 and words[-2] == "--user" and re.fullmatch(r"[A-Za-z0-9_=-]+", words[-1]):
        carried, words = words[-1], words[:-2]
    if len(words) >= 3 and words[-2] == "--agent" and _AGENT_NAME.fullmatch(words[-1]):
        words = words[:-2]
    if len(words) >= 2 and words[-1] == "statusline" and runs_ctxd(words[:-1]):
        return OurStatusLine(carried)
    return None


def _encode(entry: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(entry, ensure_ascii=False).encode()).decode()


def decode_carried(encoded: str) -> tuple[Any, bool]:
    """The carried status line, and whether it came from the user's settings (not the file's own)."""
    try:
        entry = json.loads(base64.urlsafe_b64decode(encoded.encode()).decode())
    except (ValueError, RecursionError):  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise InstallError("ctxd's status line carries an entry that cannot be read; left unchanged") from None
    if isinstance(entry, dict) and list(entry) == [INHERITED]:
        return entry[INHERITED], True
    return entry, False


def carried_status_line(encoded: str) -> Any:
    """The status line ctxd's carries (what `ctxd statusline --user` runs)."""
    return decode_carried(encoded)[0]


def _get(settings: dict[str, Any], key: str) -> Any:
    """`settings[key]`, where a dotted key names a nested object (qwen-code's `ui.statusLine`)."""
    value: Any = settings
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _parent(settings: dict[str, Any], key: str, make: bool) -> tuple[dict[str, Any] | None, str]:
    """The object holding a dotted key's last part (made when missing, with `make`), and that part."""
    *parents, last = key.split(".")
    holder: Any = settings
    for part in parents:
        if make and part not in holder:
            holder[part] = {}
        holder = holder.get(part)
        if not isinstance(holder, dict):
            if make:
                raise InstallError(f"`{part}` is not an object; left unchanged")
            return None, last
    return holder, last


def own_status_line(settings: dict[str, Any], key: str = "statusLine") -> Any:
    """The user's own status line in `settings`: the entry there, or the one ctxd's carries."""
    line = _get(settings, key)
    if ours := our_status_line(line):
        try:
            return decode_carried(ours.carried)[0] if ours.carried else None
        except InstallError:
            return None
    return line


def status_line_add(settings: dict[str, Any], command: list[str], inherited: Any = None,
                    key: str = "statusLine", extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """ctxd's status line (`command`, its words before `--user`) as `settings[key]` (a dotted key:
    nested), carrying the entry that was there; `inherited`: the user's own status line to carry
    when there is none (at project scope, the one the project's would hide)."""
    holder, last = _parent(settings, key, make=True)
    assert holder is not None
    line = holder.get(last)
    carried = None
    if ours := our_status_line(line):
        carried = ours.carried  # ctxd's already: the entry it carries stays
    elif line is not None:
        carried = _encode(line)
    elif inherited is not None:
        carried = _encode({INHERITED: inherited})
    from ctxd.agents.config.ours import shell

    holder[last] = {"type": "command", "command": shell(command + (["--user", carried] if carried else [])),
                    **(extra or {})}
    return settings


def status_line_remove(settings: dict[str, Any], key: str = "statusLine") -> dict[str, Any]:
    """`settings` without ctxd's status line: the one it carried put back (none, when it carried
    the user's from elsewhere)."""
    holder, last = _parent(settings, key, make=False)
    if holder is not None and (ours := our_status_line(holder.get(last))):
        carried = ours.carried
        entry, inherited = decode_carried(carried) if carried else (None, True)
        if inherited:
            del holder[last]
            _drop_emptied(settings, key.split(".")[:-1])
        else:
            holder[last] = entry
    return settings


def _drop_emptied(settings: dict[str, Any], parents: list[str]) -> None:
    """The objects of a dotted key's path that are left empty, taken out too (as `mcpServers`
    is): install made Qwen Code's `ui` to hold `ui.statusLine`, and uninstall left `"ui": {}`."""
    while parents:
        holder: Any = settings
        for part in parents[:-1]:
            holder = holder[part]
        if holder[parents[-1]]:
            return
        del holder[parents[-1]]
        parents = parents[:-1]


# --- MCP servers: {"mcpServers": {"ctxd": {...}}} -------------------------------------------------


def mcp_add(state: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    servers = state.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError("`mcpServers` is not an object; left unchanged")
    if "ctxd" in servers and not is_our_mcp(servers["ctxd"]):
        raise InstallError("an MCP server named `ctxd` that is not ctxd's is configured; left unchanged")
    servers["ctxd"] = entry
    return state


def mcp_remove(state: dict[str, Any]) -> dict[str, Any]:
    servers = state.get("mcpServers")
    if isinstance(servers, dict) and is_our_mcp(servers.get("ctxd")):
        del servers["ctxd"]
        if not servers:
            del state["mcpServers"]
    return state


def mcp_installed(state: dict[str, Any]) -> bool:
    servers = state.get("mcpServers") or {}
    return isinstance(servers, dict) and is_our_mcp(servers.get("ctxd"))
