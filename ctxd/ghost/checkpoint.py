"""Checkpoints: every snapshot taken for a reason, and the one place that decides how.

A checkpoint is a `Job`: which folder, for which thread, why (its trigger: "manual" when someone
asked, "turn" or "tool" when an agent is about to act), before which turn and tool, and its
message. Whoever wants one builds the job and calls `take`: the hooks (alone, or through the
owner, to which the job travels as JSON: `to_wire`, `from_wire`; `ctxd.ownerlink` frames it and
the owner dispatches it), the session bridge for a followed session's new turn, and the
`ctxd/ghost/snapshot` request (an editor's, `ctxd mcp`'s). `take` holds the policy:

- an automatic checkpoint (a turn's, a tool's) of a folder whose `ghost.auto` is "off" is not
  taken; the user's own snapshots always are;
- an automatic one is kept apart from the user's (`ghost.keep_auto`) and adds nothing when the tree
  did not change since the newest snapshot (`ctxd.ghost.take.snapshot` does both by its trigger);
- an automatic one never fails its caller (an agent must not wait or fail for it): what went wrong
  is its outcome, and one line says what happened in the caller's log; a manual one raises, so the
  client is told.

The hooks import this module on every tool call: the standard library only, until `take` runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # (`Place` is for the type checker alone: a class made at import costs the hooks time)
    import threading
    from typing import Protocol

    from ctxd.ghost.treewatch import TreeWatch
    from ctxd.protocol.shapes import CheckpointTool, CheckpointTurn
    from ctxd.settings import GhostSettings, Settings

    class Place(Protocol):
        """Where a job is taken when the folder is open: a workspace of the daemon, or a folder the
        owner keeps for the hooks. Both know their settings (read afresh), their file watch, and
        whether the folder is still the one opened."""

        tree_watch: TreeWatch | None

        @property
        def settings(self) -> Settings: ...

        def opened_root(self) -> Path: ...

AUTOMATIC = ("turn", "tool")
"""Checkpoints taken without the user asking: kept apart (`ghost.keep_auto`), never evicting the
user's own snapshots, not repeated for an unchanged tree, and off with `ghost.auto = "off"`."""
TRIGGERS = ("manual", *AUTOMATIC)
"""What a job may say took it (a restore's undo snapshot is the restore's own: "restore")."""
MAX_WIRE_TEXT = 64 * 1024
"""A job's message, thread and tool texts from a client are at most this long."""
MAX_WIRE_PATHS = 1_000
"""A job's tool names at most this many paths (ACP's proxy sends 100 at most)."""


class Job(NamedTuple):
    """A checkpoint to take of `folder` (a plain folder's store lives in `state_dir`), for `thread`
    (None: recorded for no thread), why (`trigger`), before which turn and tool, labelled `message`.
    A NamedTuple, not a dataclass: the hooks build one on every tool call, and `dataclasses`
    imports `inspect` (milliseconds of the agent's time)."""

    folder: Path
    state_dir: Path
    thread: str | None
    trigger: str
    turn: CheckpointTurn | None = None
    tool: CheckpointTool | None = None
    message: str = ""

    @property
    def automatic(self) -> bool:
        return self.trigger in AUTOMATIC

    def to_wire(self) -> dict[str, Any]:
        """The job as JSON (what `from_wire` reads back)."""
        return {"folder": os.fspath(self.folder), "stateDir": os.fspath(self.state_dir), "thread": self.thread,
                "trigger": self.trigger, "turn": self.turn, "tool": self.tool, "message": self.message}

    @classmethod
    def from_wire(cls, data: Any) -> Job:
        """The job a client sent; ValueError naming the first field that is not what it must be."""
        if not isinstance(data, dict):
            raise ValueError("job: not an object")
        folders: list[str] = []
        for key in ("folder", "stateDir"):
            value = data.get(key)
            if not isinstance(value, str) or not os.path.isabs(value) or "\0" in value:
                raise ValueError(f"job.{key}: not an absolute path")
            folders.append(value)
        trigger, thread, message = data.get("trigger"), data.get("thread"), data.get("message", "")
        if trigger not in TRIGGERS:
            raise ValueError(f"job.trigger: must be one of {', '.join(TRIGGERS)}")
        if thread is not None and not _text(thread):
            raise ValueError("job.thread: not a text")
        if not isinstance(message, str) or len(message) > MAX_WIRE_TEXT:
            raise ValueError("job.message: not a text")
        return cls(Path(folders[0]), Path(folders[1]), thread, trigger, wire_turn(data.get("turn")),
                   wire_tool(data.get("tool")), message)


def _text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_WIRE_TEXT


