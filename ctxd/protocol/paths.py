"""File names on the wire (protocol v2): every byte sent must be valid UTF-8, but a POSIX file name
is any bytes. Python reads such a name as a str with surrogate escapes (os.fsdecode); sent as it
is, it would be invalid UTF-8. Such a path is sent escaped, with `"pathEncoding": "escaped"`
beside it: each byte that is not UTF-8 as `\\xNN`, and a backslash as `\\\\`, so the escaping can
be undone. Paths that are valid UTF-8 are sent unchanged, without the marker.

Call `escape_paths` on any reply that carries paths (ghost snapshot, restore, diff); it knows
the shapes: lists of paths under PATH_LISTS (one marker in the reply, beside the lists, and then
every path of those lists is escaped) and objects with a `path` (the marker sits in the object).
"""

from __future__ import annotations

from typing import Any

ESCAPED = "escaped"
PATH_LISTS = ("restored", "removed", "wouldWrite", "wouldRemove")


def escape_path(path: str, force: bool = False) -> tuple[str, bool]:
    """`(wire form, escaped?)` of a path read with surrogate escapes; with `force`, escaped even
    when it is valid UTF-8 (a list marked escaped is escaped as a whole)."""
    if not force:
        try:
            path.encode("utf-8")
            return path, False
        except UnicodeEncodeError:
            pass
    out = []
    for ch in path:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as os.fsdecode keeps it
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:  # any other lone surrogate
            out.append(f"\\u{code:04x}")
        elif ch == "\\":
            out.append("\\\\")
        else:
            out.append(ch)
    return "".join(out), True


def unescape_path(text: str) -> bytes:
    """The file name's bytes from an escaped wire form (for clients and tests)."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text.startswith("\\x", i):
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        elif text.startswith("\\\\", i):
            out += b"\\"
            i += 2
        else:
            out += text[i].encode("utf-8", "surrogatepass")
            i += 1
    return bytes(out)


def escape_paths(value: Any) -> Any:
    """`value` (a reply) with every path that is not UTF-8 escaped and marked. Returns a copy only
    where something changed."""
    if isinstance(value, list):
        return [escape_paths(v) for v in value]
    if not isinstance(value, dict):
        return value
    result = dict(value)
    lists = {k: v for k, v in value.items() if k in PATH_LISTS and isinstance(v, list)}
    # One marker for all the reply's path lists: when one needs escaping, all are escaped.
    if any(isinstance(p, str) and escape_path(p)[1] for paths in lists.values() for p in paths):
        for key, paths in lists.items():
            result[key] = [escape_path(p, force=True)[0] if isinstance(p, str) else p for p in paths]
        result["pathEncoding"] = ESCAPED
    for key, item in value.items():
        if key == "path" and isinstance(item, str):
            wire, escaped = escape_path(item)
            if escaped:
                result["path"], result["pathEncoding"] = wire, ESCAPED
        elif key not in lists and isinstance(item, (dict, list)):
            result[key] = escape_paths(item)
    return result
