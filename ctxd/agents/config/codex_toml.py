"""Codex's config.toml as text: ctxd's entries added, found wherever they ended up, removed, and
whether Codex trusts ctxd's hooks.

Codex edits this file too (`codex mcp add`, `codex features enable`, the trust `/hooks` and a
trusted project record, through its own TOML editor), and its editor puts a new table where it
sees fit: `[mcp_servers.x]` after the last `[mcp_servers.*]` table, `[hooks.state]` after the last
`[hooks.*]` one, anything else at the end, before the comment that closes the file. So ctxd's
entries are never cut out as a block: the file is read as a list of items (table headers, key =
value statements, comments, blank lines), and only the items that are ctxd's own are removed, each
checked by what it says (a hook whose command runs `ctxd hook codex`, the `ctxd` MCP server that
runs `ctxd mcp`, the `notify` that runs `ctxd hook codex notify`), wherever it is. The result is
parsed and compared with the file parsed minus ctxd's entries: anything else that would change
makes the edit refused, never written.

Whitespace follows the same rule as the entries: ctxd's block is one blank line (and, when the
file did not end with a line end, the line end ctxd added, said in the block's first comment)
followed by its tables; uninstall takes back exactly that.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from ctxd.agents.config.ours import is_our_hook, is_our_mcp, runs_ctxd

BLOCK_START = "# >>> ctxd: written by `ctxd hooks install`; `ctxd hooks uninstall` removes this block"
BLOCK_START_EOL = BLOCK_START + " (and the line end before it)"
BLOCK_END = "# <<< ctxd"
NOTIFY_START = "# >>> ctxd notify: written by `ctxd hooks install`; `ctxd hooks uninstall` removes it"
NOTIFY_END = "# <<< ctxd notify"
MARKERS = {BLOCK_START, BLOCK_START_EOL, BLOCK_END, NOTIFY_START, NOTIFY_END}
BOM = "\ufeff"


class TomlEditError(ValueError):
    """The file cannot be edited safely (not TOML, or ctxd's entries cannot be told apart)."""


# --- reading the file as items ---------------------------------------------------------------------


@dataclass
class Item:
    kind: str  # "header", "keyval", "blank" or "comment"
    start: int
    end: int  # after the item's line end
    path: tuple[str, ...] = ()  # a header's table, a statement's key (dotted keys as parts)
    array: bool = False  # a `[[...]]` header
    prefix: list[int] = field(default_factory=list)  # the blank and comment items just before it


def scan(text: str) -> list[Item]:
    """The file's items, in order; their texts joined are the file."""
    items: list[Item] = []
    i, n = 0, len(text)
    while i < n:
        j = i
        while j < n and text[j] in " \t":
            j += 1
        if j == n or text[j] in "\r\n":
            items.append(Item("blank", i, _line_end(text, j)))
        elif text[j] == "#":
            items.append(Item("comment", i, _line_end(text, j)))
        elif text[j] == "[":
            array = text.startswith("[[", j)
            close = _key_end(text, j + (2 if array else 1), "]")
            if array and not text.startswith("]]", close):
                raise TomlEditError(f"line {text.count(chr(10), 0, j) + 1}: a table header that does not close")
            end = _rest_of_line(text, close + (2 if array else 1))
            items.append(Item("header", i, end, _header_path(text[j:close + (2 if array else 1)]), array))
        else:
            equals = _key_end(text, j, "=")
            value_end = _value_end(text, equals + 1)
            items.append(Item("keyval", i, _rest_of_line(text, value_end), _key_path(text[j:equals])))
        i = items[-1].end
    waiting: list[int] = []
    for index, item in enumerate(items):
        if item.kind in ("blank", "comment"):
            waiting.append(index)
        else:
            item.prefix, waiting = waiting, []
    return items


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end + 1


def _where(text: str, i: int) -> str:
    return f"line {text.count(chr(10), 0, i) + 1}"


def _skip_string(text: str, i: int) -> int:
    """The index after the string that starts at `i`."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        j = i + 3
        while True:
            k = text.find(quote * 3, j)
            if k < 0:
                raise TomlEditError(f"{_where(text, i)}: a string that does not end")
            if quote == "'" or not _escaped(text, k):
                k += 3
                for _ in range(2):  # up to two more quotes belong to the string
                    if text.startswith(quote, k):
                        k += 1
                return k
            j = k + 1
    j = i + 1
    while j < len(text) and text[j] not in "\r\n":
        if text[j] == quote and (quote == "'" or not _escaped(text, j)):
            return j + 1
        j += 1
    raise TomlEditError(f"{_where(text, i)}: a string that does not end on its line")


def _escaped(text: str, i: int) -> bool:
    slashes = 0
    while i - 1 - slashes >= 0 and text[i - 1 - slashes] == "\\":
        slashes += 1
    return slashes % 2 == 1


def _key_end(text: str, i: int, stop: str) -> int:
    """The index of `stop` ending the key that starts at `i` (quoted parts skipped)."""
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = _skip_string(text, i)
            continue
        if c == stop:
            return i
        if c in "\r\n":
            break
        i += 1
    raise TomlEditError(f"{_where(text, i)}: not a TOML statement")


def _value_end(text: str, i: int) -> int:
    """The index where the value starting at `i` ends (its line's comment or line end, outside
    every string and bracket)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = _skip_string(text, i)
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "#":
            if depth <= 0:
                return i
            i = _line_end(text, i)
            continue
        elif c == "\n" and depth <= 0:
            return i
        i += 1
    if depth > 0:
        raise TomlEditError(f"{_where(text, i)}: a value that does not close")
    return i


def _rest_of_line(text: str, i: int) -> int:
    """After what may follow a statement on its line: spaces and a comment."""
    j = i
    while j < len(text) and text[j] in " \t\r":
        j += 1
    if j < len(text) and text[j] not in "#\n":
        raise TomlEditError(f"{_where(text, j)}: more after a statement on its line")
    return _line_end(text, j)


KEY_PART = re.compile(r"""[ \t]*(?:([A-Za-z0-9_-]+)|"([^"\\\n]*)"|'([^'\n]*)')[ \t]*""")


def _simple_path(key: str) -> tuple[str, ...] | None:
    """A dotted key's parts without TOML's parser, when no part has an escape; else None."""
    parts = []
    for piece in key.split("."):
        match = KEY_PART.fullmatch(piece)
        if match is None:
            return None  # an escape, or a dot inside quotes: the parser decides
        parts.append(next(g for g in match.groups() if g is not None))
    return tuple(parts)


def _key_path(key: str) -> tuple[str, ...]:
    if (simple := _simple_path(key)) is not None:
        return simple
    try:
        value: Any = tomllib.loads(f"{key.strip()} = 0")
    except tomllib.TOMLDecodeError:
        raise TomlEditError(f"not a TOML key: {key.strip()[:80]!r}") from None
    return _only_path(value)


def _header_path(header: str) -> tuple[str, ...]:
    inner = header.strip()
    inner = inner[2:-2] if inner.startswith("[[") else inner[1:-1]
    if (simple := _simple_path(inner)) is not None:
        return simple
    try:
        value: Any = tomllib.loads(header)
    except tomllib.TOMLDecodeError:
        raise TomlEditError(f"not a TOML table header: {header[:80]!r}") from None
    return _only_path(value)


def _only_path(value: Any) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(value, (dict, list)):
        if isinstance(value, list):
            value = value[0] if value else None
            continue
        if len(value) != 1:
            break
        key = next(iter(value))
        parts.append(key)
        value = value[key]
    return tuple(parts)


# --- what is ctxd's ----------------------------------------------------------------------------------


def is_our_notify(value: Any) -> bool:
    return (isinstance(value, list) and all(isinstance(w, str) for w in value)
            and value[-3:] == ["hook", "codex", "notify"] and runs_ctxd(value[:-3]))


def without_ours(config: dict[str, Any]) -> dict[str, Any]:
    """The parsed file as it is meant to be once ctxd's entries are gone (a new dict)."""
    config = copy.deepcopy(config)
    if is_our_notify(config.get("notify")):
        del config["notify"]
    hooks = config.get("hooks")
    if isinstance(hooks, dict):
        for event in list(hooks):
            groups = hooks[event]
            if event == "state" or not isinstance(groups, list):
                continue
            kept = []
            for group in groups:
                handlers = group.get("hooks") if isinstance(group, dict) else None
                if isinstance(handlers, list) and any(is_our_hook(h) for h in handlers):
                    group["hooks"] = [h for h in handlers if not is_our_hook(h)]
                    if not group["hooks"]:
                        continue
                kept.append(group)
            if kept or not groups:
                hooks[event] = kept
            else:
                del hooks[event]
    servers = config.get("mcp_servers")
    if isinstance(servers, dict) and is_our_mcp(servers.get("ctxd")):
        del servers["ctxd"]
    return tidy(config)


def tidy(config: dict[str, Any]) -> dict[str, Any]:
    """Empty `hooks` and `mcp_servers` tables are no tables (removing ctxd's last entry may leave
    an explicit `[hooks]` header of the user's)."""
    for key in ("hooks", "mcp_servers"):
        if config.get(key) == {}:
            del config[key]
    return config


def parse(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text.removeprefix(BOM))
    except tomllib.TOMLDecodeError as error:
        raise TomlEditError(f"not valid TOML ({error})") from None
    except RecursionError:
        raise TomlEditError("not a configuration: values nested too deep to read") from None


def _body(text: str, items: list[Item], indexes: list[int]) -> Any:
    """A table's own statements, parsed (None when they do not parse alone)."""
    try:
        return tomllib.loads("".join(text[items[i].start:items[i].end] for i in indexes
                                     if items[i].kind == "keyval"))
    except (tomllib.TOMLDecodeError, RecursionError):
        return None


@dataclass
class Found:
    """The items of ctxd's entries, and which of them belong to the notify (at the top)."""

    items: set[int] = field(default_factory=set)
    notify: set[int] = field(default_factory=set)


def find_ours(text: str, items: list[Item]) -> Found:
    found = Found()
    sections: list[tuple[int, list[int]]] = []  # (header index or -1 for the root, its statements)
    current: tuple[int, list[int]] = (-1, [])
    sections.append(current)
    for index, item in enumerate(items):
        if item.kind == "header":
            current = (index, [])
            sections.append(current)
        elif item.kind == "keyval":
            current[1].append(index)
    for index in sections[0][1]:
        root = _body(text, items, [index]) if items[index].path == ("notify",) else None
        if isinstance(root, dict) and is_our_notify(root.get("notify")):
            found.items.add(index)
            found.notify.add(index)
    groups: dict[str, list[tuple[int, list[int], list[bool]]]] = {}  # event -> (header, statements, handlers ours)
    ctxd_server: list[int] = []
    for header, statements in sections[1:]:
        item = items[header]
        path = item.path
        body = _body(text, items, statements) if path[:1] == ("hooks",) or path[:2] == ("mcp_servers", "ctxd") else None
        if item.array and len(path) == 2 and path[0] == "hooks" and path[1] != "state":
            inline = body.get("hooks") if isinstance(body, dict) else None
            marks = [is_our_hook(h) for h in inline] if isinstance(inline, list) else []
            groups.setdefault(path[1], []).append((header, statements, marks))
        elif item.array and len(path) == 3 and path[0] == "hooks" and path[2] == "hooks" and groups.get(path[1]):
            ours = is_our_hook(body)
            groups[path[1]][-1][2].append(ours)
            if ours:
                found.items.update([header, *statements])
        elif path == ("mcp_servers", "ctxd") and not item.array and is_our_mcp(body):
            ctxd_server.append(header)
        if ctxd_server and len(path) > 2 and path[:2] == ("mcp_servers", "ctxd"):
            found.items.update([header, *statements])  # Codex's records about ctxd's server go with it
        if header in ctxd_server:
            found.items.update([header, *statements])
    for event_groups in groups.values():
        for header, statements, marks in event_groups:
            if marks and all(marks):
                found.items.update([header, *statements])
    return found


# --- removing and adding ----------------------------------------------------------------------------


def remove_ours(text: str) -> str:
    """`text` without ctxd's entries and the whitespace ctxd added with them; TomlEditError when
    what is left would differ from the file minus ctxd's entries in anything else."""
    bom = BOM if text.startswith(BOM) else ""
    body = text[len(bom):]
    expected = without_ours(parse(body))
    items = scan(body)
    found = find_ours(body, items)
    gone = set(found.items)
    eol_marker = -1  # the block's first comment, when it says ctxd ended the line before it
    for index, item in enumerate(items):
        line = body[item.start:item.end].strip()
        if item.kind == "comment" and line in MARKERS:
            gone.add(index)
            if line in (NOTIFY_START, NOTIFY_END):
                found.notify.add(index)
            if line == BLOCK_START_EOL:
                eol_marker = index
    for index in sorted(found.items):
        item = items[index]
        if item.kind == "header":
            blanks = [p for p in item.prefix if items[p].kind == "blank" and p not in gone]
            if blanks:
                gone.add(blanks[-1])  # the blank line ctxd wrote before its table
        elif index not in found.notify:
            gone.update(item.prefix)  # comments inside ctxd's own table go with it
    from_block = {i for i in gone if i not in found.notify}  # not the notify at the top
    kept_any = False
    for index, item in enumerate(items):  # a table Codex added after ctxd's, now first in the file
        if index in gone:
            continue
        if item.kind != "blank":
            kept_any = True
        elif not kept_any and index > 0 and index - 1 in from_block:
            gone.add(index)
            from_block.add(index)
    order = [i for i in range(len(items)) if i not in gone]
    start = next((i for i in sorted(found.items) if items[i].kind == "header"
                  and any(body[items[p].start:items[p].end].strip() in (BLOCK_START, BLOCK_START_EOL)
                          for p in items[i].prefix)), -1)
    if start >= 0 and any(items[i].kind != "blank" for i in order if i > start):
        # The file's own blank lines at its end were before ctxd's block; with tables after it,
        # they go back to the end, where Codex's editor keeps them.
        trailing = [p for p in items[start].prefix if p in order and items[p].kind == "blank"]
        order = [i for i in order if i not in trailing] + trailing
    result = "".join(body[items[i].start:items[i].end] for i in order)
    if eol_marker >= 0 and all(i in gone for i in range(eol_marker, len(items))):
        result = result.removesuffix("\n").removesuffix("\r")
    try:
        left = parse(result)
    except TomlEditError as error:
        raise TomlEditError(f"ctxd's entries cannot be removed cleanly ({error})") from None
    if tidy(left) != expected:
        raise TomlEditError("ctxd's entries are written in a form ctxd cannot remove alone "
                            "(an inline table or array of them?); remove them by hand")
    return bom + result


def line_end(text: str) -> str:
    return "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"


def _toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


@dataclass
class Hook:
    event: str
    matcher: str | None
    command: str
    timeout: int


def block(hooks: list[Hook], server: list[str] | None, eol: bool, nl: str) -> str:
    """ctxd's tables: a `[[hooks.<event>]]` group per hook (its matcher, one handler), then
    `[mcp_servers.ctxd]` running `server` unless None."""
    lines = [BLOCK_START_EOL if eol else BLOCK_START]
    for hook in hooks:
        if len(lines) > 1:
            lines.append("")
        lines.append(f"[[hooks.{hook.event}]]")
        if hook.matcher is not None:
            lines.append(f"matcher = {_toml_str(hook.matcher)}")
        lines += [f"[[hooks.{hook.event}.hooks]]", 'type = "command"', f"command = {_toml_str(hook.command)}",
                  f"timeout = {hook.timeout}"]
    if server is not None:
        lines += ["", "[mcp_servers.ctxd]", f"command = {_toml_str(server[0])}",
                  f"args = [{', '.join(_toml_str(a) for a in server[1:])}]"]
    lines.append(BLOCK_END)
    return nl.join(lines) + nl


def add_ours(text: str, hooks: list[Hook], server: list[str] | None) -> str:
    """`text` (without ctxd's entries) with ctxd's block at the end."""
    bom = BOM if text.startswith(BOM) else ""
    body = text[len(bom):]
    nl = line_end(body)
    if not body:
        result = block(hooks, server, False, nl)
    elif body.endswith("\n"):
        result = body + nl + block(hooks, server, False, nl)
    else:
        result = body + nl + nl + block(hooks, server, True, nl)
    return bom + result


# --- Codex's trust in ctxd's hooks ------------------------------------------------------------------


SNAKE = re.compile(r"(?<!^)(?=[A-Z])")
MATCHER_EVENTS = {"PreToolUse", "PermissionRequest", "PostToolUse", "SessionStart"}


def hook_hash(event: str, matcher: Any, handler: dict[str, Any]) -> str:
    """The hash Codex (0.171) records when a hook is trusted: SHA-256 of the hook's identity (its
    event, its group's matcher where the event has one, the handler with its timeout) as JSON
    with sorted keys and no spaces."""
    normal: dict[str, Any] = {"type": "command", "command": handler.get("command"),
                              "timeout": max(1, int(handler.get("timeout", 600))), "async": bool(handler.get("async", False))}
    if isinstance(handler.get("statusMessage"), str):
        normal["statusMessage"] = handler["statusMessage"]
    identity: dict[str, Any] = {"event_name": SNAKE.sub("_", event).lower(), "hooks": [normal]}
    if event in MATCHER_EVENTS and isinstance(matcher, str):
        identity["matcher"] = matcher
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class HookTrust:
    event: str
    key: str
    state: str  # "trusted", "untrusted", "changed" (trusted in another form) or "disabled"


def our_hooks_trust(config: dict[str, Any], sources: list[str], user_config: dict[str, Any]) -> list[HookTrust]:
    """Codex's trust in each of ctxd's hooks of `config` (whose path Codex names as one of
    `sources`), from the `[hooks.state]` of the user's config: Codex keys a hook's state by
    `<file>:<event>:<group index>:<handler index>`."""
    hooks = config.get("hooks")
    state = (user_config.get("hooks") or {}).get("state") if isinstance(user_config.get("hooks"), dict) else None
    states = state if isinstance(state, dict) else {}
    found = []
    for event, groups in (hooks.items() if isinstance(hooks, dict) else []):
        if event == "state" or not isinstance(groups, list):
            continue
        for g, group in enumerate(groups):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for h, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if not is_our_hook(handler):
                    continue
                keys = [f"{source}:{SNAKE.sub('_', event).lower()}:{g}:{h}" for source in sources]
                record: dict[str, Any] = next((states[k] for k in keys if isinstance(states.get(k), dict)), {})
                wanted = hook_hash(event, group.get("matcher"), handler)
                if record.get("enabled") is False:
                    verdict = "disabled"
                elif record.get("trusted_hash") == wanted:
                    verdict = "trusted"
                elif record.get("trusted_hash"):
                    verdict = "changed"
                else:
                    verdict = "untrusted"
                found.append(HookTrust(event, keys[0], verdict))
    return found
