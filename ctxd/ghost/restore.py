"""Ghost snapshots: the working tree as it was, kept outside the user's history; restore, preview, undo.

A snapshot is a commit of ctxd's own store (`ctxd.ghost.gitstore`) whose tree is the workspace's
working tree, captured through a temporary index (`ctxd.ghost.capture`): the user's index, HEAD,
refs, config, hooks and files are never written by a snapshot. Its metadata (message, time,
scope, the user's HEAD, what was skipped) is a JSON line in the commit message.

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
  the `undoId` to go back to, and its leftovers are removed.

A workspace folder below the repository's top level is a scope: only paths under it are
snapshotted and restored. Pure module: no server code; errors are `ctxd.errors` classes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxd.errors import GitFailed, InvalidParams
from ctxd.ghost import gitstore as st
from ctxd.ghost import treewrite
from ctxd.ghost.capture import Background, CaptureOptions, State, capture, check_cancel, file_count, nul
from ctxd.ghost.gitstore import ID, Site, open_site
from ctxd.ghost.treewrite import Change
from ctxd.redact import redact
from ctxd.settings import GhostSettings, default_state_dir

META_PREFIX = "ctxd-ghost: "
DEFAULT_MESSAGE = "ctxd snapshot"
MAX_DIFF_TEXT = 1024 * 1024
"""`before`/`after` of a diff are sent for text files up to this size."""


def _now() -> str:
    """UTC, to the millisecond, ending in "Z" (without importing datetime for it)."""
    now = time.time_ns() // 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now // 1000)) + f".{now % 1000:03d}Z"


def _clean_message(message: str | None) -> str:
    """What a commit's message may hold: no NUL, never the API key (a prompt may quote it)."""
    text = redact((message or "").replace("\0", ""))
    return text if text.strip() else DEFAULT_MESSAGE


def _site(folder: Path, state_dir: Path | None) -> Site:
    site = open_site(Path(folder), Path(state_dir) if state_dir else default_state_dir())
    assert site is not None  # created when missing
    return site


# --- taking snapshots -------------------------------------------------------------------------------


