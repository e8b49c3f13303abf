"""Capturing a working tree into a temporary index of ctxd's store.

Tracked files are taken as they are on disk, untracked files that are not ignored are added
(`ctxd.ghost.untracked` lists them and says what is left out), and the tree is written. The index
starts from the last capture's, kept in the store, or from the user's (`ctxd.ghost.gitindex`), so
that a file whose stat data did not change is not hashed again.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxd.errors import GitFailed
from ctxd.ghost import treewatch
from ctxd.ghost.gitcmd import Background, check_cancel, nul
from ctxd.ghost.gitindex import UserIndex, copy_user_index, index_entry_count, seed, stamp
from ctxd.ghost.gitstore import Site, drop_unused_shared_indexes, now_ns
from ctxd.ghost.untracked import SECRET_REASON, excludes, secret, untracked
from ctxd.settings import GhostSettings

_PACKED = ("-c", "core.bigFileThreshold=1")
"""Blobs go into one pack per command (git's bulk check-in) instead of one loose file each."""
FEW_PATHS = 64
"""Up to this many paths, blobs are written loose: a pack per capture costs more than a few files
(it is synced to disk), and the packs would soon make the store repack (`ctxd.ghost.gitstore.needs_gc`)."""


def _store_flags(paths: int) -> tuple[str, ...]:
    return () if paths <= FEW_PATHS else _PACKED


@dataclass
class State:
    """The working tree captured into a temporary index."""

    index: Path
    tree: str
    skipped: dict[str, str]  # repository path (folders end in "/") -> reason
    started_ns: int  # wall clock when the capture began: files changed before it existed then


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
    def same_user_index(meta: dict[str, Any] | None, user: UserIndex, settings: GhostSettings) -> bool:
        return (meta is not None and user.digest is not None and meta.get("userDigest") == user.digest
                and "userCount" in meta and meta.get("exclude") == list(settings.exclude))

    @classmethod
    def usable(cls, meta: dict[str, Any] | None, user: UserIndex, settings: GhostSettings) -> bool:
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
            if stamp(self.index) != stamp(index):  # else git left the seed as it was: it is kept already
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


def _hidden_tracked(site: Site, user: UserIndex, settings: GhostSettings,
                    meta: dict[str, Any] | None) -> list[str]:
    """Tracked files in scope that must not be captured: secrets and `ghost.exclude` matches."""
    if _Cache.same_user_index(meta, user, settings) and isinstance(meta, dict) and "hidden" in meta:
        return list(meta["hidden"])
    hidden = {p for p in user.paths() if site.in_scope(p) and secret(p, tracked=True)}
    if settings.exclude and not site.plain:
        hidden |= set(site.paths("ls-files", "-z", "--cached", "--ignored", *excludes(settings), "--",
                                 site.scope, user=True))
    return sorted(hidden)



@dataclass(frozen=True)
class CaptureOptions:
    """What a capture is asked for: the folder's ghost settings, whom to tell how it goes, what
    stops it, whether it is `light` (a diff's: hashes and stores nothing, writes no tree), and the
    daemon's file watch, when it runs in one (only what the watch saw change is re-checked)."""

    settings: GhostSettings
    progress: Callable[[str], None] | None = None
    cancel: threading.Event | None = None
    light: bool = False
    watch: treewatch.TreeWatch | None = None

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
    watch = None if options.light else options.watch
    ticket = treewatch.NO_TICKET if watch is None else watch.ticket(site.store, site.key, site.top, site.prefix)
    user = UserIndex(site)  # read before anything else
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


class _Run:
    """One capture into `index`: what each step found, for the steps after it.

    `meta` is what the kept index of the last capture says of itself, while it may seed this one;
    `unchanged` stays true while the index is still exactly the kept one (its tree is then known).
    """

    def __init__(self, site: Site, options: CaptureOptions, user: UserIndex, cache: _Cache, index: Path,
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
        (the last listing is reused when no directory changed, see `ctxd.ghost.untracked.untracked`)."""
        same_user = _Cache.same_user_index(self.meta, self.user, self.settings)
        known = self.meta.get("listing") if self.meta is not None and same_user else None
        site, settings, cancel = self.site, self.settings, self.options.cancel
        self._listing = Background(lambda: untracked(site, settings, cancel, known))
        if not same_user:
            self.user.prefetch()
        self.options.say("looking for changes and untracked files")

    def seed_index(self) -> None:
        """Start the index from the kept one when it may be used, else from the user's index (a
        copy, or its listing when the copy failed), else from HEAD."""
        site, index = self.site, self.index
        self.meta = self.meta if _Cache.usable(self.meta, self.user, self.settings) else None
        if self.meta is not None:
            seed(self.cache.index, index)
        elif not self.cold and site.user_index is not None and site.user_index.exists():
            copy_user_index(site, index)
        elif self.user.listing:  # the user's entries (`ls-files --stage` writes what `--index-info` reads);
            # with no stat data every file is hashed, but staged new files are not lost (HEAD lacks them)
            site.git("update-index", "-z", "--index-info", index=index, stdin=self.user.listing)
        elif site.head:
            site.git("read-tree", site.head, index=index)

    def refresh_tracked(self) -> None:
        """Tracked files as they are on disk; only those whose stat data changed are hashed."""
        seeded = stamp(self.index)
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
        self.unchanged = self.meta is not None and seeded is not None and seeded == stamp(self.index)
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
        saved = self.cache.save(self.index, known, self.files, deleted)
        drop_unused_shared_indexes(site.store)
        return saved


def file_count(site: Site, state: State) -> int:
    if not site.prefix:
        return index_entry_count(state.index, site.store) if state.index.exists() else 0
    return len(site.paths("ls-files", "-z", "--", site.scope, index=state.index))
