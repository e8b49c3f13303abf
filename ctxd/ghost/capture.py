"""Capturing a working tree into a temporary index of ctxd's store, and what is left out.

Tracked files are taken as they are on disk, untracked files that are not ignored are added,
and these are left out and reported (`skipped`): dependency and build folders, nested
repositories, untracked files over `ghost.max_untracked_file_bytes`, untracked folders of
`ghost.max_untracked_dir_files` files or more, and secrets (`.env`, `.env.*`, `env/`, `.env/`,
an untracked `.ctxd.toml`). `ghost.exclude` patterns (gitignore syntax) are treated as ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from ctxd.errors import Cancelled, GitFailed
from ctxd.ghost import treewatch
from ctxd.ghost.gitstore import Site, drop_unused_shared_indexes, now_ns, shared_index_of
from ctxd.settings import GhostSettings

DEPENDENCY_DIRS = frozenset({
    "node_modules", "bower_components", ".venv", "venv", "dist", "build", "__pycache__", ".tox",
    ".nox", ".cache", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis",
    ".parcel-cache", ".gradle", ".eggs",
})
"""Untracked directories with these names are dependencies, build output or caches: never snapshotted."""

SECRET_DIRS = frozenset({"env", ".env"})
SECRET_REASON = "secret (never captured)"
UNTRACKED_SECRETS = frozenset({".ctxd.toml"})
"""A workspace's `.ctxd.toml` may hold settings a user keeps to themselves: when it is untracked it
is never captured (when tracked, it is already in the user's own history and is captured)."""

_PACKED = ("-c", "core.bigFileThreshold=1")
"""Blobs go into one pack per command (git's bulk check-in) instead of one loose file each."""
FEW_PATHS = 64
"""Up to this many paths, blobs are written loose: a pack per capture costs more than a few files
(it is synced to disk), and the packs would soon make the store repack (`ctxd.ghost.gitstore.needs_gc`)."""


def _store_flags(paths: int) -> tuple[str, ...]:
    return () if paths <= FEW_PATHS else _PACKED


def check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("snapshot cancelled")


def nul(paths: Iterable[str]) -> bytes:
    return b"".join(os.fsencode(p) + b"\0" for p in paths)


def _mib(size: float) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def secret(path: str, tracked: bool = False) -> str | None:
    """The secret part of `path` (a file, or a folder ending in `/`), if any."""
    parts = path.rstrip("/").split("/")
    for i, part in enumerate(parts):
        is_dir = i < len(parts) - 1 or path.endswith("/")
        if is_dir and part in SECRET_DIRS:
            return "/".join(parts[: i + 1]) + "/"
    name = parts[-1]
    if name == ".env" or name.startswith(".env.") or (not tracked and name in UNTRACKED_SECRETS):
        return path
    return None


def _dependency_dir(path: str, start: int) -> str | None:
    """The first component of `path` (from component `start` on) that names a dependency dir."""
    parts = path.rstrip("/").split("/")
    for i in range(start, len(parts)):
        if parts[i] in DEPENDENCY_DIRS and (i < len(parts) - 1 or path.endswith("/")):
            return "/".join(parts[: i + 1]) + "/"
    return None


def _excludes(settings: GhostSettings) -> list[str]:
    return [f"--exclude={pattern}" for pattern in settings.exclude if pattern.strip()]


def _untracked(site: Site, settings: GhostSettings, cancel: threading.Event | None,
               known: dict[str, Any] | None) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """Untracked files in scope to snapshot, what was skipped (with why), and what it takes to
    reuse the listing: when no directory changed since the last one (no entry was created,
    removed or renamed) and no ignore file changed, the last listing is still right, as with git's
    own untracked cache. Sizes are checked every time."""
    if (known is not None and known.get("limits") == [settings.max_untracked_dir_files]
            and _stamps_hold(site, known.get("dirs"))):
        dirs = known["dirs"]
        candidates, skipped = list(known["candidates"]), dict(known["skipped"])
    else:
        dirs = _directory_stamps(site)
        candidates, skipped = _list_untracked(site, settings, cancel)
    check_cancel(cancel)
    kept: list[str] = []
    for path in candidates:
        try:
            size = os.lstat(site.top / path).st_size
        except OSError:
            continue  # gone since it was listed
        if size > settings.max_untracked_file_bytes:
            skipped[path] = (f"untracked file of {_mib(size)} "
                             f"(limit {_mib(settings.max_untracked_file_bytes)})")
        else:
            kept.append(path)
    listing = {"dirs": dirs, "candidates": candidates,
               "skipped": {k: v for k, v in skipped.items() if not v.startswith("untracked file of")}}
    return kept, skipped, listing


_RACY_NS = 100_000_000
MAX_STAMPED_DIRS = 5000


def _stamps_hold(site: Site, stamps: Any) -> bool:
    """Every recorded directory and ignore file still has the change time recorded (a new
    directory changes its parent's)."""
    if not isinstance(stamps, dict):
        return False
    for path, stamp in stamps.items():
        try:
            if stamp == -1 or os.stat(site.top / path).st_mtime_ns != stamp:
                return False
        except OSError:
            if stamp != 0:
                return False
    return True


def _directory_stamps(site: Site) -> dict[str, int] | None:
    """The change time of every directory a listing looks at, and of every ignore file; None
    when there are too many to be worth it. A directory changed a moment ago is recorded as -1,
    so the next capture lists again (a change in the same clock tick would not show)."""
    started = now_ns()
    stamps: dict[str, int] = {}
    extra = [site.user_git_dir / "info" / "exclude"] if site.user_git_dir is not None else []
    parts = site.prefix.rstrip("/").split("/") if site.prefix else []
    extra += [site.top.joinpath(*parts[:i], ".gitignore") for i in range(len(parts))]
    for path in extra:
        try:
            stamps[str(path)] = os.stat(path).st_mtime_ns
        except OSError:
            stamps[str(path)] = 0
    pending = [site.prefix.rstrip("/")]
    while pending:
        rel = pending.pop()
        here = site.top / rel if rel else site.top
        try:
            stamps[f"{rel}/" if rel else "./"] = os.stat(here).st_mtime_ns
            with os.scandir(here) as entries:
                for entry in entries:
                    child = f"{rel}/{entry.name}" if rel else entry.name
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name != ".git" and entry.name not in DEPENDENCY_DIRS:
                            pending.append(child)
                    elif entry.name == ".gitignore":
                        stamps[child] = entry.stat(follow_symlinks=False).st_mtime_ns
        except OSError:
            stamps[f"{rel}/" if rel else "./"] = -1
        if len(stamps) > MAX_STAMPED_DIRS:
            return None
    return {k: (-1 if v >= started - _RACY_NS else v) for k, v in stamps.items()}


def _list_untracked(site: Site, settings: GhostSettings,
                    cancel: threading.Event | None) -> tuple[list[str], dict[str, str]]:
    """Untracked directories are first listed collapsed, so dependency directories and nested
    repositories are never walked; only the remaining untracked directories are expanded."""
    scope_depth = site.prefix.count("/")
    user_excludes = _excludes(settings)
    dir_limit = settings.max_untracked_dir_files if not site.plain else 1 << 62  # all is untracked there
    skipped: dict[str, str] = {}
    files: list[str] = []
    expand: list[str] = []
    for entry in site.paths("ls-files", "-z", "--others", "--exclude-standard", *user_excludes, "--directory",
                            "--no-empty-directory", "--", site.scope, user=True):
        dep = _dependency_dir(entry, scope_depth)
        hidden = secret(entry)
        if hidden is not None:
            skipped.setdefault(hidden, SECRET_REASON)
        elif dep is not None:
            skipped.setdefault(dep, "dependency or build directory")
        elif entry.endswith("/"):
            if (site.top / entry / ".git").exists():
                skipped[entry] = "nested git repository"
            else:
                expand.append(entry)
        else:
            files.append(entry)
    check_cancel(cancel)
    if expand:
        excludes = [f"--exclude={name}/" for name in sorted(DEPENDENCY_DIRS | SECRET_DIRS)] + user_excludes
        # An untracked directory holding the workspace folder is expanded only as far as the folder.
        specs = [site.scope if site.prefix.startswith(d) else f":(literal){d}" for d in expand]
        inner = site.paths("ls-files", "-z", "--others", "--exclude-standard", *excludes, "--", *specs, user=True)
        for dep in site.paths("ls-files", "-z", "--others", "--ignored", "--directory",
                              *(f"--exclude={name}/" for name in sorted(DEPENDENCY_DIRS | SECRET_DIRS)),
                              "--", *specs, user=True):
            hidden = secret(dep)
            if hidden is not None:
                skipped.setdefault(hidden, SECRET_REASON)
            elif _dependency_dir(dep, scope_depth) is not None:
                skipped.setdefault(_dependency_dir(dep, scope_depth) or dep, "dependency or build directory")
        groups: dict[str, list[str]] = {}
        expanded = set(expand)
        for path in inner:
            if path.endswith("/"):
                skipped[path] = "nested git repository"
                continue
            hidden = secret(path)
            if hidden is not None:
                skipped.setdefault(hidden, SECRET_REASON)
                continue
            groups.setdefault(_group_of(path, expanded, site.prefix), []).append(path)
        for group, members in groups.items():
            if group and len(members) >= dir_limit:
                skipped[group] = f"untracked directory with {len(members)} files (limit {dir_limit})"
            else:
                files.extend(members)
    return files, skipped


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


def index_entry_count(index: Path, git_dir: Path | None = None) -> int:
    """Entries in an index file, read from its header ("DIRC", version, count). A split index (one
    of ctxd's, in `git_dir`) holds the entries that replace some of its shared index's and the
    entries it adds, and its `link` extension says which of the shared index's entries it deletes
    and which it replaces (two EWAH bitmaps)."""
    with index.open("rb") as handle:
        data = handle.read() if git_dir is not None else handle.read(12)
    count = _header_count(data)
    shared = shared_index_of(git_dir, data) if git_dir is not None else None
    if shared is None:
        return count
    with shared.open("rb") as handle:
        base = _header_count(handle.read(12))
    at = data.find(bytes.fromhex(shared.name.split(".", 1)[1])) + 20
    deleted, at = _ewah_set_bits(data, at)
    replaced, _ = _ewah_set_bits(data, at)
    return base - deleted + count - replaced


def _header_count(header: bytes) -> int:
    if len(header) < 12 or header[:4] != b"DIRC":
        return 0
    return int(struct.unpack(">I", header[8:12])[0])


def _ewah_set_bits(data: bytes, at: int) -> tuple[int, int]:
    """The bits set in the EWAH bitmap at `at` (git's ewah_io.c), and where the bytes after it start:
    its size in bits, its count of 64-bit words, the words, the position of the last marker word.
    A marker word says whether a run of whole words is all ones (bit 0), how long the run is
    (the next 32 bits), and how many words given as they are follow it (the top 31 bits)."""
    _bits, words = struct.unpack_from(">II", data, at)
    values = struct.unpack_from(f">{words}Q", data, at + 8)
    count, i = 0, 0
    while i < words:
        marker = values[i]
        if marker & 1:
            count += ((marker >> 1) & 0xFFFFFFFF) * 64
        literal = marker >> 33
        count += sum(bin(word).count("1") for word in values[i + 1:i + 1 + literal])
        i += 1 + literal
    return count, at + 8 + 8 * words + 4


@dataclass
class State:
    """The working tree captured into a temporary index."""

    index: Path
    tree: str
    skipped: dict[str, str]  # repository path (folders end in "/") -> reason
    started_ns: int  # wall clock when the capture began: files changed before it existed then


_STAGED = re.compile(rb"(?:^|\0)[0-7]{6} [0-9a-f]{40,64} ([0-3])\t([^\0]*)")
_GITLINK = re.compile(rb"(?:^|\0)160000 [0-9a-f]{40,64} [0-3]\t([^\0]*)")


class _UserIndex:
    """What a capture needs to know of the user's index, read with `ls-files --stage` when needed.

    When the index file's bytes are unchanged since the last capture, the listing is not read.
    A plain folder has no index: its listing is empty.
    """

    def __init__(self, site: Site) -> None:
        self.site = site
        index = site.user_index
        try:  # a few milliseconds, against a git process for the listing
            self.digest: str | None = hashlib.sha1(index.read_bytes()).hexdigest() if index else "plain"
        except FileNotFoundError:
            self.digest = None
        self._listing: bytes | None = b"" if index is None else None
        self._pending: Background[tuple[int, bytes]] | None = None

    def prefetch(self) -> None:
        """Start reading the listing on a thread (it is read at once when asked for before)."""
        if self._listing is None and self._pending is None:
            site = self.site
            self._pending = Background(lambda: site.user("ls-files", "--stage", "-z"))

    def settle(self) -> None:
        """Wait for a listing being read (a capture leaves no thread behind)."""
        if self._pending is not None:
            self._pending.wait()

    @property
    def listing(self) -> bytes:
        if self._listing is None:
            pending = self._pending
            self._listing = (pending.result() if pending else self.site.user("ls-files", "--stage", "-z"))[1]
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

    def gitlinks(self) -> list[str]:
        """Submodules (mode 160000): their commit is read from their own git directory, which no
        watch of the work tree sees change."""
        if b"160000 " not in self.listing:
            return []
        return sorted({os.fsdecode(m.group(1)) for m in _GITLINK.finditer(self.listing)})


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
    def for_site(cls, site: Site) -> _Cache:
        base = site.store / f"cache-{site.key}"
        return cls(index=base.with_suffix(".index"), meta=base.with_suffix(".json"))

    def read(self) -> dict[str, Any] | None:
        try:
            meta = json.loads(self.meta.read_text("utf-8"))
            st = self.index.stat()
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("stat") != [st.st_ino, st.st_size, st.st_mtime_ns]:
            return None
        return meta

    def drop(self) -> None:
        self.meta.unlink(missing_ok=True)
        self.index.unlink(missing_ok=True)

    @staticmethod
    def same_user_index(meta: dict[str, Any] | None, user: _UserIndex, settings: GhostSettings) -> bool:
        return (meta is not None and user.digest is not None and meta.get("userDigest") == user.digest
                and "userCount" in meta and meta.get("exclude") == list(settings.exclude))

    @classmethod
    def usable(cls, meta: dict[str, Any] | None, user: _UserIndex, settings: GhostSettings) -> bool:
        """The kept index may seed a capture: the user's index lists the same entries, no conflicts."""
        if meta is None or meta.get("exclude") != list(settings.exclude):
            return False
        if cls.same_user_index(meta, user, settings):
            return True
        return not user.unmerged() and meta.get("signature") == user.signature

    def save(self, index: Path, known: dict[str, Any], untracked: list[str], deleted: list[str]
             ) -> tuple[int, int, int] | None:
        """Keep `index` and what is known of it; returns its stamp as kept (None: not kept)."""
        st = index.stat()
        meta = {**known, "stat": [st.st_ino, st.st_size, st.st_mtime_ns], "untracked": untracked,
                "deleted": deleted}
        pending = self.index.with_suffix(f".{os.urandom(16).hex()}.tmp")
        try:
            if _stamp(self.index) != _stamp(index):  # else git left the seed as it was: it is kept already
                os.link(index, pending)  # the same inode, so the recorded stat matches
            self.meta.with_suffix(".tmp").write_text(json.dumps(meta), "utf-8")
            self.meta.unlink(missing_ok=True)  # first: an index without its meta is never used
            if pending.exists():
                os.replace(pending, self.index)
            os.rename(self.meta.with_suffix(".tmp"), self.meta)  # no file replaced: no flush (`replace_locked`)
        except OSError:
            pending.unlink(missing_ok=True)
            self.meta.unlink(missing_ok=True)
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)


