"""The workspace a folder belongs to, found from any folder inside it (no daemon, no git process).

The nearest enclosing folder ctxd has a store for (a ledger database in the state directory, a
snapshot store of its git repository or of the plain folder) is the workspace, and ctxd *knows*
it; else the git root, else the folder itself, which ctxd does not know yet. `ctxd hook` acts only
in a folder ctxd knows; `ctxd usage` and `ctxd sessions` take any of them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import NamedTuple


class Located(NamedTuple):
    folder: Path
    known: bool  # ctxd has a store for it (an editor opened it, or a snapshot was taken of it)


def ledger_database(state_dir: Path, folder: Path) -> Path:
    """The ledger database ctxd keeps for a workspace folder (`ctxd.ledger.store.database_path`,
    repeated here so that a hook does not import SQLite to find it)."""
    digest = hashlib.sha256(str(folder).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in folder.name)[:40] or "root"
    return state_dir / "workspaces" / f"{safe}-{digest}.sqlite3"


def plain_store(state_dir: Path, folder: Path) -> Path:
    """The snapshot store of a folder that is not a git repository (`ctxd.ghost.store._plain_site`)."""
    digest = hashlib.sha256(os.fsencode(folder)).hexdigest()[:24]
    return state_dir / "ghost" / f"{folder.name[:40] or 'root'}-{digest}" / "store"


def git_common_dir(top: Path) -> Path | None:
    """The common git directory of a work tree whose top is `top` (a `.git` folder, or a `.git`
    file naming a linked worktree's directory), or None when `top` has no `.git`."""
    dot_git = top / ".git"
    if dot_git.is_dir():
        return dot_git
    try:
        text = dot_git.read_text("utf-8", "replace") if dot_git.is_file() else ""
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    git_dir = Path(text[len("gitdir:"):].strip())
    git_dir = git_dir if git_dir.is_absolute() else (top / git_dir)
    try:
        common = (git_dir / "commondir").read_text("utf-8").strip()
    except OSError:
        return git_dir
    return (git_dir / common) if not os.path.isabs(common) else Path(common)


def find_workspace(folder: Path, state_dir: Path) -> Located:
    folder = Path(os.path.abspath(folder))
    try:
        folder = folder.resolve()
    except OSError:
        pass
    git_root: Path | None = None
    for candidate in (folder, *folder.parents):
        if ledger_database(state_dir, candidate).exists() or (plain_store(state_dir, candidate) / "HEAD").exists():
            return Located(candidate, True)
        if git_root is None and (candidate / ".git").exists():
            git_root = candidate
            common = git_common_dir(candidate)
            if common is not None and (common / "ctxd" / "store" / "HEAD").exists():
                return Located(candidate, True)
    return Located(git_root or folder, False)
