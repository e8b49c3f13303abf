"""Writing a restore's changes into the working tree so that every file ends whole: exactly as it
was, or exactly as the snapshot has it, whatever fails on the way (a full disk, a quota, a file
size limit, an I/O error, a read-only file system, a crash).

Three steps, each taken from descriptors of real folders (`Folders`: opened from the work tree's
top without following a link, so a folder swapped for a link meanwhile never leads outside):

1. Staging. Each file and link the snapshot needs is written under a temporary name in the
   folder it goes to; where the snapshot has a folder that is not there now (nothing is there, or
   a file or a link the restore deletes), a temporary folder beside it is built to become that
   folder. Then the file systems are synced, the store's too (the undo snapshot's objects). Any
   failure stops here: the temporaries are removed and no file the user sees has changed.
2. Placing: renames only, which need no space. A temporary replaces its file in one rename, the
   old one kept under a hard link until the end (checked to be the file found unchanged, not a save
   renamed over it just before: `_linked_the_checked`); what the snapshot does not have is moved aside
   under a temporary name. Where nothing was, the rename never replaces what another program
   made there meanwhile (`_rename_noreplace`). A failure renames everything back (`PlacingFailed`).
3. Cleanup: what was moved aside is deleted, then the folders the deletions emptied.

Temporary names are `.ctxd-<tag>-<n>`; the restore's journal records the tag and the folders
that hold them, so that `remove_leftovers` finds what a crash left. Pure module: the caller
(`ctxd.ghost.restore.restore`) plans, checks space, writes the journal and reports.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ctxd.errors import GitFailed
from ctxd.ghost.gitstore import Blobs

GITLINK = "160000"
TREE = "040000"  # a folder an undo makes again, with its mode (git keeps no empty folder: `ctxd.ghost.restore`)
LINK = "120000"
EXECUTABLE = "100755"
REGULAR = "100644"
TEMP_PREFIX = ".ctxd-"
ASIDE = ".aside"

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

_syncfs: Callable[[int], int] | None = None
_renameat2: Callable[[int, bytes, int, bytes, int], int] | None = None
_RENAME_NOREPLACE = 1
if sys.platform.startswith("linux"):
    try:
        _syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # pragma: no cover - every Linux libc since 2011 has it
        _syncfs = None
    try:
        _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
        _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        _renameat2.restype = ctypes.c_int
    except (OSError, AttributeError):  # pragma: no cover - glibc before 2.28, some other libcs
        _renameat2 = None


@dataclass
class Change:
    """One path of `git diff-tree --raw` between the current state and the tree a restore makes."""

    path: str
    status: str  # "A" (only in the new tree), "D" (only in the old), "M" (both, different); "T" counts as M
    old_mode: str
    new_mode: str
    old_sha: str
    new_sha: str
    binary: bool = False
    perm: int | None = None  # the new file's (or folder's) permission bits, when the snapshot recorded them (an undo's)


@dataclass
class _Entry:
    """A file, a link or a folder (a submodule's, or one an undo makes again: TREE) to write: `parts`
    below its placement's temporary folder, or none when it is the placement's temporary itself."""

    parts: list[str]
    mode: str
    sha: str
    perm: int | None = None


@dataclass
class _Placement:
    """One name of a real folder that the restore gives new content: a file, a link, or a folder
    built under a temporary name."""

    folder: str  # the repository path of the folder that holds it ("" for the top)
    name: str
    temp: str
    builds_folder: bool
    entries: list[_Entry] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # the change paths it makes as the snapshot has them
    removed: list[str] = field(default_factory=list)  # the deleted paths it takes with it (inside a folder it replaces)

    @property
    def path(self) -> str:
        return f"{self.folder}/{self.name}" if self.folder else self.name


@dataclass
class _Removal:
    folder: str
    name: str
    path: str
    gitlink: bool


@dataclass
class Writing:
    """What a restore writes, planned before anything is: see the module's docstring."""

    tag: str
    prefix: str  # the workspace folder's path in the repository: paths are shown relative to it
    placements: list[_Placement]
    removals: list[_Removal]
    devices: dict[str, int]  # folder -> its file system's st_dev, for the folders that get new content
    made: list[tuple[str, str]] = field(default_factory=list)  # (folder, name) of every temporary name
    keep: set[str] = field(default_factory=set)  # folders never removed when emptied (an undo's: they were there)

    def temp_name(self, folder: str, aside: bool = False) -> str:
        """A new temporary name in `folder`; `aside` for what the user had there (moved aside
        until the end), which the leftovers of a crash tell apart (`remove_leftovers`)."""
        name = f"{TEMP_PREFIX}{self.tag}-{len(self.made) + 1}{ASIDE if aside else ''}"
        self.made.append((folder, name))
        return name

    def show(self, path: str) -> str:
        """A repository path as a message shows it: relative to the workspace folder, bytes that
        are not UTF-8 escaped."""
        path = path[len(self.prefix):] if path.startswith(self.prefix) else path
        return os.fsencode(path).decode("utf-8", "backslashreplace")

    @property
    def folders(self) -> list[str]:
        """The folders temporary names are made in: what a crash's leftovers are looked for in."""
        return sorted({p.folder for p in self.placements} | {r.folder for r in self.removals})

    @property
    def emptiable(self) -> list[str]:
        """The folders this restore deletes from: the only ones it can leave empty (`finish`)."""
        return sorted({r.folder for r in self.removals} - self.keep)

    @property
    def blobs(self) -> list[str]:
        """The objects to read, in the order staging writes them."""
        return [e.sha for p in self.placements for e in p.entries if e.mode not in (GITLINK, TREE)]


class Folders:
    """Descriptors of the work tree's real folders by repository path, each opened from the one
    above without following a link (a folder swapped for a link meanwhile fails the open instead
    of leading outside). A bounded cache: take a descriptor and use it before asking for another."""

    LIMIT = 256

    def __init__(self, top: Path) -> None:
        self._top = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._fds: dict[str, int] = {}

    def fd(self, folder: str) -> int:
        """The folder's descriptor; OSError when it is missing, a file or a link."""
        if not folder:
            return self._top
        found = self._fds.get(folder)
        if found is not None:
            return found
        parent, _, name = folder.rpartition("/")
        above = self.fd(parent)
        if len(self._fds) >= self.LIMIT:
            self._drop(keep=parent)
        fd = os.open(name, _FOLDER_FLAGS, dir_fd=above)
        self._fds[folder] = fd
        return fd

    def _drop(self, keep: str) -> None:
        for folder, fd in list(self._fds.items()):
            if folder != keep:
                os.close(fd)
                del self._fds[folder]

    def close(self) -> None:
        self._drop(keep="")
        os.close(self._top)


# --- planning -------------------------------------------------------------------------------------


def plan(top: Path, changes: list[Change], tag: str, prefix: str = "") -> Writing:
    """Where each change goes: the placements (by path, parents first) and the deletions. Looks at
    the folders on the way (lstat, never through a link); writes nothing."""
    kinds: dict[str, os.stat_result | None] = {}

    def look(path: str) -> os.stat_result | None:
        if path not in kinds:
            try:
                kinds[path] = os.lstat(os.path.join(top, path)) if path else os.stat(top)
            except OSError:
                kinds[path] = None
        return kinds[path]

    def is_folder(path: str) -> bool:
        found = look(path)
        return found is not None and stat.S_ISDIR(found.st_mode)

    writing = Writing(tag=tag, prefix=prefix, placements=[], removals=[], devices={})
    placed: dict[str, _Placement] = {}
    for change in sorted((c for c in changes if c.status != "D"), key=lambda c: c.path):
        parts = change.path.split("/")
        depth = next((i for i in range(1, len(parts)) if not is_folder("/".join(parts[:i]))), None)
        if depth is None:  # every folder on the way is there: the file goes straight into its folder
            if change.new_mode in (GITLINK, TREE) and is_folder(change.path):
                continue  # a submodule's folder is there already (its content is not the snapshot's)
            placement = _Placement("/".join(parts[:-1]), parts[-1], writing.temp_name("/".join(parts[:-1])),
                                   builds_folder=change.new_mode in (GITLINK, TREE))
            placement.entries.append(_Entry([], change.new_mode, change.new_sha, change.perm))
            placed[change.path] = placement
            writing.placements.append(placement)
        else:  # a folder the snapshot has is not there: built whole beside where it goes
            at = "/".join(parts[:depth])
            if at not in placed:
                placed[at] = _Placement("/".join(parts[:depth - 1]), parts[depth - 1], writing.temp_name("/".join(parts[:depth - 1])),
                                       builds_folder=True)
                writing.placements.append(placed[at])
            placement = placed[at]
            placement.entries.append(_Entry(parts[depth:], change.new_mode, change.new_sha, change.perm))
        if change.new_mode not in (GITLINK, TREE):
            placement.restored.append(change.path)
    for change in changes:
        if change.status != "D":
            continue
        parts = change.path.split("/")
        cover = next((placed[p] for p in ("/".join(parts[:i]) for i in range(1, len(parts) + 1)) if p in placed), None)
        if cover is not None:  # inside a folder (or the file or link) that a placement replaces
            cover.removed.append(change.path)
        else:
            writing.removals.append(_Removal("/".join(parts[:-1]), parts[-1], change.path, change.old_mode == GITLINK))
    for placement in writing.placements:
        found = look(placement.folder)
        if found is not None:
            writing.devices[placement.folder] = found.st_dev
    return writing


def space_needed(top: Path, writing: Writing, sizes: dict[str, int | None]) -> list[tuple[str, int, int]]:
    """(folder, bytes needed, bytes free) for each file system that has too little room for what
    staging writes (every new file is written before any old one is freed). Empty: it fits."""
    per_device: dict[int, tuple[str, int, int]] = {}  # st_dev -> (a folder on it, blocks, inodes)
    for placement in writing.placements:
        device = writing.devices.get(placement.folder)
        if device is None:
            continue  # gone meanwhile: staging fails there, before anything is changed
        folder, blocks, inodes = per_device.get(device, (placement.folder, 0, 0))
        folders = {tuple(e.parts[:i]) for e in placement.entries for i in range(1, len(e.parts))}
        blocks += len(folders) + (1 if placement.builds_folder else 0)
        inodes += len(folders) + len(placement.entries) + (1 if placement.builds_folder else 0)
        for entry in placement.entries:
            size = (sizes.get(entry.sha) or 0) if entry.mode not in (GITLINK, TREE) else 0
            blocks += -(-size // 4096)
        per_device[device] = (folder, blocks, inodes)
    short = []
    for folder, blocks, inodes in per_device.values():
        try:
            fs = os.statvfs(os.path.join(top, folder))
        except OSError:
            continue
        unit = fs.f_frsize or fs.f_bsize or 4096
        free = (fs.f_bfree if os.geteuid() == 0 else fs.f_bavail) * unit  # root may use the reserved blocks
        need = blocks * 4096
        if need > free or (fs.f_files and inodes > fs.f_favail):
            short.append((folder, need, free))
    return short


# --- writing ----------------------------------------------------------------------------------------


class StagingFailed(Exception):
    """Staging failed: no file the user sees was changed. `clean` is False when some temporary
    could not be removed (the journal then stays, and the next open removes it)."""

    def __init__(self, reason: str, code: int | None, clean: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code  # the errno, when the system refused a write
        self.clean = clean


class PlacingFailed(Exception):
    """Placing failed part-way. `restored` and `removed` are the change paths left as the snapshot
    has them (empty when everything was renamed back: the working tree is then as it was)."""

    def __init__(self, reason: str, restored: list[str], removed: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.restored = restored
        self.removed = removed


def stage(writing: Writing, folders: Folders, blobs: Blobs, sync_also: list[Path]) -> None:
    """Write every placement under its temporary name, then sync the file systems that hold them
    and those of `sync_also`. On any failure, remove what was written and raise StagingFailed."""
    doing = "syncing the file system"
    try:
        for placement in writing.placements:
            doing = f"writing {writing.show(placement.path)}"
            _stage_one(placement, folders, blobs)
        doing = "syncing the file system"
        _sync(writing, folders, sync_also)
    except (OSError, GitFailed) as error:
        code = error.errno if isinstance(error, OSError) else None
        raise StagingFailed(f"{describe(error)} {doing}", code, clean=_remove_temps(writing, folders)) from None


def _stage_one(placement: _Placement, folders: Folders, blobs: Blobs) -> None:
    home = folders.fd(placement.folder)
    if not placement.builds_folder:
        try:
            now = os.lstat(placement.name, dir_fd=home).st_mode
        except FileNotFoundError:
            now = 0
        _write_entry(home, placement.temp, placement.entries[0], blobs, now if stat.S_ISREG(now) else None)
        return
    os.mkdir(placement.temp, 0o777, dir_fd=home)
    opened: dict[tuple[str, ...], int] = {(): os.open(placement.temp, _FOLDER_FLAGS, dir_fd=home)}
    perms: dict[tuple[str, ...], int] = {}  # the folders' recorded modes, set once all they hold is written
    try:
        for entry in placement.entries:
            if entry.mode == TREE and entry.perm is not None:
                perms[tuple(entry.parts)] = entry.perm
            if not entry.parts:
                continue  # the placement is an empty folder (a submodule's), or one an undo makes again
            last = len(entry.parts) + 1 if entry.mode == TREE else len(entry.parts)
            for i in range(1, last):
                inner = tuple(entry.parts[:i])
                if inner not in opened:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(inner[-1], 0o777, dir_fd=opened[inner[:-1]])
                    opened[inner] = os.open(inner[-1], _FOLDER_FLAGS, dir_fd=opened[inner[:-1]])
            if entry.mode != TREE:
                _write_entry(opened[tuple(entry.parts[:-1])], entry.parts[-1], entry, blobs)
        for inner in sorted(perms, key=len, reverse=True):  # (the deepest first: a folder made read-only last)
            os.fchmod(opened[inner], perms[inner])
    finally:
        for fd in opened.values():
            os.close(fd)


def _write_entry(folder: int, name: str, entry: _Entry, blobs: Blobs, replaced: int | None = None) -> None:
    """One new file, link or empty folder, made as `git checkout-index` makes them (mode 0666 or
    0777 less the umask), its content streamed from `blobs`. A file whose mode the snapshot
    recorded (`entry.perm`: an undo's, of a file the restore deleted or rewrote) gets that mode;
    else a file that replaces a file (`replaced`: its mode) gives its group and others no more
    than that file did: a 0600 file came back 0644, and an undo left it so."""
    if entry.mode == GITLINK:
        os.mkdir(name, 0o777, dir_fd=folder)
        return
    blobs.next(entry.sha)
    if entry.mode == LINK:
        os.symlink(os.fsdecode(b"".join(blobs.chunks())), name, dir_fd=folder)
        return
    fd = os.open(name, _NEW_FILE, 0o777 if entry.mode == EXECUTABLE else 0o666, dir_fd=folder)
    try:
        if entry.perm is not None:
            os.fchmod(fd, entry.perm)
        elif replaced is not None:  # the owner's bits as git makes them, the others' never wider than now
            made, others = os.fstat(fd).st_mode & 0o777, replaced & 0o077
            if entry.mode == EXECUTABLE:
                others |= (replaced & 0o044) >> 2  # (executable by those who may read it)
            os.fchmod(fd, made & 0o700 | made & others)
        for chunk in blobs.chunks():
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
        if _syncfs is None:
            os.fsync(fd)
    finally:
        os.close(fd)


def _sync(writing: Writing, folders: Folders, also: list[Path]) -> None:
    """Make what staging wrote durable before anything is renamed over a file: one `syncfs` per
    file system (where there is none, each file was synced as it was written)."""
    if _syncfs is None:
        return
    done: set[int] = set()
    for folder, device in writing.devices.items():
        if device not in done:
            done.add(device)
            _sync_fd(folders.fd(folder))
    for path in also:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_dev not in done:
                done.add(os.fstat(fd).st_dev)
                _sync_fd(fd)
        finally:
            os.close(fd)


def _sync_fd(fd: int) -> None:
    assert _syncfs is not None
    if _syncfs(fd) != 0:  # a write-back error of the file system since it was opened (EIO, ENOSPC)
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@dataclass
class _Step:
    """One thing `place` did, for taking it back: a path the snapshot lacks moved aside
    (`placement` None), or a placement, with what was there kept as `aside` (a hard link when
    `linked`, else moved) and whether the new content is in place yet."""

    folder: str
    name: str
    aside: str | None
    placement: _Placement | None = None
    linked: bool = False
    placed: bool = False


def place(writing: Writing, folders: Folders, captured_at: int) -> None:
    """Put every staged temporary in place and move aside what the snapshot does not have: renames
    in one folder each, which need no space. On a failure, everything done is renamed back, the
    temporaries are removed, and PlacingFailed says what could not be renamed back. A file changed
    since `captured_at` (its ctime, ns) is a failure: the undo snapshot does not hold it (an
    editor's save while a restore staged its files was lost)."""
    done: list[_Step] = []
    doing = ""
    try:
        for removal in writing.removals:
            doing = f"deleting {writing.show(removal.path)}"
            if removal.gitlink:
                continue  # a submodule's folder: removed at the end, only when empty
            try:
                home = folders.fd(removal.folder)
            except OSError:
                continue  # its folder is gone (or is a link now): nothing of the snapshot's there to delete
            try:
                found = os.lstat(removal.name, dir_fd=home)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(found.st_mode):  # a folder made there meanwhile
                raise IsADirectoryError(errno.EISDIR, "a folder is where the snapshot's file was deleted")
            _unchanged_since(found, captured_at)
            aside = writing.temp_name(removal.folder, aside=True)
            try:
                os.rename(removal.name, aside, src_dir_fd=home, dst_dir_fd=home)
            except FileNotFoundError:
                continue
            done.append(_Step(removal.folder, removal.name, aside))
        for placement in writing.placements:
            doing = f"putting {writing.show(placement.path)} in place"
            home = folders.fd(placement.folder)
            try:
                there = os.lstat(placement.name, dir_fd=home)
            except FileNotFoundError:
                there = None
            step = _Step(placement.folder, placement.name, None, placement)
            if there is not None and stat.S_ISDIR(there.st_mode):  # a folder the snapshot has a file for
                _folder_unchanged_since(home, placement.name, captured_at)
            elif there is not None:
                _unchanged_since(there, captured_at)
            if there is not None:
                step.aside = writing.temp_name(placement.folder, aside=True)
                step.linked = (not placement.builds_folder and not stat.S_ISDIR(there.st_mode)
                               and _link(home, placement.name, step.aside))
                if step.linked:
                    _linked_the_checked(home, step.aside, there)
                else:  # a folder either side (or no hard links here): moved aside first
                    os.rename(placement.name, step.aside, src_dir_fd=home, dst_dir_fd=home)
            done.append(step)
            if step.linked:  # over the file just checked (kept under its second name)
                os.rename(placement.temp, placement.name, src_dir_fd=home, dst_dir_fd=home)
            else:  # where nothing is now: a file another program made there since the check is kept
                _rename_noreplace(home, placement.temp, placement.name)
            step.placed = True
    except OSError as error:
        left = _undo(writing, folders, done)
        _remove_temps(writing, folders)
        restored, removed = [], []
        for step in left:
            if step.placement is None:
                removed.append(f"{step.folder}/{step.name}" if step.folder else step.name)
                continue
            if step.placed:
                restored += step.placement.restored
            removed += step.placement.removed  # what it replaced is gone (placed, or moved aside)
        raise PlacingFailed(f"{describe(error)} {doing}", sorted(restored), sorted(removed)) from None


def _rename_noreplace(home: int, name: str, to: str) -> None:
    """Rename `name` to `to`, a name nothing is at: a file another program made there between the
    check and the rename fails it (EEXIST, as a file changed since the undo snapshot fails it) instead
    of being replaced unseen. `renameat2(RENAME_NOREPLACE)` where there is one; where the system or
    the file system has none (ENOSYS, EINVAL), a plain rename, as before: the check just made is all
    there is."""
    if _renameat2 is not None:
        if _renameat2(home, os.fsencode(name), home, os.fsencode(to), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code == errno.EEXIST:
            raise OSError(errno.EEXIST, "made by another program while the restore ran (retry it)")
        if code not in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise OSError(code, os.strerror(code), name)
    os.rename(name, to, src_dir_fd=home, dst_dir_fd=home)


def _unchanged_since(found: os.stat_result, captured_at: int) -> None:
    if found.st_ctime_ns > captured_at:
        raise OSError(errno.EAGAIN, "changed by another program while the restore ran (retry it)")


def _folder_unchanged_since(home: int, name: str, captured_at: int) -> None:
    """A folder about to be moved aside (and deleted with all it holds) and everything in it are
    as the undo snapshot has them: nothing was added, deleted or changed in it since `captured_at`
    (a file saved there while the restore staged its own was deleted with the folder). Depth first
    without recursion, each folder opened from the one above without following a link."""
    fds = [os.open(name, _FOLDER_FLAGS, dir_fd=home)]
    try:
        _unchanged_since(os.fstat(fds[0]), captured_at)
        names = [os.listdir(fds[0])]
        while fds:
            if not names[-1]:
                os.close(fds.pop())
                names.pop()
                continue
            inner = names[-1].pop()
            found = os.stat(inner, dir_fd=fds[-1], follow_symlinks=False)
            _unchanged_since(found, captured_at)
            if stat.S_ISDIR(found.st_mode):
                fds.append(os.open(inner, _FOLDER_FLAGS, dir_fd=fds[-1]))
                names.append(os.listdir(fds[-1]))
    finally:
        for fd in fds:
            os.close(fd)


def _linked_the_checked(home: int, aside: str, checked: os.stat_result) -> None:
    """The second name `_link` made is for the file checked unchanged, not for one another program
    saved there between the check and the link (an editor's save renames a new file over the old):
    that one would have been replaced, and deleted with the second name at the end. (A failure
    removes the second name with the other temporaries: the save keeps its own.)"""
    linked = os.lstat(aside, dir_fd=home)
    if ((linked.st_dev, linked.st_ino, linked.st_size, linked.st_mtime_ns)
            != (checked.st_dev, checked.st_ino, checked.st_size, checked.st_mtime_ns)):
        raise OSError(errno.EAGAIN, "changed by another program while the restore ran (retry it)")


def _link(home: int, name: str, aside: str) -> bool:
    """A second name for the file about to be replaced, so that it can be put back; False where the
    file system has no hard links."""
    try:
        os.link(name, aside, src_dir_fd=home, dst_dir_fd=home, follow_symlinks=False)
    except OSError as error:
        if error.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            return False
        raise
    return True


def _undo(writing: Writing, folders: Folders, done: list[_Step]) -> list[_Step]:
    """Take back what `place` did, newest first; the steps that could not be are returned."""
    left = []
    for step in reversed(done):
        if step.placement is not None and not step.placed and (step.aside is None or step.linked):
            continue  # nothing changed at that name (a hard link beside it is a temporary like the others)
        try:
            home = folders.fd(step.folder)
            if step.aside is None:  # added where nothing was: out of the way again
                _rename_if_there(home, step.name, writing.temp_name(step.folder))
            elif step.linked:  # over the new one, in one step
                os.rename(step.aside, step.name, src_dir_fd=home, dst_dir_fd=home)
            else:  # back where nothing should be now: what another program made there since is kept
                if step.placed:
                    _rename_if_there(home, step.name, writing.temp_name(step.folder))
                _rename_noreplace(home, step.aside, step.name)
        except OSError:
            left.append(step)
    return left


def _rename_if_there(home: int, name: str, to: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.rename(name, to, src_dir_fd=home, dst_dir_fd=home)


def finish(writing: Writing, folders: Folders, floor: int) -> None:
    """After a complete placing: delete what was moved aside, then the folders the deletions left
    empty (as `git read-tree -u` does), never above the workspace folder (`floor`: its depth).
    Best effort: the restore is complete whatever is left."""
    _remove_temps(writing, folders)
    for removal in writing.removals:
        parts = removal.path.split("/")
        last = len(parts) if removal.gitlink else len(parts) - 1  # a submodule's folder itself, when empty
        for depth in range(last, floor, -1):
            if "/".join(parts[:depth]) in writing.keep:
                break  # (and so is every folder above it)
            try:
                os.rmdir(parts[depth - 1], dir_fd=folders.fd("/".join(parts[:depth - 1])))
            except OSError:
                break


def _remove_temps(writing: Writing, folders: Folders) -> bool:
    """Remove every temporary name this restore made; False when one could not be."""
    clean = True
    for folder, name in writing.made:
        try:
            home = folders.fd(folder)
        except OSError:
            continue
        clean = _remove_name(home, name) and clean
    return clean


def _remove_name(home: int, name: str) -> bool:
    try:
        os.unlink(name, dir_fd=home)
    except FileNotFoundError:
        pass
    except OSError as error:
        if error.errno not in (errno.EISDIR, errno.EPERM):
            return False
        try:  # a folder: staged, or moved aside (never followed through a link: descriptors all the way)
            shutil.rmtree(name, dir_fd=home)
        except OSError:
            return False
    return True


def remove_leftovers(top: Path, tag: str, folders: list[str], floor: int = 0, emptiable: list[str] | None = None,
                     keep: list[str] | None = None) -> bool:
    """What a restore cut short (a crash) left: every `.ctxd-<tag>-*` name in the journal's folders
    (temporaries, and what was moved aside, which the undo snapshot holds). A folder that only
    what was moved aside kept from being empty, or that is empty already and is one the restore
    deletes from (`emptiable`, all of `folders` when None: the restore had deleted what it moved
    aside, and was cut short before the folder: `finish`), is removed with the folders above it
    that this leaves empty, down to the workspace folder (`floor`: its depth), as the restore would
    have done; an empty folder it only wrote into was the user's (cut short before it wrote there),
    and so is a folder of `keep` (`Writing.keep`). False when a name stays."""
    if not tag or not all(isinstance(f, str) for f in folders):
        return True
    prefix = f"{TEMP_PREFIX}{tag}-"
    clean = True
    emptied: list[str] = []
    opened = Folders(top)
    try:
        for folder in folders:
            try:
                home = opened.fd(folder)
                names = [n for n in os.listdir(home) if n.startswith(prefix)]
            except OSError:
                continue
            for name in names:
                clean = _remove_name(home, name) and clean
            if any(n.endswith(ASIDE) for n in names) or (
                    not names and (emptiable is None or folder in emptiable) and not os.listdir(home)):
                emptied.append(folder)
        for folder in sorted((f for f in emptied if f), key=lambda f: -f.count("/")):
            parts = folder.split("/")
            for depth in range(len(parts), floor, -1):
                if keep and "/".join(parts[:depth]) in keep:
                    break
                try:
                    os.rmdir(parts[depth - 1], dir_fd=opened.fd("/".join(parts[:depth - 1])))
                except OSError:
                    break
    finally:
        opened.close()
    return clean


def describe(error: OSError | GitFailed) -> str:
    """What went wrong, in the system's words and with its name ("No space left on device (ENOSPC)")."""
    if isinstance(error, GitFailed):
        return error.message
    name = errno.errorcode.get(error.errno or 0, "")
    text = error.strerror or str(error)
    return f"{text} ({name})" if name else text