def wire_turn(value: Any) -> CheckpointTurn | None:
    """A client's turn, checked (its text cut to MAX_WIRE_TEXT); ValueError when not one."""
    if value is None:
        return None
    index = value.get("index") if isinstance(value, dict) else None
    text = value.get("text", "") if isinstance(value, dict) else None
    if not isinstance(index, int) or isinstance(index, bool) or index < 0 or not isinstance(text, str):
        raise ValueError("job.turn: must be {index, text}")
    return {"index": index, "text": text[:MAX_WIRE_TEXT]}


def wire_tool(value: Any) -> CheckpointTool | None:
    """A client's tool, checked; ValueError when not one or past the bounds."""
    if value is None:
        return None
    if not isinstance(value, dict) or not _text(value.get("name")):
        raise ValueError("job.tool: must be {name, callId?, paths?}")
    tool: CheckpointTool = {"name": value["name"]}
    if value.get("callId") is not None:
        if not _text(value["callId"]):
            raise ValueError("job.tool.callId: not a text")
        tool["callId"] = value["callId"]
    if value.get("paths") is not None:
        paths = value["paths"]
        if not isinstance(paths, list) or len(paths) > MAX_WIRE_PATHS or not all(_text(p) for p in paths):
            raise ValueError(f"job.tool.paths: not a list of at most {MAX_WIRE_PATHS} texts")
        tool["paths"] = list(paths)
    return tool


class Outcome(NamedTuple):
    """What became of a job: the snapshot (a new one, or the newest when the tree did not change),
    or why none was taken (`skipped` on purpose, or `failed`), and how long it took."""

    commit: dict[str, Any] | None = None
    skipped: str | None = None
    failed: str | None = None
    ms: int = 0

    def line(self, job: Job, by: str = "") -> str:
        """The log line of an automatic checkpoint (`by`: who took it, when not the caller)."""
        if self.commit is not None:
            taker = f" by {by}" if by else ""
            return (f"{job.thread}: checkpoint {str(self.commit.get('id'))[:12]} ({job.trigger}){taker} in "
                    f"{self.ms} ms: {job.message}")
        if self.skipped is not None:
            return f"{job.thread}: {self.skipped}: no checkpoint"
        return f"no checkpoint for {job.thread}: {self.failed}"

    def to_answer(self) -> dict[str, Any]:
        """The owner's answer to a client's job: `taken` false tells the client to take it itself."""
        if self.commit is not None:
            return {"taken": True, "commit": {"id": self.commit.get("id")}}
        if self.skipped is not None:
            return {"taken": True, "skipped": self.skipped}
        return {"taken": False, "reason": self.failed}

    @classmethod
    def from_answer(cls, answer: dict[str, Any], ms: int) -> Outcome:
        """The outcome the owner answered (`to_answer`), taken `ms` after the client asked."""
        if isinstance(answer.get("skipped"), str):
            return cls(skipped=answer["skipped"], ms=ms)
        commit = answer.get("commit")
        if answer.get("taken") and isinstance(commit, dict):
            return cls(commit=commit, ms=ms)
        return cls(failed=str(answer.get("reason") or "the owner did not take it"), ms=ms)


def automatic_on(settings: GhostSettings) -> bool:
    """Whether a folder takes automatic checkpoints (`ghost.auto`)."""
    return settings.auto != "off"


def take(job: Job, place: Place | None = None, *, progress: Callable[[str], None] | None = None,
         cancel: threading.Event | None = None, log: Callable[[str], None] | None = None) -> Outcome:
    """Take `job` in `place` (None: in this process, the folder's settings read from its files),
    as the module's docstring says. `log` gets the line of an automatic checkpoint."""
    from ctxd.errors import CtxdError
    from ctxd.ghost.take import snapshot

    if place is None:
        from ctxd.settings import load_settings

        settings = load_settings(job.folder).ghost
    else:
        settings = place.settings.ghost
    if job.automatic and not automatic_on(settings):
        outcome = Outcome(skipped="ghost.auto is off")
    else:
        started = time.monotonic()
        try:
            root = place.opened_root() if place is not None else job.folder
            commit = snapshot(root, job.message, settings=settings, state_dir=job.state_dir, progress=progress,
                              cancel=cancel, trigger=job.trigger, thread=job.thread, turn=job.turn, tool=job.tool,
                              watch=place.tree_watch if place is not None else None)
        except (CtxdError, OSError) as error:
            if not job.automatic:
                raise
            outcome = Outcome(failed=_describe(error), ms=int((time.monotonic() - started) * 1000))
        else:
            outcome = Outcome(commit=commit, ms=int((time.monotonic() - started) * 1000))
    if log is not None and job.automatic:
        log(outcome.line(job))
    return outcome


def _describe(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return f"{type(error).__name__}: {message}"
