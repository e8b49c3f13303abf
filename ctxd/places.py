"""ctxd's on-disk layout in one place: the state dir and what it holds, and the workspace a folder
belongs to. Standard library only: every hook and status line imports it.

    <state dir>/                         $XDG_STATE_HOME/ctxd, or the one a daemon was given
      workspaces/<name>-<hash>.sqlite3   a workspace folder's ledger (`ledger_database`)
      workspaces/<name>-<hash>.state-dir the pointer to a daemon's own state dir (`note_state_dir`)
      ghost/<name>-<hash>/store          the snapshot store of a folder that is no git repository
      owner/                             the owner's socket, locks and log (`owner_dir`, ctxd/ownerlink.py)
      hooks/                             what the hooks write (`hooks_dir`, the user's alone):
        sessions/<thread>.json           a hooked session's marks (ctxd/marks.py)
        usage/<agent>-<id>.json          the exact usage a status line handed over
        told/                            what the hooks' log has said once
        backups/                         the agents' configuration files as install found them
      hooks.log                          what the hooks did (`hooks_log`)
      sessions/summaries.sqlite3         the agents' session files summarized (ctxd/sessions/summaries.py)
      estimator/<profile>-<hash>.table   the token estimator's tables, kept by the daemon (`estimator_dir`)

A git repository's snapshot store is `<git common dir>/ctxd/store` (`git_common_dir`).

Finding the workspace of a folder (no daemon, no git process):

The nearest enclosing folder ctxd has a store for (a ledger database in the state directory, a
snapshot store of its git repository or of the plain folder) is the workspace, and ctxd *knows*
it; else the git root, else the folder itself, which ctxd does not know yet. `ctxd hook` acts in a
folder ctxd knows and in any git work tree (`Located.git`); `ctxd usage` and `ctxd sessions` take
any of them.

A `.git` file and the `commondir` it leads to are written by whoever made the folder: they are
read only as regular files of at most MAX_POINTER_BYTES (`ctxd.safefile`), so a FIFO, a device or
a huge file there can neither block a hook nor grow its memory; such a `.git` is not followed.

A daemon may keep a workspace's ledger in a state directory of its own (`stateDir`, `--state-dir`),
which the agents' hooks cannot be told. Such a daemon leaves a pointer in the default state
directory (`note_state_dir`), and the workspace is found with that state directory: the hooks'
checkpoints, marks and usage then land where that daemon looks.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import stat
import sys

from ctxd.safefile import read_text_bounded

TYPE_CHECKING = False  # (typing's own costs a hook milliseconds; mypy reads any TYPE_CHECKING so)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import NamedTuple

MAX_POINTER_BYTES = 4096
"""A `.git` file or a `commondir` holds one path: anything larger is not one, and is not read."""


def ctxd_command() -> list[str]:
    """How ctxd starts itself, and how install names it in the agents' configuration: this Python
    running ctxd/launch.py by absolute path, which nothing in the folder it runs in can stand in
    for (`python -m ctxd` would import a `ctxd` folder there)."""
    return [os.path.abspath(sys.executable), os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.py")]


def _path(name: str) -> Path:
    """pathlib, imported only where a Path is built: a hook the owner answers needs the names
    below as strings (`state_dir_name`, `owner_dir`, `hooks_log`), and importing pathlib would
    cost it a tenth of its time."""
    from pathlib import Path

    return Path(name)


class NoFolder(Exception):
    """The folder a command was asked about cannot be had (`asked_folder`); its message says why."""


def asked_folder(given: str | None) -> Path:
    """The folder a terminal command was asked about: `given` (its `--workspace`), made absolute
    and resolved, else the current directory. Raises NoFolder when the current directory is gone
    (deleted since the shell entered it) or `given` cannot be resolved (a symlink loop)."""
    if given is None:
        try:
            return _path(os.getcwd())
        except OSError as error:
            raise NoFolder(f"the current folder cannot be read ({error.strerror}): was it deleted? "
                           "cd to an existing folder") from None
    try:
        return _path(given).expanduser().resolve()
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop (Python < 3.13)
        raise NoFolder(f"{given} cannot be resolved ({getattr(error, 'strerror', None) or error})") from None


def state_dir_name() -> str:
    """`$XDG_STATE_HOME/ctxd` (default `~/.local/state/ctxd`), as a string (`default_state_dir`)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "ctxd")


def default_state_dir() -> Path:
    return _path(state_dir_name())


