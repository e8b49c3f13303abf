"""What every verb does first: open the folder's store, and clean up after a restore a crash cut short.

A restore writes a journal before it touches the working tree (`ctxd.ghost.restore`). A journal
found by the next verb that locks the store means that restore never finished: it becomes the
record of an interrupted restore (`interrupted_restore`, with the `undoId` to go back to), and
what it left in the working tree (temporary files named by its tag) is removed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from ctxd.ghost import gitstore as st
from ctxd.ghost import legacy, treewrite
from ctxd.ghost.gitstore import Site, open_site
from ctxd.settings import default_state_dir


def open_store(folder: Path, state_dir: Path | None) -> Site:
    """The folder's store, made when missing; the first version's snapshots moved into it (once)."""
    site = open_site(Path(folder), Path(state_dir) if state_dir else default_state_dir())
    assert site is not None  # created when missing
    legacy.move_once(site)
    return site


def find_store(folder: Path, state_dir: Path | None, *, create: bool) -> Site | None:
    """As `open_store`, for a check when a folder opens: never waiting for another process's
    verb; without `create`, None when the folder has no store."""
    site = open_site(Path(folder), Path(state_dir) if state_dir else default_state_dir(), create=create)
    if site is not None:
        legacy.move_once(site, wait=False)
    return site


def recover(site: Site) -> dict[str, Any] | None:
    """With the store locked (so no restore is running): a journal left behind means a restore was
    cut short. Keep it as the record of an interrupted restore (at once: a reader that finds the
    store busy reads the record), then remove what that restore left in the working tree and the
    store's temporary files."""
    if site.journal().exists():
        try:
            os.replace(site.journal(), site.interrupted_record())
        except OSError:  # a read-only store: the journal stays the record
            pass
    st.clean_leftovers(site)
    record = st.read_json(site.interrupted_record()) or st.read_json(site.journal())
    if record is not None and "tag" in record:
        folders, emptiable, keep = record.get("folders"), record.get("emptiable"), record.get("keep")
        if treewrite.remove_leftovers(site.top, str(record.get("tag") or ""), folders if isinstance(folders, list) else [],
                                      floor=depth(site), emptiable=emptiable if isinstance(emptiable, list) else None,
                                      keep=keep if isinstance(keep, list) else None):
            record = {k: v for k, v in record.items() if k not in ("tag", "folders", "emptiable", "keep")}
            with contextlib.suppress(OSError):  # cleaned once: later snapshots do not look again
                st.write_json(site.interrupted_record(), record)
    return record


def interrupted_restore(folder: Path, *, state_dir: Path | None = None, create: bool = True) -> dict[str, Any] | None:
    """A restore of this folder that a crash cut short, if any: `{id, undoId, startedAt, message}`.
    Restoring `undoId` puts the tree back as it was before that restore began. The record stays
    until the next restore of this folder succeeds."""
    site = find_store(folder, state_dir, create=create)
    if site is None:
        return None  # no snapshot was ever taken of it
    with site.locked(wait=False) as mine:
        # Busy: a snapshot or restore is running; a journal is its own, unless the process that
        # wrote it is gone (the store is busy recovering from that crash).
        record = recover(site) if mine else st.read_json(site.interrupted_record())
        if not mine and record is None and (journal := st.read_json(site.journal())) and not _alive(journal.get("pid")):
            record = journal
    if not record:
        return None
    return {"id": record.get("id"), "undoId": record.get("undoId"), "startedAt": record.get("startedAt"),
            "message": (f"a restore of snapshot {str(record.get('id'))[:12]} was interrupted; restore "
                        f"{str(record.get('undoId'))[:12]} to go back to the state before it")}


def _alive(pid: Any) -> bool:
    """Whether the process `pid` runs (this one does; another user's counts as running)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def depth(site: Site) -> int:
    """The workspace folder's depth in the work tree: restores never remove a folder at or above it."""
    return len(site.prefix.rstrip("/").split("/")) if site.prefix else 0
