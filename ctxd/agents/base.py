"""The declared interface of an agent ctxd follows, hooks and installs into (docs/agents.md).

An agent is one module of `ctxd/agents/` whose `AGENT` is an instance of a subclass of `Agent`,
listed by one line in the registry (`ctxd/agents/__init__.py`). Everything else in ctxd asks the
registry and this interface: nothing outside the agent's module names the agent. The members come
in groups: who it is; where its sessions live and how they are read (a `SessionStore`); how full
its window is and when it compacts; its hooks; ctxd's entries in its configuration; its status
line. The groups an agent does not have (hooks, configuration, status line) keep the defaults
here, which say "none".

Stdlib only, and cheap to import: `ctxd hook` imports this on every tool call of the agent (named
tuples, not dataclasses, whose import alone costs a hook more than this module).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from ctxd.agents.config.plan import ConfigChange
    from ctxd.agents.folders import Folders
    from ctxd.agents.jsonl import Reader as JsonlReader
    from ctxd.agents.session import Change as SessionChange
    from ctxd.agents.session import Session

HookAction = Literal["turn", "tool", "compacted", "after-compaction", "ignore"]
"""What ctxd does for one of an agent's hook events: a checkpoint before a user turn ("turn") or
before a tool that may change files ("tool"); note a compaction the agent made ("compacted");
after a compaction, tell the model that `recall` finds what it replaced, and note it
("after-compaction"); nothing at all, the input not even read ("ignore")."""

Action = Literal["install", "uninstall"]
Scope = Literal["user", "project"]


class AgentLimits(NamedTuple):
    """A followed session's window and where its agent compacts by itself, each with where the
    number comes from (an inferred one says so)."""

    window: int
    window_source: str
    limit: int  # tokens at which the agent compacts by itself
    limit_source: str
    warn_at: int  # tokens from which the gauge warns


class AgentConfig(NamedTuple):
    """What the agent's own configuration says about its compaction (read-only, once); each field
    None when the configuration does not set it."""

    compact_limit: int | None = None  # a token count at which it compacts (Codex's model_auto_compact_token_limit)
    compact_percent: float | None = None  # a percent of the window (Claude Code's CLAUDE_AUTOCOMPACT_PCT_OVERRIDE)
    auto_compact: bool = True  # False: the user turned its automatic compaction off
    windows: Mapping[str, int] = MappingProxyType({})  # model -> window, where the configuration declares one
    compact_limits: Mapping[str, int] = MappingProxyType({})  # model -> where it compacts, where the configuration's
    # declared limits say (OpenCode: each model's context and output limits in opencode.json)
    source: str | None = None  # the file the values come from


class HookInput(NamedTuple):
    """A hook's payload in ctxd's words; the agent's module reads the agent's field names."""

    action: HookAction | None  # None: an event ctxd has no use for (only checked and logged)
    session_id: str | None
    cwd: str | None
    prompt: str | None = None
    tool_name: str | None = None
    tool_input: Any = None
    tool_id: str | None = None


class StatusUsage(NamedTuple):
    """What the agent's status-line input says of the session: the tokens of its latest request
    (`used_tokens`, the reply's `output_tokens` apart) against its window and the point where the
    agent compacts; `known` False before the first request."""

    used_tokens: int
    output_tokens: int
    context_window: int
    compact_at: int
    known: bool
    cost_usd: float | None = None
    model: str | None = None
    session_id: str | None = None
    cwd: str | None = None


class Stamp(NamedTuple):
    """A session as its store sees it now, without reading it: `ident` names what holds it (a
    file's device and inode: another means the session is read afresh), `size` how much it holds
    (less than was read: rewritten, read afresh), `version` what else changes with it (a file's
    modification time); `regular` False for what is never read (a link, a FIFO, a device)."""

    ident: tuple[int, int]
    size: int
    version: int
    regular: bool = True

    def key(self) -> tuple[int, ...]:
        """Equal while nothing changed: nothing to read."""
        return (*self.ident, self.size, self.version)


class SessionReader(ABC):
    """Reads one session incrementally into a `Session`: each `read` returns what it added."""

    session: Session
    bytes_read: int  # every byte ever read for this session (the privacy check counts them)
    caught_up: bool  # the last read reached the end (not stopped by its budget)
    stop_when_rewritten: bool  # set: a session rewritten under the same ident is not read but `rewritten`
    rewritten: bool
    holds_window: bool = True  # False (the owner's readers): the window's items are handed on in each
    # `Change`, not kept in `Session.items` (the store holds them); a reader may keep them all the same
    # A read found it must start again from the start (`reset`, then read again; a reader asks it a
    # bounded number of times: jsonl.py's `read_again_for`).
    replay: bool = False

    @abstractmethod
    def read(self, ident: tuple[int, int] | None = None, budget: int | None = None) -> SessionChange:
        """What the session gained since the last read; with `ident`, nothing unless it is still
        that one; with `budget`, about that many bytes at most (`caught_up` False: call again)."""

    @abstractmethod
    def reset(self) -> None:
        """Forget what was read: the next read starts from the session's start."""

    def left(self, stamp: Stamp) -> int:
        """About how many bytes are left to read of the session stamped `stamp` (0: none)."""
        return stamp.size

    def trim(self) -> None:
        """Caught up: drop what a long session need not keep in memory (thousands are followed)."""
        return None

    def state(self) -> dict[str, Any] | None:
        """Where this reader stands, as JSON, so that a later process takes it up there (`resume`)
        instead of reading the session again; None: it cannot be taken up, only read again."""
        return None

    def resume(self, saved: dict[str, Any], stamp: Stamp) -> bool:
        """Take up where `saved` (from `state()`) left off, when the session (stamped `stamp` now)
        is still the one read; False: it is not (or the state cannot be used), read it from its
        start with a new reader."""
        return False


class SessionStore(ABC):
    """Where one agent's sessions are, as the follower asks for them: their keys, a stamp that
    changes when one does, the folders to watch, the head that says where a session works, and an
    incremental reader. One JSONL file per session is the shared default (`ctxd.agents.jsonl`);
    an agent keeping its sessions otherwise (one SQLite database, say) implements its own, with
    keys of its own. Nothing here writes into the agent's folders."""

    recursive: bool = True
    """Whether `watched()` folders are watched with everything below them. False: the folders
    alone (OpenCode's database sits beside a large tree of its own, whose folders would use up
    the user's inotify watches)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def watched(self) -> list[Path]:
        """The folders whose writes may change a session (watched recursively unless `recursive` is False)."""
        return [self.root]

    @abstractmethod
    def keys(self) -> list[str]:
        """Every session now, one key each. Never through a link, never a FIFO or a device."""

    @abstractmethod
    def owns(self, key: str) -> bool:
        """Whether `key` (a path a file event named, say) is one of this store's sessions."""

    def touched(self, path: str) -> list[str]:
        """The sessions a write to `path` may have changed."""
        return [path] if self.owns(path) else []

    @abstractmethod
    def stamp(self, key: str) -> Stamp | None:
        """The session's stamp now; None when it is gone."""

    def written(self, key: str, stamp: Stamp) -> float:
        """When the session stamped `stamp` was last written (seconds since the epoch; 0: unknown):
        its file's mtime."""
        try:
            return os.lstat(key).st_mtime
        except OSError:
            return 0.0

    @abstractmethod
    def peek_cwd(self, key: str, folders: Folders) -> tuple[str | None, bool, int]:
        """(cwd, complete, bytes read): where the session works, from its head only. A session
        outside every open folder is never read further (docs/sessions.md, Privacy). `complete`
        False: the head is not written yet, ask again. Nothing read (0) and complete: not looked
        at, because it cannot be in the folders; asked again when they change."""

    @abstractmethod
    def reader(self, key: str) -> SessionReader:
        """A reader of the session from its start."""


class Agent(ABC):
    """One agent, as every part of ctxd asks about it. Subclass it in `ctxd/agents/<name>.py`."""

    # --- who ---

    name: str
    """The thread prefix (`<name>:<session id>`), `ctxd hook <name>`, `--agent <name>`, the
    settings `sources.<name>` and `sources.<name>_home`: a lower-case word."""
    title: str
    """The agent's name as the user knows it ("Claude Code")."""
    version: str
    """The agent version whose formats and rules this module follows (docs, `ctxd/status`)."""
    cache_provider: str | None = None
    """Whose prompt cache holds its prompts (`ctxd.tokens.prompt_cache`: its lifetime); None: the model's."""
    overhead: tuple[tuple[str, str, float], ...] = ()
    """Where the agent's own instructions and tools go when its files do not state them whole
    (`ctxd.usage.breakdown`, inferred): `/context` categories (`systemPrompt`, `builtinTools`...),
    each with its label and its share of them (the shares add up to 1)."""
    overhead_how: str = ""
    """What the inferred categories' explanation adds: how the shares of `overhead` were measured."""

    # --- where its sessions live ---

    @abstractmethod
    def home(self, env: Mapping[str, str], configured: str | None) -> Path:
        """The agent's home folder: `configured` (`sources.<name>_home`), else its own
        environment variable, else its default under `$HOME`."""

    @abstractmethod
    def session_root(self, home: Path) -> Path:
        """The folder its sessions are kept under."""

    @abstractmethod
    def sessions(self, root: Path) -> SessionStore | None:
        """Its sessions under `root`; None when it keeps none that ctxd reads."""

    def summary_reader(self, key: str) -> JsonlReader | None:
        """A reader of the session file `key` that builds no item, only what a summary shows
        (`ctxd sessions` and the owner's first listing keep one per file: ctxd/sessions/summaries.py),
        and that can be put aside and taken up where it stood. None (the default): the agent's
        sessions are not summarized, `ctxd sessions` reads them whole."""
        return None

    def summary_files(self, key: str) -> list[str]:
        """Files besides `key` whose changes change its summary (Claude Code's subagents')."""
        return []

    # --- how full, when it compacts ---

    @abstractmethod
    def read_config(self, home: Path) -> AgentConfig:
        """What its own configuration in `home` says of its compaction (read-only)."""

    @abstractmethod
    def limits(self, model: str | None, stated_window: int | None, config: AgentConfig) -> AgentLimits:
        """Its window for `model` (`stated_window`: what its session file states) and the point
        where it compacts by itself, by its own rule."""

    # --- hooks ---

    hook_events: Mapping[str, HookAction] = {}
    """Its hook events ctxd installs and acts on, and what each does ({}: no hooks)."""

    def hook_input(self, event: str, data: dict[str, Any]) -> HookInput | None:
        """The hook's payload (already redacted) in ctxd's words; None when it is not one. May
        turn an event's action to "ignore" for one payload (a repeat, a source ctxd has no use for)."""
        return None

    def changes_files(self, tool_name: str, tool_input: Any) -> bool:
        """Whether the tool may change the working tree (a shell command always may)."""
        return False

    def tool_paths(self, tool_name: str, tool_input: Any) -> list[str]:
        """The paths the tool call names, as it names them."""
        return []

    def shell_command(self, tool_name: str, tool_input: Any) -> str | None:
        """The command of a shell tool ("" when it names none); None for any other tool."""
        return None

    def compaction_notice(self, text: str) -> str | None:
        """What the hook prints after a compaction so that the model reads `text`, in the agent's
        documented output; None when it has no such output."""
        return None

    # --- ctxd's entries in its configuration ---

    def marks(self, env: Mapping[str, str]) -> list[Path]:
        """The folders the agent makes once it has run on this machine (any one of them says it is
        here): `ctxd hooks install` with no `--agent` installs only into an agent that has one.
        Its home folder by default, whose own variable (`$CODEX_HOME`...) `home` reads. A folder,
        not a program on PATH: the PATH of the shell or editor running install is not the agent's
        (npx, nvm, a version manager), and an agent never run has no session to follow yet."""
        return [self.home(env, None)]

    def present(self, env: Mapping[str, str]) -> bool:
        """Whether the agent is on this machine: one of its `marks` is a folder."""
        return any(path.is_dir() for path in self.marks(env))

    def config_changes(self, action: Action, scope: Scope, project: Path, state_dir: Path,
                       ctxd: list[str]) -> tuple[list[ConfigChange], list[str]]:
        """The files `ctxd hooks install|uninstall` changes (hooks, status line, MCP server), and
        notes for the user. `ctxd`: the words that run ctxd."""
        return [], []

    def config_status(self, scope: Scope, project: Path) -> str | None:
        """One line for `ctxd hooks status`: what of ctxd's is installed (and trusted); None: nothing to install."""
        return None

    def mcp_installed(self, project: Path) -> bool:
        """Whether ctxd's MCP server is configured for it in `project` (or for the user)."""
        return False

    # --- status line ---

    def statusline_usage(self, data: dict[str, Any]) -> StatusUsage | None:
        """The usage its status-line input states; None when it has no status line."""
        return None

    def statusline_cache(self, data: dict[str, Any]) -> tuple[float, bool] | None:
        """When its latest request was made, and whether its cache writes went to a 1-hour
        cache, from the status-line input (quick: only what is cheap to read)."""
        return None

    # --- derived ---

    def thread(self, session_id: str) -> str:
        return f"{self.name}:{session_id}"
