"""The compaction package on its own: history builder, offline strategy, strategy choice, retries."""

from __future__ import annotations

import json
import threading

import pytest

from ctxd.compact import choose_strategy, compact, offline_target
from ctxd.compact.history import (
    build_compacted_history,
    compact_prompt,
    recent_user_messages,
    summary_message,
)
from ctxd.compact.model import drop_oldest, is_openai_host, to_chat_messages
from ctxd.compact.offline import (
    Section,
    history_tokens,
    mask_tool_outputs,
    offline_compact,
    render_summary,
)
from ctxd.compact.retry import RetryPolicy
from ctxd.errors import InvalidParams
from ctxd.ledger.rules import (
    SUMMARY_PREFIX,
    is_real_user_message,
    is_summary_message,
    message_text,
)
from ctxd.settings import LlmSettings, Settings
from ctxd.tokens.approx import approx_text_tokens


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> dict:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def call(call_id: str, command: str, name: str = "shell") -> dict:
    return {"type": "function_call", "call_id": call_id, "name": name,
            "arguments": json.dumps({"command": ["bash", "-lc", command]})}


def output(call_id: str, text: str) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


GHOST = {"type": "ghost_snapshot", "ghost_commit": {"id": "g1", "parent": "p0", "created_at": 1}}


def text_of(items: list[dict]) -> str:
    return json.dumps(items, ensure_ascii=False)


# --- history builder -----------------------------------------------------------------------------


def test_real_user_messages_exclude_summaries_and_injected_context() -> None:
    assert is_real_user_message(user("please fix it"))
    assert not is_real_user_message(user("<environment_context>cwd=/x</environment_context>"))
    assert not is_real_user_message(user("# AGENTS.md instructions for /repo\n..."))
    assert not is_real_user_message(summary_message("earlier work"))
    assert not is_real_user_message(assistant("done"))
    assert not is_real_user_message({"type": "message", "role": "user", "content": "  "})


def test_recent_user_messages_newest_first_then_truncated_then_chronological() -> None:
    items = [user("a" * 400), assistant("x"), user("b" * 40), user("c" * 40)]
    # 10 + 10 tokens for the newest two, then 5 tokens left for the 100-token oldest one.
    selected = [message_text(m) for m in recent_user_messages(items, 25)]
    assert selected[1:] == ["b" * 40, "c" * 40]
    assert selected[0].startswith("a") and "truncated" in selected[0] and len(selected[0]) < 100
    assert recent_user_messages(items, 20) == [user("b" * 40), user("c" * 40)]
    assert recent_user_messages(items, 0) == []


def test_build_compacted_history_layout() -> None:
    items = [user("<environment_context>x</environment_context>"), user("first"), assistant("ok"), GHOST,
             summary_message("old summary"), user("second")]
    history = build_compacted_history(items, "the new summary", 20_000)
    assert [h.get("role") or h["type"] for h in history] == ["user", "user", "user", "ghost_snapshot"]
    assert history[0]["content"][0]["text"] == "first"
    assert history[1]["content"][0]["text"] == "second"
    summary = history[2]["content"][0]["text"]
    # The earlier summary is carried forward after the new one, word for word (protocol v3).
    assert summary.startswith(SUMMARY_PREFIX) and summary.endswith("the new summary\n\n## Earlier summary\nold summary")
    assert history[3] == GHOST


def test_compact_prompt_file_overrides(tmp_path) -> None:
    custom = tmp_path / "prompt.md"
    custom.write_text("Summarize in haiku.\n")
    assert compact_prompt(str(custom)) == "Summarize in haiku."
    assert "handoff" in compact_prompt(None).lower()


# --- offline -------------------------------------------------------------------------------------


def long_thread(turns: int = 12) -> list[dict]:
    items: list[dict] = [user("Refactor src/app/config.py. Never edit the vendor/ directory.")]
    for turn in range(turns):
        items.append(call(f"c{turn}", f"pytest -q tests/test_{turn}.py"))
        body = "\n".join(f"line {n} of noisy test output" for n in range(300))
        if turn == 3:
            body += "\nE   KeyError: 'tenant_42'\nFAILED tests/test_3.py::test_tenant\nexit code: 1"
        items.append(output(f"c{turn}", body))
        items.append(assistant(f"Step {turn} looks fine." + (" We decided to keep the YAML loader." if turn == 5 else "")))
        if turn == 7:
            items.append(GHOST)
        items.append(user(f"continue with step {turn + 1}"))
    return items


