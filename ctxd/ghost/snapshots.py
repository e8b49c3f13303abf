"""Ghost commits: snapshots of a workspace's working tree that live outside the user's history.

A snapshot is an ordinary git commit whose tree is the working tree (tracked files as they are on
disk, plus untracked files that are not ignored), built through a private temporary index so the
user's index, HEAD, branches, tags, stash, config and files are never written. Each snapshot is
kept reachable from its own ref under `refs/ctxd/ghost/`, so `git gc --prune=now` keeps it and a
restarted daemon can list it. Its metadata (message, time, scope, what was skipped) is a JSON
line in the commit message.

A restore takes a fresh snapshot of the current state into a temporary index and then lets
`read-tree -u` switch the working tree from that state to the snapshot's, as a checkout between
two commits would: changed files are rewritten, files created since are removed, and files git
does not know about in either state (ignored, skipped) are never deleted.

A workspace folder below the repository's top level is a scope: only paths under it are
snapshotted and restored. Pure module: no pygls; errors are `ctxd.errors` classes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import git

from ctxd.errors import Cancelled, GitFailed, InvalidParams
from ctxd.settings import GhostSettings

REF_PREFIX = "refs/ctxd/ghost/"
"""Private ref namespace: outside refs/heads, refs/tags and refs/stash, so nothing shows as a branch."""

DEPENDENCY_DIRS = frozenset({
    "node_modules", "bower_components", ".venv", "venv", "dist", "build", "__pycache__", ".tox",
    ".nox", ".cache", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis",
    ".parcel-cache", ".gradle", ".eggs",
})
"""Untracked directories with these names are dependencies, build output or caches: never snapshotted."""

META_PREFIX = "ctxd-ghost: "
DEFAULT_MESSAGE = "ctxd snapshot"
_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # a full SHA-1 or SHA-256 object name, nothing else
_IDENTITY = {
    # A fixed identity: snapshots work with no user.name/user.email configured.
    "GIT_AUTHOR_NAME": "ctxd", "GIT_AUTHOR_EMAIL": "ctxd@localhost",
    "GIT_COMMITTER_NAME": "ctxd", "GIT_COMMITTER_EMAIL": "ctxd@localhost",
}
_ENV = {
    "GIT_OPTIONAL_LOCKS": "0",  # git must not refresh the user's index behind our back
    "GIT_TERMINAL_PROMPT": "0",
}
_STALE_TEMP_SECONDS = 3600.0
_PACKED = ("-c", "core.bigFileThreshold=1")
"""Blobs go into one pack per command (git's bulk check-in) instead of one loose file each:
creating hundreds of small files is what makes a first snapshot slow. Files that need a
filter or an end-of-line conversion are still written loose, converted."""

_locks_guard = threading.Lock()
_locks: dict[str, threading.Lock] = {}


def _repo_lock(common_dir: Path) -> threading.Lock:
    """One snapshot or restore at a time per repository (worktrees share the object store and refs)."""
    with _locks_guard:
        return _locks.setdefault(str(common_dir), threading.Lock())


@dataclass
class _Repo:
    """A workspace folder resolved to its repository, worktree and scope."""

    folder: Path
    top: Path
    git_dir: Path  # this worktree's private git dir (holds the index and our temp files)
    common_dir: Path  # shared by linked worktrees (objects, refs)
    prefix: str  # the folder relative to `top`: "" or "sub/dir/"
    worktree: str  # "" for the main worktree, else the linked worktree's name
    head: str | None  # HEAD's commit when the repository was opened; None before the first commit
    cmd: git.Git

    def run(self, *args: str, index: Path | None = None, stdin: bytes | None = None,
            env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> tuple[int, bytes]:
        """Run one git command from the top level; raise GitFailed unless its status is in `ok`."""
        full_env = dict(_ENV)
        if index is not None:
            full_env["GIT_INDEX_FILE"] = str(index)
        if env:
            full_env.update(env)
        with tempfile.TemporaryFile() as feed:
            if stdin is not None:
                feed.write(stdin)
                feed.seek(0)
            status, out, err = self.cmd.execute(
                [git.Git.GIT_PYTHON_GIT_EXECUTABLE, *args], istream=feed if stdin is not None else None,
                with_extended_output=True, with_exceptions=False, stdout_as_string=False,
                strip_newline_in_stdout=False, env=full_env)
        if status not in ok:
            message = err.strip() if isinstance(err, str) else str(err)
            name = next((a for a in args if not a.startswith("-") and "=" not in a), "")
            raise GitFailed(f"git {name} failed: {message or f'exit status {status}'}")
        return status, out

    def out(self, *args: str, **kwargs: Any) -> str:
        return os.fsdecode(self.run(*args, **kwargs)[1]).strip()

    def paths(self, *args: str, **kwargs: Any) -> list[str]:
        """Run a command with NUL-separated path output (`-z`) and split it."""
        raw = self.run(*args, **kwargs)[1]
        return [os.fsdecode(p) for p in raw.split(b"\0") if p]

    @property
    def scope(self) -> str:
        """Pathspec for the workspace folder, taken literally (names may hold `*` or `:`)."""
        return f":(literal){self.prefix.rstrip('/')}" if self.prefix else "."

    def in_scope(self, path: str) -> bool:
        return path.startswith(self.prefix)

    def rel(self, path: str) -> str:
        """A repository path as the client sees it: relative to the workspace folder."""
        return path[len(self.prefix):]

    def work_dir(self) -> Path:
        """Where our temporary index files live: inside the git dir, invisible to `git status`."""
        path = self.git_dir / "ctxd"
        path.mkdir(exist_ok=True)
        now = time.time()
        for stale in path.glob("tmp-*"):
            try:
                if now - stale.stat().st_mtime > _STALE_TEMP_SECONDS:
                    stale.unlink()
            except OSError:
                pass
        return path

    def temp_index(self) -> Path:
        """A fresh path for a temporary index. It must not exist until git writes it."""
        return self.work_dir() / f"tmp-{uuid.uuid4().hex}.index"


def _open(folder: Path) -> _Repo:
    folder = Path(folder)
    if not folder.is_dir():
        raise GitFailed(f"{folder} is not a git repository (no such folder)")
    cmd = git.Git(str(folder))
    status, out, err = cmd.execute(
        [git.Git.GIT_PYTHON_GIT_EXECUTABLE, "rev-parse", "--show-toplevel", "--absolute-git-dir",
         "--git-common-dir", "--show-prefix", "--revs-only", "HEAD^{commit}"],
        with_extended_output=True, with_exceptions=False, stdout_as_string=False, env=dict(_ENV))
    if status != 0:
        detail = err.strip() if isinstance(err, str) else ""
        raise GitFailed(f"{folder} is not a git repository" + (f": {detail}" if detail else ""))
    lines = os.fsdecode(out).split("\n")
    if len(lines) < 4:
        raise GitFailed(f"{folder} is not inside a git working tree")
    top, git_dir, common, prefix = Path(lines[0]), Path(lines[1]), lines[2], lines[3]
    head = lines[4].strip() if len(lines) > 4 and _ID.fullmatch(lines[4].strip()) else None
    common_dir = (folder / common).resolve() if not os.path.isabs(common) else Path(common)
    worktree = "" if git_dir.resolve() == common_dir.resolve() else git_dir.name
    return _Repo(folder=folder, top=top, git_dir=git_dir, common_dir=common_dir, prefix=prefix,
                 worktree=worktree, head=head, cmd=git.Git(str(top)))


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("snapshot cancelled")


def _mib(size: float) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def _dependency_dir(path: str, start: int) -> str | None:
    """The first component of `path` (from component `start` on) that names a dependency dir."""
    parts = path.rstrip("/").split("/")
    for i in range(start, len(parts)):
        if parts[i] in DEPENDENCY_DIRS and (i < len(parts) - 1 or path.endswith("/")):
            return "/".join(parts[: i + 1]) + "/"
    return None


def _untracked(repo: _Repo, settings: GhostSettings,
               cancel: threading.Event | None) -> tuple[list[str], list[dict[str, str]]]:
    """Untracked, non-ignored files in scope to snapshot, and what was skipped (with why).

    Untracked directories are first listed collapsed, so dependency directories and nested
    repositories are never walked; only the remaining untracked directories are expanded.
    """
    scope_depth = repo.prefix.count("/")
    skipped: dict[str, str] = {}
    files: list[str] = []
    expand: list[str] = []
    for entry in repo.paths("ls-files", "-z", "--others", "--exclude-standard", "--directory",
                            "--no-empty-directory", "--", repo.scope):
        dep = _dependency_dir(entry, scope_depth)
        if dep is not None:
            skipped.setdefault(dep, "dependency or build directory")
        elif entry.endswith("/"):
            if (repo.top / entry / ".git").exists():
                skipped[entry] = "nested git repository"
            else:
                expand.append(entry)
        else:
            files.append(entry)
    _check_cancel(cancel)
    if expand:
        excludes = [f"--exclude={name}/" for name in sorted(DEPENDENCY_DIRS)]
        # An untracked directory holding the workspace folder is expanded only as far as the folder.
        specs = [repo.scope if repo.prefix.startswith(d) else f":(literal){d}" for d in expand]
        inner = repo.paths("ls-files", "-z", "--others", "--exclude-standard", *excludes, "--", *specs)
        for dep in repo.paths("ls-files", "-z", "--others", "--ignored", "--directory", *excludes,
                              "--", *specs):
            if _dependency_dir(dep, scope_depth) is not None:
                skipped.setdefault(_dependency_dir(dep, scope_depth) or dep, "dependency or build directory")
        groups: dict[str, list[str]] = {}
        expanded = set(expand)
        for path in inner:
            if path.endswith("/"):
                skipped[path] = "nested git repository"
                continue
            groups.setdefault(_group_of(path, expanded, repo.prefix), []).append(path)
        for group, members in groups.items():
            if group and len(members) >= settings.max_untracked_dir_files:
                skipped[group] = (f"untracked directory with {len(members)} files "
                                  f"(limit {settings.max_untracked_dir_files})")
            else:
                files.extend(members)
    _check_cancel(cancel)
    kept: list[str] = []
    for path in files:
        try:
            size = os.lstat(repo.top / path).st_size
        except OSError:
            continue  # gone since it was listed
        if size > settings.max_untracked_file_bytes:
            skipped[path] = (f"untracked file of {_mib(size)} "
                             f"(limit {_mib(settings.max_untracked_file_bytes)})")
        else:
            kept.append(path)
    report = [{"path": repo.rel(p), "reason": r} for p, r in sorted(skipped.items())]
    return kept, report


def _group_of(path: str, expanded: set[str], prefix: str) -> str:
    """The untracked directory a file counts towards for the directory-size limit.

    That is the collapsed directory git listed, except when the workspace folder itself is
    untracked: then each of its subdirectories counts on its own and its loose files not at all.
    """
    parts = path.split("/")
    for depth in range(1, len(parts)):
        directory = "/".join(parts[:depth]) + "/"
        if directory in expanded:
            if prefix.startswith(directory):  # the workspace folder lies inside this directory
                rest = path[len(prefix):]
                return prefix + rest.split("/", 1)[0] + "/" if "/" in rest else ""
            return directory
    return ""


def _index_entry_count(index: Path) -> int:
    """Entries in an index file, read from its header ("DIRC", version, count)."""
    with index.open("rb") as handle:
        header = handle.read(12)
    if len(header) < 12 or header[:4] != b"DIRC":
        return 0
    return struct.unpack(">I", header[8:12])[0]


@dataclass
class _State:
    """The working tree captured into a temporary index."""

    index: Path
    tree: str
    skipped: list[dict[str, str]]


_STAGED = re.compile(rb"(?:^|\0)[0-7]{6} [0-9a-f]{40,64} ([0-3])\t([^\0]*)")


class _UserIndex:
    """What a capture needs to know of the user's index, read with `ls-files --stage` when needed.

    The listing changes when paths, modes, contents or stages change, not when only stat data do
    (as after `git stash create` or a refresh). When the index file's bytes are unchanged since the
    last capture, the listing is not even read.
    """

    def __init__(self, repo: _Repo) -> None:
        self.repo = repo
        try:  # a few milliseconds, against a git process for the listing
            self.digest: str | None = hashlib.sha1((repo.git_dir / "index").read_bytes()).hexdigest()
        except FileNotFoundError:
            self.digest = None
        self._listing: bytes | None = None
        self._pending: Future[tuple[int, bytes]] | None = None

    def prefetch(self, pool: ThreadPoolExecutor) -> None:
        """Start reading the listing in the background, in case it is needed."""
        self._pending = pool.submit(self.repo.run, "ls-files", "--stage", "-z")

    @property
    def listing(self) -> bytes:
        if self._listing is None:
            pending = self._pending
            self._listing = (pending.result() if pending else self.repo.run("ls-files", "--stage", "-z"))[1]
        return self._listing

    @property
    def signature(self) -> str:
        return hashlib.sha1(self.listing).hexdigest()

    @property
    def count(self) -> int:
        return self.listing.count(b"\0")

    def unmerged(self) -> set[str]:
        if not any(marker in self.listing for marker in (b" 1\t", b" 2\t", b" 3\t")):
            return set()  # the common case, found at memchr speed
        return {os.fsdecode(m.group(2)) for m in _STAGED.finditer(self.listing) if m.group(1) != b"0"}

    def paths(self) -> set[str]:
        return {os.fsdecode(m.group(2)) for m in _STAGED.finditer(self.listing)}


@dataclass
class _Cache:
    """The last capture's index, kept so an unchanged file is never hashed twice.

    It is only a seed: it is used while the user's index still lists the same paths and contents
    (its signature), and the untracked files it holds that are no longer wanted are taken out.
    `deleted` are files the user's index tracks that were missing from the working tree, so the
    next capture checks whether they came back.
    """

    index: Path
    meta: Path

    @classmethod
    def for_scope(cls, repo: _Repo) -> _Cache:
        key = hashlib.sha1(repo.prefix.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        base = repo.work_dir() / f"cache-{key}"
        return cls(index=base.with_suffix(".index"), meta=base.with_suffix(".json"))

    def read(self) -> dict[str, Any] | None:
        """The record of the kept index, if it is intact."""
        try:
            meta = json.loads(self.meta.read_text("utf-8"))
            st = self.index.stat()
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("stat") != [st.st_ino, st.st_size, st.st_mtime_ns]:
            return None
        return meta

    @staticmethod
    def same_user_index(meta: dict[str, Any] | None, user: _UserIndex) -> bool:
        """The user's index file is byte for byte the one the kept index was made from."""
        return (meta is not None and user.digest is not None and meta.get("userDigest") == user.digest
                and "userCount" in meta)

    @classmethod
    def usable(cls, meta: dict[str, Any] | None, user: _UserIndex) -> bool:
        """The kept index may seed a capture: the user's index lists the same entries, no conflicts."""
        if meta is None:
            return False
        if cls.same_user_index(meta, user):
            return True
        return not user.unmerged() and meta.get("signature") == user.signature

    def save(self, index: Path, user: dict[str, Any], untracked: list[str], deleted: list[str]) -> None:
        st = index.stat()
        meta = {**user, "stat": [st.st_ino, st.st_size, st.st_mtime_ns], "untracked": untracked,
                "deleted": deleted}
        pending = self.index.with_suffix(f".{uuid.uuid4().hex}.tmp")
        try:
            os.link(index, pending)  # the same inode, so the recorded stat matches
            self.meta.with_suffix(".tmp").write_text(json.dumps(meta), "utf-8")
            os.replace(pending, self.index)
            os.replace(self.meta.with_suffix(".tmp"), self.meta)
        except OSError:
            pending.unlink(missing_ok=True)
            self.meta.unlink(missing_ok=True)


def _nul(paths: Iterable[str]) -> bytes:
    return b"".join(os.fsencode(p) + b"\0" for p in paths)


def _capture(repo: _Repo, settings: GhostSettings, progress: Callable[[str], None] | None,
             cancel: threading.Event | None) -> _State:
    """Write the working tree (in scope) into a new temporary index and return its tree.

    The index is seeded from the last capture when the user's index has not changed since, else
    by copying the user's: either way files whose stat data still match are not hashed again.
    Outside the scope the user's index is kept as it is.
    """
    say = progress or (lambda _message: None)
    user = _UserIndex(repo)  # read before anything else
    cache = _Cache.for_scope(repo)
    index = repo.temp_index()
    try:
        # Listing untracked files reads the user's index and the disk; refreshing the seeded index
        # writes only the temporary one: the two run side by side.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="ctxd-ghost") as pool:
            listing = pool.submit(_untracked, repo, settings, cancel)
            meta = cache.read()
            if not cache.same_user_index(meta, user):
                user.prefetch(pool)  # needed to compare, or to remember this capture
            say("looking for changes and untracked files")
            meta = meta if cache.usable(meta, user) else None
            # copy2 keeps the mtime git compares file times with to spot racily clean entries
            if meta is not None:
                shutil.copy2(cache.index, index)
            elif (repo.git_dir / "index").exists():
                shutil.copy2(repo.git_dir / "index", index)
            repo.run(*_PACKED, "add", "--update", "--", repo.scope, index=index)
            unmerged = set() if meta is not None else user.unmerged()
            files, skipped = listing.result()
        _check_cancel(cancel)
        recheck: list[str] = []
        if meta is not None:
            gone = sorted(set(meta["untracked"]) - set(files))
            if gone:  # no longer wanted: deleted, ignored now, or over a limit now
                repo.run("update-index", "--force-remove", "-z", "--stdin", index=index, stdin=_nul(gone))
            recheck = [p for p in meta["deleted"]
                       if os.path.islink(repo.top / p) or os.path.isfile(repo.top / p)]
        say(f"adding {len(files)} untracked files")
        if files or recheck:  # --remove: a file deleted since it was listed is simply left out
            repo.run(*_PACKED, "update-index", "--add", "--remove", "-z", "--stdin", index=index,
                     stdin=_nul(files + recheck))
        outside = sorted(p for p in unmerged if not repo.in_scope(p))
        if outside:  # a merge in progress: take those files as they are on disk, so the tree can be written
            repo.run(*_PACKED, "update-index", "--add", "--remove", "-z", "--stdin", index=index,
                     stdin=_nul(outside))
        _check_cancel(cancel)
        say("writing tree")
        tree = repo.out("write-tree", index=index)
        if not unmerged and index.exists():
            _remember(repo, cache, index, user, meta, files)
        return _State(index=index, tree=tree, skipped=skipped)
    except BaseException:
        index.unlink(missing_ok=True)
        raise


def _remember(repo: _Repo, cache: _Cache, index: Path, user: _UserIndex, meta: dict[str, Any] | None,
              files: list[str]) -> None:
    """Keep a capture's index as the next one's seed, with what it takes to reuse it safely."""
    if meta is not None and cache.same_user_index(meta, user):
        known = {"signature": meta["signature"], "userDigest": user.digest, "userCount": meta["userCount"]}
    else:
        known = {"signature": user.signature, "userDigest": user.digest, "userCount": user.count}
    deleted: list[str] = []
    # The index holds the user's entries, less the tracked files missing from disk, plus `files`.
    if known["userCount"] + len(files) != _index_entry_count(index):
        kept = set(repo.paths("ls-files", "-z", index=index))
        deleted = sorted(p for p in user.paths() - kept if repo.in_scope(p))
    cache.save(index, known, files, deleted)


def _file_count(repo: _Repo, state: _State) -> int:
    if not repo.prefix:
        return _index_entry_count(state.index) if state.index.exists() else 0
    return len(repo.paths("ls-files", "-z", "--", repo.scope, index=state.index))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _clean_message(message: str | None) -> str:
    text = (message or "").replace("\0", "")
    return text if text.strip() else DEFAULT_MESSAGE


def snapshot(folder: Path, message: str | None = None, *, settings: GhostSettings | None = None,
             progress: Callable[[str], None] | None = None,
             cancel: threading.Event | None = None) -> dict[str, Any]:
    """Snapshot the workspace folder's working tree as a ghost commit; returns a GhostCommit."""
    settings = settings or GhostSettings()
    started = time.monotonic()
    repo = _open(folder)
    with _repo_lock(repo.common_dir):
        parent = repo.head
        state = _capture(repo, settings, progress, cancel)
        try:
            meta = {
                "v": 1,
                "message": _clean_message(message),
                "createdAt": _now(),
                "scope": repo.prefix,
                "worktree": repo.worktree,
                "fileCount": _file_count(repo, state),
                "skipped": state.skipped,
                "durationMs": 0,
            }
            _check_cancel(cancel)
            if progress:
                progress("committing")
            meta["durationMs"] = int((time.monotonic() - started) * 1000)
            subject = meta["message"].splitlines()[0][:200] if meta["message"].strip() else DEFAULT_MESSAGE
            body = f"{subject}\n\n{META_PREFIX}{json.dumps(meta, ensure_ascii=True)}\n"
            args = ["commit-tree", "--no-gpg-sign", state.tree, "-m", body]
            if parent:
                args[3:3] = ["-p", parent]
            commit = repo.out(*args, env=_IDENTITY)
            repo.run("update-ref", "-m", "ctxd ghost snapshot", REF_PREFIX + commit, commit)
        finally:
            state.index.unlink(missing_ok=True)
    return _wire(commit, parent, meta)


def _wire(commit: str, parent: str | None, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": commit,
        "parent": parent,
        "createdAt": meta.get("createdAt"),
        "message": meta.get("message", DEFAULT_MESSAGE),
        "fileCount": meta.get("fileCount", 0),
        "skipped": meta.get("skipped", []),
        "durationMs": meta.get("durationMs", 0),
    }


def _parse_meta(body: str) -> dict[str, Any] | None:
    for line in reversed(body.splitlines()):
        if line.startswith(META_PREFIX):
            try:
                meta = json.loads(line[len(META_PREFIX):])
            except ValueError:
                return None
            return meta if isinstance(meta, dict) else None
    return None


def _ours(repo: _Repo, meta: dict[str, Any] | None) -> bool:
    """A snapshot belongs to this folder when it was taken of the same scope in the same worktree."""
    return (meta is not None and meta.get("scope") == repo.prefix
            and meta.get("worktree", "") == repo.worktree)


def _snapshots(repo: _Repo) -> list[dict[str, Any]]:
    raw = repo.run("for-each-ref", "--format=%(objectname)%00%(parent)%00%(contents)%00",
                   REF_PREFIX)[1]
    fields = raw.split(b"\0")
    found = []
    for i in range(0, len(fields) - 2, 3):
        commit = os.fsdecode(fields[i]).strip()
        parents = os.fsdecode(fields[i + 1]).split()
        meta = _parse_meta(fields[i + 2].decode("utf-8", "replace"))
        if _ID.fullmatch(commit) and _ours(repo, meta):
            found.append(_wire(commit, parents[0] if parents else None, meta or {}))
    found.sort(key=lambda g: (g["createdAt"] or "", g["id"]), reverse=True)
    return found


def list_snapshots(folder: Path) -> list[dict[str, Any]]:
    """This folder's snapshots, newest first (read back from the refs, so they outlive the daemon)."""
    return _snapshots(_open(folder))


def _resolve(repo: _Repo, commit_id: Any) -> str:
    """Check that `commit_id` names one of this folder's snapshots; return its tree."""
    if not isinstance(commit_id, str) or not _ID.fullmatch(commit_id):
        raise InvalidParams("id: not a snapshot id (expected a full hexadecimal commit id)")
    status, out = repo.run("for-each-ref", "--format=%(contents)", REF_PREFIX + commit_id)
    if not out.strip():
        raise InvalidParams(f"id: unknown snapshot {commit_id}")
    if not _ours(repo, _parse_meta(out.decode("utf-8", "replace"))):
        raise InvalidParams(f"id: snapshot {commit_id} was taken of another workspace folder")
    status, tree = repo.run("rev-parse", "--verify", "--quiet", f"{commit_id}^{{tree}}", ok=(0, 1))
    if status != 0:
        raise InvalidParams(f"id: snapshot {commit_id} is missing from the object store")
    return os.fsdecode(tree).strip()


def _scoped_target(repo: _Repo, current: _State, snapshot_tree: str) -> str:
    """The tree to switch to: the snapshot inside the scope, the current state outside it."""
    if not repo.prefix:
        return snapshot_tree
    index = repo.temp_index()
    try:
        repo.run("read-tree", current.tree, index=index)
        inside = repo.paths("ls-files", "-z", "--", repo.scope, index=index)
        if inside:
            repo.run("update-index", "--force-remove", "-z", "--stdin", index=index, stdin=_nul(inside))
        status, sub = repo.run("rev-parse", "--verify", "--quiet",
                               f"{snapshot_tree}:{repo.prefix.rstrip('/')}", ok=(0, 1))
        if status == 0:
            repo.run("read-tree", f"--prefix={repo.prefix}", os.fsdecode(sub).strip(), index=index)
        return repo.out("write-tree", index=index)
    finally:
        index.unlink(missing_ok=True)


def _changes(repo: _Repo, old: str, new: str) -> tuple[list[str], list[str], set[str]]:
    """Paths written and removed when the working tree goes from `old` to `new`, and the
    written paths that are submodules in `new` (git leaves their contents alone)."""
    parts = repo.paths("diff-tree", "-r", "-z", "--no-renames", "--raw", old, new)
    written, removed, gitlinks = [], [], set()
    for header, path in zip(parts[::2], parts[1::2], strict=True):
        fields = header.split()
        if fields[-1] == "D":
            removed.append(path)
        else:
            written.append(path)
            if fields[1] == "160000":
                gitlinks.add(path)
    return written, removed, gitlinks


def _check_in_the_way(repo: _Repo, written: list[str], removed: list[str], gitlinks: set[str]) -> None:
    """Refuse a restore that would delete files git does not track in either state.

    Such files (ignored, or skipped by the snapshot limits) are only at risk where the snapshot
    needs a file where a directory now is, or a directory where a file now is. A file the snapshot
    holds is written back even if it is ignored or too big now: that is the undo asked for.
    """
    going = set(removed)
    blocked: list[str] = []
    for path in written:
        target = repo.top / path
        parts = path.split("/")
        for i in range(1, len(parts)):
            ancestor = "/".join(parts[:i])
            where = repo.top / ancestor
            if (where.is_symlink() or where.exists() and not where.is_dir()) and ancestor not in going:
                blocked.append(ancestor)
        if target.is_dir() and not target.is_symlink() and path not in gitlinks:
            for root, _dirs, names in os.walk(target):
                for name in names:
                    inner = Path(root, name).relative_to(repo.top).as_posix()
                    if inner not in going:
                        blocked.append(inner)
    if blocked:
        shown = ", ".join(sorted(set(blocked))[:5])
        raise GitFailed(f"restore would delete files that are not in any snapshot: {shown}; "
                        "move them away and retry")


def restore(folder: Path, commit_id: str, *, settings: GhostSettings | None = None) -> dict[str, Any]:
    """Make the working tree (in scope) what it was at the snapshot; returns {id, restored, removed}."""
    settings = settings or GhostSettings()
    repo = _open(folder)
    with _repo_lock(repo.common_dir):
        snapshot_tree = _resolve(repo, commit_id)
        if (repo.git_dir / "index.lock").exists():
            raise GitFailed("another git process is running (index.lock exists); nothing was restored")
        current = _capture(repo, settings, None, None)
        try:
            target = _scoped_target(repo, current, snapshot_tree)
            written, removed, gitlinks = _changes(repo, current.tree, target)
            if written or removed:
                _check_in_the_way(repo, written, removed, gitlinks)
                repo.run("read-tree", "--reset", "-u", current.tree, target, index=current.index)
        finally:
            current.index.unlink(missing_ok=True)
    return {"id": commit_id, "restored": [repo.rel(p) for p in written if p not in gitlinks],
            "removed": [repo.rel(p) for p in removed]}


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
