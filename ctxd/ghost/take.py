"""Taking a snapshot of a workspace folder's working tree, and keeping the store to its limits.

A snapshot captures the tree (`ctxd.ghost.capture`) and commits it to the folder's store
(`ctxd.ghost.commits`). Why it was taken is its trigger: the user asked ("manual"), before a user
turn or a tool ("turn", "tool": automatic checkpoints, decided in `ctxd.ghost.checkpoint`), or
before a restore ("restore"). Old snapshots beyond the folder's limits are dropped after each one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd.errors import GitFailed, InvalidParams
from ctxd.ghost import commits, recovery
from ctxd.ghost import gitstore as st
from ctxd.ghost.capture import CaptureOptions, capture
from ctxd.ghost.checkpoint import AUTOMATIC
from ctxd.ghost.commits import DEFAULT_MESSAGE, TRIGGERS
from ctxd.ghost.gitcmd import check_cancel
from ctxd.ghost.gitstore import ID, Site
from ctxd.redact import redact
from ctxd.settings import GhostSettings

if TYPE_CHECKING:
    from ctxd.ghost.treewatch import TreeWatch
    from ctxd.protocol.shapes import CheckpointTool, CheckpointTurn


def _clean_message(message: str | None) -> str:
    """What a commit's message may hold: no NUL, never the API key (a prompt may quote it)."""
    text = redact((message or "").replace("\0", ""))
    return text if text.strip() else DEFAULT_MESSAGE


def _unchanged(site: Site, tree: str) -> dict[str, Any] | None:
    """The folder's newest snapshot when its tree is `tree` (and it still exists), else None."""
    last = st.read_json(commits.last_path(site))
    if not last or last.get("tree") != tree or not ID.fullmatch(str(last.get("id"))):
        return None
    if not (site.ref_dir() / last["id"]).is_file():
        return None
    commit = last.get("commit")
    return commit if isinstance(commit, dict) and commit.get("id") == last["id"] else None


def checkpoint_meta(trigger: str, thread: str | None = None, turn: CheckpointTurn | None = None,
                    tool: CheckpointTool | None = None) -> dict[str, Any]:
    """The v3 fields a snapshot's metadata carries: what took it, for which thread, before what."""
    if trigger not in TRIGGERS:
        raise InvalidParams(f"trigger: must be one of {', '.join(TRIGGERS)}")
    meta: dict[str, Any] = {"trigger": trigger, "thread": thread}
    if turn is not None:
        meta["turn"] = {"index": int(turn.get("index") or 0), "text": str(turn.get("text") or "")[:200]}
    if tool is not None:
        entry: dict[str, Any] = {"name": str(tool.get("name") or "")}
        if tool.get("callId"):
            entry["callId"] = str(tool["callId"])
        if tool.get("paths"):
            entry["paths"] = [str(p) for p in tool["paths"]][:50]
        meta["tool"] = entry
    return meta


def snapshot(folder: Path, message: str | None = None, *, settings: GhostSettings | None = None,
             progress: Callable[[str], None] | None = None, cancel: threading.Event | None = None,
             state_dir: Path | None = None, trigger: str = "manual", thread: str | None = None,
             turn: CheckpointTurn | None = None, tool: CheckpointTool | None = None,
             watch: TreeWatch | None = None) -> dict[str, Any]:
    """Snapshot the workspace folder's working tree; returns a GhostCommit. Old snapshots beyond
    `ghost.keep` (the user's and restores') or `ghost.keep_auto` (turns' and tools') or
    `ghost.max_age_days` are dropped. An automatic checkpoint (`trigger` "turn" or "tool") of a
    tree identical to the newest snapshot's adds nothing: that snapshot is the result. `watch`:
    the daemon's file watch. Whether a checkpoint is taken at all is `ctxd.ghost.checkpoint.take`'s
    to decide: this is how."""
    settings = settings or GhostSettings()
    extra = checkpoint_meta(trigger, thread, turn, tool)
    started = time.monotonic()
    site = recovery.open_store(folder, state_dir)
    with site.locked():
        recovery.recover(site)
        for attempt in (1, 2):
            state = capture(site, CaptureOptions(settings, progress, cancel, watch=watch), cold=attempt == 2)
            try:
                check_cancel(cancel)
                if trigger in AUTOMATIC and (same := _unchanged(site, state.tree)) is not None:
                    return same
                if progress:
                    progress("committing")
                commit = commits.write(site, state, _clean_message(message), started, extra)
                break
            except GitFailed:
                if attempt == 2:
                    raise
                # An object the kept index relies on went with the user's gc: capture from scratch.
            finally:
                state.index.unlink(missing_ok=True)
        _retain(site, settings, keep_id=commit["id"])
    return commit


def prime(folder: Path, *, settings: GhostSettings, watch: TreeWatch, state_dir: Path | None = None) -> None:
    """In the daemon, when a folder opens: one capture, committed to nothing, whose kept index starts
    the file watch's dirty set, so that the first checkpoint already re-checks only what changed
    (`ctxd.ghost.treewatch`). Only for a folder that has a store and no interrupted restore, and
    never waiting for another process's capture."""
    site = recovery.find_store(folder, state_dir, create=False)
    if site is None:
        return
    with site.locked(wait=False) as mine:
        if mine and recovery.recover(site) is None:  # a restore cut short waits for the user, untouched
            capture(site, CaptureOptions(settings, watch=watch)).index.unlink(missing_ok=True)


def _retain(site: Site, settings: GhostSettings, keep_id: str) -> None:
    """Drop this folder's snapshots beyond `keep` and older than `max_age_days`; git's gc of the
    store frees their space (run when the store has many packs, or by `delete`)."""
    held = {keep_id}
    for record in (site.journal(), site.interrupted_record()):
        data = st.read_json(record)
        if data:
            held |= {str(data[key]) for key in ("id", "undoId") if data.get(key)}
    ids = st.ref_ids(site)
    oldest = time.time() - settings.max_age_days * 86400
    victims = [i for when, i in ids if when < oldest and i not in held]
    if len(ids) > min(settings.keep, settings.keep_auto):  # only then does the kind of each matter
        automatic = commits.automatic_ids(site, [i for _when, i in ids])
        for kept, mine in ((settings.keep, lambda i: i not in automatic), (settings.keep_auto, automatic.__contains__)):
            victims += [i for i in [i for _when, i in ids if mine(i)][kept:] if i not in held]
    for commit_id in victims:
        st.delete_ref(site, commit_id)
    if st.needs_gc(site):
        try:
            st.gc(site)
        except GitFailed:
            pass  # space is freed at the next one; the snapshot itself is complete


def ledger_item(commit: dict[str, Any]) -> dict[str, Any]:
    """The `ghost_snapshot` item recorded in a thread for a snapshot (the Responses API spelling)."""
    return {"type": "ghost_snapshot", "ghost_commit": {
        "id": commit["id"], "parent": commit["parent"], "created_at": commit["createdAt"],
        "message": commit["message"]}}


def slow_warning(folder: Path, seconds: float) -> str:
    return (f"ctxd: the snapshot of {folder} has taken more than {seconds:g} s. Large untracked files "
            "are the likely cause: add them to .gitignore, or lower ghost.max_untracked_file_bytes.")
