"""Followed Gemini CLI and qwen-code sessions are priced from ctxd's own table, with no
`[prices."<model>"]` in the user's config (issue #39): the daemon follows the sessions those
agents wrote (tests/fixtures/agents/gemini, .../qwen) and its breakdown's cost uses the rates of
the vendors' own providers in OpenCode's models.dev snapshot (ctxd/sessions/prices.json).

Nothing asserts a duration: the waits are bounds only a hang reaches."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxd.agents.gemini import GeminiReader
from ctxd.agents.qwen import QwenReader, encode_project
from ctxd.agents.session import Usage
from tests.rpc import Client
from tests.test_gemini_daemon import SESSION as GEMINI_SESSION
from tests.test_gemini_daemon import _chats, _lines
from tests.test_qwen_followed import FIXTURE as QWEN_FIXTURE
from tests.test_qwen_followed import SESSION as QWEN_SESSION

WAIT = 30.0
# USD per million tokens (input, cached input, output): models.dev's google and alibaba entries.
GEMINI_2_5_PRO = (1.25, 0.125, 10.0)
QWEN3_7_PLUS = (0.5, 0.05, 3.0)  # a model of qwen-code's own "Standard API Key" preset


def _until(what: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT
    while not (found := what()):
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)
    return found


def _expected(usage: Usage, rates: tuple[float, float, float]) -> float:
    return (usage.input * rates[0] + usage.cached_input * rates[1] + usage.output * rates[2]) / 1e6


def test_followed_gemini_and_qwen_sessions_are_priced_without_the_users_prices(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    work = tmp_path / "app"
    work.mkdir()
    gemini_home = tmp_path / "gemini-home"
    gemini_file = _chats(gemini_home, work) / "session-2026-12-02T01-18-3863ff50.jsonl"
    gemini_file.write_text("\n".join(_lines(work)) + "\n")
    qwen_home = tmp_path / "qwen"
    chats = qwen_home / "projects" / encode_project(work) / "chats"
    chats.mkdir(parents=True)
    qwen_file = chats / f"{QWEN_SESSION}.jsonl"
    qwen_file.write_text(QWEN_FIXTURE.read_text().replace("/home/user/app", str(work))
                         .replace("qwen3-coder-plus", "qwen3.7-plus"))
    assert not (state_dir / "config").exists()  # no config.toml: no prices of the user's
    client = daemon_factory([work], env={"GEMINI_CLI_HOME": str(gemini_home), "QWEN_HOME": str(qwen_home)})
    uri = work.as_uri()

    for thread, path, reader_class, model, rates in (
            (f"gemini:{GEMINI_SESSION}", gemini_file, GeminiReader, "gemini-2.5-pro", GEMINI_2_5_PRO),
            (f"qwen:{QWEN_SESSION}", qwen_file, QwenReader, "qwen3.7-plus", QWEN3_7_PLUS)):
        reader = reader_class(str(path))
        reader.read()
        usage = reader.session.cumulative[model]
        assert usage.cached_input > 0 and usage.output > 0  # the rate of each kind counts

        expected = _expected(usage, rates)

        def priced(thread: str = thread, expected: float = expected) -> dict[str, Any] | None:
            if not any(t["thread"] == thread for t in client.request("ctxd/threads", {"workspace": uri})["threads"]):
                return None
            cost = client.request("ctxd/usage", {"workspace": uri, "thread": thread})["cost"]
            # read whole: all of it priced, or the model named unpriced
            return cost if cost["total"] >= expected - 1e-6 or cost.get("unpricedModels") else None

        cost = _until(priced)
        assert cost["priced"] is True and "unpricedModels" not in cost, (thread, cost)
        assert cost["total"] == pytest.approx(expected, abs=1e-6), thread
        assert cost["cachedInput"] == pytest.approx(usage.cached_input * rates[1] / 1e6, abs=1e-6), thread


# Alibaba Cloud Model Studio's implicit-cache rate: the input its cache serves at 20% of the input
# price (https://www.alibabacloud.com/help/en/model-studio/context-cache); models.dev gives these
# five no cached rate of their own.
QWEN_IMPLICIT_CACHE = {"qwen3-coder-plus": 1.0, "qwen3-coder-flash": 0.3, "qwen3-max": 1.2, "qwen3.5-plus": 0.4,
                       "qwen3.6-flash": 0.1875}


def test_qwen_models_without_a_models_dev_cached_rate_take_alibabas_published_one() -> None:
    import json

    from ctxd.sessions import pricing

    rows = json.loads((Path(pricing.__file__).parent / "prices.json").read_text(encoding="utf-8"))["models"]
    for model, input_rate in QWEN_IMPLICIT_CACHE.items():
        price = pricing.lookup(model)
        assert price is not None and price.input == input_rate, model
        assert price.cached_input == pytest.approx(input_rate * 0.2), model
        assert "https://www.alibabacloud.com/help/en/model-studio/context-cache" in rows[model]["source"], model


def test_a_followed_qwen_session_reading_from_the_cache_is_priced(
        daemon_factory: Callable[..., Client], tmp_path: Path, state_dir: Path) -> None:
    """qwen-code's own session (its model qwen3-coder-plus, cached input on every request after the
    first): priced whole, its cached input at Alibaba's implicit-cache rate, no model unpriced."""
    work = tmp_path / "app"
    work.mkdir()
    qwen_home = tmp_path / "qwen"
    chats = qwen_home / "projects" / encode_project(work) / "chats"
    chats.mkdir(parents=True)
    qwen_file = chats / f"{QWEN_SESSION}.jsonl"
    qwen_file.write_text(QWEN_FIXTURE.read_text().replace("/home/user/app", str(work)))
    reader = QwenReader(str(qwen_file))
    reader.read()
    usage = reader.session.cumulative["qwen3-coder-plus"]
    assert usage.cached_input > 0
    rates = (1.0, 0.2, 5.0)
    expected = _expected(usage, rates)
    client = daemon_factory([work], env={"QWEN_HOME": str(qwen_home)})
    uri = work.as_uri()
    thread = f"qwen:{QWEN_SESSION}"

    def read() -> dict[str, Any] | None:
        if not any(t["thread"] == thread for t in client.request("ctxd/threads", {"workspace": uri})["threads"]):
            return None
        cost = client.request("ctxd/usage", {"workspace": uri, "thread": thread})["cost"]
        return cost if cost["total"] >= expected - 1e-6 or cost.get("unpricedModels") else None

    cost = _until(read)
    assert cost["priced"] is True and "unpricedModels" not in cost, cost
    assert cost["cachedInput"] == pytest.approx(usage.cached_input * rates[1] / 1e6, abs=1e-6)
    assert cost["total"] == pytest.approx(expected, abs=1e-6)
