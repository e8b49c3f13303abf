"""What `ctxd mcp` answers: the workspace it serves, the agent session it serves, and its six
tools, each a request to the owner (docs/processes.md).

The owner follows the workspace's agent sessions and writes their histories; this process only
asks. So there is one writer of each history whatever runs beside it (an editor, the hooks, other
agents' `ctxd mcp`), and this process imports little: the MCP server answers `initialize` while
the owner is reached (and started, if none runs) on a thread of its own.
"""

from __future__ import annotations

import os
import threading
import time

from ctxd import ownerlink
from ctxd.mcp.limits import ASKED_QUERY_CHARS, MAX_LIMIT
from ctxd.mcp.protocol import ToolError

TYPE_CHECKING = False  # (ctxd.mcp.protocol: no `typing` nor `pathlib` before `initialize` is answered)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

SESSION_ENV = "CTXD_SESSION"
ACP = "acp"
"""`acp:<session id>`: an ACP session a `ctxd acp` proxy records (ctxd/acp), served as an agent's is."""
OPEN_SECONDS = ownerlink.START_SECONDS + 10
FOLLOW_WAIT_SECONDS = 3.0
REOPEN_SECONDS = 5.0  # an owner not reached is asked again at a tool call at most this often


class Backend:
    """The served workspace and session, reached through the owner."""

    def __init__(self, cwd: str, session: str | None = None) -> None:
        self.cwd = cwd
        self.state_dir: Path | None = None
        self.named_session = session
        self._owner: ownerlink.Session | None = None
        self._failure: str | None = None
        self._opened = threading.Event()
        self._started = False
        self._reopening = threading.Lock()
        self._reopened_at = 0.0

    def start(self) -> None:
        """Find the workspace and reach the owner on a thread of its own, once the agent has the
        answers it waits for at its start (`initialize`, `tools/list`: `protocol.Server` calls
        this after the list), so that what it imports is not on the agent's way; a tool call or
        a resource read that comes first starts it at once."""
        if not self._started:
            self._started = True
            threading.Thread(target=self._open, name="ctxd-mcp-owner", daemon=True).start()

    def _open(self) -> None:
        from pathlib import Path

        self.root = Path(self.cwd)  # the workspace's folder, once found (no tool answers before)
        self.uri = self.root.as_uri()
        try:
            from ctxd.places import default_state_dir, find_workspace

            located = find_workspace(self.root, default_state_dir())
            self.root, self.state_dir, self.uri = located.folder, located.state_dir, located.folder.as_uri()
            self._owner = ownerlink.Session.open(self.state_dir, [self.root])
            if self._owner is None:
                self._failure = (f"no ctxd owner of {self.state_dir} could be reached or started; "
                                 "see its log in <state dir>/owner/owner.log")
        except ownerlink.Unsafe as error:
            self._failure = f"ctxd will not use {self.state_dir}: {error}"
        except Exception as error:  # noqa: BLE001 - each tool call reports it
            self._failure = f"the ctxd owner could not be reached: {type(error).__name__}: {error}"
        finally:
            self._opened.set()

    def close(self) -> None:
        if not self._started:
            return
        self._opened.wait(OPEN_SECONDS)
        if self._owner is not None:
            self._owner.close()

    # --- asking the owner ---

    def ask(self, method: str, params: dict[str, Any], timeout: float = 120.0) -> Any:
        self.start()
        if not self._opened.wait(OPEN_SECONDS):
            raise ToolError(self._failure or "the ctxd owner did not answer in time")
        owner = self._owner if self._owner is not None and not self._owner.closed else self._reopen(self._owner)
        if owner is None:
            raise ToolError(self._failure or "the ctxd owner did not answer in time")
        self._follow_acp_workspace()
        try:
            return self._request(owner, method, params, timeout)
        except OSError as error:  # the session ended (the owner went away): once more, with a new one
            again = self._reopen(owner)
            if again is None:
                raise ToolError(f"the ctxd owner did not answer: {error}") from None
        try:
            return self._request(again, method, params, timeout)
        except OSError as error:
            raise ToolError(f"the ctxd owner did not answer: {error}") from None

    def _request(self, owner: ownerlink.Session, method: str, params: dict[str, Any], timeout: float) -> Any:
        try:
            return owner.request(method, {"workspace": self.uri, **params}, timeout)
        except ownerlink.RemoteError as error:
            raise ToolError(error.message) from None
        except TimeoutError as error:
            raise ToolError(f"the ctxd owner did not answer: {error}") from None

    def _reopen(self, broken: ownerlink.Session | None) -> ownerlink.Session | None:
        """A session with the owner again, once the one this process had ended (the owner was
        restarted, upgraded or died: every tool call failed for the rest of the agent's session),
        or none could be had at the start; at most every REOPEN_SECONDS, one thread at a time."""
        with self._reopening:
            if self._owner is not broken and self._owner is not None and not self._owner.closed:
                return self._owner  # (another call reopened it meanwhile)
            if self.state_dir is None or time.monotonic() - self._reopened_at < REOPEN_SECONDS:
                return None
            self._reopened_at = time.monotonic()
            if broken is not None:
                broken.close()
            try:
                self._owner = ownerlink.Session.open(self.state_dir, [self.root])
            except (ownerlink.Unsafe, OSError) as error:
                self._owner, self._failure = None, f"the ctxd owner could not be reached: {error}"
            if self._owner is None and self._failure is None:
                self._failure = "the ctxd owner could not be reached again"
            return self._owner

    def _follow_acp_workspace(self) -> None:
        """Behind a `ctxd acp` proxy given a workspace of its own (`--workspace`), the session is
        recorded there: that folder is asked (and opened in the owner's session) instead."""
        from pathlib import Path

        from ctxd import acplink

        link = acplink.served(os.environ)
        folder = link.get("workspace") if link is not None else None
        if not isinstance(folder, str) or not os.path.isabs(folder) or Path(folder) == self.root:
            return
        self.root, self.uri = Path(folder), Path(folder).as_uri()
        assert self._owner is not None
        self._owner.notify("workspace/didChangeWorkspaceFolders",
                           {"event": {"added": [{"uri": self.uri, "name": self.root.name}], "removed": []}})
        deadline = time.monotonic() + FOLLOW_WAIT_SECONDS  # the owner opens it on a worker of its own
        while time.monotonic() < deadline:
            try:
                self._owner.request("ctxd/threads", {"workspace": self.uri}, FOLLOW_WAIT_SECONDS)
                return
            except ownerlink.RemoteError:
                time.sleep(0.05)

    def synced(self) -> None:
        """What the agent wrote until now is mirrored before a tool answers from it."""
        self.ask("ctxd/sessions/sync", {})

    # --- which session ---

    def thread(self) -> str:
        """The session served: the one CTXD_SESSION names, else the newest followed session of the
        workspace (waiting a little for the owner to have read them)."""
        from ctxd import acplink, agents

        self.synced()
        behind_proxy = acplink.served_thread(os.environ)
        if behind_proxy and not self.named_session:
            return behind_proxy
        if self.named_session:
            _, _, session_id = self.named_session.partition(":")
            if not session_id or not _served(self.named_session):
                raise ToolError(f"{SESSION_ENV}={self.named_session!r} is not an agent session's thread (expected "
                                f"{' or '.join(f'{name}:<session id>' for name in [*agents.names(), ACP])})")
            return self.named_session
        deadline = time.monotonic() + FOLLOW_WAIT_SECONDS
        while True:
            listed = [t["thread"] for t in self.ask("ctxd/threads", {})["threads"]
                      if _served(str(t.get("thread", "")))]
            if listed or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        if not listed:
            titles = " or ".join(agent.title for agent in agents.every())
            raise ToolError(f"no {titles} session of {self.root} is known to ctxd yet; set {SESSION_ENV} to the "
                            f"session's thread (such as {agents.names()[0]}:<session id>)")
        return str(listed[0])  # the newest activity first

    # --- the tools ---

    def context_usage(self) -> dict[str, Any]:
        thread = self.thread()
        breakdown = self.ask("ctxd/usage", {"thread": thread})
        usage = breakdown["usage"]
        return {"thread": thread, "agent": thread.partition(":")[0], "model": breakdown.get("model"),
                "usedTokens": usage["usedTokens"], "contextWindow": usage["contextWindow"],
                "percent": usage["percent"], "compactAt": usage["autoCompactLimit"], "cost": breakdown.get("cost"),
                "categories": breakdown["categories"], "cache": breakdown.get("cache")}

    def recall(self, query: str, limit: int, scope: str) -> dict[str, Any]:
        if not 1 <= limit <= MAX_LIMIT:
            raise ToolError(f"limit: must be a whole number from 1 to {MAX_LIMIT}, not {limit}")
        if not query.strip():
            raise ToolError("query: give the words to search for")
        if len(query) > ASKED_QUERY_CHARS:  # (a pasted log: its first words, cut between two)
            cut = query[:ASKED_QUERY_CHARS]
            query = cut.rsplit(None, 1)[0] if query[ASKED_QUERY_CHARS].strip() and cut.strip() else cut
        result: dict[str, Any] = self.ask("ctxd/recall", {"thread": self.thread(), "query": query, "limit": limit,
                                                          "scope": scope})
        return result

    def history_item(self, seq: int, thread: str | None) -> dict[str, Any]:
        if seq < 1:
            raise ToolError(f"seq: must be a whole number from 1, not {seq}")
        result: dict[str, Any] = self.ask("ctxd/item", {"thread": thread or self.thread(), "seq": seq})
        return result

    def checkpoints(self, limit: int) -> dict[str, Any]:
        if limit < 1:
            raise ToolError(f"limit: must be a whole number from 1, not {limit}")
        return {"checkpoints": self.ask("ctxd/ghost/list", {})["snapshots"][:limit]}

    def checkpoint(self, label: str | None) -> dict[str, Any]:
        """A snapshot of the working tree (an agent session's own ledger records nothing of it)."""
        served = self._thread_or_none()
        params: dict[str, Any] = {"thread": served} if served else {"record": False}
        if label is not None:
            params["message"] = label
        result: dict[str, Any] = self.ask("ctxd/ghost/snapshot", params)
        return result

    def restore_checkpoint(self, id: str, confirm: bool) -> dict[str, Any]:
        """The files only: the conversation is the agent's own. Without `confirm`, a preview."""
        if not id:
            raise ToolError("id: give the id of a checkpoint (see the checkpoints tool)")
        result = self.ask("ctxd/ghost/restore", {"id": id, "dryRun": not confirm})
        if not confirm:
            return {"preview": {"restored": result["restored"], "removed": result["removed"]}}
        return {"restored": result["restored"], "removed": result["removed"], "undoId": result.get("undoId")}

    def codex_statusline(self, meta: dict[str, Any]) -> str:
        """Codex's footer: the gauge of the thread it displays, asked of the owner with a short
        deadline; Codex's own numbers when the owner cannot answer in time."""
        from ctxd.mcp import codex_statusline as footer

        self.start()
        state = footer.field(meta, footer.STATE_KEY)
        session = footer.field(state, "thread").get("id")
        gauge = checkpoint = None
        if isinstance(session, str) and session and self._opened.wait(footer.OWNER_SECONDS / 2) and self._owner:
            try:
                breakdown = self._owner.request("ctxd/usage", {"workspace": self.uri, "thread": f"codex:{session}"},
                                                footer.OWNER_SECONDS)
                usage, cost = breakdown["usage"], breakdown.get("cost") or {}
                if usage.get("source") != "estimate" or usage.get("usedTokens"):
                    gauge = {"usedTokens": usage["usedTokens"], "compactAt": usage["autoCompactLimit"],
                             "costUsd": cost.get("total")}
                snapshots = self._owner.request("ctxd/ghost/list", {"workspace": self.uri}, footer.OWNER_SECONDS)
                checkpoint = _time_of(snapshots["snapshots"][0]) if snapshots.get("snapshots") else None
            except (ownerlink.RemoteError, OSError, TimeoutError, KeyError, TypeError):
                pass
        return footer.resource_text(footer.tree(gauge, state, checkpoint))

    def _thread_or_none(self) -> str | None:
        """The served session, when there is one: a checkpoint is taken without one too."""
        try:
            return self.thread()
        except ToolError:
            return None


def _served(thread: str) -> bool:
    """Whether `ctxd mcp` may serve `thread`: an agent's session (ctxd/agents) or an ACP session's."""
    from ctxd import agents

    return agents.followed(thread) is not None or thread.partition(":")[0] == ACP


def _time_of(snapshot: dict[str, Any]) -> float | None:
    from ctxd import isotime

    return isotime.seconds(snapshot.get("createdAt"))


def backend_from_environment(cwd: str) -> Backend:
    return Backend(cwd, session=os.environ.get(SESSION_ENV) or None)
