"""Settings, merged from lowest to highest precedence.

Built-in defaults; `~/.config/ctxd/config.toml`; the workspace's `.ctxd.toml`;
`initializationOptions.ctxd`; and, for model and window, `ctxd/setPromptContext`. TOML keys are
snake_case, JSON keys camelCase; both are accepted everywhere. A bad value is reported and its
default kept: a typo in a config file must not stop the daemon.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CONTEXT_WINDOW = 128_000


@dataclass
class LlmSettings:
    base_url: str | None = None
    model: str | None = None
    api: str = "chat"  # "chat" or "responses"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = 120.0
    max_retries: int = 4  # retries of 429 / 5xx / network errors during a compaction
    retry_budget_seconds: float = 60.0  # and the time they may take in all


@dataclass
class GhostSettings:
    max_untracked_file_bytes: int = 10 * 1024 * 1024
    max_untracked_dir_files: int = 200
    warn_after_seconds: float = 240.0


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

    def effective_context_window(self) -> int:
        if self.context_window:
            return self.context_window
        from ctxd.tokens.catalog import (
            context_window_for,  # a late import: the catalogue is optional data
        )

        return context_window_for(self.model) or DEFAULT_CONTEXT_WINDOW

    def auto_compact_limit(self) -> int:
        """Tokens at which a thread is compacted; 0 means never."""
        if self.auto_compact_token_limit is not None:
            return max(0, self.auto_compact_token_limit)
        return int(self.effective_context_window() * self.auto_compact_ratio)


def snake_case(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _normalize_keys(raw: dict[str, Any]) -> dict[str, Any]:
    return {snake_case(k): _normalize_keys(v) if isinstance(v, dict) else v for k, v in raw.items()}


def _apply(target: Any, raw: dict[str, Any], prefix: str, problems: list[str]) -> None:
    """Set the known fields of a dataclass from `raw`, checking each value's type."""
    fields = {f.name: f for f in dataclasses.fields(target)}
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if key not in fields:
            problems.append(f"unknown setting '{name}'")
            continue
        current = getattr(target, key)
        if dataclasses.is_dataclass(current):
            if isinstance(value, dict):
                _apply(current, value, f"{name}.", problems)
            else:
                problems.append(f"setting '{name}' must be a table")
            continue
        if not _type_ok(target, key, value):
            problems.append(f"setting '{name}' has a bad value {value!r}; keeping {current!r}")
            continue
        setattr(target, key, value)


def _type_ok(target: Any, key: str, value: Any) -> bool:
    annotation = str(next(f.type for f in dataclasses.fields(target) if f.name == key))
    if value is None:
        return "None" in annotation
    if isinstance(value, bool):
        return "bool" in annotation
    if isinstance(value, int):
        return ("int" in annotation or "float" in annotation) and value >= 0
    if isinstance(value, float):
        return "float" in annotation and value >= 0
    if isinstance(value, str):
        return "str" in annotation
    return False


def load_toml(path: Path, problems: list[str]) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as error:
        problems.append(f"{path}: {error}")
        return {}


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ctxd" / "config.toml"


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ctxd"


def load_settings(
    workspace: Path | None = None,
    init_options: dict[str, Any] | None = None,
    problems: list[str] | None = None,
) -> Settings:
    """Merge every layer into a fresh Settings; problems found are appended to `problems`."""
    problems = problems if problems is not None else []
    settings = Settings()
    layers = [load_toml(user_config_path(), problems)]
    if workspace is not None:
        layers.append(load_toml(workspace / ".ctxd.toml", problems))
    layers.append(init_options or {})
    for layer in layers:
        if isinstance(layer, dict):
            _apply(settings, _normalize_keys(layer), "", problems)
    if settings.llm.api not in ("chat", "responses"):
        problems.append("setting 'llm.api' must be 'chat' or 'responses'; keeping 'chat'")
        settings.llm.api = "chat"
    if not 0 < settings.auto_compact_ratio <= 1:
        problems.append("setting 'auto_compact_ratio' must be in (0, 1]; keeping 0.9")
        settings.auto_compact_ratio = 0.9
    return settings
