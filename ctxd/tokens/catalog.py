"""Built-in model catalogue: the context window and the tokenizer of the models people run.

A model id is matched as the agents and APIs write it: a provider prefix (`openai/`,
`anthropic/`, Bedrock's `us.anthropic.`, Mantle's `openai.`), a release date (`-20250929`,
`@20250929`, `-2024-08-06`), a Bedrock version (`-v1:0`) and Claude Code's `[1m]` tag are taken
off, then the name must be in the table exactly. A model that is not in it is unknown: `lookup`
says None and nothing is guessed from a similar name (`claude-opus-9` is not a Claude 200k model).
The settings override both facts: `context_window` the window, `tokenizer` the counter
(`o200k_base`, `cl100k_base`, or `estimate:o200k` / `estimate:cl100k` for the fast estimator).

`encoding` is the tiktoken encoding that counts the model's tokens exactly; it is known for
OpenAI's models only. For the others `profile` picks the estimator's weights: o200k's for
tokenizers that are frugal with Chinese and code (Qwen, GLM, DeepSeek, Kimi, Gemini), cl100k's,
which count a little higher, for Claude's. A model without a tiktoken encoding gets its family's
exact tokenizer and estimator profile from families.py (Qwen, DeepSeek, Llama 3, Mistral; Claude's
profile only). The windows are the providers' published figures; they change, which is why the
settings win. Each entry says where its window comes from (`SOURCES`) and the table says when it
was checked (`CHECKED`); the agents' own model lists are
compared with it by tests/test_models_catalog.py, so a model an agent ships shows up there.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ctxd.tokens import families

O200K = "o200k_base"
CL100K = "cl100k_base"
ENCODING_PROFILES = {O200K: "o200k", CL100K: "cl100k"}
DEFAULT_PROFILE = "o200k"
CHECKED = "2026-11-26"
ONE_MILLION = 1_000_000

SOURCES = {
    "claude-code": "Claude Code 2.1.332's bundled model catalogue (npm @anthropic-ai/claude-code@2.1.332): "
                   "`context.window`, 200,000 where an entry states none (its default for a known model)",
    "codex": "Codex 0.171.0's bundled models.json (npm @openai/codex@0.171.0): `context_window`",
    "openai": "OpenAI's model pages (platform.openai.com/docs/models)",
    "vendor": "the vendor's published model card",
}


@dataclass(frozen=True)
class ModelInfo:
    prefix: str  # the model's canonical id
    context_window: int
    encoding: str | None = None  # exact tiktoken encoding, when known
    profile: str = DEFAULT_PROFILE  # estimator weights when counting without the encoding
    source: str = "vendor"  # a key of SOURCES
    max_output: int | None = None  # Claude Code: the model's default output tokens (its auto-compact rule)


def _m(name: str, window: int, encoding: str | None = None, profile: str | None = None, source: str = "vendor",
       max_output: int | None = None) -> ModelInfo:
    return ModelInfo(name, window, encoding, profile or ENCODING_PROFILES.get(encoding or "", DEFAULT_PROFILE), source,
                     max_output)


def _claude(name: str, window: int, max_output: int) -> ModelInfo:
    return _m(name, window, profile="cl100k", source="claude-code", max_output=max_output)


def _codex(name: str, window: int) -> ModelInfo:
    return _m(name, window, O200K, source="codex")


CATALOG: dict[str, ModelInfo] = {
    m.prefix: m
    for m in (
        # Claude Code 2.1.332's catalogue: every model it knows, with its window and default output.
        _claude("claude-3-5-haiku", 200_000, 8_192),
        _claude("claude-3-5-sonnet", 200_000, 8_192),
        _claude("claude-3-7-sonnet", 200_000, 32_000),
        _claude("claude-haiku-4-5", 200_000, 32_000),
        _claude("claude-haiku-5-5", ONE_MILLION, 128_000),
        _claude("claude-sonnet-4-0", 200_000, 32_000),
        _claude("claude-sonnet-4-5", 200_000, 32_000),
        _claude("claude-sonnet-4-6", 200_000, 32_000),
        _claude("claude-sonnet-5", ONE_MILLION, 64_000),
        _claude("claude-sonnet-5-5", ONE_MILLION, 128_000),
        _claude("claude-opus-4-0", 200_000, 32_000),
        _claude("claude-opus-4-1", 200_000, 32_000),
        _claude("claude-opus-4-5", 200_000, 32_000),
        _claude("claude-opus-4-6", 200_000, 64_000),
        _claude("claude-opus-4-7", ONE_MILLION, 64_000),
        _claude("claude-opus-4-8", ONE_MILLION, 64_000),
        _claude("claude-opus-5", ONE_MILLION, 64_000),
        _claude("claude-opus-5-5", ONE_MILLION, 128_000),
        _claude("claude-fable-5", ONE_MILLION, 64_000),
        _claude("claude-fable-5-1", ONE_MILLION, 64_000),
        _claude("claude-fable-5-2", ONE_MILLION, 128_000),
        _claude("claude-mythos-5", ONE_MILLION, 64_000),
        _claude("claude-mythos-5-1", ONE_MILLION, 64_000),
        _claude("claude-mythos-5-2", ONE_MILLION, 128_000),
        # Codex 0.171.0's models.json.
        _codex("gpt-6.2-sol", 500_000),
        _codex("gpt-6.2-astra", 272_000),
        _codex("gpt-6-astra", 272_000),
        _codex("gpt-6.1-sol", 500_000),
        _codex("gpt-6.1-terra", 500_000),
        _codex("gpt-6-sol", 272_000),
        _codex("gpt-6-luna", 272_000),
        _codex("gpt-5.6-sol", 272_000),
        _codex("gpt-5.6-terra", 272_000),
        _codex("gpt-5.6-luna", 272_000),
        _codex("gpt-daybreak-blue-latest", 272_000),
        _codex("gpt-daybreak-red-latest", 372_000),
        _codex("gpt-5.5", 272_000),
        _codex("codex-auto-review", 272_000),
        # OpenAI: exact counts with tiktoken.
        _m("gpt-5", 400_000, O200K, source="openai"),
        _m("gpt-5-codex", 400_000, O200K, source="openai"),
        _m("gpt-5-mini", 400_000, O200K, source="openai"),
        _m("gpt-5-nano", 400_000, O200K, source="openai"),
        _m("gpt-5-pro", 400_000, O200K, source="openai"),
        _m("gpt-5.1", 400_000, O200K, source="openai"),
        _m("gpt-5.1-codex", 400_000, O200K, source="openai"),
        _m("gpt-5.1-codex-max", 400_000, O200K, source="openai"),
        _m("gpt-5.1-codex-mini", 400_000, O200K, source="openai"),
        _m("gpt-5.2", 400_000, O200K, source="openai"),
        _m("gpt-5.2-codex", 400_000, O200K, source="openai"),
        _m("gpt-5.3-codex", 400_000, O200K, source="openai"),
        _m("gpt-5.4", 400_000, O200K, source="openai"),
        _m("gpt-5.4-mini", 400_000, O200K, source="openai"),
        _m("codex-mini", 200_000, O200K, source="openai"),
        _m("codex-mini-latest", 200_000, O200K, source="openai"),
        _m("gpt-4.1", 1_047_576, O200K, source="openai"),
        _m("gpt-4.1-mini", 1_047_576, O200K, source="openai"),
        _m("gpt-4.1-nano", 1_047_576, O200K, source="openai"),
        _m("gpt-4.5", 128_000, O200K, source="openai"),
        _m("gpt-4.5-preview", 128_000, O200K, source="openai"),
        _m("gpt-4o", 128_000, O200K, source="openai"),
        _m("gpt-4o-mini", 128_000, O200K, source="openai"),
        _m("chatgpt-4o", 128_000, O200K, source="openai"),
        _m("gpt-oss-120b", 131_072, O200K, source="openai"),
        _m("gpt-oss-20b", 131_072, O200K, source="openai"),
        _m("o1", 200_000, O200K, source="openai"),
        _m("o1-mini", 128_000, O200K, source="openai"),
        _m("o3", 200_000, O200K, source="openai"),
        _m("o3-mini", 200_000, O200K, source="openai"),
        _m("o3-pro", 200_000, O200K, source="openai"),
        _m("o4-mini", 200_000, O200K, source="openai"),
        _m("gpt-4", 8_192, CL100K, source="openai"),
        _m("gpt-4-0613", 8_192, CL100K, source="openai"),
        _m("gpt-4-0314", 8_192, CL100K, source="openai"),
        _m("gpt-4-32k", 32_768, CL100K, source="openai"),
        _m("gpt-4-turbo", 128_000, CL100K, source="openai"),
        _m("gpt-4-1106-preview", 128_000, CL100K, source="openai"),
        _m("gpt-4-0125-preview", 128_000, CL100K, source="openai"),
        _m("gpt-3.5-turbo", 16_385, CL100K, source="openai"),
        # Others: estimated.
        _m("gemini-2.5-pro", 1_048_576),
        _m("gemini-2.5-flash", 1_048_576),
        _m("qwen3-coder-plus", 1_000_000),
        _m("qwen3-coder", 262_144),
        _m("qwen3-coder-480b-a35b-instruct", 262_144),
        _m("qwen3-max", 262_144),
        _m("qwen-max", 131_072),
        _m("qwen-plus", 131_072),
        _m("glm-4.5", 131_072),
        _m("glm-4.6", 204_800),
        _m("glm-5", 131_072),
        _m("deepseek-chat", 131_072),
        _m("deepseek-reasoner", 131_072),
        _m("kimi-k2", 262_144),
        _m("mistral-large", 131_072),
        _m("devstral", 131_072),
        _m("grok-4", 256_000),
        _m("grok-code-fast-1", 256_000),
    )
}

# The names Anthropic's API dates without the `-0` (claude-sonnet-4-20250514) are the same models.
CATALOG["claude-sonnet-4"] = CATALOG["claude-sonnet-4-0"]
CATALOG["claude-opus-4"] = CATALOG["claude-opus-4-0"]

_PROVIDER = re.compile(r"^(?:(?:us|eu|apac|au|jp|global)\.)?(?:anthropic|openai)\.")
_VERSION = re.compile(r"-v\d+(?::\d+)?$")
_DATE = re.compile(r"(?:-\d{8}|-\d{4}-\d{2}-\d{2}|@\d{8}|@\w+)$")
_LATEST = re.compile(r"-latest$")
_ONE_M = re.compile(r"\[1m\]$")


def candidates(model: str) -> list[str]:
    """The names `model` may be listed under, most specific first: as written, then without its
    provider prefix, `[1m]` tag, Bedrock version, release date and `-latest`."""
    return list(_candidates(model))


@functools.lru_cache(maxsize=256)
def _candidates(model: str) -> tuple[str, ...]:
    """`candidates`, worked out once per model name (`ctxd sessions` prices thousands of sessions
    of a few models)."""
    name = model.strip().lower()
    names = [name]

    def add(new: str) -> None:
        nonlocal name
        if new != name:
            name = new
            names.append(new)

    add(name.rsplit("/", 1)[-1])
    add(_PROVIDER.sub("", name))
    for _ in range(3):
        add(_DATE.sub("", _VERSION.sub("", _ONE_M.sub("", name))))
    add(_LATEST.sub("", name))
    return tuple(names)


def lookup(model: str | None) -> ModelInfo | None:
    """The catalogue entry for `model`, or None: the model is unknown (never a guess)."""
    if not model:
        return None
    for name in candidates(model):
        info = CATALOG.get(name)
        if info is not None:
            return info
    return None


def one_million_tag(model: str | None) -> bool:
    """Claude Code's `[1m]` tag: the session asked for the model's 1M-token window."""
    return bool(model and _ONE_M.search(model.strip().lower()))


def context_window_for(model: str | None) -> int | None:
    info = lookup(model)
    if info is None:
        return None
    return max(info.context_window, ONE_MILLION) if one_million_tag(model) else info.context_window


def counter_spec(model: str | None, override: str | None = None) -> tuple[str | None, str]:
    """(tiktoken encoding or None, estimator profile) for a model, with the `tokenizer` setting
    (`o200k_base`, `cl100k_base`, `estimate:o200k`, `estimate:cl100k`) taking precedence."""
    if override:
        kind, _, profile = override.partition(":")
        if kind == "estimate":
            known = {*ENCODING_PROFILES.values(), *(f.profile for f in families.FAMILIES.values())}
            return None, profile if profile in known else DEFAULT_PROFILE
        if override in ENCODING_PROFILES:
            return override, ENCODING_PROFILES[override]
        if override in families.FAMILIES:
            return override, families.FAMILIES[override].profile
    info = lookup(model)
    if info is not None and info.encoding:
        return info.encoding, info.profile
    family = families.family_for(model)  # the exact tokenizer of Claude, Qwen, DeepSeek, Llama, Mistral
    if family is not None:
        spec = families.FAMILIES[family]
        return (family if spec.hot_path else None), spec.profile
    return None, info.profile if info is not None else DEFAULT_PROFILE