def config_file_name() -> str:
    """The user's own config file, `$XDG_CONFIG_HOME/ctxd/config.toml`, as a string (`user_config_path`)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "ctxd", "config.toml")


def user_config_path() -> Path:
    return _path(config_file_name())


def owner_dir(state_dir: str | os.PathLike[str]) -> str:
    """The owner's folder: its socket, its locks, its log (docs/processes.md)."""
    return os.path.join(state_dir, "owner")


def hooks_log(state_dir: str | os.PathLike[str]) -> str:
    return os.path.join(state_dir, "hooks.log")


def marks_dir(state_dir: Path) -> Path:
    """Where a hooked session's marks are (`ctxd.marks`)."""
    return _path(os.path.join(state_dir, "hooks", "sessions"))


def usage_dir(state_dir: Path) -> Path:
    """Where a status line hands the exact usage over (`<agent>-<session id>.json`)."""
    return _path(os.path.join(state_dir, "hooks", "usage"))


def backups_dir(state_dir: Path) -> Path:
    """The agents' configuration files as `ctxd hooks install` found them."""
    return _path(os.path.join(state_dir, "hooks", "backups"))


def estimator_dir(state_dir: Path) -> Path:
    """Where the daemon keeps the estimator's tables once built (ctxd/tokens/estimator.py `prepare`)."""
    return _path(os.path.join(state_dir, "estimator"))


class Unsafe(PermissionError):
    """A folder of ctxd's cannot be trusted: a link, another user's, or open to others."""


def open_private(path: str | os.PathLike[str], make: bool, dir_fd: int | None = None, refused: int = 0o077) -> int:
    """A descriptor of the folder `path` (relative to `dir_fd` when given), checked on the
    descriptor itself (no race with a swap): a folder, not a link, this user's, closed to others.
    With `make` it is created (0700) when missing and closed to others when it is the user's own
    but open to them (an older ctxd, or a umask of 000, made it so); without, one with a `refused`
    mode bit is refused. A folder (`dir_fd` None) in one every user may write into without the
    sticky bit is refused: another could move it away and put theirs in its place. Raises Unsafe,
    or FileNotFoundError when missing."""
    if dir_fd is None:
        parent = os.path.dirname(os.path.abspath(path))
        if make and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        mode = os.stat(parent).st_mode
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:  # (/tmp has the sticky bit: nobody moves ours away)
            raise Unsafe(f"{os.fspath(path)}: its folder {parent} is writable by every user (and not sticky): "
                         "another user could put a folder of theirs in its place; ctxd will not use it")
    if make:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700, dir_fd=dir_fd)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unsafe(f"{os.fspath(path)}: a link or not a folder; ctxd will not use it") from None
        raise
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            raise Unsafe(f"{os.fspath(path)}: belongs to another user (uid {info.st_uid}); ctxd will not use it")
        if stat.S_IMODE(info.st_mode) & 0o077:
            if not make and stat.S_IMODE(info.st_mode) & refused:
                raise Unsafe(f"{os.fspath(path)}: open to other users (mode {stat.S_IMODE(info.st_mode):o}); "
                             "ctxd will not use it")
            if make:  # (the user's own bits kept: a read-only state dir stays read-only)
                os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_state_dir(state_dir: str | os.PathLike[str]) -> None:
    """The state dir made (0700) or checked as `open_private` does: a state dir in a shared place
    that another user made first, or a link to one of theirs, is never written into (its ledgers,
    marks and logs would be theirs to read or replace). Raises Unsafe."""
    os.close(open_private(state_dir, True))


def hooks_dir(state_dir: Path) -> Path:
    """`<state dir>/hooks`, made (0700) when missing. Raises PermissionError when it, or the state
    dir, is a link or another user's folder (a state dir in a shared place, prepared by someone
    else): a prompt's words must not be written into it."""
    folder = _path(os.path.join(state_dir, "hooks"))
    try:
        private_state_dir(state_dir)
        os.close(open_private(folder, True))
    except Unsafe as error:
        raise PermissionError(f"{folder} is a link, not a folder, or another user's: the hooks write nothing there "
                              f"({error})") from None
    return folder


if TYPE_CHECKING:
    class Located(NamedTuple):
        folder: Path
        known: bool  # ctxd has a store for it (an editor opened it, or a snapshot was taken of it)
        state_dir: Path  # the state directory the daemon of this workspace uses
        git: bool = False  # the folder is the top of a git work tree whose `.git` ctxd can follow
else:  # the same tuple, without typing's import
    Located = collections.namedtuple("Located", ["folder", "known", "state_dir", "git"], defaults=[False])