def _hidden_tracked(site: Site, user: _UserIndex, settings: GhostSettings,
                    meta: dict[str, Any] | None) -> list[str]:
    """Tracked files in scope that must not be captured: secrets and `ghost.exclude` matches."""
    if _Cache.same_user_index(meta, user, settings) and isinstance(meta, dict) and "hidden" in meta:
        return list(meta["hidden"])
    hidden = {p for p in user.paths() if site.in_scope(p) and secret(p, tracked=True)}
    if settings.exclude and not site.plain:
        hidden |= set(site.paths("ls-files", "-z", "--cached", "--ignored", *_excludes(settings), "--",
                                 site.scope, user=True))
    return sorted(hidden)


@dataclass(frozen=True)
class CaptureOptions:
    """What a capture is asked for: the folder's ghost settings, whom to tell how it goes, what
    stops it, and whether it is `light` (a diff's: hashes and stores nothing, writes no tree)."""

    settings: GhostSettings
    progress: Callable[[str], None] | None = None
    cancel: threading.Event | None = None
    light: bool = False

    def say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)


def capture(site: Site, options: CaptureOptions, *, cold: bool = False) -> State:
    """Write the working tree (in scope) into a new temporary index of the store; return its tree.

    The index is seeded from the last capture when the user's index has not changed since, else
    by copying the user's: either way files whose stat data still match are not hashed again.
    Outside the scope the user's index is kept as it is. A `light` capture hashes and stores
    nothing: files changed since the seed are left for a `git diff` against the index to read,
    new untracked files are entered as intent-to-add, and no tree is written (its `tree` is "").
    `cold` starts from the user's index whatever was kept.
    """
    started = now_ns()
    # In the daemon, the paths changed since its last capture (taken first: before any file is read).
    ticket = treewatch.NO_TICKET if options.light else treewatch.ticket(site.store, site.key, site.top, site.prefix)
    user = _UserIndex(site)  # read before anything else
    cache = _Cache.for_site(site)
    index = site.temp_index()
    try:
        try:
            if cold:
                raise GitFailed("asked for a capture from scratch")
            return _capture(_Run(site, options, user, cache, index, started, cold=False, ticket=ticket))
        except GitFailed:
            # A kept or copied index git cannot use (a split index, objects gone after the user's
            # gc, damaged bytes): start again from nothing but the user's listing, under a new
            # name (a git that died on the damage leaves its `<index>.lock` behind).
            cache.drop()
            _discard(index)
            index = site.temp_index()
            return _capture(_Run(site, options, user, cache, index, started, cold=True, ticket=ticket))
    except BaseException:
        ticket.done(None)
        _discard(index)
        raise


