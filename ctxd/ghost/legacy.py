"""The snapshots of ctxd's first version, moved out of the user's repository once.

That version made each snapshot a commit of the user's repository (its parent the user's HEAD)
with a ref `refs/ctxd/ghost/<id>`, so `git log --all` and every history view showed them. When a
verb first opens a repository's store in a process (`ctxd.ghost.recovery.open_store`), they are
moved into the store (`migrate`); a marker in the store then says it is done, and the process
does not look again.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from ctxd.errors import GitFailed
from ctxd.ghost import commits
from ctxd.ghost import gitstore as st
from ctxd.ghost.gitstore import ID, Site

LEGACY_REFS = "refs/ctxd/ghost/"
"""Where ctxd's first version kept snapshots: refs of the user's own repository."""


def _marker(site: Site) -> Path:
    return site.store / "legacy-refs-moved"


def migrate(site: Site) -> None:
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
    marker = _marker(site)
    if site.plain or marker.exists():
        return
    fields = site.user("for-each-ref", "--format=%(objectname)%00%(refname)%00%(objecttype)%00%(parent)%00"
                       "%(contents)%00", LEGACY_REFS)[1].split(b"\0")
    moved: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(0, len(fields) - 4, 5):
        commit, ref, kind, parents = (os.fsdecode(f).strip() for f in fields[i:i + 4])
        meta = commits.parse_meta(fields[i + 4].decode("utf-8", "replace")) if kind == "commit" else None
        if ID.fullmatch(commit) and meta is not None:
            meta["parent"] = parents.split()[0] if parents else None
            moved.append((commit, ref, meta))
    if moved:
        wanted = "".join(f"{commit}\n" for commit, _ref, _meta in moved).encode()
        objects = site.git("rev-list", "--objects", "--no-object-names", "--no-walk", "--stdin", stdin=wanted)[1]
        site.git("pack-objects", "-q", "--window=0", str(site.store / "objects" / "pack" / "pack"), stdin=objects)
        st.add_shallow(site, [commit for commit, _ref, _meta in moved])
        for commit, _ref, meta in moved:
            key = st.folder_key(str(meta.get("worktree") or ""), str(meta.get("scope") or ""))
            when = commits.started_ns(meta) / 1e9
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


_moved: set[str] = set()
"""The stores this process found moved already (by their path): not looked at again."""


def move_once(site: Site, *, wait: bool = True) -> None:
    """Move the first version's snapshots into the store, unless this process saw it done. With the
    store busy and not `wait`, the next verb that opens it tries. A snapshot of that version git
    cannot read is left where it is (the next process tries again)."""
    if site.plain or str(site.store) in _moved:
        return
    if not _marker(site).exists():
        with site.locked(wait=wait) as mine, contextlib.suppress(GitFailed):
            if mine:
                migrate(site)
    if _marker(site).exists():
        _moved.add(str(site.store))


def parents(site: Site) -> dict[str, Any]:
    """The user's commit each moved snapshot was taken on (its parent there, not copied)."""
    found = (st.read_json(_marker(site)) or {}).get("parents")
    return found if isinstance(found, dict) else {}
