"""Listing the untracked files of a capture, and what a snapshot leaves out.

Untracked files that are not ignored are added to a snapshot; these are left out and reported
(`skipped`): dependency and build folders, nested repositories, untracked files over
`ghost.max_untracked_file_bytes`, untracked folders of `ghost.max_untracked_dir_files` files or
more, and secrets (`.env`, `.env.*`, `env/`, `.env/`, an untracked `.ctxd.toml`). `ghost.exclude`
patterns (gitignore syntax) are treated as ignored.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import Any

from ctxd.errors import GitFailed
from ctxd.ghost.gitcmd import check_cancel
from ctxd.ghost.gitstore import Site, now_ns
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


def excludes(settings: GhostSettings) -> list[str]:
    return [f"--exclude={pattern}" for pattern in settings.exclude if pattern.strip()]


def untracked(site: Site, settings: GhostSettings, cancel: threading.Event | None,
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


def _readable_rules(path: Path, mode: int) -> None:
    """An ignore file git would wait on (it opens them with a blocking open): no listing, no
    checkpoint, said at once rather than after USER_GIT_SECONDS. A link in the tree git does not
    follow; `info/exclude` is followed, as git does."""
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode)):
        raise GitFailed(f"{path}: a FIFO or a device where git reads ignore rules: no checkpoint")


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
            info = os.stat(path)
        except OSError:
            stamps[str(path)] = 0
            continue
        _readable_rules(path, info.st_mode)
        stamps[str(path)] = info.st_mtime_ns
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
                        info = entry.stat(follow_symlinks=False)
                        _readable_rules(Path(here, entry.name), info.st_mode)
                        stamps[child] = info.st_mtime_ns
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
    user_excludes = excludes(settings)
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
        expanded_excludes = [f"--exclude={name}/" for name in sorted(DEPENDENCY_DIRS | SECRET_DIRS)] + user_excludes
        # An untracked directory holding the workspace folder is expanded only as far as the folder.
        specs = [site.scope if site.prefix.startswith(d) else f":(literal){d}" for d in expand]
        inner = site.paths("ls-files", "-z", "--others", "--exclude-standard", *expanded_excludes, "--", *specs, user=True)
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
