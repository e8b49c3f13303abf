"""A snapshot's commit in ctxd's store: written from a captured state, read back by its id.

A snapshot is a commit of ctxd's own store (`ctxd.ghost.gitstore`) whose tree is the workspace's
working tree, captured through a temporary index (`ctxd.ghost.capture`): the user's index, HEAD,
refs, config, hooks and files are never written by a snapshot. Its metadata (message, time,
scope, the user's HEAD, what was skipped, what took it) is a JSON line in the commit message,
read back as the wire's `GhostCommit` (`wire`). Beside the refs, two files of the store speak
for each folder: its newest snapshot and tree (`last_path`: an automatic checkpoint of the same
tree adds nothing) and which snapshots are automatic (the kinds file: retention counts them apart).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ctxd.errors import InvalidParams
from ctxd.ghost import gitstore as st
from ctxd.ghost.capture import State, file_count
from ctxd.ghost.checkpoint import AUTOMATIC
from ctxd.ghost.checkpoint import TRIGGERS as JOB_TRIGGERS
from ctxd.ghost.gitcmd import Background
from ctxd.ghost.gitstore import ID, Site

META_PREFIX = "ctxd-ghost: "
DEFAULT_MESSAGE = "ctxd snapshot"


def now() -> str:
    """UTC, to the millisecond, ending in "Z" (without importing datetime for it)."""
    ms = time.time_ns() // 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def write(site: Site, state: State, message: str, started: float, extra: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """Commit a captured state to the store, copy what it borrows, and give it its ref."""
    meta: dict[str, Any] = {
        "v": 3,
        "trigger": "manual",
        "message": message,
        "createdAt": now(),
        "scope": site.prefix,
        "worktree": site.worktree,
        "parent": site.head,
        "fileCount": file_count(site, state),
        "skipped": [{"path": site.rel(p), "reason": r} for p, r in sorted(state.skipped.items())],
        "startedNs": state.started_ns,
        "durationMs": 0,
        **(extra or {}),
    }
    meta["durationMs"] = int((time.monotonic() - started) * 1000)
    subject = message.splitlines()[0][:200] if message.strip() else DEFAULT_MESSAGE
    body = f"{subject}\n\n{META_PREFIX}{json.dumps(meta, ensure_ascii=True)}\n"
    pinning = Background(lambda: st.pin(site, None, state.tree))  # the tree's objects, while git writes the commit
    try:
        # (the message on stdin: an undo's modes of many files passed the argument's size limit, E2BIG)
        commit = site.out("commit-tree", "--no-gpg-sign", state.tree, "-F", "-", stdin=body.encode())
    finally:
        pinning.wait()
    pinning.result()
    st.pin_commit(site, commit)
    st.write_ref(site, commit)
    _note_kind(site, commit, str(meta["trigger"]))
    shown = wire(commit, meta)
    # Not synced to disk: after a crash a lost or stale file only means the next checkpoint commits.
    pending = last_path(site).with_name(f".last-{site.key}.{os.getpid()}.tmp")
    pending.write_text(json.dumps({"id": commit, "tree": state.tree, "commit": shown}), "utf-8")
    os.replace(pending, last_path(site))
    return shown


TRIGGERS = (*JOB_TRIGGERS, "restore")
"""What took a snapshot: a job's trigger (`ctxd.ghost.checkpoint`), or a restore (its undo)."""


def last_path(site: Site) -> Path:
    """The folder's newest snapshot and its tree: what an automatic checkpoint compares with."""
    return site.store / f"last-{site.key}.json"


def _kinds_path(site: Site) -> Path:
    """Which of the folder's snapshots are automatic ({id: true|false}), so that retention, which
    runs after every checkpoint once there are many, does not read every snapshot's message."""
    return site.store / f"kinds-{site.key}.json"


