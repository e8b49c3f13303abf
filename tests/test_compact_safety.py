"""Compaction that never loses the request (issue #15): a short thread is refused, the user's recent
words are kept verbatim, the offline summary names the artifact trail, and a summarizer request
that overflows goes down a ladder instead of failing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import assistant, call, output, user
from tests.rpc import RpcError
from tests.test_codex_parity import KEY_ENV, llm_options

COMPACTION_FAILED = 1001
REQUEST = "Please make the CSV importer skip blank lines; keep the public API unchanged."


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def test_a_short_thread_is_refused_and_left_as_it_was(daemon_factory, workspace) -> None:
    client = daemon_factory([workspace])
    ws = workspace.as_uri()
    items = [user(REQUEST), call("c1", "shell", '{"cmd": "pytest -q tests/test_csv.py"}'),
             output("c1", "1 failed"), assistant("Fixed in importer.py.")]
    before = client.request("ctxd/record", {"workspace": ws, "items": items})
    with pytest.raises(RpcError) as caught:
        client.request("ctxd/compact", {"workspace": ws, "strategy": "offline"})
    assert caught.value.code == COMPACTION_FAILED
    assert caught.value.message.startswith("nothing worth compacting")
    after = client.request("ctxd/history", {"workspace": ws})
    assert after["items"] == items and after["historyVersion"] == before["historyVersion"]
    assert not client.notes("ctxd/compacted")


def long_thread(turns: int = 6) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [user(REQUEST)]
    for n in range(turns):
        log = "".join(f"tests/test_csv.py::test_case_{n}_{i} PASSED\n" for i in range(150))
        items += [call(f"c{n}", "shell", json.dumps({"cmd": f"pytest -q tests/test_csv.py -k case_{n}"})),
                  output(f"c{n}", log + f"E   ValueError: blank line {n} in src/importer.py\nexit code: 1"),
                  assistant(f"Step {n}: the blank-line check in src/importer.py is next.")]
    items.append(user("Also add a test for trailing blank lines."))
    return items


def test_offline_compaction_keeps_the_recent_requests_verbatim(daemon_factory, workspace) -> None:
    client = daemon_factory([workspace])
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": long_thread()})
    result = client.request("ctxd/compact", {"workspace": ws, "strategy": "offline"})
    assert result["tokensAfter"] < result["tokensBefore"]
    texts = [item["content"][0]["text"] for item in client.request("ctxd/history", {"workspace": ws})["items"]
             if item.get("role") == "user"]
    assert REQUEST in texts and "Also add a test for trailing blank lines." in texts


def test_the_offline_summary_names_the_artifact_trail_even_when_masking_was_enough(daemon_factory,
                                                                                   workspace) -> None:
    client = daemon_factory([workspace])
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": long_thread(turns=24)})
    result = client.request("ctxd/compact", {"workspace": ws, "strategy": "offline"})
    assert result["summary"].startswith("Removed the bodies of")  # masking alone reached the target
    summary = result["summary"]
    assert "src/importer.py" in summary  # files touched
    assert "pytest -q tests/test_csv.py -k case_23" in summary  # commands run (the newest first)
    assert "ValueError: blank line" in summary  # errors seen


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_summarizer_request_that_overflows_goes_down_the_ladder(daemon_factory, workspace, fake, api) -> None:
    # The model takes at most two input items (one message and the instruction): only the last rung fits.
    fake.max_input_items = 2
    client = daemon_factory([workspace], llm_options(fake, api=api), env=KEY_ENV)
    ws = workspace.as_uri()
    items = long_thread()
    client.request("ctxd/record", {"workspace": ws, "items": items})
    result = client.request("ctxd/compact", {"workspace": ws, "strategy": "llm"})
    assert result["strategy"] == "llm" and result["summary"] == fake.summary.strip()
    assert result["trimmedItems"] >= len(items) - 1
    bodies = [json.dumps(r.body) for r in fake.requests]
    assert "test_case_0_0 PASSED" in bodies[0]  # first the full history
    assert all("test_case_0_0 PASSED" not in body for body in bodies[1:])  # then with outputs stripped
    assert len(bodies) >= 3  # then fewer turns, until one fits


def test_an_explicit_model_compaction_that_cannot_fit_reports_1001(daemon_factory, workspace, fake) -> None:
    fake.max_input_items = 0  # nothing fits, not even the instruction alone
    client = daemon_factory([workspace], llm_options(fake), env=KEY_ENV)
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "items": long_thread(turns=2)})
    before = client.request("ctxd/history", {"workspace": ws})
    with pytest.raises(RpcError) as caught:
        client.request("ctxd/compact", {"workspace": ws, "strategy": "llm"})
    assert caught.value.code == COMPACTION_FAILED and "does not fit" in caught.value.message
    assert client.request("ctxd/history", {"workspace": ws}) == before
    # `auto` never stops there: it falls back to offline.
    result = client.request("ctxd/compact", {"workspace": ws, "strategy": "auto"})
    assert result["strategy"] == "offline" and "does not fit" in result["fallbackReason"]