def _commit(site: Site, state: State, message: str, started: float, extra: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """Commit a captured state to the store, copy what it borrows, and give it its ref."""
    meta: dict[str, Any] = {
        "v": 3,
        "trigger": "manual",
        "message": message,
        "createdAt": _now(),
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
        commit = site.out("commit-tree", "--no-gpg-sign", state.tree, "-m", body)
    finally:
        pinning.wait()
    pinning.result()
    st.pin_commit(site, commit)
    st.write_ref(site, commit)
    _note_kind(site, commit, str(meta["trigger"]))
    wire = _wire(commit, meta)
    # Not synced to disk: after a crash a lost or stale file only means the next checkpoint commits.
    pending = _last_path(site).with_name(f".last-{site.key}.{os.getpid()}.tmp")
    pending.write_text(json.dumps({"id": commit, "tree": state.tree, "commit": wire}), "utf-8")
    os.replace(pending, _last_path(site))
    return wire


TRIGGERS = ("manual", "turn", "tool", "restore")
AUTOMATIC = ("turn", "tool")
"""Checkpoints taken without the user asking: kept apart (`ghost.keep_auto`), never evicting the
user's own snapshots, and not repeated for an unchanged tree."""


def _last_path(site: Site) -> Path:
    """The folder's newest snapshot and its tree: what an automatic checkpoint compares with."""
    return site.store / f"last-{site.key}.json"


def _unchanged(site: Site, tree: str) -> dict[str, Any] | None:
    """The folder's newest snapshot when its tree is `tree` (and it still exists), else None."""
    last = st.read_json(_last_path(site))
    if not last or last.get("tree") != tree or not ID.fullmatch(str(last.get("id"))):
        return None
    if not (site.ref_dir() / last["id"]).is_file():
        return None
    commit = last.get("commit")
    return commit if isinstance(commit, dict) and commit.get("id") == last["id"] else None


def checkpoint_meta(trigger: str, thread: str | None = None, turn: dict[str, Any] | None = None,
                    tool: dict[str, Any] | None = None) -> dict[str, Any]:
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
             turn: dict[str, Any] | None = None, tool: dict[str, Any] | None = None,
             site: Site | None = None) -> dict[str, Any]:
    """Snapshot the workspace folder's working tree; returns a GhostCommit. Old snapshots beyond
    `ghost.keep` (the user's and restores') or `ghost.keep_auto` (turns' and tools') or
    `ghost.max_age_days` are dropped. An automatic checkpoint (`trigger` "turn" or "tool") of a
    tree identical to the newest snapshot's adds nothing: that snapshot is the result."""
    settings = settings or GhostSettings()
    extra = checkpoint_meta(trigger, thread, turn, tool)
    started = time.monotonic()
    site = site or _site(folder, state_dir)
    with site.locked():
        _recover(site)
        for attempt in (1, 2):
            state = capture(site, CaptureOptions(settings, progress, cancel), cold=attempt == 2)
            try:
                check_cancel(cancel)
                if trigger in AUTOMATIC and (same := _unchanged(site, state.tree)) is not None:
                    return same
                if progress:
                    progress("committing")
                commit = _commit(site, state, _clean_message(message), started, extra)
                break
            except GitFailed:
                if attempt == 2:
                    raise
                # An object the kept index relies on went with the user's gc: capture from scratch.
            finally:
                state.index.unlink(missing_ok=True)
        _retain(site, settings, keep_id=commit["id"])
    return commit


def prime(folder: Path, *, settings: GhostSettings, state_dir: Path | None = None) -> None:
    """In the daemon, when a folder opens: one capture, committed to nothing, whose kept index starts
    the file watch's dirty set, so that the first checkpoint already re-checks only what changed
    (`ctxd.ghost.treewatch`). Only for a folder that has a store and no interrupted restore, and
    never waiting for another process's capture."""
    site = st.open_site(Path(folder), Path(state_dir) if state_dir else default_state_dir(), create=False)
    if site is None:
        return
    with site.locked(wait=False) as mine:
        if mine and _recover(site) is None:  # a restore cut short waits for the user, untouched
            capture(site, CaptureOptions(settings)).index.unlink(missing_ok=True)


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
        automatic = _automatic_ids(site, [i for _when, i in ids])
        for kept, mine in ((settings.keep, lambda i: i not in automatic), (settings.keep_auto, automatic.__contains__)):
            victims += [i for i in [i for _when, i in ids if mine(i)][kept:] if i not in held]
    for commit_id in victims:
        st.delete_ref(site, commit_id)
    if st.needs_gc(site):
        try:
            st.gc(site)
        except GitFailed:
            pass  # space is freed at the next one; the snapshot itself is complete


def _kinds_path(site: Site) -> Path:
    """Which of the folder's snapshots are automatic ({id: true|false}), so that retention, which
    runs after every checkpoint once there are many, does not read every snapshot's message."""
    return site.store / f"kinds-{site.key}.json"


def _automatic_ids(site: Site, ids: list[str]) -> set[str]:
    """Those of `ids` that a turn or a tool took. Ids not yet in the kinds file are read with one
    git call over the folder's refs."""
    kinds = st.read_json(_kinds_path(site)) or {}
    if any(i not in kinds for i in ids):
        raw = site.git("for-each-ref", "--format=%(objectname)%00%(contents)%00",
                       f"{st.REF_ROOT}/{site.key}/", borrow=False)[1]
        fields = raw.split(b"\0")
        kinds = {}
        for i in range(0, len(fields) - 1, 2):
            meta = _parse_meta(fields[i + 1].decode("utf-8", "replace"))
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


# --- reading them back ------------------------------------------------------------------------------


def _wire(commit: str, meta: dict[str, Any]) -> dict[str, Any]:
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


def _parse_meta(body: str) -> dict[str, Any] | None:
    for line in reversed(body.splitlines()):
        if line.startswith(META_PREFIX):
            try:
                meta = json.loads(line[len(META_PREFIX):])
            except ValueError:
                return None
            return meta if isinstance(meta, dict) else None
    return None


def list_snapshots(folder: Path, *, state_dir: Path | None = None) -> list[dict[str, Any]]:
    """This folder's snapshots, newest first (read back from the store, so they outlive the daemon)."""
    site = _site(folder, state_dir)
    if not site.plain and not _legacy_marker(site).exists():
        with site.locked(), contextlib.suppress(GitFailed):
            _migrate_legacy(site)
    raw = site.git("for-each-ref", "--format=%(objectname)%00%(contents)%00",
                   f"{st.REF_ROOT}/{site.key}/", borrow=False)[1]
    fields = raw.split(b"\0")
    found = []
    legacy_parents: dict[str, Any] | None = None
    for i in range(0, len(fields) - 1, 2):
        commit = os.fsdecode(fields[i]).strip()
        meta = _parse_meta(fields[i + 1].decode("utf-8", "replace"))
        if ID.fullmatch(commit) and meta is not None:
            if "parent" not in meta:  # moved from the first version: its parent was the commit's
                legacy_parents = legacy_parents or (st.read_json(_legacy_marker(site)) or {}).get("parents") or {}
                meta["parent"] = legacy_parents.get(commit)
            found.append(_wire(commit, meta))
    found.sort(key=lambda g: (g["createdAt"] or "", g["id"]), reverse=True)
    return found


def _resolve(site: Site, commit_id: Any) -> dict[str, Any]:
    """Check that `commit_id` names one of this folder's snapshots; return its metadata and tree."""
    if not isinstance(commit_id, str) or not ID.fullmatch(commit_id):
        raise InvalidParams("id: not a snapshot id (expected a full hexadecimal commit id)")
    owner = st.owner_key(site, commit_id)
    if owner is None:
        raise InvalidParams(f"id: unknown snapshot {commit_id}")
    if owner != site.key:
        raise InvalidParams(f"id: snapshot {commit_id} was taken of another workspace folder")
    status, body = site.git("cat-file", "commit", commit_id, ok=(0, 128), borrow=False)
    meta = _parse_meta(body.decode("utf-8", "replace")) if status == 0 else None
    if meta is None:
        raise InvalidParams(f"id: snapshot {commit_id} is missing from the snapshot store")
    meta["tree"] = body.split(b"\n", 1)[0].split()[1].decode()
    return meta


def _skipped_paths(site: Site, meta: dict[str, Any]) -> list[str]:
    return [site.prefix + s["path"] for s in meta.get("skipped", []) if isinstance(s, dict) and "path" in s]


def _started_ns(meta: dict[str, Any]) -> int:
    started = meta.get("startedNs")
    if isinstance(started, int):
        return started
    try:  # a version 1 snapshot: its creation time, a little later than the capture began
        from datetime import datetime

        return int(datetime.fromisoformat(str(meta["createdAt"]).replace("Z", "+00:00")).timestamp() * 1e9)
    except (KeyError, ValueError):
        return 0


# --- comparing trees ---------------------------------------------------------------------------------


def _diff(site: Site, old: str, new: str, paths: list[str] | None = None, numstat: bool = False) -> list[Change]:
    args = ["diff-tree", "-r", "-z", "--no-renames", "--raw"] + (["--numstat"] if numstat else [])
    args += [old, new] + (["--", *paths] if paths else [])
    return _parse_raw(site.git(*args)[1])


def _parse_raw(output: bytes) -> list[Change]:
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


def _protected(site: Site, meta: dict[str, Any], change: Change) -> bool:
    """A path the current state has and the snapshot does not, that a restore must leave alone:
    skipped by the snapshot, or unchanged since it was taken (so it existed then, left out)."""
    for skipped in _skipped_paths(site, meta):
        if change.path == skipped or (skipped.endswith("/") and change.path.startswith(skipped)):
            return True
    try:
        return os.lstat(site.top / change.path).st_ctime_ns < _started_ns(meta)
    except OSError:
        return False


def _plan(site: Site, meta: dict[str, Any], current: State) -> tuple[str, list[Change]]:
    """The tree a restore switches to (the snapshot, with protected paths as they are now) and
    the changes from the current state to it. Files it would replace that the current capture
    left out are added to the current state first, so the undo snapshot holds them."""
    target = _scoped_target(site, current, meta["tree"])
    changes = _diff(site, current.tree, target)
    keep = [c for c in changes if c.status == "D" and _protected(site, meta, c)]
    if keep:
        index = site.temp_index()
        try:
            site.git("read-tree", target, index=index)
            info = b"".join(f"{c.old_mode} {c.old_sha}\t".encode() + os.fsencode(c.path) + b"\0" for c in keep)
            site.git("update-index", "-z", "--index-info", index=index, stdin=info)
            target = site.out("write-tree", index=index)
        finally:
            index.unlink(missing_ok=True)
    uncaptured = [c.path for c in changes if c.status == "A" and _reachable(site, c.path)
                  and os.path.lexists(site.top / c.path) and not os.path.isdir(site.top / c.path)]
    if uncaptured:
        site.git("-c", "core.bigFileThreshold=1", "update-index", "--add", "-z", "--stdin",
                 index=current.index, stdin=nul(uncaptured))
        current.tree = site.out("write-tree", index=current.index)
    if keep or uncaptured:
        changes = _diff(site, current.tree, target)
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
        if change.status != "A":
            continue  # the current state has a file there: its folders were folders when it was captured
        parts = change.path.split("/")
        for i in range(1, len(parts)):
            ancestor = "/".join(parts[:i])
            if mode(ancestor) and not stat.S_ISDIR(mode(ancestor)) and ancestor not in going:
                blocked.append(ancestor)  # a file or a link where the snapshot has a folder
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


def _open_folders(site: Site, path: str) -> list[int] | None:
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


# --- restore, diff, delete ------------------------------------------------------------------------


def restore(folder: Path, commit_id: str, *, settings: GhostSettings | None = None, dry_run: bool = False,
            state_dir: Path | None = None) -> dict[str, Any]:
    """Make the working tree (in scope) what it was at the snapshot.

    Returns `{id, restored, removed, undoId}`; with `dry_run`, `{id, restored, removed, dryRun: true}`
    and nothing is written anywhere. Every file ends exactly as it was or exactly as the snapshot
    has it, whatever fails (`ctxd.ghost.treewrite`); a failure is GitFailed saying which.
    """
    settings = settings or GhostSettings()
    started = time.monotonic()
    site = _site(folder, state_dir)
    with site.locked():
        _recover(site)
        meta = _resolve(site, commit_id)
        if site.user_git_dir is not None and (site.user_git_dir / "index.lock").exists():
            raise GitFailed("another git process is running (index.lock exists); nothing was restored")
        try:
            current = capture(site, CaptureOptions(settings))
        except GitFailed as error:
            raise _not_started(commit_id, error) from None
        writing_started = False
        try:
            target, changes = _plan(site, meta, current)
            _check_in_the_way(site, changes)
            gitlinks = {c.path for c in changes if c.new_mode == "160000"}
            result: dict[str, Any] = {
                "id": commit_id,
                "restored": [site.rel(c.path) for c in changes if c.status != "D" and c.path not in gitlinks],
                "removed": [site.rel(c.path) for c in changes if c.status == "D"],
            }
            if dry_run:
                result["dryRun"] = True
                return result
            writing = treewrite.plan(site.top, changes, tag=os.urandom(6).hex(), prefix=site.prefix)
            _check_space(site, writing, commit_id)
            undo = _commit(site, current, f"before restoring {commit_id[:12]}", started,
                           {"undoOf": commit_id, "trigger": "restore"})
            result["undoId"] = undo["id"]
            if changes:
                _check_complete(site, changes)
                st.write_json(site.journal(), {"id": commit_id, "undoId": undo["id"], "startedAt": _now(),
                                               "pid": os.getpid(), "tag": writing.tag, "folders": writing.folders})
                writing_started = True
                _write(site, writing, commit_id, undo["id"])
        except (OSError, GitFailed) as error:
            if writing_started or (isinstance(error, GitFailed) and "nothing was changed" in error.message):
                raise  # `_write` says what the working tree holds; the checks say it themselves
            raise _not_started(commit_id, error) from None
        finally:
            current.index.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            site.interrupted_record().unlink(missing_ok=True)
    return result


def _not_started(commit_id: str, error: OSError | GitFailed) -> GitFailed:
    """A failure before the restore touched the working tree (capturing, committing the undo
    snapshot, writing the journal: a full disk there too)."""
    reason = error.message if isinstance(error, GitFailed) else (
        treewrite.describe(error) + (f" ({error.filename})" if error.filename else ""))
    return GitFailed(f"the restore of {commit_id[:12]} could not start: {reason}; nothing was changed",
                     error.data if isinstance(error, GitFailed) else None)


def _depth(site: Site) -> int:
    """The workspace folder's depth in the work tree: restores never remove a folder at or above it."""
    return len(site.prefix.rstrip("/").split("/")) if site.prefix else 0


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


def _write(site: Site, writing: treewrite.Writing, commit_id: str, undo_id: str) -> None:
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
        treewrite.place(writing, folders)
        treewrite.finish(writing, folders, floor=_depth(site))
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


def diff(folder: Path, commit_id: str, path: str | None = None, *, settings: GhostSettings | None = None,
         state_dir: Path | None = None) -> dict[str, Any]:
    """How the working tree now differs from a snapshot, as a restore would see it (protected
    paths are not differences). With `path` naming one text file, its `before` and `after` text.

    Nothing is hashed or stored: git compares the snapshot's tree with the working tree through a
    light capture's index, as `git diff <commit>` does."""
    settings = settings or GhostSettings()
    site = _site(folder, state_dir)
    if path is not None and (not isinstance(path, str) or not path or path.startswith("/") or "\0" in path
                             or ".." in path.split("/")):
        raise InvalidParams("path: a path relative to the workspace folder")
    with site.locked():
        _recover(site)
        meta = _resolve(site, commit_id)
        current = capture(site, CaptureOptions(settings, light=True))
        try:
            spec = f":(literal){site.prefix}{path.rstrip('/')}" if path else site.scope
            tokens = site.git("diff", "--no-ext-diff", "--no-textconv", "--no-renames", "-z", "--raw", "--numstat",
                              "--ignore-submodules=all", meta["tree"], "--", spec, index=current.index)[1]
            changes = [c for c in _parse_raw(tokens) if not (c.status == "A" and _protected(site, meta, c))]
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
    """A working-tree file's text (a link's target), read through `_open_folders` so that a folder
    swapped for a link meanwhile never makes it read a file outside; None for anything else or
    anything over MAX_DIFF_TEXT."""
    folders = _open_folders(site, path)
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
    site = _site(folder, state_dir)
    with site.locked():
        _recover(site)
        _resolve(site, commit_id)
        st.delete_ref(site, commit_id)
        st.gc(site)
    return {"deleted": True}


# --- crashes ------------------------------------------------------------------------------------------


def _recover(site: Site) -> dict[str, Any] | None:
    """With the store locked (so no restore is running): a journal left behind means a restore was
    cut short. Keep it as the record of an interrupted restore (at once: a reader that finds the
    store busy reads the record), then remove what that restore left in the working tree and the
    store's temporary files. Snapshots the first version left in the user's refs are moved into
    the store."""
    if site.journal().exists():
        try:
            os.replace(site.journal(), site.interrupted_record())
        except OSError:  # a read-only store: the journal stays the record
            pass
    st.clean_leftovers(site)
    with contextlib.suppress(GitFailed):  # a snapshot of that version git cannot read: left where it is
        _migrate_legacy(site)
    record = st.read_json(site.interrupted_record()) or st.read_json(site.journal())
    if record is not None and "tag" in record:
        folders = record.get("folders")
        if treewrite.remove_leftovers(site.top, str(record.get("tag") or ""), folders if isinstance(folders, list) else [],
                                      floor=_depth(site)):
            record = {k: v for k, v in record.items() if k not in ("tag", "folders")}
            with contextlib.suppress(OSError):  # cleaned once: later snapshots do not look again
                st.write_json(site.interrupted_record(), record)
    return record


LEGACY_REFS = "refs/ctxd/ghost/"
"""Where ctxd's first version kept snapshots: refs of the user's own repository."""


def _legacy_marker(site: Site) -> Path:
    return site.store / "legacy-refs-moved"


def _migrate_legacy(site: Site) -> None:
    """Move the first version's snapshots out of the user's repository, once per store (locked).

    That version made each snapshot a commit of the user's repository (its parent the user's HEAD)
    with a ref `refs/ctxd/ghost/<id>`, so `git log --all` and every history view showed them. Each
    one that carries ctxd's metadata keeps its id (ledger items name it): its commit, tree and blobs
    are copied into the store and it gets a store ref under its folder's key, dated when it was
    taken. Its parent, the user's commit, is not copied; the store's `shallow` file tells git there
    not to look for it. Then the user's refs are deleted in one `update-ref` transaction (no hook
    runs, no other ref is touched). A crash before that leaves both, and the next call moves them
    again; refs there without ctxd's metadata are left alone.
    """
    marker = _legacy_marker(site)
    if site.plain or marker.exists():
        return
    fields = site.user("for-each-ref", "--format=%(objectname)%00%(refname)%00%(objecttype)%00%(parent)%00"
                       "%(contents)%00", LEGACY_REFS)[1].split(b"\0")
    moved: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(0, len(fields) - 4, 5):
        commit, ref, kind, parents = (os.fsdecode(f).strip() for f in fields[i:i + 4])
        meta = _parse_meta(fields[i + 4].decode("utf-8", "replace")) if kind == "commit" else None
        if ID.fullmatch(commit) and meta is not None:
            meta["parent"] = parents.split()[0] if parents else None
            moved.append((commit, ref, meta))
    if moved:
        commits = "".join(f"{commit}\n" for commit, _ref, _meta in moved).encode()
        objects = site.git("rev-list", "--objects", "--no-object-names", "--no-walk", "--stdin", stdin=commits)[1]
        site.git("pack-objects", "-q", "--window=0", str(site.store / "objects" / "pack" / "pack"), stdin=objects)
        st.add_shallow(site, [commit for commit, _ref, _meta in moved])
        for commit, _ref, meta in moved:
            key = st.folder_key(str(meta.get("worktree") or ""), str(meta.get("scope") or ""))
            when = _started_ns(meta) / 1e9
            st.write_ref(site, commit, key, when=when if 0 < when < time.time() else None)
        # (When one of them changed meanwhile, none is deleted: the next call moves them again.)
        site.user("update-ref", "--stdin",
                  stdin="".join(f"delete {ref} {commit}\n" for commit, ref, _meta in moved).encode())
    assert site.user_git_dir is not None
    for stale in (site.user_git_dir / "ctxd").glob("tmp-*"):  # that version's temporary indexes
        with contextlib.suppress(OSError):
            if stale.stat().st_mtime < time.time() - 3600:
                stale.unlink()
    st.write_json(marker, {"parents": {commit: meta["parent"] for commit, _ref, meta in moved}})


def interrupted_restore(folder: Path, *, state_dir: Path | None = None, create: bool = True) -> dict[str, Any] | None:
    """A restore of this folder that a crash cut short, if any: `{id, undoId, startedAt, message}`.
    Restoring `undoId` puts the tree back as it was before that restore began. The record stays
    until the next restore of this folder succeeds."""
    site = open_site(Path(folder), Path(state_dir) if state_dir else default_state_dir(), create=create)
    if site is None:
        return None  # no snapshot was ever taken of it
    with site.locked(wait=False) as mine:
        # Busy: a snapshot or restore is running; a journal is its own, unless the process that
        # wrote it is gone (the store is busy recovering from that crash).
        record = _recover(site) if mine else st.read_json(site.interrupted_record())
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


# --- the ledger side ------------------------------------------------------------------------------


def ledger_item(commit: dict[str, Any]) -> dict[str, Any]:
    """The `ghost_snapshot` item recorded in a thread for a snapshot (the Responses API spelling)."""
    return {"type": "ghost_snapshot", "ghost_commit": {
        "id": commit["id"], "parent": commit["parent"], "created_at": commit["createdAt"],
        "message": commit["message"]}}


def item_commit_id(item: dict[str, Any]) -> str | None:
    """The snapshot a ledger item records, if it is a `ghost_snapshot` item."""
    if item.get("type") != "ghost_snapshot" or not isinstance(item.get("ghost_commit"), dict):
        return None
    commit_id = item["ghost_commit"].get("id")
    return commit_id if isinstance(commit_id, str) else None


def slow_warning(folder: Path, seconds: float) -> str:
    return (f"ctxd: the snapshot of {folder} has taken more than {seconds:g} s. Large untracked files "
            "are the likely cause: add them to .gitignore, or lower ghost.max_untracked_file_bytes.")
