"""The plan of `ctxd hooks install | uninstall`: each configuration file and its new text, the
backups that let uninstall give back a file byte for byte, and the writes, all or none.

A copy of each file as it was is kept in ctxd's state directory (`<state dir>/hooks/backups`);
uninstall writes it back byte for byte when the file is still what install wrote, else removes
ctxd's entries from it. A file with nothing of ctxd's in it is not rewritten.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import errno
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxd.agents.config import json_settings
from ctxd.agents.config.files import LARGE_LIMIT, LIMIT, InstallError, Write, missing_folders, read, write_all
from ctxd.places import backups_dir, hooks_dir

LOCK_WAIT = 30.0
"""How long `ctxd hooks install | uninstall` waits for another one to finish (seconds)."""


@dataclass
class ConfigChange:
    path: Path
    before: str | None  # None: the file does not exist
    after: str | None  # None: remove the file (it was created by install and is now empty)
    holds_ours: Callable[[str], bool]  # whether a text of this file holds ctxd's entries


def read_scoped(path: Path, scope: str, project: Path, limit: int = LIMIT) -> str | None:
    """The file's text (None: no file). At project scope a name leading out of the project is refused."""
    return read(path, project if scope == "project" else None, limit)


def mcp_in_json(files: Callable[[str], Path], project: Path, limit: Callable[[str, Path], int] = lambda s, p: LIMIT) -> bool:
    """Whether ctxd's MCP server is in the JSON settings file `files(scope)` names, at project or user
    scope (an unreadable file says no)."""
    for scope in ("project", "user"):
        try:
            path = files(scope)
            if json_settings.mcp_installed(json_settings.load(path, read_scoped(path, scope, project, limit(scope, path)))):
                return True
        except InstallError:
            continue
    return False


def backup_path(state_dir: Path, path: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(path.absolute())).hexdigest()[:24]
    return backups_dir(state_dir) / f"{path.name}-{digest}.json"


