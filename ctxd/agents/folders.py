"""The open workspace folders, as the agents' session stores ask about them: which folder a
session's working directory is in, and (for an agent that names its session folders after the
directory, as Claude Code does) which folder names could be one of them.

Privacy rule (docs/sessions.md): a session outside every open workspace folder is never read
beyond its head; each agent's `peek_cwd` says what its head is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path


def _forms(folder: Path) -> set[str]:
    forms = {str(folder)}
    try:
        forms.add(str(folder.resolve()))
    except OSError:
        pass
    return forms


class Folders:
    """The open workspace folders, indexed once: which one holds a cwd, and whether a folder name
    an agent derived from a directory could be inside one, each found in time that does not grow
    with the number of folders. Every session file is matched again whenever folders are added, so
    2,000 folders times a few hundred files compared one by one (each folder resolved each time)
    held the follower for tens of seconds. `known`: folders' forms found before (an earlier
    index's `forms`), reused."""

    def __init__(self, folders: Iterable[Path], known: Mapping[Path, set[str]] | None = None) -> None:
        self.folders = list(folders)
        self.forms: dict[Path, set[str]] = {}
        self._by_form: dict[str, Path] = {}  # a normalised form -> the first folder that has it
        self._encoded: dict[Callable[[str], str], set[str]] = {}  # per encoding: every form encoded
        for folder in self.folders:
            forms = known.get(folder) if known is not None else None
            forms = self.forms[folder] = forms if forms is not None else _forms(folder)
            for form in forms:
                self._by_form.setdefault(os.path.normpath(form), folder)

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

    def encoded(self, encode: Callable[[str], str]) -> set[str]:
        """Every form of every folder, encoded as an agent names a directory's session folder
        (computed once per index and encoding)."""
        found = self._encoded.get(encode)
        if found is None:
            found = self._encoded[encode] = {encode(form.rstrip(os.sep)) for forms in self.forms.values()
                                             for form in forms}
        return found

    def may_hold(self, name: str, encode: Callable[[str], str]) -> bool:
        """Could the folder an agent named `name` after a directory (with `encode`, which turns a
        path separator into '-') be one of the folders or a directory inside one? Matched without
        opening anything (Claude Code's and qwen-code's project folders)."""
        encoded = self.encoded(encode)
        if name in encoded:
            return True
        return any(name[:at] in encoded for at, char in enumerate(name) if char == "-")


def folder_of(cwd: str | None, folders: list[Path]) -> Path | None:
    """The open workspace folder that contains `cwd` (the innermost one), or None."""
    return Folders(folders).folder_of(cwd)


def index(folders: list[Path] | Folders) -> Folders:
    return folders if isinstance(folders, Folders) else Folders(folders)
