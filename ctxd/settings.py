"""Settings, merged from lowest to highest precedence.

Built-in defaults; `~/.config/ctxd/config.toml`; the workspace's `.ctxd.toml`;
`initializationOptions.ctxd`; and, for model and window, `ctxd/setPromptContext`. TOML keys are
snake_case, JSON keys camelCase; both are accepted everywhere. A bad value is reported and its
default kept: a typo in a config file must not stop the daemon.

Trust (protocol v2): a workspace's `.ctxd.toml` is written by whoever wrote the repository, so the
settings that send data off the machine or read outside the workspace (`llm.*`, `state_dir`,
`sources.*`, a `compact_prompt_file` outside the workspace) are taken from it only when the editor
says the workspace is trusted (`initializationOptions.ctxd.trusted`); otherwise each is ignored
and reported. A `.ctxd.toml` that is a symbolic link is not read at all: it could lead outside the
workspace. `hooks.*` (where the agents' hooks take checkpoints) is read only from the user's own
config file: a repository must not switch off its own checkpoints. Every problem is a `Problem`
that `ctxd/status` lists and the server shows once.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxd import redact
from ctxd.places import default_state_dir as default_state_dir  # (ctxd.places is their home)
from ctxd.places import user_config_path as user_config_path
from ctxd.safefile import read_bounded

if TYPE_CHECKING:
    from ctxd.protocol import shapes

DEFAULT_CONTEXT_WINDOW = 128_000
MAX_PROMPT_FILE_BYTES = 64 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
# Tables and arrays nested deeper than this are refused before anything walks them recursively.
MAX_CONFIG_DEPTH = 32
# The largest numbers a setting may hold: an int JSON and floats carry exactly (the protocol's own
# bound), and seconds or days a timer and the clock can take. A larger one (a 401-digit window, `inf`)
# is reported and its default kept: it would break every request that computes with it.
MAX_SETTING_INT = 2**53 - 1
MAX_SETTING_FLOAT = 1e9
# What a path from a config file can raise besides OSError: RuntimeError for "~nosuchuser",
# ValueError for a NUL.
_PATH_ERRORS = (OSError, RuntimeError, ValueError)
_TOO_DEEP = f"ignored: tables or arrays nested more than {MAX_CONFIG_DEPTH} deep"
WORKSPACE_FILE = ".ctxd.toml"
INIT_OPTIONS = "initializationOptions"
# Settings a workspace file may set only in a trusted workspace (dotted; a prefix ending in "."
# covers a whole table). `compact_prompt_file` is checked apart: inside the workspace it is fine.
TRUSTED_ONLY = ("llm.", "state_dir", "sources.")
# Settings only the user's own config file may set: from any other layer they are ignored and reported.
USER_ONLY = ("hooks",)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Prefixes of well-known key formats (OpenAI, GitHub, GitLab, Slack, AWS, Google, Hugging Face).
_KEY_PREFIXES = ("sk-", "sk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox",
                 "AKIA", "ASIA", "AIza", "hf_")


def env_seconds(name: str, default: float) -> float:
    """A number of seconds from the environment variable `name` (the tests shorten ctxd's waits):
    `default` when it is unset or not a number, never below 0."""
    try:
        return max(0.0, float(os.environ.get(name) or default))
    except ValueError:
        return default


@dataclass(frozen=True)
class Problem:
    """A settings problem: where (a file, or `initializationOptions`), which key, what is wrong."""

    source: str
    message: str
    key: str | None = None

    def as_dict(self) -> shapes.Problem:
        if self.key:
            return {"source": self.source, "key": self.key, "message": self.message}
        return {"source": self.source, "message": self.message}

    def __str__(self) -> str:
        return f"{self.source}: {self.message}"


@dataclass
class LlmSettings:
    base_url: str | None = None
    model: str | None = None
    api: str = "chat"  # "chat" or "responses"
    api_key_env: str = redact.DEFAULT_KEY_ENV
    timeout_seconds: float = 120.0
    max_retries: int = 4  # retries of 429 / 5xx / network errors during a compaction
    retry_budget_seconds: float = 60.0  # and the time they may take in all


@dataclass
class GhostSettings:
    max_untracked_file_bytes: int = 10 * 1024 * 1024
    max_untracked_dir_files: int = 200
    warn_after_seconds: float = 240.0
    keep: int = 100  # snapshots kept per workspace folder; older ones are dropped
    keep_auto: int = 300  # automatic checkpoints (a turn's, a tool's) kept apart: they never evict the others
    max_age_days: float = 30.0  # and none older than this
    auto: str = "turn"  # "turn": a snapshot when a followed session starts a user turn; or "off"
    # Patterns (gitignore syntax) never captured, beside the built-in .env, .env.*, env/, .env/,
    # an untracked .ctxd.toml and dependency folders.
    exclude: list[str] = field(default_factory=list)


@dataclass
class SourcesSettings:
    """Followed agent sessions (docs/sessions.md), for every agent ctxd knows (ctxd/agents):
    `sources.<agent>` (default true) and `sources.<agent>_home`, the agent's home (default: its own
    environment variable, else its folder in ~: $CODEX_HOME or ~/.codex, $CLAUDE_CONFIG_DIR or
    ~/.claude...)."""

    enabled: dict[str, bool] = field(default_factory=dict)  # agent -> followed; absent: true
    homes: dict[str, str] = field(default_factory=dict)  # agent -> its home, where one is set

    def follows(self, agent: str) -> bool:
        return self.enabled.get(agent, True)

    def home(self, agent: str) -> str | None:
        return self.homes.get(agent)


@dataclass
class HooksSettings:
    """The agents' hooks (docs/hooks.md). Read only from the user's own config file: a repository's
    `.ctxd.toml` (or an editor's options) must not switch off its own checkpoints."""

    # Folders, or glob patterns, where the hooks do nothing: a hook whose cwd is one of them or
    # below one gets no checkpoint. Each is absolute after `~` is expanded.
    exclude: list[str] = field(default_factory=list)


@dataclass
class Settings:
    model: str | None = None
    context_window: int | None = None
    auto_compact_token_limit: int | None = None
    auto_compact_ratio: float = 0.9
    tool_output_token_limit: int = 10_000
    compact_user_message_max_tokens: int = 20_000
    compact_prompt_file: str | None = None
    state_dir: str | None = None
    # Token counter: o200k_base, cl100k_base, estimate:o200k or estimate:cl100k; default: the
    # model catalogue's choice (ctxd/catalog.py).
    tokenizer: str | None = None
    llm: LlmSettings = field(default_factory=LlmSettings)
    ghost: GhostSettings = field(default_factory=GhostSettings)
    sources: SourcesSettings = field(default_factory=SourcesSettings)
    hooks: HooksSettings = field(default_factory=HooksSettings)
    # Prices by model, USD per million tokens: {"model": {"input", "cached_input", "cache_write",
    # "output"}}; over the built-in table (ctxd/sessions/prices.json).
    prices: dict[str, Any] = field(default_factory=dict)

    def chosen_state_dir(self) -> Path:
        """`state_dir` as the user configured it, else the default: the owner's, as its clients
        pick it (ctxd/server/forward.py), and so the one `ctxd sessions` and `ctxd usage` share
        with it (hooks find it from the pointer the owner leaves in the default one)."""
        if self.state_dir:
            try:
                return Path(self.state_dir).expanduser()
            except RuntimeError:  # `~someone` who is not a user here
                pass
        return default_state_dir()

    def effective_context_window(self) -> int:
        if self.context_window:
            return self.context_window
        from ctxd.tokens.catalog import (
            context_window_for,  # a late import: the catalogue is optional data
        )

        return context_window_for(self.model) or DEFAULT_CONTEXT_WINDOW

    def auto_compact_limit(self) -> int:
        """Tokens at which a thread is compacted; 0 means never. Never above 90% of the window
        (Codex: min(configured limit, window * 9 / 10)), so a limit set for a bigger model still
        compacts before this one overflows."""
        window = self.effective_context_window()
        cap = window * 9 // 10
        if self.auto_compact_token_limit is not None:
            return min(max(0, self.auto_compact_token_limit), cap)
        return min(int(window * self.auto_compact_ratio), cap)


def snake_case(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


# Tables whose keys are names the user gives (a model's), not setting names: kept as written.
_NAMED_TABLES = ("prices",)


def _normalize_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """Setting names in snake_case at every level; a named table's keys as written."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = snake_case(key)
        out[name] = _normalize_keys(value) if isinstance(value, dict) and name not in _NAMED_TABLES else value
    return out


def _apply(target: Any, raw: dict[str, Any], prefix: str, problems: list[Problem], source: str) -> None:
    """Set the known fields of a dataclass from `raw`, checking each value's type."""
    if isinstance(target, SourcesSettings):
        _apply_sources(target, raw, prefix, problems, source)
        return
    fields = {f.name: f for f in dataclasses.fields(target)}
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if key not in fields:
            problems.append(Problem(source, f"unknown setting '{name}'", name))
            continue
        current = getattr(target, key)
        if dataclasses.is_dataclass(current):
            if isinstance(value, dict):
                _apply(current, value, f"{name}.", problems, source)
            else:
                problems.append(Problem(source, f"setting '{name}' must be a table", name))
            continue
        if not _type_ok(target, key, value):
            shown = "" if name == "llm.api_key_env" else f" {_shown(value)}"  # it may be a key: never echoed
            problems.append(Problem(source, f"setting '{name}' has a bad value{shown}; keeping {current!r}", name))
            continue
        setattr(target, key, value)


def _apply_sources(target: SourcesSettings, raw: dict[str, Any], prefix: str, problems: list[Problem],
                   source: str) -> None:
    """`sources.<agent>` (true or false) and `sources.<agent>_home` (a path), for the agents ctxd knows."""
    from ctxd import agents

    known = agents.names()
    for key, value in raw.items():
        name = f"{prefix}{key}"
        agent, home = (key.removesuffix("_home"), True) if key.endswith("_home") else (key, False)
        if agent not in known:
            problems.append(Problem(source, f"unknown setting '{name}'", name))
        elif home and (value is None or isinstance(value, str)):
            if value is None:
                target.homes.pop(agent, None)
            else:
                target.homes[agent] = value
        elif not home and isinstance(value, bool):
            target.enabled[agent] = value
        else:
            current = target.home(agent) if home else target.follows(agent)
            problems.append(Problem(source, f"setting '{name}' has a bad value {_shown(value)}; keeping {current!r}",
                                    name))


def _shown(value: Any) -> str:
    """A bad value as a problem names it: at most 60 characters (a 401-digit number is not echoed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_SETTING_INT:
        return f"(a number of {len(str(value))} digits)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_ok(target: Any, key: str, value: Any) -> bool:
    annotation = str(next(f.type for f in dataclasses.fields(target) if f.name == key))
    if value is None:
        return "None" in annotation
    if isinstance(value, bool):
        return "bool" in annotation
    if isinstance(value, int):
        return ("int" in annotation or "float" in annotation) and 0 <= value <= (
            MAX_SETTING_INT if "int" in annotation else MAX_SETTING_FLOAT)
    if isinstance(value, float):
        return "float" in annotation and math.isfinite(value) and 0 <= value <= MAX_SETTING_FLOAT
    if isinstance(value, str):
        return "str" in annotation and "list" not in annotation
    if isinstance(value, list):
        return "list[str]" in annotation and all(isinstance(v, str) for v in value)
    if isinstance(value, dict):
        return "dict" in annotation
    return False


def _too_deep(value: Any, depth: int = MAX_CONFIG_DEPTH) -> bool:
    """Whether tables or arrays in `value` nest more than `depth` deep. Looks no deeper than that,
    so it cannot itself exhaust the stack the way a 3,000-deep table would elsewhere."""
    if depth < 0:
        return True
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return any(_too_deep(child, depth - 1) for child in children)


def load_toml(path: Path, problems: list[Problem], follow_links: bool = True) -> dict[str, Any]:
    """A config file's table; {} when it is missing, and a problem when it is not a small file, not
    TOML, nested too deep, or (unless `follow_links`) a symbolic link: a workspace's file must not
    lead outside the workspace."""
    try:
        info = path.stat() if follow_links else path.lstat()
    except FileNotFoundError:
        return {}
    except OSError as error:
        problems.append(Problem(str(path), f"cannot read it: {error.strerror or error}"))
        return {}
    if stat.S_ISLNK(info.st_mode):
        problems.append(Problem(str(path), "ignored: it is a symbolic link, which could lead outside the workspace"))
        return {}
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CONFIG_BYTES:
        problems.append(Problem(str(path), f"ignored: not a regular file of at most {MAX_CONFIG_BYTES} bytes"))
        return {}
    import tomllib  # here: most folders have no config file, and `ctxd hook` starts on every tool call

    try:
        # Checked again on what is opened (ctxd.safefile): a FIFO swapped in since the stat must not
        # block the reader (a hook), and, unless `follow_links`, a link is refused too (ELOOP).
        raw = tomllib.loads(read_bounded(path, MAX_CONFIG_BYTES, follow_links=follow_links).decode("utf-8"))
        deep = _too_deep(raw)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        problems.append(Problem(str(path), str(error)))
        return {}
    except ValueError as error:  # an integer over Python's 4,300-digit conversion limit
        problems.append(Problem(str(path), f"ignored: {str(error)[:120]}"))
        return {}
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        deep = True
    if deep:
        problems.append(Problem(str(path), _TOO_DEEP))
        return {}
    return raw


def is_trusted(init_options: dict[str, Any] | None) -> bool:
    """The editor's verdict on the workspace (`initializationOptions.ctxd.trusted`); false unless true."""
    return isinstance(init_options, dict) and init_options.get("trusted") is True


def load_settings(
    workspace: Path | None = None,
    init_options: dict[str, Any] | None = None,
    problems: list[Problem] | None = None,
) -> Settings:
    """Merge every layer into a fresh Settings; problems found are appended to `problems`."""
    problems = problems if problems is not None else []
    settings = Settings()
    user_file = user_config_path()
    layers: list[tuple[str, Any]] = [(str(user_file), load_toml(user_file, problems))]
    if workspace is not None:
        workspace_file = workspace / WORKSPACE_FILE
        raw = load_toml(workspace_file, problems, follow_links=False)
        if isinstance(raw, dict):
            raw = _untrusted_removed(_normalize_keys(raw), workspace, is_trusted(init_options),
                                     str(workspace_file), problems)
            raw = _user_only_removed(raw, str(workspace_file), problems)
        layers.append((str(workspace_file), raw))
    options = {k: v for k, v in (init_options or {}).items() if k != "trusted"} if isinstance(init_options, dict) else {}
    if _too_deep(options):
        problems.append(Problem(INIT_OPTIONS, _TOO_DEEP))
        options = {}
    layers.append((INIT_OPTIONS, _user_only_removed(_normalize_keys(options), INIT_OPTIONS, problems)))
    for source, layer in layers:
        if isinstance(layer, dict):
            _apply(settings, _normalize_keys(layer), "", problems, source)
    if settings.llm.api not in ("chat", "responses"):
        problems.append(Problem("settings", "setting 'llm.api' must be 'chat' or 'responses'; keeping 'chat'", "llm.api"))
        settings.llm.api = "chat"
    if settings.ghost.auto not in ("turn", "off"):
        problems.append(Problem("settings", "setting 'ghost.auto' must be 'turn' or 'off'; keeping 'turn'", "ghost.auto"))
        settings.ghost.auto = "turn"
    if settings.ghost.keep < 1:
        problems.append(Problem("settings", "setting 'ghost.keep' must be at least 1; keeping 100", "ghost.keep"))
        settings.ghost.keep = 100
    if settings.ghost.keep_auto < 1:
        problems.append(Problem("settings", "setting 'ghost.keep_auto' must be at least 1; keeping 300",
                                "ghost.keep_auto"))
        settings.ghost.keep_auto = 300
    if not 0 < settings.auto_compact_ratio <= 1:
        problems.append(Problem("settings", "setting 'auto_compact_ratio' must be in (0, 1]; keeping 0.9",
                                "auto_compact_ratio"))
        settings.auto_compact_ratio = 0.9
    _check_key_env(settings, problems)
    _check_prompt_file(settings, workspace, problems)
    _check_hooks_exclude(settings, problems)
    redact.register(os.environ.get(settings.llm.api_key_env))
    return settings


def _flatten(raw: dict[str, Any], prefix: str = "") -> list[str]:
    names: list[str] = []
    for key, value in raw.items():
        if isinstance(value, dict) and value:
            names += _flatten(value, f"{prefix}{key}.")
        else:
            names.append(f"{prefix}{key}")
    return names


def _untrusted_removed(raw: dict[str, Any], workspace: Path, trusted: bool, source: str,
                       problems: list[Problem]) -> dict[str, Any]:
    """The workspace file's table without the settings it may not set unless trusted."""
    if trusted:
        return raw
    kept = dict(raw)
    for key in list(kept):
        value = kept[key]
        guarded = any(key == prefix.rstrip(".") for prefix in TRUSTED_ONLY)
        if key == "compact_prompt_file" and isinstance(value, str) and not _inside(workspace, value):
            guarded = True
        if not guarded:
            continue
        del kept[key]
        names = _flatten({key: value}) if isinstance(value, dict) else [key]
        for name in names:
            what = ("it reads outside the workspace" if key == "compact_prompt_file"
                    else "it could send data off the machine or read outside the workspace")
            problems.append(Problem(source, f"setting '{name}' ignored: the workspace is not trusted and {what}. "
                                            "Trust the workspace in the editor to use it.", name))
    return kept


def _user_only_removed(raw: dict[str, Any], source: str, problems: list[Problem]) -> dict[str, Any]:
    """`raw` without the settings only the user's own config file may set (USER_ONLY)."""
    kept = dict(raw)
    for key in USER_ONLY:
        if key in kept:
            value = kept.pop(key)
            for name in _flatten({key: value}) if isinstance(value, dict) else [key]:
                problems.append(Problem(source, f"setting '{name}' ignored: only your own config file "
                                                f"({user_config_path()}) sets it", name))
    return kept


def _check_hooks_exclude(settings: Settings, problems: list[Problem]) -> None:
    """Keep `hooks.exclude` only when every entry is a folder or pattern that is absolute once `~`
    is expanded (a relative one would depend on where the agent runs)."""
    for entry in settings.hooks.exclude:
        if not entry.strip() or "\0" in entry or not os.path.isabs(os.path.expanduser(entry)):
            problems.append(Problem("settings", f"setting 'hooks.exclude': {_shown(entry)} is not an absolute folder "
                                                "or pattern (a leading ~ is expanded); keeping []", "hooks.exclude"))
            settings.hooks.exclude = []
            return


def _inside(workspace: Path, name: str) -> bool:
    """Whether `name` (relative to the workspace, or absolute) resolves to a path inside it."""
    try:
        root = workspace.resolve()
        target = _resolve(name, workspace)
    except _PATH_ERRORS:
        return False
    return target == root or root in target.parents


def _resolve(name: str, workspace: Path | None) -> Path:
    """`name` with `~` expanded, relative to the workspace, symlinks followed. Raises _PATH_ERRORS."""
    path = Path(name).expanduser()
    return (path if workspace is None else workspace / path).resolve()


def looks_like_key(value: str) -> bool:
    """A value that is a credential rather than the name of an environment variable."""
    if not _ENV_NAME.fullmatch(value) or value.startswith(_KEY_PREFIXES):
        return True
    if len(value) >= 8 and any(value == v for v in os.environ.values()):
        return True  # the value of some variable: a key pasted where its name belongs
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value) and any(c.isdigit() for c in value)
    return len(value) >= 20 and mixed


def _check_key_env(settings: Settings, problems: list[Problem]) -> None:
    name = settings.llm.api_key_env
    if looks_like_key(name):
        redact.register(name)
        problems.append(Problem("settings", "setting 'llm.api_key_env' must be the name of an environment variable "
                                            "(like OPENAI_API_KEY); its value looks like a key itself, so it is not "
                                            "used and not shown. Put the key in an environment variable and name "
                                            "that variable here.", "llm.api_key_env"))
        settings.llm.api_key_env = LlmSettings.api_key_env


def _check_prompt_file(settings: Settings, workspace: Path | None, problems: list[Problem]) -> None:
    """Keep `compact_prompt_file` only when it is a regular file of at most 64 KiB; resolve it."""
    name = settings.compact_prompt_file
    if not name:
        return
    try:
        path = _resolve(name, workspace)
        problem = prompt_file_problem(path)
    except _PATH_ERRORS as error:  # "~nosuchuser/p.md", a NUL: a typo, not a reason to stop
        problem = f"cannot use {name!r}: {error}"
    if problem is not None:
        problems.append(Problem("settings", f"setting 'compact_prompt_file': {problem}; using the built-in prompt",
                                "compact_prompt_file"))
        settings.compact_prompt_file = None
        return
    settings.compact_prompt_file = str(path)


def prompt_file_problem(path: Path) -> str | None:
    """Why `path` cannot be a compaction prompt, or None. Never opens it (a FIFO would block)."""
    try:
        info = path.stat()
    except OSError as error:
        return f"cannot read {path}: {error.strerror or error}"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    if info.st_size > MAX_PROMPT_FILE_BYTES:
        return f"{path} is {info.st_size} bytes, over the limit of {MAX_PROMPT_FILE_BYTES}"
    return None


class PromptFileMoved(OSError):
    """The prompt file no longer is the file checked when the settings were read."""


def read_prompt_file(path: Path) -> str:
    """The prompt file's text, checked again as it is opened: it may have changed since the settings
    were read (a `git pull` can turn it into a link to `~/.ssh/id_rsa`). `path` was resolved then
    and, from an untrusted workspace, found inside it; so it must still resolve to itself, be
    opened without following a link, and be the file the path names now (fstat against stat),
    or PromptFileMoved is raised and nothing is read. Then: a regular file, at most 64 KiB read
    whatever it claims. Raises OSError."""
    if path.resolve() != path:
        raise PromptFileMoved(f"{path} leads elsewhere since the settings were read; not read")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not os.path.samestat(info, os.stat(path)):
            raise PromptFileMoved(f"{path} was replaced while it was opened; not read")
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        data = handle.read(MAX_PROMPT_FILE_BYTES + 1)
    if len(data) > MAX_PROMPT_FILE_BYTES:
        raise OSError(f"{path} is over the limit of {MAX_PROMPT_FILE_BYTES} bytes")
    return data.decode("utf-8")
