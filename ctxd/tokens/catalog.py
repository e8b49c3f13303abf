"""Built-in model catalogue: the context window and the tokenizer of common models.

A model is matched by the longest catalogue prefix of its name (`gpt-4o-2024-08-06` is a
`gpt-4o`; a provider prefix such as `openai/` or `anthropic/` is ignored). The settings override
both facts: `context_window` the window, `tokenizer` the counter (`o200k_base`, `cl100k_base`,
or `estimate:o200k` / `estimate:cl100k` for the fast estimator with that family's weights).

`encoding` is the tiktoken encoding that counts the model's tokens exactly; it is known for
OpenAI's models only. For the others `profile` picks the estimator's weights: o200k's for
tokenizers that are frugal with Chinese and code (Qwen, GLM, DeepSeek, Kimi, Gemini), cl100k's,
which count a little higher, for Claude's. A model without a tiktoken encoding gets its family's
exact tokenizer and estimator profile from families.py (Qwen, DeepSeek, Llama 3, Mistral; Claude's
profile only). The windows are the providers' published figures;
they change, which is why the settings win.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxd.tokens import families

O200K = "o200k_base"
CL100K = "cl100k_base"
ENCODING_PROFILES = {O200K: "o200k", CL100K: "cl100k"}
DEFAULT_PROFILE = "o200k"


@dataclass(frozen=True)
class ModelInfo:
    prefix: str
    context_window: int
    encoding: str | None = None  # exact tiktoken encoding, when known
    profile: str = DEFAULT_PROFILE  # estimator weights when counting without the encoding


def _m(prefix: str, window: int, encoding: str | None = None, profile: str | None = None) -> ModelInfo:
    return ModelInfo(prefix, window, encoding, profile or ENCODING_PROFILES.get(encoding or "", DEFAULT_PROFILE))


CATALOG: dict[str, ModelInfo] = {
    m.prefix: m
    for m in (
        # OpenAI: exact counts with tiktoken.
        _m("gpt-5", 400_000, O200K),
        _m("gpt-5-codex", 400_000, O200K),
        _m("codex-mini", 200_000, O200K),
        _m("gpt-4.1", 1_047_576, O200K),
        _m("gpt-4.5", 128_000, O200K),
        _m("gpt-4o", 128_000, O200K),
        _m("chatgpt-4o", 128_000, O200K),
        _m("gpt-oss", 131_072, O200K),
        _m("o1", 200_000, O200K),
        _m("o1-mini", 128_000, O200K),
        _m("o3", 200_000, O200K),
        _m("o4-mini", 200_000, O200K),
        _m("gpt-4", 8_192, CL100K),
        _m("gpt-4-32k", 32_768, CL100K),
        _m("gpt-4-turbo", 128_000, CL100K),
        _m("gpt-4-1106", 128_000, CL100K),
        _m("gpt-4-0125", 128_000, CL100K),
        _m("gpt-3.5-turbo", 16_385, CL100K),
        # Others: estimated.
        _m("claude", 200_000, profile="cl100k"),
        _m("gemini", 1_048_576),
        _m("qwen3-coder-plus", 1_000_000),
        _m("qwen3-coder", 262_144),
        _m("qwen3", 131_072),
        _m("qwen-max", 131_072),
        _m("qwen-plus", 131_072),
        _m("glm-4.5", 131_072),
        _m("glm-4.6", 204_800),
        _m("glm-5", 131_072),
        _m("deepseek", 131_072),
        _m("kimi-k2", 262_144),
        _m("mistral-large", 131_072),
        _m("devstral", 131_072),
        _m("grok-4", 256_000),
        _m("grok-code", 256_000),
    )
}


def lookup(model: str | None) -> ModelInfo | None:
    """The catalogue entry for `model`: its longest matching prefix, case-insensitive."""
    if not model:
        return None
    name = model.strip().lower().rsplit("/", 1)[-1]
    best: ModelInfo | None = None
    for prefix, info in CATALOG.items():
        if name.startswith(prefix) and (best is None or len(prefix) > len(best.prefix)):
            best = info
    return best


def context_window_for(model: str | None) -> int | None:
    info = lookup(model)
    return info.context_window if info else None


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