def test_masking_keeps_name_size_and_errors() -> None:
    items = long_thread()
    masked, count = mask_tool_outputs(items, keep_recent=3)
    assert count == 9
    placeholders = [i["output"] for i in masked if i["type"] == "function_call_output"][:9]
    assert all(p.startswith("[output of `shell` removed by compaction:") for p in placeholders)
    assert "KeyError: 'tenant_42'" in placeholders[3] and "exit code 1" in placeholders[3]
    outputs = [i for i in items if i["type"] == "function_call_output"]
    kept = [i for i in masked if i["type"] == "function_call_output"][9:]
    assert len(outputs) == 12 and kept == outputs[9:]  # the newest three, untouched
    assert len(masked) == len(items)


def search_and_test_run() -> list[dict]:
    """A search whose one definition hit names a file nothing else names, and a test run whose
    fifth and sixth failures come after four others."""
    hits = [f"src/app/handlers_{n}.py:{n}:    dispatch(request)" for n in range(60)]
    hits.insert(37, "src/deep/router_xq7.py:12:def dispatch(request, *args):")
    failures = [f"FAILED tests/test_api.py::test_{n} - KeyError: 'tenant_{n}'" for n in range(4)]
    failures += ["FAILED tests/test_api.py::test_late - ValueError: quota_zz9 exceeded",
                 "E   TimeoutError: worker_k41 did not answer"]
    log = "\n".join(["collected 40 items", *[f"tests/test_api.py::test_{n} PASSED" for n in range(30)], *failures])
    return [user("find dispatch"), call("s1", "rg -n dispatch src/"), output("s1", "\n".join(hits)),
            user("run the tests"), call("t1", "pytest -q"), output("t1", log)]


def test_a_masked_output_quotes_its_errors_and_the_definitions_it_found() -> None:
    items = search_and_test_run()
    masked, count = mask_tool_outputs(items, keep_recent=0)
    assert count == 2
    text = text_of(masked)
    for fact in ("src/deep/router_xq7.py:12:def dispatch", "quota_zz9", "worker_k41", "tenant_0"):
        assert fact in text, fact
    assert "handlers_5.py" not in text  # a plain hit is not quoted


