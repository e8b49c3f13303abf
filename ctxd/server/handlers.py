"""One thin handler per `ctxd/*` method: params in (already parsed), a plain JSON dict out, of the
shape `ctxd/protocol/shapes.py` declares for the method.

A handler calls the domain and decides nothing itself. Each runs on a worker thread with a `Call`
that carries what it may need besides its params. The server imports this module (and with it
pydantic) on the first request, not at start; the compactor, the snapshots and `ctxd/status` are
imported by the first handler that needs them, so that the first gauge does not wait for them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel

from ctxd.errors import Cancelled, GitFailed, InvalidParams
from ctxd.protocol import methods
from ctxd.protocol import params as p
from ctxd.protocol.items import record_items
from ctxd.protocol.paths import escape_paths
from ctxd.server.events import CompactionEvents, Outbox, SlowWarning
from ctxd.workspace import Workspace
from ctxd.workspace.core import path_to_uri

if TYPE_CHECKING:
    from pathlib import Path

    from ctxd.protocol import shapes
    from ctxd.workspace.service import Service


@dataclass
class Call:
    """What a handler gets besides its params."""

    workspace: Workspace
    cancel: threading.Event
    outbox: Outbox
    events: CompactionEvents
    sessions: Any = None  # the followed sessions (ctxd.sessions.bridge.SessionBridge), if any
    writes_acp: bool = False  # the session is a `ctxd acp` proxy's (ownerlink.Session, role "acp")
    broadcast: Callable[[str, dict[str, Any]], None] | None = None  # a notification to every session

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("request cancelled")


log = logging.getLogger(__name__)
Handler = Callable[[Call, Any], Any]
HANDLERS: dict[str, tuple[type[BaseModel], Handler]] = {}


def handler(method: str) -> Callable[[Handler], Handler]:
    """Register `fn` as the method's handler, taking the params `params.PARAMS` declares for it."""

    def register(fn: Handler) -> Handler:
        HANDLERS[method] = (p.PARAMS[method], fn)
        return fn

    return register


@handler(methods.RECORD)
def record(call: Call, params: p.RecordParams) -> shapes.RecordResult:
    return call.workspace.record(params.thread, record_items(params.items))


def record_now(workspace_of: Callable[[str], Workspace], raw_params: Any) -> shapes.RecordResult | None:
    """`ctxd/record` on the reader thread (see app.py): stored now, or None having written nothing."""
    params = p.parse_params(p.RecordParams, raw_params)
    return workspace_of(params.workspace).record_now(params.thread, record_items(params.items))


@handler(methods.REPORT_TOKEN_USAGE)
def report_token_usage(call: Call, params: p.ReportTokenUsageParams) -> shapes.UsageSnapshot:
    call.workspace.check_writable(params.thread)  # a followed session's usage is the agent's report
    usage = params.usage
    cached = min(usage.cached_input_tokens or 0, usage.input_tokens)
    billed = {"input": usage.input_tokens - cached, "cachedInput": cached, "output": usage.output_tokens}
    return call.workspace.report_usage(params.thread, usage.total_tokens, billed)


@handler(methods.SET_PROMPT_CONTEXT)
def set_prompt_context(call: Call, params: p.SetPromptContextParams) -> shapes.UsageSnapshot:
    call.workspace.check_writable(params.thread)  # a followed session's model and window are its file's
    context = params.model_dump(by_alias=True, exclude_none=True, exclude={"workspace", "thread", "work_done_token"})
    return call.workspace.set_prompt_context(params.thread, context)


@handler(methods.USAGE)
def usage(call: Call, params: p.UsageParams) -> shapes.Breakdown:
    return call.workspace.breakdown(params.thread)


@handler(methods.PROMPT)
def prompt(call: Call, params: p.PromptParams) -> shapes.PromptResult:
    return call.workspace.prompt(params.thread, list(params.input_modalities))


@handler(methods.ROLLBACK)
def rollback(call: Call, params: p.RollbackParams) -> shapes.RollbackResult:
    return call.workspace.rollback(params.thread, params.turns, dry_run=params.dry_run)


@handler(methods.UNDO)
def undo(call: Call, params: p.UndoParams) -> shapes.UndoResult:
    return call.workspace.undo(params.thread, params.id)