def read_backup(state_dir: Path, path: Path) -> dict[str, Any] | None:
    try:
        text = read(backup_path(state_dir, path), limit=4 * LARGE_LIMIT)
        value = json.loads(text) if text else None
    except (InstallError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and value.get("path") == str(path.absolute()) else None


Edit = Callable[[dict[str, Any]], dict[str, Any]]


def json_install(path: Path, before: str | None, edit: Edit, holds_ours: Callable[[str], bool]) -> ConfigChange:
    """A JSON file with `edit` applied (installed already: the file as it is, not reformatted)."""
    parsed = json_settings.load(path, before)
    value = edit(copy.deepcopy(parsed))
    if before is not None and value == parsed:
        return ConfigChange(path, before, before, holds_ours)
    return ConfigChange(path, before, json_settings.dump(value, before), holds_ours)


def json_uninstall(path: Path, before: str | None, edit: Edit, state_dir: Path,
                   holds_ours: Callable[[str], bool], load: Callable[[str], Any] = json.loads) -> ConfigChange:
    """A JSON file without ctxd's entries (`edit` removes them): the backup's bytes when it still
    is what install wrote (or was changed back since), else the file less ctxd's entries. `load`
    reads the backup's text (OpenCode's JSONC reader: a commented file rewritten as JSON since
    install lost the user's empty `mcp`)."""
    if before is None:
        return ConfigChange(path, None, None, holds_ours)
    backup = read_backup(state_dir, path) or {}
    original = backup.get("original")
    if backup.get("installed") == before:  # untouched since install: exactly what was there (JSONC too)
        if not backup.get("existed"):
            return ConfigChange(path, before, None, holds_ours)
        if original is not None:
            return ConfigChange(path, before, original, holds_ours)
    parsed = json_settings.load(path, before)
    value = edit(copy.deepcopy(parsed))
    if value == parsed:
        return ConfigChange(path, before, before, holds_ours)  # nothing of ctxd's: not even reformatted
    if original is not None:
        try:
            was = load(original.removeprefix(json_settings.BOM))
            _put_back_emptied(parsed, value, was)
            if _same(was, value):
                return ConfigChange(path, before, original, holds_ours)  # changed since, and changed back
        except (ValueError, RecursionError):
            pass
    if backup and not backup.get("existed") and not value:
        return ConfigChange(path, before, None, holds_ours)  # install created it and only ctxd's entries were left
    return ConfigChange(path, before, json_settings.dump(value, before), holds_ours)


_NOTHING = object()


def _put_back_emptied(parsed: Any, value: dict[str, Any], original: Any) -> None:
    """What `edit` took out of `value` (the file `parsed` less ctxd's entries) with ctxd's last
    entry in it, put back in place when the file had it before install with nothing in it: an empty
    object or list, or a null (`"hooks": {}`, `"mcpServers": {}`, Qwen Code's `"ui": {}`). Uninstall
    of a file the agent rewrote since install lost them."""
    if not isinstance(parsed, dict) or not isinstance(original, dict):
        return
    back: dict[str, Any] = {}
    for key, now in parsed.items():
        if key in value:
            if isinstance(value[key], dict):
                _put_back_emptied(now, value[key], original.get(key))
        elif key in original and (kept := _emptied(now, original[key])) is not _NOTHING:
            back[key] = kept
    if back:
        rest = dict(value)
        value.clear()
        value.update({key: rest[key] if key in rest else back[key] for key in parsed if key in rest or key in back})
        value.update(rest)


def _emptied(now: Any, was: Any) -> Any:
    """What of `was` (the value before install) stays where `edit` removed `now`."""
    if was is None or was == {} or was == []:
        return copy.deepcopy(was)
    if isinstance(was, dict) and isinstance(now, dict):
        kept: dict[str, Any] = {}
        _put_back_emptied(now, kept, was)
        return kept or _NOTHING
    return _NOTHING


def _same(a: Any, b: Any) -> bool:
    """The same JSON value, types included (Python has 1 == True == 1.0: a user's `1` changed to
    `true` after install was taken for "changed back", and uninstall wrote the `1` back)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def apply(changes: list[ConfigChange], action: str, state_dir: Path) -> None:
    """Every change and its backup, or none of them (InstallError)."""
    writes: list[Write] = []
    for change in changes:
        known = read_backup(state_dir, change.path)
        if action == "install":
            backup = backup_path(state_dir, change.path)
            if known and known.get("installed") == change.before:  # installed again over ctxd's own
                existed, original = known.get("existed", True), known.get("original")
                folders = known.get("folders") if not existed else []
            else:  # the file as the user left it; unknown when it holds ctxd's entries already
                existed = change.before is not None
                original = None if change.before is None or change.holds_ours(change.before) else change.before
                folders = [str(f) for f in missing_folders(change.path)] if change.before is None else []
            record = json.dumps({"path": str(change.path.absolute()), "existed": existed,
                                 "original": original, "installed": change.after, "folders": folders})
            writes.append(Write(backup, None, record, check_unchanged=False, private=True))
        made = known.get("folders") if known and action == "uninstall" and not known.get("existed") else None
        prune = [Path(f) for f in made if isinstance(f, str)] if isinstance(made, list) else []
        writes.append(Write(change.path, change.before, change.after, prune=prune))
    write_all(writes)


def diff(changes: list[ConfigChange]) -> str:
    out: list[str] = []
    for change in changes:
        out += difflib.unified_diff((change.before or "").splitlines(keepends=True),
                                    (change.after or "").splitlines(keepends=True),
                                    fromfile=str(change.path) if change.before is not None else "/dev/null",
                                    tofile=str(change.path) if change.after is not None else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)


@contextlib.contextmanager
def one_at_a_time(state_dir: Path, wait: float = LOCK_WAIT) -> Iterator[None]:
    """`ctxd hooks install | uninstall` one at a time (an flock of `<state dir>/hooks/install.lock`),
    from reading the files to the last write: two at once (two ctxds, two commands to write) each
    read the files and wrote them one by one, leaving some files of one and some of the other, or
    one's failure putting back files the other said it wrote. Waits `wait` seconds at most, then
    raises InstallError (never blocks for good). A state dir ctxd cannot write into has nothing to
    lock with: the command runs unlocked (uninstall needs no backup written)."""
    import fcntl

    path = backups_dir(state_dir).parent / "install.lock"
    try:
        hooks_dir(state_dir)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as error:
        if isinstance(error, PermissionError) or error.errno == errno.EROFS:
            # (read-only, or a state dir ctxd does not trust, `places.hooks_dir`: the command runs as
            # it did before the lock, and no lock file is made there)
            yield
            return
        raise InstallError(f"{path}: cannot be opened ({error.strerror or error}); nothing was written") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InstallError(f"{path}: not a regular file; nothing was written")
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES):
                    raise InstallError(f"{path}: cannot be locked ({error.strerror}); nothing was written") from None
                if time.monotonic() >= deadline:
                    raise InstallError(f"another `ctxd hooks install` or `uninstall` has been running for {wait:.0f} s "
                                       f"(it holds {path}); nothing was written; run the command again") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
