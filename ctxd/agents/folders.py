"""Where the agents keep their sessions, and which workspace folder a session belongs to.

Codex: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl` (`CODEX_HOME` default `~/.codex`); the
first line is the session's meta, with its `cwd`. Claude Code: `<config>/projects/<project>/
<session>.jsonl` (`CLAUDE_CONFIG_DIR` default `~/.claude`), where `<project>` is the starting
directory with every character other than a letter or digit replaced by `-`; subagents' own files
(`agent-*.jsonl`, or under a session's folder) are not sessions.

Privacy rule: a session outside every open workspace folder is never read beyond its first line.
For Codex that line is the meta line. For Claude, whose project folder names the directory, a
file is not opened at all unless its folder's name could be a directory inside an open workspace;
then its head is read up to the first line that states a `cwd` (a `summary` or snapshot record
may come first), and no further unless that cwd is inside the workspace.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ctxd.sessions.reader import HEAD_LIMIT, head

CODEX = "codex"
CLAUDE = "claude"
CLAUDE_HEAD_LINES = 8  # a transcript states its cwd on its first message line


@dataclass(frozen=True)
class Source:
    agent: str
    root: Path  # the folder the agent writes session files under
    enabled: bool = True


def sources(codex_home: str | None = None, claude_home: str | None = None, *, codex: bool = True,
            claude: bool = True, env: Mapping[str, str] | None = None) -> list[Source]:
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    codex_dir = Path(codex_home or env.get("CODEX_HOME") or home / ".codex").expanduser()
    claude_dir = Path(claude_home or env.get("CLAUDE_CONFIG_DIR") or home / ".claude").expanduser()
    return [Source(CODEX, codex_dir / "sessions", codex), Source(CLAUDE, claude_dir / "projects", claude)]


def agent_of(path: str, roots: Mapping[str, Path]) -> str | None:
    """Which agent's session file `path` is, or None when it is not one."""
    if not path.endswith(".jsonl"):
        return None
    p = Path(path)
    codex_root = roots.get(CODEX)
    if codex_root is not None and p.name.startswith("rollout-") and _under(p, codex_root):
        return CODEX
    claude_root = roots.get(CLAUDE)
    if claude_root is not None and p.parent.parent == claude_root and not p.name.startswith("agent-"):
        return CLAUDE
    return None


def claude_id(path: str) -> str | None:
    """A Claude session's id is its file name. A name that is not UTF-8 cannot be an id a reply
    can carry: None, and the id comes from the lines' `sessionId`."""
    stem = Path(path).stem
    try:
        stem.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return stem


def _under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def encode_project(directory: str | Path) -> str:
    """Claude Code's project folder name for a directory."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(directory))


def _forms(folder: Path) -> set[str]:
    forms = {str(folder)}
    try:
        forms.add(str(folder.resolve()))
    except OSError:
        pass
    return forms


class Folders:
    """The open workspace folders, indexed once: which one holds a cwd, and whether a Claude project
    folder could be inside one, each found in time that does not grow with the number of folders.
    Every session file is matched again whenever folders are added, so 2,000 folders times a few
    hundred files compared one by one (each folder resolved each time) held the follower for tens of
    seconds. `known`: folders' forms found before (an earlier index's `forms`), reused."""

    def __init__(self, folders: Iterable[Path], known: Mapping[Path, set[str]] | None = None) -> None:
        self.folders = list(folders)
        self.forms: dict[Path, set[str]] = {}
        self._by_form: dict[str, Path] = {}  # a normalised form -> the first folder that has it
        self._encoded: set[str] = set()  # Claude's project folder name of each form
        for folder in self.folders:
            forms = known.get(folder) if known is not None else None
            forms = self.forms[folder] = forms if forms is not None else _forms(folder)
            for form in forms:
                self._by_form.setdefault(os.path.normpath(form), folder)
                self._encoded.add(encode_project(form.rstrip(os.sep)))

    def folder_of(self, cwd: str | None) -> Path | None:
        """The open folder that contains `cwd` (the innermost one), or None."""
        if not cwd or not os.path.isabs(cwd):
            return None
        path = os.path.normpath(cwd)  # `W/../other` is not inside W
        while True:
            found = self._by_form.get(path)
            if found is not None:
                return found
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent

    def claude_dir_may_match(self, project_dir: str) -> bool:
        """Could the Claude project folder `project_dir` be a directory inside one of the folders?"""
        if project_dir in self._encoded:
            return True
        return any(project_dir[:at] in self._encoded for at, char in enumerate(project_dir) if char == "-")


def folder_of(cwd: str | None, folders: list[Path]) -> Path | None:
    """The open workspace folder that contains `cwd` (the innermost one), or None."""
    return Folders(folders).folder_of(cwd)


def claude_dir_may_match(project_dir: str, folders: list[Path]) -> bool:
    """Could the Claude project folder `project_dir` be a directory inside one of `folders`?"""
    return Folders(folders).claude_dir_may_match(project_dir)


def peek_cwd(agent: str, path: str, folders: list[Path] | Folders) -> tuple[str | None, bool, int]:
    """(cwd, complete, bytes read): the session's working directory from its head only.

    `complete` is False when the head is not written yet (try again later). For Claude, a file
    whose project folder cannot be inside an open folder is not opened (cwd None, complete).
    """
    if agent == CODEX:
        records, read = head(path, 1)
        if not records:
            return None, read >= HEAD_LIMIT, read  # a first line over the limit: not a session
        payload = records[0].get("payload") if records[0].get("type") == "session_meta" else None
        cwd = payload.get("cwd") if isinstance(payload, dict) else None
        return (cwd if isinstance(cwd, str) else None), True, read
    index = folders if isinstance(folders, Folders) else Folders(folders)
    if not index.claude_dir_may_match(Path(path).parent.name):
        return None, True, 0
    records, read = head(path, CLAUDE_HEAD_LINES)
    for rec in records:
        if isinstance(rec.get("cwd"), str):
            return rec["cwd"], True, read
    return None, len(records) >= CLAUDE_HEAD_LINES or read >= HEAD_LIMIT, read


def session_files(source: Source) -> list[str]:
    """Every session file under a source's root, as they are now. Only regular files: a symlink
    (it may point anywhere, ~/.ssh included), a FIFO or a device is never a session."""
    if not source.enabled or not source.root.is_dir():
        return []
    if source.agent == CLAUDE:
        projects = [e.path for e in _entries(str(source.root)) if e.is_dir(follow_symlinks=False)]
        return [e.path for project in projects for e in _entries(project)
                if e.name.endswith(".jsonl") and not e.name.startswith("agent-") and e.is_file(follow_symlinks=False)]
    found: list[str] = []
    pending = [str(source.root)]
    while pending:
        for entry in _entries(pending.pop()):
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif entry.name.startswith("rollout-") and entry.name.endswith(".jsonl") and entry.is_file(
                    follow_symlinks=False):
                found.append(entry.path)
    return found


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(directory))
    except OSError:
        return []