def test_a_second_compaction_keeps_what_the_first_ones_placeholders_quote() -> None:
    first, _ = mask_tool_outputs(search_and_test_run(), keep_recent=0)
    again, count = mask_tool_outputs(first, keep_recent=0)
    assert count == 0 and again == first  # a placeholder is never masked again (its quotes would go)
    fake = "[output of `shell` removed by compaction: 1 tokens, 1 lines; errors: " + "x" * 40_000 + "]"
    assert mask_tool_outputs([call("f1", "cat big"), output("f1", fake)], keep_recent=0)[1] == 1  # a look-alike is masked
    later = [*first, *long_thread(8)]
    summary = offline_compact(later, target_tokens=history_tokens(later) // 8, user_message_max_tokens=2_000)
    assert summary.masked == 0  # the summary path, which reads the placeholders' quotes
    for fact in ("src/deep/router_xq7.py:12:def dispatch", "quota_zz9", "worker_k41"):
        assert fact in summary.summary, fact


def test_offline_is_deterministic_reduces_4x_and_keeps_facts() -> None:
    items = long_thread()
    before = history_tokens(items)
    first = offline_compact(items, target_tokens=before // 4, user_message_max_tokens=20_000)
    second = offline_compact(items, target_tokens=before // 4, user_message_max_tokens=20_000)
    assert first.items == second.items
    assert history_tokens(first.items) <= before // 4
    text = text_of(first.items)
    for fact in ("src/app/config.py", "Never edit the vendor/ directory", "KeyError: 'tenant_42'",
                 "decided to keep the YAML loader", "pytest -q tests/test_3.py"):
        assert fact in text, fact
    assert first.items[-1] == GHOST
    assert first.items[-2]["content"][0]["text"].startswith(SUMMARY_PREFIX)


def test_offline_masking_alone_when_it_is_enough() -> None:
    items = long_thread()
    before = history_tokens(items)
    result = offline_compact(items, target_tokens=before // 2, user_message_max_tokens=20_000)
    assert result.masked == 9
    assert len(result.items) == len(items)


def test_offline_carries_an_earlier_summary_forward() -> None:
    items = [summary_message("## Decisions\n- chose sqlite-wal-77"), *long_thread(6)]
    result = offline_compact(items, target_tokens=history_tokens(items) // 4, user_message_max_tokens=20_000)
    assert "sqlite-wal-77" in text_of(result.items)
    assert sum(map(is_summary_message, result.items)) == 1


def test_render_summary_respects_budget_and_fair_shares() -> None:
    big = Section("Big", [f"line {n} " + "x" * 100 for n in range(200)])
    small = Section("Small", ["keep me"])
    text = render_summary([big, small], 500)
    assert "keep me" in text
    assert approx_text_tokens(text) <= 520
    assert "line 199" in text and "line 0 " not in text  # newest kept first


def test_offline_target_is_4x_and_at_most_half_the_limit() -> None:
    items = long_thread()
    before = history_tokens(items)
    assert offline_target(items, Settings(auto_compact_token_limit=0)) == before // 4
    assert offline_target(items, Settings(auto_compact_token_limit=1000)) == 500


def test_offline_via_compact_entry_point() -> None:
    outcome = compact(long_thread(), strategy="offline", settings=Settings(), cancel=threading.Event())
    assert outcome.strategy == "offline" and outcome.trimmed_items == 0 and outcome.summary


def test_unknown_strategy_is_invalid_params() -> None:
    with pytest.raises(InvalidParams):
        compact([], strategy="magic", settings=Settings())


# --- strategy choice, trimming, chat rendering, backoff --------------------------------------------


@pytest.mark.parametrize("base_url, api, expected", [
    (None, "responses", "offline"),
    ("https://api.openai.com/v1", "responses", "remote"),
    ("https://api.openai.com/v1", "chat", "llm"),
    ("http://127.0.0.1:8080/v1", "responses", "llm"),
    ("https://openai.example.com/v1", "responses", "llm"),
])
def test_auto_strategy(base_url: str | None, api: str, expected: str) -> None:
    settings = Settings(llm=LlmSettings(base_url=base_url, api=api))
    assert choose_strategy("auto", settings) == expected
    assert choose_strategy("offline", settings) == "offline"


def test_is_openai_host() -> None:
    assert is_openai_host("https://api.openai.com/v1")
    assert not is_openai_host("https://api.openai.com.evil.test/v1")
    assert not is_openai_host(None)


def test_drop_oldest_takes_the_call_partner() -> None:
    items = [call("a", "ls"), user("u"), output("a", "files"), assistant("x")]
    rest, dropped = drop_oldest(items)
    assert dropped == 2 and rest == [user("u"), assistant("x")]
    rest, dropped = drop_oldest(rest)
    assert dropped == 1 and rest == [assistant("x")]


def test_chat_rendering_merges_roles_and_renders_tools() -> None:
    messages = to_chat_messages([user("hi"), call("a", "ls"), output("a", "x.py"), assistant("done"),
                                 {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]}])
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert "[tool call `shell` id=a]" in messages[1]["content"]
    assert "x.py" in messages[2]["content"]
    assert messages[3]["content"].startswith("done") and "think" in messages[3]["content"]


def test_backoff_grows_is_capped_and_honours_retry_after() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0)
    assert policy.delay(0, None, rng=lambda: 1.0) == 0.5
    assert policy.delay(2, None, rng=lambda: 1.0) == 2.0
    assert policy.delay(10, None, rng=lambda: 1.0) == 4.0
    assert policy.delay(3, None, rng=lambda: 0.0) == 2.0  # jitter stays in [ceiling/2, ceiling]
    assert policy.delay(3, 0.25) == 0.25
    assert policy.delay(0, 10_000) == 30.0


def test_a_second_offline_compaction_merges_the_first_summary() -> None:
    items = long_thread()
    first = offline_compact(items, target_tokens=history_tokens(items) // 4, user_message_max_tokens=20_000,
                            try_masking=False)
    later = first.items + [call("d1", "make lint"), output("d1", "error: E501 line too long in src/app/cli.py\nexit code: 2"),
                           assistant("Lint is next."), user("fix lint")]
    second = offline_compact(later, target_tokens=history_tokens(later), user_message_max_tokens=20_000,
                             try_masking=False)
    summary = second.items[-2]["content"][0]["text"]
    assert summary.count("## Errors seen") == 1
    for fact in ("KeyError: 'tenant_42'", "E501 line too long", "decided to keep the YAML loader", "src/app/config.py"):
        assert fact in summary, fact
    assert sum(map(is_summary_message, second.items)) == 1
