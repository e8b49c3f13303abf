"""Reading a folder's snapshots back: the list, how the working tree differs from one, and
forgetting one.

The list is read from the store's refs (so it outlives the daemon); a diff compares a snapshot's
tree with the working tree as a restore would see it (`ctxd.ghost.restore`: protected paths are not
differences), through a light capture that hashes and stores nothing.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from ctxd.errors import InvalidParams
from ctxd.ghost import commits, legacy, recovery
from ctxd.ghost import gitstore as st
from ctxd.ghost.capture import CaptureOptions, capture
from ctxd.ghost.gitstore import ID, Site
from ctxd.ghost.restore import open_folders, parse_raw, protected
from ctxd.settings import GhostSettings

MAX_DIFF_TEXT = 1024 * 1024
"""`before`/`after` of a diff are sent for text files up to this size."""


def list_snapshots(folder: Path, *, state_dir: Path | None = None) -> list[dict[str, Any]]:
    """This folder's snapshots, newest first (read back from the store, so they outlive the daemon)."""
    site = recovery.open_store(folder, state_dir)  # the first version's snapshots moved in, once
    raw = site.git("for-each-ref", "--format=%(objectname)%00%(contents)%00",
                   f"{st.REF_ROOT}/{site.key}/", borrow=False)[1]
    fields = raw.split(b"\0")
    found = []
    legacy_parents: dict[str, Any] | None = None
    for i in range(0, len(fields) - 1, 2):
        commit = os.fsdecode(fields[i]).strip()
        meta = commits.parse_meta(fields[i + 1].decode("utf-8", "replace"))
        if ID.fullmatch(commit) and meta is not None:
            if "parent" not in meta:  # moved from the first version: its parent was the commit's
                legacy_parents = legacy_parents or legacy.parents(site)
                meta["parent"] = legacy_parents.get(commit)
            found.append(commits.wire(commit, meta))
    found.sort(key=lambda g: (g["createdAt"] or "", g["id"]), reverse=True)
    return found


def diff(folder: Path, commit_id: str, path: str | None = None, *, settings: GhostSettings | None = None,
         state_dir: Path | None = None) -> dict[str, Any]:
    """How the working tree now differs from a snapshot, as a restore would see it (protected
    paths are not differences). With `path` naming one text file, its `before` and `after` text.

    Nothing is hashed or stored: git compares the snapshot's tree with the working tree through a
    light capture's index, as `git diff <commit>` does."""
    settings = settings or GhostSettings()
    site = recovery.open_store(folder, state_dir)
    if path is not None and (not isinstance(path, str) or not path or path.startswith("/") or "\0" in path
                             or ".." in path.split("/")):
        raise InvalidParams("path: a path relative to the workspace folder")
    with site.locked():
        recovery.recover(site)
        meta = commits.resolve(site, commit_id)
        current = capture(site, CaptureOptions(settings, light=True))
        try:
            spec = f":(literal){site.prefix}{path.rstrip('/')}" if path else site.scope
            tokens = site.git("diff", "--no-ext-diff", "--no-textconv", "--no-renames", "-z", "--raw", "--numstat",
                              "--ignore-submodules=all", meta["tree"], "--", spec, index=current.index)[1]
            changes = [c for c in parse_raw(tokens) if not (c.status == "A" and protected(site, meta, c))]
        finally:
            current.index.unlink(missing_ok=True)
        files = []
        for change in sorted(changes, key=lambda c: c.path):
            status = {"A": "added", "D": "deleted"}.get(change.status, "modified")
            files.append({"path": site.rel(change.path), "status": status, "binary": change.binary})
        if path and len(changes) == 1 and not changes[0].binary and changes[0].path == site.prefix + path:
            change = changes[0]
            if change.status != "A" and (text := _blob_text(site, change.old_sha)) is not None:
                files[0]["before"] = text
            if change.status != "D" and (text := _file_text(site, change.path)) is not None:
                files[0]["after"] = text
    return {"id": commit_id, "files": files}


def _file_text(site: Site, path: str) -> str | None:
    """A working-tree file's text (a link's target), read through `open_folders` (`ctxd.ghost.restore`) so that a folder
    swapped for a link meanwhile never makes it read a file outside; None for anything else or
    anything over MAX_DIFF_TEXT."""
    folders = open_folders(site, path)
    if folders is None:
        return None
    name = path.rsplit("/", 1)[-1]
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folders[-1])
        except OSError as error:
            return os.readlink(name, dir_fd=folders[-1]) if error.errno == errno.ELOOP else None
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = handle.read(MAX_DIFF_TEXT + 1)
        return None if len(data) > MAX_DIFF_TEXT else data.decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        for fd in folders:
            os.close(fd)


def _blob_text(site: Site, sha: str) -> str | None:
    size = int(site.out("cat-file", "-s", sha))
    if size > MAX_DIFF_TEXT:
        return None
    return site.git("cat-file", "blob", sha)[1].decode("utf-8", "replace")


def delete(folder: Path, commit_id: str, *, state_dir: Path | None = None) -> dict[str, Any]:
    """Forget a snapshot; git's gc of the store then frees its space (run here)."""
    site = recovery.open_store(folder, state_dir)
    with site.locked():
        recovery.recover(site)
        commits.resolve(site, commit_id)
        st.delete_ref(site, commit_id)
        st.gc(site)
    return {"deleted": True}
