"""Followed sessions into the open workspaces: the one consumer of the follower's updates.

For every update it mirrors the session into its workspace's thread (`Workspace.mirror`: items,
the API baseline, model, window, title, cost), and when the session started a new user turn and
`ghost.auto` is `"turn"`, it snapshots the workspace at once, on a thread of its own, labelled with
the turn's first words. The server only starts it, tells it the open folders, and forwards
`threads_changed` as `ctxd/threadsChanged`. No wire code here.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from ctxd.errors import CtxdError
from ctxd.ledger.workspace import Service, Workspace, path_to_uri
from ctxd.sessions import discovery, drift, limits, pricing
from ctxd.sessions.follower import Follower, Update
from ctxd.sessions.model import Session, Turn
from ctxd.settings import Problem, Settings

log = logging.getLogger("ctxd")


class SessionBridge:
    def __init__(self, service: Service, settings: Settings, threads_changed: Callable[[str], None],
                 problems: list[Problem] | None = None) -> None:
        self.service = service
        self.threads_changed = threads_changed
        problems = problems if problems is not None else []
        self.prices = pricing.price_table(settings.prices, problems)
        for problem in problems:
            log.warning("%s: %s", problem.source, problem.message)
        sources = discovery.sources(settings.sources.codex_home, settings.sources.claude_home,
                                    codex=settings.sources.codex, claude=settings.sources.claude)
        self.follower = Follower(self._update, sources)
        roots = {s.agent: s.root for s in sources}
        # The agents' own auto-compact settings, read once (read-only; ctxd/sessions/limits.py).
        self.codex_limit = limits.codex_configured_limit(roots[discovery.CODEX].parent)
        self.claude_pct = limits.claude_pct_override(roots[discovery.CLAUDE].parent)
        self._checkpoints = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxd-checkpoint")
        self.checkpoints_taken = 0
        self._annotated: dict[str, tuple[int, int]] = {}  # thread -> the compaction whose fill after was told

    def start(self, folders: list[Path]) -> None:
        self.follower.set_folders(folders)
        self.follower.start()

    def set_folders(self, folders: list[Path]) -> None:
        self.follower.set_folders(folders)

    def stop(self) -> None:
        self.follower.stop()
        self._checkpoints.shutdown(wait=False, cancel_futures=True)

    def status(self) -> list[dict[str, Any]]:
        """`ctxd/status` `sources`: agent, root, enabled, sessions followed (and how)."""
        sessions = self.follower.sessions()
        return [{"agent": s.agent, "root": s.root, "enabled": s.enabled, "sessions": s.sessions, "watching": s.watching,
                 "unread": drift.unread(sessions, s.agent)}
                for s in self.follower.status()]

    # --- on the follower's thread ---

    def _update(self, update: Update) -> None:
        uri = path_to_uri(update.folder)
        try:
            workspace = self.service.workspace(uri)
        except CtxdError:
            return  # closed meanwhile
        session, change = update.session, update.change
        if not update.new and change.turns and workspace.settings.ghost.auto == "turn":
            # First: the agent is about to act on this turn. One per batch, the latest: turns
            # written at once were not acted on one by one, and a flood must not evict the
            # user's snapshots. A session found anew (also a file rewritten) has no new turns.
            self._checkpoints.submit(self._checkpoint, workspace, session.thread, change.turns[-1])
        replace = update.new or change.replaced
        items = session.items if replace else change.appended
        compactions = [{"strategy": session.agent, "automatic": c["trigger"] == "auto", "trigger": c["trigger"],
                        "tokensBefore": c["tokensBefore"], "tokensAfter": c["tokensAfter"]}
                       for c in session.agent_compactions] if replace else None
        try:
            workspace.mirror(session.thread, list(items), replace=replace, baseline=session.baseline,
                             after_baseline=max(0, len(session.items) - session.baseline_items),
                             context=self._context(session), info=self._info(session), compactions=compactions)
            after = self._compaction_after(session)
            if after is not None:
                workspace.annotate_followed_compaction(session.thread, after)
        except CtxdError as error:
            log.warning("%s: cannot mirror %s: %s", uri, session.thread, error.message)
            return
        if update.new or change.replaced or after is not None:
            self.threads_changed(uri)  # the Compactions list shows the agent's compaction at once

    def _compaction_after(self, session: Session) -> int | None:
        """The fill after the agent's latest compaction, when it became known with this update."""
        if not session.agent_compactions:
            return None
        key = (len(session.agent_compactions), session.agent_compactions[-1]["tokensAfter"])
        if key[1] is None or self._annotated.get(session.thread) == key:
            return None
        self._annotated[session.thread] = key
        return key[1]

    def _info(self, session: Session) -> dict[str, Any]:
        return {"source": session.agent, "title": session.title, "model": session.model,
                "lastActivity": session.last_activity, "path": session.path, "cwd": session.cwd,
                "turns": len(session.turns), "compactions": session.compactions,
                "usage": {model or "": usage.as_dict() for model, usage in session.cumulative.items()},
                "cost": pricing.cost(session.cumulative, self.prices)}

    def _checkpoint(self, workspace: Workspace, thread: str, turn: Turn) -> None:
        from ctxd.ghost import snapshots as ghost

        started = time.monotonic()
        try:
            commit = ghost.snapshot(workspace.opened_root(), turn.text or f"{thread} turn", settings=workspace.settings.ghost,
                                    state_dir=workspace.state_dir)
        except CtxdError as error:
            log.info("%s: no checkpoint for %s: %s", workspace.uri, thread, error.message)
            return
        self.checkpoints_taken += 1
        log.info("%s: checkpoint %s for %s in %.0f ms", workspace.uri, commit.get("id"), thread,
                 (time.monotonic() - started) * 1000)


    def _context(self, session: Session) -> dict[str, Any]:
        """The prompt context of the mirrored thread: the model, the session's window and the
        agent's auto-compact point (`followed` marks them as the agent's, never the editor's)."""
        if session.agent == discovery.CODEX:
            agent = limits.codex(session.model, session.context_window, self.codex_limit)
        else:
            agent = limits.claude(session.model, self.claude_pct)
        context: dict[str, Any] = {"followed": {
            "agent": session.agent, "autoCompactLimit": agent.limit, "warnAt": agent.warn_at,
            "windowSource": agent.window_source, "limitSource": agent.limit_source}}
        if session.model:
            context["model"] = session.model
        context["contextWindow"] = agent.window
        if session.base_instructions:
            context["baseInstructions"] = session.base_instructions
        if session.tools:
            context["tools"] = session.tools
        if session.first_request:
            context["followed"]["firstRequest"] = session.first_request
        return context