@handler(methods.HISTORY)
def history(call: Call, params: p.HistoryParams) -> shapes.HistoryResult:
    return call.workspace.history(params.thread, params.offset, params.limit, params.include_archived)


@handler(methods.THREADS)
def threads(call: Call, params: p.ThreadsListParams) -> shapes.ThreadsResult:
    return call.workspace.threads(params.threads)


SYNC_SECONDS = 3.0


@handler(methods.SESSIONS_SYNC)
def sessions_sync(call: Call, params: p.ThreadsParams) -> shapes.SyncResult:
    """What the agents wrote until now is read and mirrored (bounded): `ctxd mcp` asks before it
    answers the model, so that what the agent just did is in its recall."""
    return {"idle": call.sessions.wait_idle(SYNC_SECONDS) if call.sessions is not None else True}


@handler(methods.STATUS)
def status(call: Call, params: p.StatusParams) -> shapes.Status:
    from ctxd.status import status as daemon_status

    return daemon_status(call.workspace,
                         sources=call.sessions.status(call.workspace) if call.sessions is not None else [])


@handler(methods.COMPACT)
def compact(call: Call, params: p.CompactParams) -> shapes.CompactResult:
    from ctxd.compact import run as compaction

    call.workspace.check_writable(params.thread)
    result = compaction.compact_thread(call.workspace, params.thread, strategy=params.strategy, cancel=call.cancel,
                                       events=call.events, progress_token=params.work_done_token)
    return cast("shapes.CompactResult", result)


@handler(methods.GHOST_SNAPSHOT)
def ghost_snapshot(call: Call, params: p.GhostSnapshotParams) -> shapes.GhostCommit:
    from ctxd.ghost import api as ghost
    from ctxd.workspace import checkpoints

    workspace, token = call.workspace, params.work_done_token
    settings = workspace.settings.ghost
    call.outbox.progress(token, {"kind": "begin", "title": "Snapshotting the working tree"})
    slow = SlowWarning(settings.warn_after_seconds,
                       lambda: call.outbox.show_message(ghost.slow_warning(workspace.root, settings.warn_after_seconds)))
    try:
        commit = checkpoints.snapshot(workspace, params.thread, params.message, cancel=call.cancel, record=params.record,
                                      progress=lambda message: call.outbox.progress(token, {"kind": "report", "message": message}))
    finally:
        slow.finish()
        call.outbox.progress(token, {"kind": "end"})
    return cast("shapes.GhostCommit", escape_paths(commit))


@handler(methods.GHOST_LIST)
def ghost_list(call: Call, params: p.GhostListParams) -> shapes.GhostListResult:
    from ctxd.ghost import api as ghost

    workspace = call.workspace
    snapshots = ghost.list_snapshots(workspace.opened_root(), state_dir=workspace.state_dir)
    result: shapes.GhostListResult = {"snapshots": cast("list[shapes.GhostCommit]", snapshots)}
    interrupted = ghost.interrupted_restore(workspace.opened_root(), state_dir=workspace.state_dir)
    if interrupted is not None:
        result["interruptedRestore"] = cast("shapes.InterruptedRestore", interrupted)
    return cast("shapes.GhostListResult", escape_paths(result))


@handler(methods.GHOST_RESTORE)
def ghost_restore(call: Call, params: p.GhostRestoreParams) -> shapes.RestoreResult:
    from ctxd.workspace import checkpoints

    try:
        result = checkpoints.restore(call.workspace, params.thread, params.id, conversation=params.conversation,
                                     dry_run=params.dry_run, cancel=call.cancel)
    except GitFailed as error:  # its `data` may list paths too (`shapes.RestoreFailure`)
        if isinstance(error.data, dict):
            error.data = escape_paths(error.data)
        raise
    return cast("shapes.RestoreResult", escape_paths(result))  # file names that are not UTF-8 (protocol v2: pathEncoding)


@handler(methods.GHOST_DIFF)
def ghost_diff(call: Call, params: p.GhostDiffParams) -> shapes.DiffResult:
    from ctxd.ghost import api as ghost

    workspace = call.workspace
    return cast("shapes.DiffResult", escape_paths(ghost.diff(workspace.opened_root(), params.id, params.path, settings=workspace.settings.ghost,
                                   state_dir=workspace.state_dir)))


