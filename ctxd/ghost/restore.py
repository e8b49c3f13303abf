"""Restoring a snapshot: the working tree made what it was, with an undo.

A restore never loses data:
- it first captures the current state, including any file it is about to replace that the
  capture would leave out (ignored now, over a limit now), and keeps it as a snapshot whose id it
  returns as `undoId`;
- it never deletes or changes a path the snapshot skipped (too large, too many files, dependency
  folders, secrets), nor a file that has not changed since the snapshot was taken (its inode
  change time is older): such a file existed then and was left out on purpose (ignored, excluded);
- it refuses (GitFailed) when a file it cannot protect is in the way, and when its new files do not
  fit on the disk beside the old ones;
- every file ends exactly as it was or exactly as the snapshot has it, whatever fails: new files
  are written under temporary names and renamed into place (`ctxd.ghost.treewrite`);
- it writes a journal first: a restore cut short by a crash is reported at the next start, with
  the `undoId` to go back to, and its leftovers are removed (`ctxd.ghost.recovery`).

A workspace folder below the repository's top level is a scope: only paths under it are
snapshotted and restored. Pure module: no server code; errors are `ctxd.errors` classes. The tree
comparisons here also serve `diff` (`ctxd.ghost.listing`), which shows what a restore would change.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from pathlib import Path
from typing import Any

from ctxd.errors import GitFailed
from ctxd.ghost import commits, recovery, treewrite
from ctxd.ghost import gitstore as st
from ctxd.ghost.capture import CaptureOptions, State, capture
from ctxd.ghost.gitcmd import nul
from ctxd.ghost.gitstore import Site
from ctxd.ghost.treewrite import Change
from ctxd.settings import GhostSettings


def _skipped_paths(site: Site, meta: dict[str, Any]) -> list[str]:
    return [site.prefix + s["path"] for s in meta.get("skipped", []) if isinstance(s, dict) and "path" in s]


def _diff_trees(site: Site, old: str, new: str, paths: list[str] | None = None, numstat: bool = False) -> list[Change]:
    args = ["diff-tree", "-r", "-z", "--no-renames", "--raw"] + (["--numstat"] if numstat else [])
    args += [old, new] + (["--", *paths] if paths else [])
    return parse_raw(site.git(*args)[1])


def parse_raw(output: bytes) -> list[Change]:
    """`--raw` records, and `--numstat` ones when asked for (they tell which files are binary)."""
    tokens = output.split(b"\0")
    changes: dict[str, Change] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith(b":"):
            old_mode, new_mode, old_sha, new_sha, status = token[1:].decode().split()
            path = os.fsdecode(tokens[i + 1])
            changes[path] = Change(path, "M" if status[0] in "MT" else status[0], old_mode, new_mode, old_sha, new_sha)
            i += 2
        elif token:
            added, _deleted, path_bytes = token.split(b"\t", 2)
            change = changes.get(os.fsdecode(path_bytes))
            if change is not None:
                change.binary = added == b"-"
            i += 1
        else:
            i += 1
    return list(changes.values())


def _scoped_target(site: Site, current: State, snapshot_tree: str) -> str:
    """The tree to switch to: the snapshot inside the scope, the current state outside it."""
    if not site.prefix:
        return snapshot_tree
    index = site.temp_index()
    try:
        site.git("read-tree", current.tree, index=index)
        inside = site.paths("ls-files", "-z", "--", site.scope, index=index)
        if inside:
            site.git("update-index", "--force-remove", "-z", "--stdin", index=index, stdin=nul(inside))
        status, sub = site.git("rev-parse", "--verify", "--quiet",
                               f"{snapshot_tree}:{site.prefix.rstrip('/')}", ok=(0, 1))
        if status == 0:
            site.git("read-tree", f"--prefix={site.prefix}", os.fsdecode(sub).strip(), index=index)
        return site.out("write-tree", index=index)
    finally:
        index.unlink(missing_ok=True)


def protected(site: Site, meta: dict[str, Any], change: Change) -> bool:
    """A path the current state has and the snapshot does not, that a restore must leave alone:
    skipped by the snapshot, or unchanged since it was taken (so it existed then, left out)."""
    for skipped in _skipped_paths(site, meta):
        if change.path == skipped or (skipped.endswith("/") and change.path.startswith(skipped)):
            return True
    try:
        return os.lstat(site.top / change.path).st_ctime_ns < commits.started_ns(meta)
    except OSError:
        return False


def _file_or_link(site: Site, path: str) -> bool:
    """Something other than a folder is at `path`, a link to a folder included (an ignored link
    to a folder was replaced by the snapshot's file and held by no snapshot: `isdir` follows it)."""
    try:
        return not stat.S_ISDIR(os.lstat(site.top / path).st_mode)
    except OSError:
        return False


def _plan(site: Site, meta: dict[str, Any], current: State) -> tuple[str, list[Change]]:
    """The tree a restore switches to (the snapshot, with protected paths as they are now) and
    the changes from the current state to it. Files it would replace that the current capture
    left out are added to the current state first, so the undo snapshot holds them."""
    target = _scoped_target(site, current, meta["tree"])
    changes = _diff_trees(site, current.tree, target)
    keep = [c for c in changes if c.status == "D" and protected(site, meta, c)]
    if keep:
        index = site.temp_index()
        try:
            site.git("read-tree", target, index=index)
            info = b"".join(f"{c.old_mode} {c.old_sha}\t".encode() + os.fsencode(c.path) + b"\0" for c in keep)
            site.git("update-index", "-z", "--index-info", index=index, stdin=info)
            target = site.out("write-tree", index=index)
        finally:
            index.unlink(missing_ok=True)
    uncaptured = [c.path for c in changes if c.status == "A" and _reachable(site, c.path) and _file_or_link(site, c.path)]
    if uncaptured:
        site.git("-c", "core.bigFileThreshold=1", "update-index", "--add", "-z", "--stdin",
                 index=current.index, stdin=nul(uncaptured))
        current.tree = site.out("write-tree", index=current.index)
    if keep or uncaptured:
        changes = _diff_trees(site, current.tree, target)
    return target, changes


def _check_in_the_way(site: Site, changes: list[Change]) -> None:
    """Refuse a restore that would delete files no snapshot holds: only possible where the
    snapshot needs a file where a directory now is, or a directory where a file now is."""
    going = {c.path for c in changes if c.status == "D"}
    gitlinks = {c.path for c in changes if c.new_mode == "160000"}
    top = os.fspath(site.top)
    modes: dict[str, int] = {}  # each folder is looked at once, however many changed files it holds

    def mode(path: str) -> int:
        if path not in modes:
            try:
                modes[path] = os.lstat(os.path.join(top, path)).st_mode
            except OSError:
                modes[path] = 0
        return modes[path]

    blocked: list[str] = []
    for change in changes:
        if change.status == "D":
            continue
        if change.status == "A":  # (else the current state has a file there: its folders were folders)
            parts = change.path.split("/")
            for i in range(1, len(parts)):
                ancestor = "/".join(parts[:i])
                if mode(ancestor) and not stat.S_ISDIR(mode(ancestor)) and ancestor not in going:
                    blocked.append(ancestor)  # a file or a link where the snapshot has a folder
        # A folder where the snapshot has a file: new, or a nested repository the current state
        # holds as its commit alone (a change of type, "M": its folder, `.git` and all, was deleted).
        if stat.S_ISDIR(mode(change.path)) and change.path not in gitlinks:
            for root, _dirs, names in os.walk(os.path.join(top, change.path)):
                for name in names:
                    inner = Path(root, name).relative_to(site.top).as_posix()
                    if inner not in going:
                        blocked.append(inner)
    if blocked:
        shown = ", ".join(sorted(set(blocked))[:5])
        raise GitFailed(f"restore would delete files that are not in any snapshot: {shown}; "
                        "move them away and retry (nothing was changed)")


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_folders(site: Site, path: str) -> list[int] | None:
    """Descriptors of the work tree's top and of each folder on the way to `path`, each opened from
    the one before without following a link: a folder swapped for a link meanwhile (to somewhere
    outside) fails the open instead of leading there. None when a folder on the way is missing, a
    file or a link. The caller closes them."""
    folders = [os.open(site.top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    for part in path.split("/")[:-1]:
        try:
            folders.append(os.open(part, _FOLDER_FLAGS, dir_fd=folders[-1]))
        except OSError:
            for fd in folders:
                os.close(fd)
            return None
    return folders


def _reachable(site: Site, path: str) -> bool:
    """Every folder on the way to `path` is a real folder: none is missing, a file or a link (what
    is behind a link is somewhere else, never the working tree's to read or delete)."""
    parts = path.split("/")
    for depth in range(1, len(parts)):
        try:
            if not stat.S_ISDIR(os.lstat(site.top.joinpath(*parts[:depth])).st_mode):
                return False
        except OSError:
            return False
    return True


def restore(folder: Path, commit_id: str, *, settings: GhostSettings | None = None, dry_run: bool = False,
            state_dir: Path | None = None) -> dict[str, Any]:
    """Make the working tree (in scope) what it was at the snapshot.

    Returns `{id, restored, removed, undoId}`; with `dry_run`, `{id, restored, removed, dryRun: true}`
    and nothing is written anywhere. Every file ends exactly as it was or exactly as the snapshot
    has it, whatever fails (`ctxd.ghost.treewrite`); a failure is GitFailed saying which.
    """
    settings = settings or GhostSettings()
    started = time.monotonic()
    site = recovery.open_store(folder, state_dir)
    with site.locked():
        recovery.recover(site)
        meta = commits.resolve(site, commit_id)
        if site.user_git_dir is not None and (site.user_git_dir / "index.lock").exists():
            raise GitFailed("another git process is running (index.lock exists); nothing was restored")
        try:
            # The whole tree, never what a watch saw change: this capture is the undo of what is
            # about to be overwritten (a write through a hard link made outside the tree after the
            # watch began was missed, and restore, then undo, lost it).
            captured_at = time.time_ns()  # (a file changed after this is not the one captured: `treewrite.place`)
            current = capture(site, CaptureOptions(settings))
        except GitFailed as error:
            raise _not_started(commit_id, error) from None
        writing_started = False
        try:
            target, changes = _plan(site, meta, current)
            _check_in_the_way(site, changes)
            gitlinks = {c.path for c in changes if c.new_mode == "160000"}
            folders_back, keep = _recorded_folders(site, meta, changes)
            result: dict[str, Any] = {
                "id": commit_id,
                "restored": [site.rel(c.path) for c in changes if c.status != "D" and c.path not in gitlinks]
                + _empty_folders(site, changes, folders_back),
                "removed": [site.rel(c.path) for c in changes if c.status == "D"],
            }
            if dry_run:
                result["dryRun"] = True
                return result
            _recorded_modes(site, meta, changes)
            writing = treewrite.plan(site.top, [*changes, *folders_back], tag=os.urandom(6).hex(), prefix=site.prefix)
            writing.keep = keep
            _check_space(site, writing, commit_id)
            modes, folders = _modes(site, changes), _folders(site, changes, writing)
            undo = commits.write(site, current, f"before restoring {commit_id[:12]}", started,
                                 {"undoOf": commit_id, "trigger": "restore", **({"modes": modes} if modes else {}),
                                  **({"folders": folders} if folders else {})})
            result["undoId"] = undo["id"]
            if writing.placements or writing.removals:
                _check_complete(site, changes)
                st.write_json(site.journal(), {"id": commit_id, "undoId": undo["id"], "startedAt": commits.now(),
                                               "pid": os.getpid(), "tag": writing.tag, "folders": writing.folders,
                                               "emptiable": writing.emptiable,
                                               **({"keep": sorted(writing.keep)} if writing.keep else {})})
                writing_started = True
                _write(site, writing, commit_id, undo["id"], captured_at)
        except (OSError, GitFailed) as error:
            if writing_started or (isinstance(error, GitFailed) and "nothing was changed" in error.message):
                raise  # `_write` says what the working tree holds; the checks say it themselves
            raise _not_started(commit_id, error) from None
        finally:
            current.index.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            site.interrupted_record().unlink(missing_ok=True)
    return result


def _modes(site: Site, changes: list[Change]) -> dict[str, int]:
    """The permission bits of the files a restore deletes or rewrites (git's mode, 644 or 755, does
    not say them): kept in its undo snapshot, whose restore gives them back exactly, whatever the
    umask then (a private 0600 file the restore deleted came back 0644 from its undo; a 0644 one,
    when only other modes were kept, 0664 under umask 002)."""
    modes = {}
    for change in changes:
        if change.status == "A" or change.old_mode not in (treewrite.REGULAR, treewrite.EXECUTABLE):
            continue
        with contextlib.suppress(OSError):
            found = os.lstat(site.top / change.path)
            if stat.S_ISREG(found.st_mode):
                modes[site.rel(change.path)] = stat.S_IMODE(found.st_mode)
    return modes


def _folders(site: Site, changes: list[Change], writing: treewrite.Writing) -> dict[str, int]:
    """The folders a restore may delete or writes into, with their permission bits: each folder
    where the snapshot has a file and all the folders in it (empty ones too, which no snapshot
    holds), and every folder that holds a changed path (its deletions may leave them empty:
    `treewrite.finish`). Kept in its undo snapshot, whose restore makes those that are missing
    again, with their mode, and removes none of them (`_recorded_folders`): an empty folder the
    restore wrote a file into was removed with that file by the undo."""
    top = os.fspath(site.top)
    floor = recovery.depth(site)
    found: dict[str, int] = {}

    def note(path: str) -> bool:
        with contextlib.suppress(OSError):
            info = os.lstat(os.path.join(top, path))
            if stat.S_ISDIR(info.st_mode):
                found[site.rel(path)] = stat.S_IMODE(info.st_mode)
                return True
        return False

    for placement in writing.placements:
        if placement.builds_folder or not note(placement.path):
            continue
        for root, dirs, _names in os.walk(os.path.join(top, placement.path)):  # (links are never followed)
            for name in dirs:
                note(Path(root, name).relative_to(site.top).as_posix())
    seen: set[str] = set()
    for change in changes:
        parts = change.path.split("/")
        gitlink = change.status == "D" and change.old_mode == treewrite.GITLINK  # (its folder, when emptied)
        for depth in range(len(parts) - (0 if gitlink else 1), floor, -1):
            folder = "/".join(parts[:depth])
            if folder in seen:
                break  # (and the folders above it)
            seen.add(folder)
            note(folder)
    return found


def _recorded_folders(site: Site, meta: dict[str, Any], changes: list[Change]) -> tuple[list[Change], set[str]]:
    """The folders an undo snapshot recorded (`_folders`), all kept when emptied, and those missing
    now, or a file or link the restore deletes, made again with their mode (an empty folder a file
    replaced was gone for good). Never where the restore puts a file, nor below a file or link it
    leaves."""
    recorded = meta.get("folders")
    if not isinstance(recorded, dict):
        return [], set()
    going = {c.path for c in changes if c.status == "D"}
    placed = {c.path for c in changes if c.status != "D"}

    def kind(path: str) -> str:
        try:
            mode = os.lstat(site.top / path).st_mode
        except (FileNotFoundError, NotADirectoryError):  # (below a file or link the restore deletes)
            return "missing"
        except OSError:
            return "other"
        return "folder" if stat.S_ISDIR(mode) else ("going" if path in going else "other")

    back, keep = [], set()
    for rel, perm in sorted(recorded.items()):
        parts = rel.split("/") if isinstance(rel, str) else []
        if (not parts or any(p in ("", ".", "..") or "\0" in p for p in parts) or isinstance(perm, bool)
                or not isinstance(perm, int) or not 0 <= perm <= 0o7777):
            continue
        path = site.prefix + rel
        keep.add(path)
        ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if (path in placed or any(site.prefix + a in placed for a in ancestors)
                or kind(path) not in ("missing", "going")
                or any(kind(site.prefix + a) == "other" for a in ancestors)):
            continue
        back.append(Change(path, "A", "000000", treewrite.TREE, "0" * 40, "0" * 40, perm=perm))
    return back, keep


def _empty_folders(site: Site, changes: list[Change], folders_back: list[Change]) -> list[str]:
    """The folders a restore makes again (`_recorded_folders`) that no other path it restores is
    in, each ending with `/`: an undo brings back an empty folder too, and its dry run must say so
    (a folder that holds a restored path is said by that path)."""
    holding: set[str] = set()  # every folder that holds a path the restore puts in place
    for change in [*changes, *folders_back]:
        if change.status != "D":
            parts = change.path.split("/")
            holding.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(site.rel(f.path) + "/" for f in folders_back if f.path not in holding)


def _recorded_modes(site: Site, meta: dict[str, Any], changes: list[Change]) -> None:
    """The files of `changes` whose mode the snapshot recorded (`_modes`) are written with it."""
    modes = meta.get("modes")
    if not isinstance(modes, dict):
        return
    for change in changes:
        perm = modes.get(site.rel(change.path)) if change.new_mode in (treewrite.REGULAR, treewrite.EXECUTABLE) else None
        if isinstance(perm, int) and not isinstance(perm, bool) and 0 <= perm <= 0o7777:
            change.perm = perm


def _not_started(commit_id: str, error: OSError | GitFailed) -> GitFailed:
    """A failure before the restore touched the working tree (capturing, committing the undo
    snapshot, writing the journal: a full disk there too)."""
    reason = error.message if isinstance(error, GitFailed) else (
        treewrite.describe(error) + (f" ({error.filename})" if error.filename else ""))
    return GitFailed(f"the restore of {commit_id[:12]} could not start: {reason}; nothing was changed",
                     error.data if isinstance(error, GitFailed) else None)


def _check_space(site: Site, writing: treewrite.Writing, commit_id: str) -> None:
    """Refuse, before anything is written, a restore whose new files do not fit beside the old
    ones (staging writes them all before the old are freed)."""
    short = treewrite.space_needed(site.top, writing, st.object_sizes(site, writing.blobs))
    if short:
        where, need, free = short[0]
        folder = site.top / where
        with contextlib.suppress(OSError):
            if os.stat(folder).st_dev == os.stat(site.folder).st_dev:
                folder = site.folder  # the usual case: the workspace's own file system
        mib = 1024 * 1024
        raise GitFailed(f"not enough free space to restore {commit_id[:12]}: it writes {need / mib:.1f} MiB of files "
                        f"on the file system of {folder}, which has {free / mib:.1f} MiB free (the old "
                        "files are freed only once every new one is written); nothing was changed: free "
                        f"{(need - free) / mib:.1f} MiB and retry", {"needBytes": need, "freeBytes": free})


def _check_complete(site: Site, changes: list[Change]) -> None:
    """The undo snapshot is complete before any file is touched: every file the restore replaces or
    deletes is in the store on its own (borrowing nothing from the user's objects)."""
    shas = [c.old_sha for c in changes if c.status != "A" and c.old_mode != treewrite.GITLINK]
    missing = [sha for sha, size in st.object_sizes(site, shas, borrow=False).items() if size is None]
    if missing:
        raise GitFailed(f"the undo snapshot is incomplete: the store lacks {len(missing)} object(s) of the files "
                        f"the restore would replace (first {missing[0]}); nothing was changed")


def _write(site: Site, writing: treewrite.Writing, commit_id: str, undo_id: str, captured_at: int) -> None:
    """Stage, place and clean up (`ctxd.ghost.treewrite`); a failure is GitFailed saying what the
    working tree holds now. The journal goes once nothing of this restore is left to clean."""
    short = commit_id[:12]
    folders = treewrite.Folders(site.top)
    try:
        blobs = st.Blobs(site, writing.blobs)
        try:
            treewrite.stage(writing, folders, blobs, sync_also=[site.store])
        finally:
            blobs.close()
        treewrite.place(writing, folders, captured_at)
        treewrite.finish(writing, folders, floor=recovery.depth(site))
    except treewrite.StagingFailed as failure:
        hint = "; free some space and retry" if failure.code in (errno.ENOSPC, errno.EDQUOT) else ""
        if failure.clean:
            with contextlib.suppress(OSError):
                site.journal().unlink(missing_ok=True)
            raise GitFailed(f"the restore of {short} failed before changing any file ({failure.reason}); "
                            f"the working tree is as it was{hint}") from None
        raise GitFailed(f"the restore of {short} failed before changing any file ({failure.reason}); the working "
                        f"tree is as it was, but temporary files named {treewrite.TEMP_PREFIX}{writing.tag}-* are left "
                        "in it: they are removed when the folder is next opened", {"undoId": undo_id}) from None
    except treewrite.PlacingFailed as failure:
        if not failure.restored and not failure.removed:
            with contextlib.suppress(OSError):
                site.journal().unlink(missing_ok=True)
            raise GitFailed(f"the restore of {short} failed part-way ({failure.reason}); every file it had changed "
                            "was put back: the working tree is as it was") from None
        changed = [*failure.restored, *failure.removed]
        shown = ", ".join(writing.show(p) for p in changed[:5]) + (", ..." if len(changed) > 5 else "")
        raise GitFailed(f"the restore of {short} stopped part-way ({failure.reason}) and the working tree could not "
                        f"be put back: {len(changed)} path(s) are as the snapshot has them ({shown}), every other "
                        f"file is as it was; restore {undo_id} to bring back what was there",
                        {"undoId": undo_id, "restored": [site.rel(p) for p in failure.restored],
                         "removed": [site.rel(p) for p in failure.removed]}) from None
    finally:
        folders.close()
    with contextlib.suppress(OSError):
        site.journal().unlink(missing_ok=True)
