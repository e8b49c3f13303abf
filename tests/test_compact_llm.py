"""The model-backed strategies against a local OpenAI-compatible server, through the real client."""

from __future__ import annotations

import threading
import time

import pytest

from ctxd.compact import compact
from ctxd.compact.history import compact_prompt
from ctxd.errors import Cancelled, CompactionFailed
from ctxd.ledger.rules import SUMMARY_PREFIX
from ctxd.settings import LlmSettings, Settings
from tests.fake_openai import FakeOpenAI, Step
from tests.test_compact import GHOST, assistant, call, output, user

KEY = "sk-test-secret-1234567890"
ITEMS = [
    user("Port the CLI to click. Keep Python 3.11 support."),
    call("c1", "pytest -q"),
    # A long output, so that every compaction here makes the thread smaller (a compaction that would
    # not is refused).
    output("c1", "".join(f"tests/test_cli.py::test_{n} PASSED\n" for n in range(120))
           + "exit code: 1\nE   ImportError: cannot import name 'group'"),
    assistant("The import is wrong; I'll fix cli/main.py."),
    GHOST,
    user("go ahead"),
]


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("CTXD_TEST_KEY", KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def settings_for(fake: FakeOpenAI, api: str = "chat", **llm) -> Settings:
    options = {"max_retries": 3, "retry_budget_seconds": 20.0, "timeout_seconds": 10.0, **llm}
    return Settings(llm=LlmSettings(base_url=fake.base_url, model="fake-model", api=api,
                                    api_key_env="CTXD_TEST_KEY", **options))


def run(strategy: str, settings: Settings, **kwargs):
    return compact(ITEMS, strategy=strategy, settings=settings, cancel=kwargs.pop("cancel", threading.Event()), **kwargs)


def test_llm_chat_sends_history_and_instruction_and_builds_history(fake) -> None:
    outcome = run("llm", settings_for(fake))
    assert outcome.strategy == "llm" and outcome.summary == fake.summary.strip()
    [request] = fake.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["model"] == "fake-model"
    messages = request.body["messages"]
    assert messages[-1] == {"role": "user", "content": compact_prompt(None)}
    assert "ImportError" in messages[2]["content"]
    roles = [i.get("role", i["type"]) for i in outcome.items]
    assert roles == ["user", "user", "user", "ghost_snapshot"]
    assert outcome.items[2]["content"][0]["text"] == f"{SUMMARY_PREFIX}\n{fake.summary.strip()}"


def test_llm_responses_api(fake) -> None:
    outcome = run("llm", settings_for(fake, api="responses"))
    [request] = fake.requests
    assert request.path == "/v1/responses"
    sent = request.body["input"]
    assert all(item["type"] != "ghost_snapshot" for item in sent)
    assert sent[-1]["content"][0]["text"] == compact_prompt(None)
    assert outcome.summary == fake.summary.strip()


def test_remote_replaces_history_with_its_output_and_keeps_ghosts(fake) -> None:
    outcome = run("remote", settings_for(fake, api="responses"), instructions="You are a coding agent.")
    [request] = fake.requests
    assert request.path == "/v1/responses/compact"
    assert request.body["instructions"] == "You are a coding agent."
    assert request.body["model"] == "fake-model"
    types = [item["type"] for item in outcome.items]
    assert types == ["message", "message", "compaction", "ghost_snapshot"]
    assert outcome.items[2]["id"] == "cmp_item_1"


def test_transient_errors_are_retried(fake) -> None:
    fake.script(Step(status=500, retry_after=0), Step(status=503), Step(status=429, retry_after=0))
    outcome = run("llm", settings_for(fake))
    assert outcome.strategy == "llm"
    assert len(fake.requests) == 4


def test_retries_are_bounded(fake) -> None:
    fake.script(*[Step(status=500, retry_after=0) for _ in range(10)])
    with pytest.raises(CompactionFailed, match="after 3 attempts"):
        run("llm", settings_for(fake, max_retries=2))
    assert len(fake.requests) == 3


def test_retry_time_budget_is_bounded(fake) -> None:
    fake.script(Step(status=429, retry_after=5))
    with pytest.raises(CompactionFailed, match="budget"):
        run("llm", settings_for(fake, retry_budget_seconds=1.0))
    assert len(fake.requests) == 1


@pytest.mark.parametrize("step, match", [
    (Step(status=401, code="invalid_api_key", message=f"Incorrect API key provided: {KEY}"), "HTTP 401"),
    (Step(status=403, message="forbidden"), "HTTP 403"),
    (Step(status=429, code="insufficient_quota", retry_after=0), "insufficient_quota"),
    (Step(garbage=True), "did not parse"),
    (Step(body={"choices": []}), "not a chat completion"),
    (Step(body={"choices": [{"index": 0, "message": {"role": "assistant", "content": ""}}]}), "no summary"),
])
def test_permanent_failures_fail_at_once_without_the_key(fake, step: Step, match: str) -> None:
    fake.script(step)
    with pytest.raises(CompactionFailed, match=match) as caught:
        run("llm", settings_for(fake))
    assert KEY not in caught.value.message
    assert len(fake.requests) == 1


@pytest.mark.parametrize("step", [Step(garbage=True), Step(body={"output": []}),
                                  Step(body={"output": [{"type": "bogus"}]})])
def test_remote_malformed_answers_fail(fake, step: Step) -> None:
    fake.script(step)
    with pytest.raises(CompactionFailed):
        run("remote", settings_for(fake, api="responses"))


# The history sent is ITEMS without the ghost item: user, call, output, assistant, user. It goes down the
# ladder: the full history, then the same items with the tool output stripped, then only the last turn
# (the last user message), which fits. llm adds the instruction as one more message (chat) or input
# item (responses); remote sends the history alone.
@pytest.mark.parametrize("strategy, api, sizes, trimmed", [
    ("llm", "chat", [6, 6, 2], 4),
    ("llm", "responses", [6, 6, 2], 4),
    ("remote", "responses", [5, 5, 1], 4),
])
def test_context_overflow_trims_oldest_items_and_retries(fake, strategy: str, api: str, sizes: list[int],
                                                         trimmed: int) -> None:
    fake.max_input_items = 3 if api == "chat" else 2
    outcome = run(strategy, settings_for(fake, api=api))
    assert outcome.trimmed_items == trimmed
    assert [len(r.body.get("messages") or r.body.get("input")) for r in fake.requests] == sizes
    assert {r.body.get("model") for r in fake.requests} == {"fake-model"}


def test_context_overflow_of_a_single_item_fails(fake) -> None:
    fake.max_input_items = 0
    with pytest.raises(CompactionFailed, match="does not fit"):
        run("llm", settings_for(fake))


def test_slow_answer_times_out_and_is_retried(fake) -> None:
    fake.script(Step(delay=3.0))
    outcome = run("llm", settings_for(fake, timeout_seconds=0.3))
    assert outcome.strategy == "llm" and len(fake.requests) == 2


def test_cancel_interrupts_a_slow_request(fake) -> None:
    """Cancelled after 0.2 s, the request ends then, not when the endpoint answers a minute later
    (the bound is a hang's: half that minute, whatever the machine's load)."""
    fake.script(Step(delay=60.0))
    cancel = threading.Event()
    started = time.monotonic()
    threading.Timer(0.2, cancel.set).start()
    with pytest.raises(Cancelled):
        run("llm", settings_for(fake), cancel=cancel)
    assert time.monotonic() - started < 30.0


def test_auto_falls_back_to_offline_when_the_model_fails(fake) -> None:
    fake.script(Step(status=401))
    outcome = run("auto", settings_for(fake))
    assert outcome.strategy == "offline"
    assert "401" in (outcome.fallback_reason or "")


def test_explicit_llm_without_an_endpoint_fails(monkeypatch) -> None:
    with pytest.raises(CompactionFailed, match="llm.base_url"):
        run("llm", Settings())
    monkeypatch.delenv("CTXD_TEST_KEY")
    with pytest.raises(CompactionFailed, match="CTXD_TEST_KEY"):
        run("remote", Settings(llm=LlmSettings(base_url="https://api.openai.com/v1", model="m", api="responses",
                                               api_key_env="CTXD_TEST_KEY")))


def test_progress_reports_steps(fake) -> None:
    fake.script(Step(status=500, retry_after=0))
    seen: list[str] = []
    run("llm", settings_for(fake), progress=seen.append)
    assert any("retrying" in line for line in seen)