@handler(methods.GHOST_DELETE)
def ghost_delete(call: Call, params: p.GhostDeleteParams) -> shapes.DeleteResult:
    from ctxd.ghost import api as ghost

    return cast("shapes.DeleteResult", ghost.delete(call.workspace.opened_root(), params.id, state_dir=call.workspace.state_dir))


@handler(methods.RECALL)
def recall(call: Call, params: p.RecallParams) -> shapes.RecallResult:
    from ctxd.ledger import recall as history

    return history.recall(call.workspace.store, params.thread, params.query, params.limit, params.scope)  # type: ignore[return-value]


@handler(methods.ITEM)
def item(call: Call, params: p.ItemParams) -> shapes.ItemResult:
    from ctxd.ledger import recall as history

    return history.item(call.workspace.store, params.thread, params.seq)  # type: ignore[return-value]


def _acp_thread(call: Call, thread: str) -> None:
    """Only a `ctxd acp` proxy's session writes an `acp:` thread, and only those (protocol v4)."""
    if not call.writes_acp:
        raise InvalidParams(f"{thread!r}: only a ctxd acp proxy's session writes ACP sessions (read-only here)")
    _acp_name(thread)


def _acp_name(thread: str) -> None:
    agent, _, session = thread.partition(":")
    if agent != "acp" or not session:
        raise InvalidParams(f"thread: {thread!r} is not an ACP session's thread (acp:<session id>)")


@handler(methods.ACP_RECORD)
def acp_record(call: Call, params: p.AcpRecordParams) -> shapes.RecordResult:
    _acp_thread(call, params.thread)
    return _store_acp(call.workspace, params, call.broadcast)


def acp_spooled(service: Service, broadcast: Callable[[str, dict[str, Any]], None], folder: Path,
                raw: dict[str, Any]) -> None:
    """A record a `ctxd acp` proxy left in its spool (ctxd/acpspool.py), stored as its
    `ctxd/acp/record` would have been, its folder opened; one that is no record is passed over."""
    try:
        params = p.parse_params(p.AcpRecordParams, {**raw, "workspace": path_to_uri(folder)})
        _acp_name(params.thread)
        workspace = service.open_folder(params.workspace)
    except InvalidParams as error:
        log.info("a spooled ACP record was not stored: %s", error.message)
        return
    _store_acp(workspace, params, broadcast)


def _store_acp(workspace: Workspace, params: p.AcpRecordParams,
               broadcast: Callable[[str, dict[str, Any]], None] | None) -> shapes.RecordResult:
    import time

    info: dict[str, Any] = {"source": "acp", "title": params.title, "model": params.model, "agent": params.agent,
                            "lastActivity": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    context: dict[str, Any] = {key: value for key, value in (("model", params.model), ("contextWindow", params.size))
                               if value}
    sent = (params.proxy, params.seq) if params.proxy is not None and params.seq is not None else None
    new = not workspace.exists(params.thread)
    result = workspace.record_followed(params.thread, list(record_items(params.items)), info=info, context=context,
                                       used=params.used, replay=params.replay, sent=sent)
    if new and broadcast is not None:  # the editors' thread lists show it at once
        broadcast(methods.THREADS_CHANGED, {"workspace": workspace.uri})
    return result


@handler(methods.ACP_CHECKPOINT)
def acp_checkpoint(call: Call, params: p.AcpCheckpointParams) -> shapes.AcpCheckpointResult:
    from ctxd.ghost.checkpoint import Job, take, wire_tool, wire_turn

    _acp_thread(call, params.thread)
    try:  # (as a hook's job is checked: its texts bounded)
        turn, tool = wire_turn(params.turn), wire_tool(params.tool)
    except ValueError as error:
        raise InvalidParams(str(error).replace("job.", "", 1)) from None
    workspace = call.workspace
    job = Job(workspace.root, workspace.state_dir, params.thread, params.trigger, turn=turn, tool=tool,
              message=params.message)
    outcome = take(job, workspace, cancel=call.cancel)
    if outcome.skipped is not None:
        return {"id": None, "skipped": outcome.skipped}
    if outcome.commit is None:  # the proxy is told, and takes it itself
        raise GitFailed(f"no checkpoint: {outcome.failed}")
    if call.broadcast is not None:  # as after a hook's checkpoint: the editors' lists show it
        call.broadcast(methods.GHOST_CHANGED, {"workspace": workspace.uri})
    return {"id": outcome.commit["id"]}