def ledger_database(state_dir: Path, folder: Path) -> Path:
    """The ledger database ctxd keeps for a workspace folder (`ctxd.ledger.store.database_path`
    is this one: a hook finds it without importing SQLite)."""
    import hashlib  # (here: a hook the owner answers needs no digest, and loading OpenSSL costs it milliseconds)

    digest = hashlib.sha256(str(folder).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in folder.name)[:40] or "root"
    return state_dir / "workspaces" / f"{safe}-{digest}.sqlite3"


def plain_store(state_dir: Path, folder: Path) -> Path:
    """The snapshot store of a folder that is not a git repository (`ctxd.ghost.gitstore._plain_site`)."""
    import hashlib

    digest = hashlib.sha256(os.fsencode(folder)).hexdigest()[:24]
    return state_dir / "ghost" / f"{folder.name[:40] or 'root'}-{digest}" / "store"


def git_common_dir(top: Path) -> Path | None:
    """The common git directory of a work tree whose top is `top` (a `.git` folder, or a `.git`
    file naming a linked worktree's directory; either may name another in its `commondir`), or
    None when `top` has no `.git`, or one that is not followed: a `.git` file or `commondir` that
    is not a regular file of at most MAX_POINTER_BYTES, or a `.git` file naming no folder."""
    git_dir = top / ".git"
    if not git_dir.is_dir():
        try:
            text = read_text_bounded(git_dir, MAX_POINTER_BYTES, errors="replace")
        except OSError:  # none, or refused (ctxd.safefile.FileRefused)
            return None
        if not text.startswith("gitdir:") or "\0" in text:
            return None
        named = _path(text[len("gitdir:"):].strip())
        git_dir = named if named.is_absolute() else (top / named)
        if not git_dir.is_dir():
            return None
    try:
        common = read_text_bounded(git_dir / "commondir", MAX_POINTER_BYTES).strip()
    except FileNotFoundError:
        return git_dir
    except (OSError, UnicodeDecodeError):
        return None
    if "\0" in common:
        return None
    return (git_dir / common) if not os.path.isabs(common) else _path(common)


def _knows(state_dir: Path, folder: Path) -> bool:
    return ledger_database(state_dir, folder).exists() or (plain_store(state_dir, folder) / "HEAD").exists()


def pointer_path(default_state_dir: Path, folder: Path) -> Path:
    """Where a daemon with a state directory of its own names it for `folder`."""
    return ledger_database(default_state_dir, folder).with_suffix(".state-dir")


def note_state_dir(default_state_dir: Path, folder: Path, state_dir: Path) -> None:
    """Called by a daemon for each workspace it opens: a non-default state directory is named in
    the default one (a pointer file); with the default one, a pointer left earlier is removed."""
    path = pointer_path(default_state_dir, folder)
    if os.path.normpath(state_dir) == os.path.normpath(default_state_dir):
        path.unlink(missing_ok=True)
        return
    text = os.fsdecode(os.path.abspath(state_dir))
    try:
        if path.read_text("utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    pending = path.with_name(f".{path.name}.{os.urandom(8).hex()}.tmp")
    pending.write_text(text, "utf-8")
    os.replace(pending, path)


def _pointed(default_state_dir: Path, folder: Path) -> Path | None:
    """The state directory a pointer names for `folder` (a daemon opened the folder with it)."""
    try:
        text = read_text_bounded(pointer_path(default_state_dir, folder), MAX_POINTER_BYTES).strip()
    except (OSError, UnicodeDecodeError):
        return None
    other = _path(text)
    return other if other.is_absolute() and other.is_dir() else None


def find_workspace(folder: Path, state_dir: Path) -> Located:
    """The workspace of `folder`; `state_dir` is the default state directory (pointers are read in
    it). Not known, it is the git root (`git` says whether its `.git` can be followed), else the
    folder itself."""
    folder = _path(os.path.abspath(folder))
    try:
        folder = folder.resolve()
    except OSError:
        pass
    git_root: Path | None = None
    followed = False
    for candidate in (folder, *folder.parents):
        other = _pointed(state_dir, candidate)
        if other is not None:
            return Located(candidate, True, other)
        if _knows(state_dir, candidate):
            return Located(candidate, True, state_dir)
        if git_root is None and (candidate / ".git").exists():
            git_root = candidate  # the first `.git`, followable or not: no parent's repository is used
            common = git_common_dir(candidate)
            followed = common is not None
            if common is not None and (common / "ctxd" / "store" / "HEAD").exists():
                return Located(candidate, True, state_dir, True)
    return Located(git_root or folder, False, state_dir, followed)