def _discard(index: Path) -> None:
    index.unlink(missing_ok=True)
    index.with_name(index.name + ".lock").unlink(missing_ok=True)


def _capture(run: _Run) -> State:
    """The steps of one capture, in order."""
    try:
        run.start_listing_untracked()
        run.seed_index()
        run.refresh_tracked()
        run.finish_listing()
        run.drop_hidden()
        run.sync_untracked()
        run.take_unmerged_outside_scope()
        check_cancel(run.options.cancel)
        if run.options.light:
            return run.state(tree="")
        tree = run.write_tree()
        run.ticket.done(run.remember(tree))
        return run.state(tree)
    finally:
        run.close()


T = TypeVar("T")


class Background(Generic[T]):
    """A call on a thread of its own (a git process to wait for meanwhile); `result` waits and
    raises what the call raised."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), name="ctxd-ghost", daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], T]) -> None:
        try:
            self._value = call()
        except BaseException as error:  # noqa: BLE001 - handed to whoever asks for the result
            self._error = error

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return cast(T, self._value)


class _Run:
    """One capture into `index`: what each step found, for the steps after it.

    `meta` is what the kept index of the last capture says of itself, while it may seed this one;
    `unchanged` stays true while the index is still exactly the kept one (its tree is then known).
    """

    def __init__(self, site: Site, options: CaptureOptions, user: _UserIndex, cache: _Cache, index: Path,
                 started: int, cold: bool, ticket: treewatch.Ticket = treewatch.NO_TICKET) -> None:
        self.site, self.options, self.user, self.cache, self.index = site, options, user, cache, index
        self.started, self.cold, self.ticket = started, cold, ticket
        self.settings = options.settings
        self.meta = None if cold else cache.read()
        self.unchanged = False
        self.short = False  # only the changed paths were re-checked (`changed_paths`)
        self.unmerged: set[str] = set()
        self.outside: list[str] = []
        self.files: list[str] = []
        self.skipped: dict[str, str] = {}
        self.listed: dict[str, Any] = {}
        self.hidden: list[str] = []
        self._listing: Background[tuple[list[str], dict[str, str], dict[str, Any]]] | None = None

    def state(self, tree: str) -> State:
        return State(index=self.index, tree=tree, skipped=self.skipped, started_ns=self.started)

    def close(self) -> None:
        """No thread of this capture outlives it."""
        if self._listing is not None:
            self._listing.wait()
        self.user.settle()

    def start_listing_untracked(self) -> None:
        """The untracked files in scope, listed on a thread while the tracked ones are refreshed
        (the last listing is reused when no directory changed, see `_untracked`)."""
        same_user = _Cache.same_user_index(self.meta, self.user, self.settings)
        known = self.meta.get("listing") if self.meta is not None and same_user else None
        site, settings, cancel = self.site, self.settings, self.options.cancel
        self._listing = Background(lambda: _untracked(site, settings, cancel, known))
        if not same_user:
            self.user.prefetch()
        self.options.say("looking for changes and untracked files")

    def seed_index(self) -> None:
        """Start the index from the kept one when it may be used, else from the user's index (a
        copy, or its listing when the copy failed), else from HEAD."""
        site, index = self.site, self.index
        self.meta = self.meta if _Cache.usable(self.meta, self.user, self.settings) else None
        if self.meta is not None:
            _seed(self.cache.index, index)
        elif not self.cold and site.user_index is not None and site.user_index.exists():
            _copy_user_index(site, index)
        elif self.user.listing:  # the user's entries (`ls-files --stage` writes what `--index-info` reads);
            # with no stat data every file is hashed, but staged new files are not lost (HEAD lacks them)
            site.git("update-index", "-z", "--index-info", index=index, stdin=self.user.listing)
        elif site.head:
            site.git("read-tree", site.head, index=index)

    def refresh_tracked(self) -> None:
        """Tracked files as they are on disk; only those whose stat data changed are hashed."""
        seeded = _stamp(self.index)
        if self.index.exists() and not self.options.light:
            paths = self.changed_paths()
            self.ticket.report(paths)
            self.short = paths is not None
            if paths is None:
                self.site.git(*_PACKED, "add", "--update", "--", self.site.scope, index=self.index)
            elif paths:  # without the user's objects: what it hashes is stored here, so no pin copies it;
                # no threads to stat a few files (git's preload starts up to 20 for any pathspec)
                self.site.git(*_store_flags(len(paths)), "-c", "core.preloadIndex=false", "--literal-pathspecs",
                              "add", "--update", "--pathspec-from-file=-", "--pathspec-file-nul",
                              index=self.index, stdin=nul(paths), borrow=False)
        self.unchanged = self.meta is not None and seeded is not None and seeded == _stamp(self.index)
        self.unmerged = set() if self.meta is not None else self.user.unmerged()

    def changed_paths(self) -> list[str] | None:
        """The paths to re-check when the daemon's watch says what changed since the index kept by
        its own last capture (see `ctxd.ghost.treewatch`), else None: every file is re-checked.

        `add --update` refuses a path that matches no entry and no longer exists (a file made and
        removed since): such a path is replaced by its nearest folder that exists."""
        ticket, meta = self.ticket, self.meta
        if ticket.dirty is None or ticket.kept is None or meta is None or self.cold:
            return None
        if (meta.get("stat") != list(ticket.kept) or meta.get("watch") != ticket.kept_token
                or not isinstance(meta.get("gitlinks"), list)):
            return None  # kept by another capture than this watch's last one
        top, scope = self.site.top, self.site.prefix.rstrip("/")
        gitlinks = [str(g) for g in meta["gitlinks"]]
        found: set[str] = set(gitlinks)
        for raw in ticket.dirty:
            path = raw.rstrip("/")
            if any(path.startswith(g + "/") for g in gitlinks):
                continue  # inside a submodule: git refuses such a path; the submodule is re-checked
            while path != scope and not os.path.lexists(top / path):
                path = path.rsplit("/", 1)[0] if "/" in path else ""
            if path == scope:
                return None  # as good as the whole scope
            found.add(path)
        self.options.say(f"re-checking {len(found)} changed paths")
        return sorted(found)

    def finish_listing(self) -> None:
        assert self._listing is not None
        self.files, self.skipped, self.listed = self._listing.result()
        check_cancel(self.options.cancel)

    def drop_hidden(self) -> None:
        """Tracked secrets and `ghost.exclude` matches are taken out and reported."""
        self.hidden = _hidden_tracked(self.site, self.user, self.settings, self.meta)
        for path in self.hidden:
            hidden_secret = secret(path, tracked=True)
            self.skipped.setdefault(hidden_secret or path, SECRET_REASON if hidden_secret else "matches ghost.exclude")
        if self.hidden and (self.meta is None or set(self.hidden) != set(self.meta.get("hidden", []))):
            self.site.git("update-index", "--force-remove", "-z", "--stdin", index=self.index, stdin=nul(self.hidden))
            self.unchanged = False

    def sync_untracked(self) -> None:
        """Untracked files no longer wanted are taken out of a kept index; new ones (and tracked
        files that came back) are added."""
        site, index, meta = self.site, self.index, self.meta
        new_files, recheck = self.files, []
        if meta is not None:
            before = set(meta["untracked"])
            gone = sorted(before - set(self.files))
            if gone:  # no longer wanted: deleted, ignored now, or over a limit now
                site.git("update-index", "--force-remove", "-z", "--stdin", index=index, stdin=nul(gone))
                self.unchanged = False
            # the ones already in the kept index were refreshed by `add --update`
            new_files = [p for p in self.files if p not in before]
            recheck = [p for p in meta["deleted"] if os.path.islink(site.top / p) or os.path.isfile(site.top / p)]
        self.options.say(f"adding {len(new_files)} untracked files")
        if not (new_files or recheck):
            return
        if self.options.light:
            site.git("--literal-pathspecs", "add", "--force", "--intent-to-add", "--pathspec-from-file=-",
                     "--pathspec-file-nul", index=index, stdin=nul(new_files + recheck))
        else:  # --remove: a file deleted since it was listed is simply left out
            site.git(*_store_flags(len(new_files) + len(recheck)), "update-index", "--add", "--remove", "-z",
                     "--stdin", index=index, stdin=nul(new_files + recheck))
            self.unchanged = False

    def take_unmerged_outside_scope(self) -> None:
        """A merge in progress: the conflicted files outside the scope are taken as they are on
        disk, so that the tree can be written."""
        self.outside = sorted(p for p in self.unmerged if not self.site.in_scope(p))
        if self.outside:
            self.site.git(*_PACKED, "update-index", "--add", "--remove", "-z", "--stdin", index=self.index,
                          stdin=nul(self.outside))
            self.unchanged = False

    def write_tree(self) -> str:
        self.options.say("writing tree")
        if self.unchanged and isinstance(self.meta, dict) and self.meta.get("tree"):
            return str(self.meta["tree"])  # the kept index, untouched: its tree is the one written last time
        if self.short:
            # Every entry is the kept index's (pinned with its snapshot) or was just stored by `add`:
            # git need not look for them, nor in the user's objects (a tree it finds there would
            # then be copied by the pin). Should one be missing after all, the pin finds it (it
            # checks every object that differs from the last pinned tree) and fails the capture.
            return self.site.out("write-tree", "--missing-ok", index=self.index, borrow=False)
        return self.site.out("write-tree", index=self.index)

    def remember(self, tree: str) -> tuple[int, int, int] | None:
        """Keep this index as the next capture's seed, with what it takes to reuse it safely
        (never while a merge is in progress: the user's index is about to change anyway).
        Returns the kept index's stamp, or None when none was kept."""
        if self.unmerged or not self.index.exists():
            return None
        site, user, meta, settings = self.site, self.user, self.meta, self.settings
        if meta is not None and _Cache.same_user_index(meta, user, settings) and isinstance(meta.get("gitlinks"), list):
            known = {"signature": meta["signature"], "userDigest": user.digest, "userCount": meta["userCount"],
                     "gitlinks": meta["gitlinks"]}
        else:
            known = {"signature": user.signature, "userDigest": user.digest, "userCount": user.count,
                     "gitlinks": [p for p in user.gitlinks() if site.in_scope(p)]}
        known["exclude"] = list(settings.exclude)
        known["watch"] = self.ticket.token  # which watch's dirty set starts with this index
        known["hidden"] = self.hidden
        known["tree"] = tree
        known["listing"] = {**self.listed, "limits": [settings.max_untracked_dir_files]}
        deleted: list[str] = []
        # The index holds the user's entries, less the tracked files missing from disk, plus `files`.
        if known["userCount"] - len(self.hidden) + len(self.files) != index_entry_count(self.index, site.store):
            kept = set(site.paths("ls-files", "-z", index=self.index))
            deleted = sorted(p for p in user.paths() - kept - set(self.hidden) if site.in_scope(p))
        stamp = self.cache.save(self.index, known, self.files, deleted)
        drop_unused_shared_indexes(site.store)
        return stamp


def _copy_user_index(site: Site, index: Path) -> None:
    """Start a temporary index from a copy of the user's (same bytes and mtime, so its stat data
    still spares unchanged files from being hashed).

    A split index (`core.splitIndex`) holds only recent changes and names a `sharedindex.<id>`
    with the rest, which git looks for in the git directory of the command that reads it: that
    file is copied into the store for as long as it takes to write the copy as a whole index."""
    assert site.user_git_dir is not None and site.user_index is not None
    import shutil  # here: the common capture (a kept seed) does without it

    shutil.copy2(site.user_index, index)
    shared = shared_index_of(site.user_git_dir, index.read_bytes())
    if shared is not None:
        copy = site.store / shared.name
        try:
            shutil.copy2(shared, copy)
            site.git("update-index", "--no-split-index", index=index)
        except FileNotFoundError:  # the user's git replaced it meanwhile
            raise GitFailed("the user's split index changed while it was copied") from None
        finally:
            copy.unlink(missing_ok=True)
    _unmark_local_edits(site, index)


def _unmark_local_edits(site: Site, index: Path) -> None:
    """Unmark, in the copy, the entries the user marked `--assume-unchanged`, or `--skip-worktree`
    while the file is on disk (ways to keep local edits out of commits). `add --update` passes
    marked entries by, so the snapshot would hold the index's bytes instead of the file's, and a
    restore would overwrite the edits with no snapshot holding them. A sparse checkout's
    skip-worktree entries (not on disk) keep their mark."""
    assumed: list[bytes] = []
    skipped: list[bytes] = []
    for entry in site.git("ls-files", "-v", "-z", index=index)[1].split(b"\0"):
        if entry.startswith(b"H "):  # nearly every entry: cached, unmarked
            continue
        tag, path = entry[:1], entry[2:]
        if tag.islower():
            assumed.append(path)
        if tag in (b"S", b"s") and os.path.lexists(site.top / os.fsdecode(path)):
            skipped.append(path)
    for flag, paths in (("--no-assume-unchanged", assumed), ("--no-skip-worktree", skipped)):
        if paths:  # one flag per call: git applies only the last one given to every path
            site.git("update-index", flag, "-z", "--stdin", index=index, stdin=b"".join(p + b"\0" for p in paths))


def _seed(kept: Path, index: Path) -> None:
    """Start a temporary index from the kept one: a second name for the same file, since git never
    writes an index in place (it writes `<index>.lock` and renames it over), so the kept one stays
    as it is. Same bytes and mtime (git uses it to spot racy entries), and nothing copied."""
    try:
        os.link(kept, index)
    except OSError:  # a file system without hard links
        import shutil

        shutil.copy2(kept, index)


def _stamp(index: Path) -> tuple[int, int, int] | None:
    try:
        st = index.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def file_count(site: Site, state: State) -> int:
    if not site.prefix:
        return index_entry_count(state.index, site.store) if state.index.exists() else 0
    return len(site.paths("ls-files", "-z", "--", site.scope, index=state.index))