def automatic_ids(site: Site, ids: list[str]) -> set[str]:
    """Those of `ids` that a turn or a tool took. Ids not yet in the kinds file are read with one
    git call over the folder's refs."""
    kinds = st.read_json(_kinds_path(site)) or {}
    if any(i not in kinds for i in ids):
        raw = site.git("for-each-ref", "--format=%(objectname)%00%(contents)%00",
                       f"{st.REF_ROOT}/{site.key}/", borrow=False)[1]
        fields = raw.split(b"\0")
        kinds = {}
        for i in range(0, len(fields) - 1, 2):
            meta = parse_meta(fields[i + 1].decode("utf-8", "replace"))
            kinds[os.fsdecode(fields[i]).strip()] = meta is not None and meta.get("trigger") in AUTOMATIC
        _write_kinds(site, kinds)
    return {i for i in ids if kinds.get(i) is True}


def _note_kind(site: Site, commit: str, trigger: str) -> None:
    """Add a new snapshot to the kinds file (when there is one: else it is built when needed)."""
    kinds = st.read_json(_kinds_path(site))
    if kinds is not None:
        live = {i for _when, i in st.ref_ids(site)}
        _write_kinds(site, {**{i: k for i, k in kinds.items() if i in live}, commit: trigger in AUTOMATIC})


def _write_kinds(site: Site, kinds: dict[str, bool]) -> None:
    # Not synced: a lost or stale file is rebuilt from the refs (an id it lacks sends it back to git).
    pending = _kinds_path(site).with_name(f".kinds-{site.key}.{os.getpid()}.tmp")
    pending.write_text(json.dumps(kinds), "utf-8")
    os.replace(pending, _kinds_path(site))


def wire(commit: str, meta: dict[str, Any]) -> dict[str, Any]:
    trigger = meta.get("trigger")
    if trigger not in TRIGGERS:  # taken before version 3: a restore's safety snapshot says what it undoes
        trigger = "restore" if meta.get("undoOf") else "manual"
    wire = {
        "id": commit,
        "parent": meta.get("parent"),
        "createdAt": meta.get("createdAt"),
        "message": meta.get("message", DEFAULT_MESSAGE),
        "fileCount": meta.get("fileCount", 0),
        "skipped": meta.get("skipped", []),
        "durationMs": meta.get("durationMs", 0),
        "trigger": trigger,
        "thread": meta.get("thread") if isinstance(meta.get("thread"), str) else None,
    }
    for key in ("turn", "tool"):
        if isinstance(meta.get(key), dict):
            wire[key] = meta[key]
    return wire


def parse_meta(body: str) -> dict[str, Any] | None:
    for line in reversed(body.splitlines()):
        if line.startswith(META_PREFIX):
            try:
                meta = json.loads(line[len(META_PREFIX):])
            except ValueError:
                return None
            return meta if isinstance(meta, dict) else None
    return None


def resolve(site: Site, commit_id: Any) -> dict[str, Any]:
    """Check that `commit_id` names one of this folder's snapshots; return its metadata and tree."""
    if not isinstance(commit_id, str) or not ID.fullmatch(commit_id):
        raise InvalidParams("id: not a snapshot id (expected a full hexadecimal commit id)")
    owner = st.owner_key(site, commit_id)
    if owner is None:
        raise InvalidParams(f"id: unknown snapshot {commit_id}")
    if owner != site.key:
        raise InvalidParams(f"id: snapshot {commit_id} was taken of another workspace folder")
    status, body = site.git("cat-file", "commit", commit_id, ok=(0, 128), borrow=False)
    meta = parse_meta(body.decode("utf-8", "replace")) if status == 0 else None
    if meta is None:
        raise InvalidParams(f"id: snapshot {commit_id} is missing from the snapshot store")
    meta["tree"] = body.split(b"\n", 1)[0].split()[1].decode()
    return meta


def started_ns(meta: dict[str, Any]) -> int:
    started = meta.get("startedNs")
    if isinstance(started, int):
        return started
    from ctxd import isotime

    created = isotime.seconds(meta.get("createdAt"))  # a version 1 snapshot: its creation time, a little
    return int(created * 1e9) if created is not None else 0  # later than the capture began
