"""Reading and writing the agents' configuration files for `ctxd hooks install | uninstall | status`.

A cloned repository chooses what its agents' project files (`.claude/settings.json`, `.mcp.json`,
`.codex/config.toml`...) are: a link to a file of the user's (`~/.claude.json`), to `/dev/zero`, a FIFO, a huge file. So:
- a file is read only when it is a regular file, at most `LIMIT` bytes (`ctxd.safefile`);
- at project scope, a name that leads out of the project (itself a link, or a folder on its way)
  is refused, for reading and for writing; at user scope a linked dotfile is the user's own
  setup and is read and written where it lives;
- a change of several files is all or nothing: every target is checked writable before the first
  write, each file is replaced whole (a temporary file renamed over it), and when a write fails
  midway the files already written are put back as they were;
- a link is never removed or replaced: a file is written, or removed, where the link leads.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from ctxd.safefile import FileRefused, read_bounded

LIMIT = 1 << 20
"""A configuration file larger than this is refused (1 MiB is far beyond any real one)."""
LARGE_LIMIT = 64 << 20
"""An agent's state file that holds its user MCP servers too (Claude Code's `~/.claude.json`)
grows with the projects it remembers: read up to this."""


class InstallError(Exception):
    """A file ctxd cannot edit safely (not parseable, a link out of the project, not writable, a
    conflicting entry): nothing is written."""


def outside(path: Path, project: Path) -> str | None:
    """Where `path` really leads when that is outside `project`, else None."""
    real = os.path.realpath(path)
    root = os.path.realpath(project)
    return None if real == root or real.startswith(root.rstrip(os.sep) + os.sep) else real


def read(path: Path, project: Path | None = None, limit: int = LIMIT) -> str | None:
    """The file's text, or None when there is none. With `project` (project scope), a name that
    leads out of it is refused."""
    if project is not None and (real := outside(path, project)) is not None:
        raise InstallError(f"{path}: a link that leads out of the project (to {real}); "
                           "ctxd neither reads nor writes through it; left unchanged")
    try:
        return read_bounded(path, limit).decode("utf-8")
    except FileNotFoundError:
        return None
    except FileRefused as error:
        raise InstallError(f"{error}; ctxd reads only a regular file of at most {limit >> 20} MiB; "
                           "left unchanged") from None
    except UnicodeDecodeError:
        raise InstallError(f"{path}: not UTF-8 text; left unchanged") from None
    except OSError as error:
        raise InstallError(f"{path}: cannot be read ({error.strerror or error}); left unchanged") from None


@dataclass
class Write:
    path: Path  # the name; when it is a link, the file it leads to is written
    before: str | None  # what was read (None: no file); a file changed since is not overwritten
    after: str | None  # None: remove the file
    check_unchanged: bool = True
    private: bool = False  # ctxd's own copy of a file that may hold a key: 0600, in folders only the user opens
    prune: list[Path] = field(default_factory=list)  # a file removed: the folders install made for it, deepest first,
    # removed once every write is done when they are empty (a `~/.gemini` left behind said Gemini CLI was there)


def _unwritable(target: Path) -> str | None:
    """Why `target` cannot be written or removed, if it cannot."""
    if target.is_dir():
        return f"{target} is a folder"
    if target.exists() and not target.is_file():
        return f"{target} is not a regular file"
    folder = target.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        reason = "read-only file system" if _read_only_fs(folder) else "no write permission"
        return f"{folder} is not writable ({reason})"
    if target.is_file() and (not target.stat().st_mode & 0o222 or not os.access(target, os.W_OK)):
        return f"{target} is read-only"  # (a rename over it would replace it: root's and its folder's owner's would)
    return None


def _read_only_fs(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _current(target: Path, limit: int) -> bytes | None:
    try:
        return read_bounded(target, limit)
    except FileNotFoundError:
        return None


def _replace(target: Path, data: bytes, private: bool = False) -> None:
    """Write `data` to `target` whole: a temporary file beside it, renamed over it, with the
    file's own mode (`private`: 0600)."""
    pending = target.with_name(f".{target.name}.ctxd-{os.getpid()}-{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            mode = 0o600 if private else target.stat().st_mode & 0o7777  # the file's own mode, kept
        except FileNotFoundError:
            mode = 0o666 & ~_umask()  # a new file: as any program would create it
        os.chmod(pending, mode)
        os.replace(pending, target)
    except BaseException:
        pending.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _make_folders(folder: Path, made: list[Path], private: bool = False) -> None:
    """The missing folders up to `folder`; `private`: made 0700, and `folder` made the user's
    alone when it is theirs (a backup of a settings file holding an API key was readable by all)."""
    missing = []
    parent = folder
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700 if private else 0o777)
        except FileExistsError:
            if not path.is_dir() or path.is_symlink():
                raise
            continue  # made meanwhile by another ctxd (the owner makes `<state dir>/hooks`): not ours to remove
        made.append(path)
    if private:
        info = os.lstat(folder)
        if info.st_uid == os.getuid() and info.st_mode & 0o077:
            os.chmod(folder, 0o700)


def write_all(writes: list[Write], limit: int = LARGE_LIMIT) -> None:
    """Every write, or none: InstallError (naming the file and what was put back) otherwise."""
    targets = [(w, Path(os.path.realpath(w.path))) for w in writes]
    problems = [p for _, t in targets if (p := _unwritable(t)) is not None]
    if problems:
        raise InstallError("; ".join(dict.fromkeys(problems)) + "; nothing was written")
    try:
        payloads = [None if write.after is None else write.after.encode() for write, _ in targets]
    except UnicodeEncodeError as error:
        raise InstallError(f"text no UTF-8 file can hold ({error.reason}); nothing was written") from None
    done: list[tuple[Path, bytes | None]] = []
    made: list[Path] = []
    try:
        for (write, target), data in zip(targets, payloads, strict=True):
            previous = _current(target, limit)
            if write.check_unchanged and previous != (None if write.before is None else write.before.encode()):
                raise InstallError(f"{write.path} changed while ctxd was writing (another program wrote it); "
                                   "run the command again")
            if data is None:
                if previous is not None:
                    done.append((target, previous))
                    target.unlink()
                continue
            _make_folders(target.parent, made, write.private)
            done.append((target, previous))
            _replace(target, data, write.private)
    except (OSError, InstallError) as error:
        lost = _put_back(done, made)
        what = error if isinstance(error, InstallError) else f"{error.filename or ''}: {_reason(error)}"
        tail = (f"could not put back {', '.join(map(str, lost))}" if lost
                else "every file is as it was before")
        raise InstallError(f"{what}; {tail}") from None
    except BaseException:  # (a bug, an interrupt: still all or none)
        _put_back(done, made)
        raise
    for write in writes:
        for folder in write.prune if write.after is None else []:
            try:
                folder.rmdir()  # only an empty one; never a link
            except OSError:
                pass  # not empty (something of the user's or the agent's since), or gone


def missing_folders(path: Path) -> list[Path]:
    """The folders a write of `path` would make (`_make_folders`), deepest first."""
    missing = []
    folder = Path(os.path.realpath(path)).parent
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _reason(error: OSError) -> str:
    if error.errno == errno.ENOSPC:
        return "no space left on the device"
    return error.strerror or str(error)


def _put_back(done: list[tuple[Path, bytes | None]], made: list[Path]) -> list[Path]:
    lost = []
    for target, previous in reversed(done):
        try:
            if previous is None:
                target.unlink(missing_ok=True)
            else:
                _replace(target, previous)
        except OSError:
            lost.append(target)
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            pass
    return lost
