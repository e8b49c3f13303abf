"""Snapshots as a thread's checkpoints: what ties a snapshot to the conversation it was taken in.

A snapshot taken for a thread is recorded in the thread's ledger (a `ghost_snapshot` item, never
sent to a model), so that restoring it "with the conversation" knows where to roll the thread
back to. A followed agent session's ledger is the agent's own: nothing is recorded there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ctxd.errors import Cancelled
from ctxd.ghost import api as ghost
from ctxd.ghost.checkpoint import Job, take
from ctxd.workspace.core import followed_agent
from ctxd.workspace.service import Workspace


def snapshot(workspace: Workspace, thread: str, message: str | None, *, cancel: threading.Event,
             progress: Callable[[str], None], record: bool = True) -> dict[str, Any]:
    """Snapshot the workspace's tree and record it in `thread` (unless an agent owns the thread, or
    the client asked for no record)."""
    job = Job(workspace.root, workspace.state_dir, thread if record else None, "manual", message=message or "")
    commit = take(job, workspace, progress=progress, cancel=cancel).commit
    assert commit is not None  # the user's own snapshot is taken, or raises
    if record and followed_agent(thread) is None:
        workspace.record(thread, [ghost.ledger_item(commit)])
    return commit


def restore(workspace: Workspace, thread: str, commit_id: str, *, conversation: bool, dry_run: bool,
            cancel: threading.Event) -> dict[str, Any]:
    """Restore a snapshot's files; with `conversation`, also put `thread` back as it was when the
    snapshot was recorded (one undoable operation, `operationId`). Restoring the `undoId` of such
    a restore with the conversation undoes both. The conversation is looked up first: an id the
    thread never recorded changes nothing (-32602)."""
    if conversation:
        workspace.check_writable(thread)
    plan = workspace.conversation_plan(thread, commit_id) if conversation else None
    if cancel.is_set():
        raise Cancelled("request cancelled")
    result = ghost.restore(workspace.opened_root(), commit_id, settings=workspace.settings.ghost, dry_run=dry_run,
                           state_dir=workspace.state_dir)
    if plan is not None and not dry_run:
        result.update(workspace.restore_conversation(thread, commit_id, plan, result.get("undoId")))
    return result
