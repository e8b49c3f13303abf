"""Codex's own unit tests, ported to ctxd's wire protocol: each drives the real daemon subprocess and
names the Codex test it ports (repository openai/codex). Where ctxd deliberately differs, the port
is left out here and docs/protocol.md ("Where ctxd differs from Codex") says why."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, Step
from tests.helpers import assistant, call, output, user
from tests.rpc import Client

KEY_ENV = {"FAKE_OPENAI_KEY": "sk-parity-0123456789"}
GHOST = {"type": "ghost_snapshot", "ghost_commit": {"id": "a" * 40, "parent": None}}
TEXT_ONLY_IMAGE = "image content omitted because you do not support image input"


def developer(*texts: str) -> dict[str, Any]:
    return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": t} for t in texts]}


def custom_call(call_id: str, name: str = "apply_patch", text: str = "{}") -> dict[str, Any]:
    return {"type": "custom_tool_call", "call_id": call_id, "name": name, "input": text}


def custom_output(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "custom_tool_call_output", "call_id": call_id, "output": text}


def image(url: str) -> dict[str, Any]:
    return {"type": "input_image", "image_url": url}


class Thread:
    """One thread of one workspace, through the real client."""

    def __init__(self, client: Client, workspace: Path, thread: str = "default") -> None:
        self.client, self.ws, self.thread = client, workspace.as_uri(), thread

    def call(self, method: str, **params: Any) -> Any:
        return self.client.request(method, {"workspace": self.ws, "thread": self.thread, **params})

    def record(self, *items: dict[str, Any]) -> dict[str, Any]:
        return self.call("ctxd/record", items=list(items))

    def items(self) -> list[dict[str, Any]]:
        return self.call("ctxd/history")["items"]

    def prompt(self, **params: Any) -> dict[str, Any]:
        return self.call("ctxd/prompt", **params)

    def used(self) -> int:
        return self.call("ctxd/usage")["usage"]["usedTokens"]


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def llm_options(fake: FakeOpenAI, api: str = "responses", **extra: Any) -> dict[str, Any]:
    return {"llm": {"baseUrl": fake.base_url, "model": "fake-model", "api": api, "apiKeyEnv": "FAKE_OPENAI_KEY",
                    "maxRetries": 0, "retryBudgetSeconds": 10, "timeoutSeconds": 10}, **extra}


def thread_of(daemon_factory: Callable[..., Client], workspace: Path, options: dict[str, Any] | None = None,
              name: str = "default") -> Thread:
    return Thread(daemon_factory([workspace], options, env=KEY_ENV), workspace, name)


# --- history_tests.rs: what is recorded ------------------------------------------------------------


def test_system_messages_are_not_recorded(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::filters_non_api_messages
    t = thread_of(daemon_factory, workspace)
    reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "summary"}],
                 "content": [{"type": "reasoning_text", "text": "thinking..."}]}
    system = {"type": "message", "role": "system", "content": [{"type": "output_text", "text": "ignored"}]}
    t.record(system, reasoning)
    t.record(user("hi"), assistant("hello"))
    assert t.items() == [reasoning, user("hi"), assistant("hello")]


@pytest.mark.parametrize("kind, make", [
    ("function", lambda text: output("call-100", text)),
    ("custom", lambda text: custom_output("tool-200", text)),
])
def test_recording_truncates_tool_outputs(daemon_factory, workspace, kind, make) -> None:
    # Codex: history_tests.rs::record_items_truncates_function_call_output_content
    # Codex: history_tests.rs::record_items_truncates_custom_tool_call_output_content
    t = thread_of(daemon_factory, workspace, {"toolOutputTokenLimit": 1000})
    long_output = ("a very long line to trigger truncation\n" if kind == "function"
                   else "custom output that is very long\n") * 2500
    t.record(make(long_output))
    [stored] = t.items()
    assert stored["output"] != long_output and "tokens truncated" in stored["output"]


def test_recording_respects_a_small_token_limit(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::record_items_respects_custom_token_limit
    t = thread_of(daemon_factory, workspace, {"toolOutputTokenLimit": 10})
    t.record(output("call-custom-limit", "tokenized content repeated many times " * 200))
    assert "tokens truncated" in t.items()[0]["output"]


# Codex truncates a recorded output to 1.2x the policy; a limit of 2083 gives its Tokens(2500).
EXEC_LIMIT = 2083


@pytest.mark.parametrize("name, content, first, removed", [
    ("format_exec_output_truncates_large_error",
     "very long execution error line that should trigger truncation\n" * 2500,
     "very long execution error line that should trigger truncation\n", 36250),
    ("format_exec_output_marks_byte_truncation_without_omitted_lines", "a" * 20_000, "a", 2500),
    ("format_exec_output_reports_omitted_lines_and_keeps_head_and_tail",
     "".join(f"line-{i}-{'x' * 64}\n" for i in range(2000)), "line-0-", 34_723),
    ("format_exec_output_prefers_line_marker_when_both_limits_exceeded",
     "".join(f"line-{i}-{'x' * 256}\n" for i in range(300)), "line-0-", 17_423),
])
def test_exec_output_truncation_vectors(daemon_factory, workspace, name, content, first, removed) -> None:
    # Codex: history_tests.rs::format_exec_output_truncates_large_error
    # Codex: history_tests.rs::format_exec_output_marks_byte_truncation_without_omitted_lines
    # Codex: history_tests.rs::format_exec_output_reports_omitted_lines_and_keeps_head_and_tail
    # Codex: history_tests.rs::format_exec_output_prefers_line_marker_when_both_limits_exceeded
    t = thread_of(daemon_factory, workspace, {"toolOutputTokenLimit": EXEC_LIMIT})
    t.record(call("c"), output("c", content))
    stored = t.items()[1]["output"]
    match = re.fullmatch(r"(?s)(?P<body>.*?)…(?P<removed>\d+) tokens truncated…(?P<tail>.*)", stored)
    assert match, stored[:200]
    assert match["body"].startswith(first) and len(match["body"].encode()) <= 10_000
    assert int(match["removed"]) == removed
    assert "omitted" not in stored
    if name == "format_exec_output_reports_omitted_lines_and_keeps_head_and_tail":
        assert "line-1999-" in match["tail"]


def test_exec_output_within_the_limit_is_unchanged(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::format_exec_output_returns_original_when_within_limits
    t = thread_of(daemon_factory, workspace, {"toolOutputTokenLimit": EXEC_LIMIT})
    content = "example output\n" * 10
    t.record(call("c"), output("c", content))
    assert t.items()[1]["output"] == content


def test_an_output_a_client_already_truncated_is_not_cut_again(daemon_factory, workspace) -> None:
    # Codex: with_serialization_allowance (output-truncation/src/lib.rs): 1.2x the limit at record
    # time, so a client's own "…N tokens truncated…" marker survives instead of a misleading new one.
    t = thread_of(daemon_factory, workspace, {"toolOutputTokenLimit": 1000})
    already = "h" * 2000 + "…2224 tokens truncated…" + "t" * 2000  # about 1006 tokens: over 1000, under 1200
    t.record(call("c"), output("c", already))
    assert t.items()[1]["output"] == already


# --- output-truncation and string truncation tests -------------------------------------------------


@pytest.mark.parametrize("limit, text, expected", [
    # Codex: string/src/truncate/tests.rs::truncate_with_token_budget_reports_truncation_at_zero_limit
    (0, "abcdef", "…2 tokens truncated…"),
    # Codex: string/src/truncate/tests.rs::truncate_with_token_budget_returns_original_when_under_limit
    (100, "short output", "short output"),
    # Codex: string/src/truncate/tests.rs::truncate_middle_tokens_handles_utf8_content (Tokens(8) = 1.2 x 6)
    (6, "😀😀😀😀😀😀😀😀😀😀\nsecond line with text\n", "😀😀😀😀…8 tokens truncated… line with text\n"),
    # Codex: output-truncation/src/truncate_tests.rs::truncate_tokens_under_limit_returns_original
    (10, "example output", "example output"),
    # Codex: output-truncation/src/truncate_tests.rs::truncate_tokens_over_limit_returns_truncated (Tokens(5) = 1.2 x 4;
    # the "Total output lines" header is the tool layer's: docs/protocol.md, "Where ctxd differs from Codex")
    (4, "this is an example of a long output that should be truncated", "this is an…10 tokens truncated… truncated"),
    # Codex: output-truncation/src/truncate_tests.rs::truncate_tokens_reports_original_line_count_when_truncated
    # (Tokens(10) = 1.2 x 8; the header likewise)
    (8, "this is an example of a long output that should be truncated\nalso some other line",
     "this is an example o…11 tokens truncated…also some other line"),
])
def test_middle_truncation_vectors(daemon_factory, workspace, limit, text, expected) -> None:
    t = thread_of(daemon_factory, workspace, {"toolOutputTokenLimit": limit})
    t.record(call("c"), output("c", text))
    assert t.items()[1]["output"] == expected


def test_a_list_output_shares_one_budget_and_reports_omitted_parts(daemon_factory, workspace) -> None:
    # Codex: output-truncation/src/truncate_tests.rs::truncates_across_multiple_under_limit_texts_and_reports_omitted
    # Codex: history_tests.rs::truncates_across_multiple_under_limit_texts_and_reports_omitted
    chunk = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
             "upsilon phi chi psi omega.\n")
    chunk_tokens = (len(chunk) + 3) // 4
    t = thread_of(daemon_factory, workspace, {"toolOutputTokenLimit": chunk_tokens * 3 * 10 // 12})  # x1.2 = 3 chunks
    text = lambda s: {"type": "input_text", "text": s}  # noqa: E731 - a one-line helper, named for the reader
    img = image("img:mid")
    parts = [text(chunk), text(chunk), img, text(chunk * 10), text(chunk), text(chunk)]
    t.record(call("c"), {"type": "function_call_output", "call_id": "c", "output": parts})
    stored = t.items()[1]["output"]
    assert len(stored) == 5
    assert stored[0] == text(chunk) and stored[1] == text(chunk) and stored[2] == img
    assert "tokens truncated" in stored[3]["text"]
    assert "omitted 2 text items" in stored[4]["text"]


# --- history_tests.rs: what the model is sent ------------------------------------------------------


def test_prompt_drops_ghost_snapshots(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::get_history_for_prompt_drops_ghost_commits
    t = thread_of(daemon_factory, workspace)
    t.record(GHOST)
    assert t.prompt()["items"] == [] and t.items() == [GHOST]


def test_prompt_adds_missing_outputs_and_drops_orphans(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::normalize_adds_missing_output_for_function_call
    # Codex: history_tests.rs::normalize_adds_missing_output_for_custom_tool_call
    # Codex: history_tests.rs::normalize_removes_orphan_function_call_output
    # Codex: history_tests.rs::normalize_removes_orphan_custom_tool_call_output
    # Codex: history_tests.rs::normalize_mixed_inserts_and_removals
    # Codex: history_tests.rs::normalize_adds_missing_output_for_function_call_inserts_output
    t = thread_of(daemon_factory, workspace)
    f1 = {"type": "function_call", "call_id": "c1", "name": "f1", "arguments": "{}"}
    t1 = custom_call("t1", "tool")
    t.record(f1, output("c2"), t1, custom_output("orphan-2"))
    assert t.prompt()["items"] == [f1, {"type": "function_call_output", "call_id": "c1", "output": "aborted"},
                                   t1, {"type": "custom_tool_call_output", "call_id": "t1", "output": "aborted"}]
    assert len(t.items()) == 4  # the stored ledger is not changed by a prompt


def test_prompt_strips_images_for_a_text_only_model(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::for_prompt_strips_images_when_model_does_not_support_images
    t = thread_of(daemon_factory, workspace)
    look = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "look at this"}, {**image("https://example.com/img.png"), "detail": "high"},
        {"type": "input_text", "text": "caption"}]}
    view = {"type": "function_call", "call_id": "call-1", "name": "view_image", "arguments": "{}"}
    result = {"type": "function_call_output", "call_id": "call-1", "output": [
        {"type": "input_text", "text": "image result"}, image("https://example.com/result.png")]}
    repl = custom_call("tool-1", "js_repl", "view_image")
    repl_out = {"type": "custom_tool_call_output", "call_id": "tool-1", "output": [
        {"type": "input_text", "text": "js repl result"}, image("https://example.com/js-repl-result.png")]}
    t.record(look, view, result, repl, repl_out)
    placeholder = {"type": "input_text", "text": TEXT_ONLY_IMAGE}
    stripped = t.prompt(inputModalities=["text"])["items"]
    assert stripped == [
        {**look, "content": [look["content"][0], placeholder, look["content"][2]]},
        view, {**result, "output": [result["output"][0], placeholder]},
        repl, {**repl_out, "output": [repl_out["output"][0], placeholder]},
    ]
    assert t.prompt()["items"] == [look, view, result, repl, repl_out]  # with image support, kept


# --- history_tests.rs: rollback --------------------------------------------------------------------


def test_rollback_preserves_the_prefix(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::drop_last_n_user_turns_preserves_prefix
    t = thread_of(daemon_factory, workspace)
    items = [assistant("session prefix item"), user("u1"), assistant("a1"), user("u2"), assistant("a2")]
    t.record(*items)
    t.call("ctxd/rollback", turns=1)
    assert t.prompt()["items"] == items[:3]
    t.record(*items[3:])
    t.call("ctxd/rollback", turns=99)
    assert t.prompt()["items"] == items[:1]


SESSION_PREFIX = [
    user("<environment_context>ctx</environment_context>"),
    user("# AGENTS.md instructions for test_directory\n\n<INSTRUCTIONS>\ntest_text\n</INSTRUCTIONS>"),
    user("<skill>\n<name>demo</name>\n<path>skills/demo/SKILL.md</path>\nbody\n</skill>"),
    user("<user_shell_command>echo 42</user_shell_command>"),
    user('<subagent_notification>{"agent_id":"a","status":"completed"}</subagent_notification>'),
]


@pytest.mark.parametrize("turns, kept", [(1, 7), (2, 5), (3, 5)])
def test_rollback_ignores_injected_user_messages(daemon_factory, workspace, turns, kept) -> None:
    # Codex: history_tests.rs::drop_last_n_user_turns_ignores_session_prefix_user_messages
    t = thread_of(daemon_factory, workspace)
    items = [*SESSION_PREFIX, user("turn 1 user"), assistant("turn 1 assistant"),
             user("turn 2 user"), assistant("turn 2 assistant")]
    t.record(*items)
    t.call("ctxd/rollback", turns=turns)
    assert t.prompt()["items"] == items[:kept]


def test_rollback_trims_the_context_updates_above_the_rolled_back_turn(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::drop_last_n_user_turns_trims_context_updates_above_rolled_back_turn
    t = thread_of(daemon_factory, workspace)
    first = [assistant("session prefix item"), user("turn 1 user"), assistant("turn 1 assistant")]
    t.record(*first)
    t.call("ctxd/setPromptContext", baseInstructions="You are a coding agent.")  # the reference baseline
    images = developer("Generated images are saved to /tmp as /tmp/image-1.png by default.")
    t.record(images, developer("<apps_instructions>\nROLLED_BACK_APPS_INSTRUCTIONS"),
             developer("<plugins_instructions>\nROLLED_BACK_PLUGIN_INSTRUCTIONS"),
             developer("<collaboration_mode>ROLLED_BACK_DEV_INSTRUCTIONS</collaboration_mode>"),
             developer("<multi_agent_mode>ROLLED_BACK_MULTI_AGENT_MODE</multi_agent_mode>"),
             user("<environment_context><cwd>PRETURN_CONTEXT_DIFF_CWD</cwd></environment_context>"),
             user("turn 2 user"), assistant("turn 2 assistant"))
    t.call("ctxd/rollback", turns=1)
    prompt = t.prompt()
    assert prompt["items"] == [*first, images]
    assert prompt["reinjectContext"] is False  # the reference baseline is kept


def test_rollback_of_a_mixed_developer_bundle_clears_the_reference(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::drop_last_n_user_turns_clears_reference_context_for_mixed_developer_context_bundles
    t = thread_of(daemon_factory, workspace)
    first = [user("turn 1 user"), assistant("turn 1 assistant")]
    t.record(*first)
    t.call("ctxd/setPromptContext", baseInstructions="You are a coding agent.")
    t.record(developer("<permissions instructions>contextual permissions</permissions instructions>",
                       "persistent plugin instructions"),
             user("<environment_context><cwd>PRETURN_CONTEXT_DIFF_CWD</cwd></environment_context>"),
             user("turn 2 user"), assistant("turn 2 assistant"))
    assert t.prompt()["reinjectContext"] is False
    t.call("ctxd/rollback", turns=1)
    prompt = t.prompt()
    assert prompt["items"] == first
    assert prompt["reinjectContext"] is True


def test_rollback_without_user_turns_changes_nothing(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::drop_last_n_user_turns_without_user_turns_is_a_true_noop
    t = thread_of(daemon_factory, workspace)
    version = t.record(assistant("session prefix item"))["historyVersion"]
    result = t.call("ctxd/rollback", turns=1)
    assert result["removedItems"] == 0 and result["historyVersion"] == version
    assert t.items() == [assistant("session prefix item")]


def test_a_legacy_inter_agent_assistant_message_does_not_start_a_turn(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::legacy_inter_agent_assistant_messages_are_not_turn_boundaries
    t = thread_of(daemon_factory, workspace)
    legacy = assistant("author: /root\nrecipient: /root/worker\nother_recipients: []\nContent: continue")
    t.record(user("first"), assistant("done"), user("second"), legacy, assistant("worker reply"))
    t.call("ctxd/rollback", turns=1)
    assert t.items() == [user("first"), assistant("done")]


def test_prompt_keeps_inter_agent_assistant_messages(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::for_prompt_preserves_inter_agent_assistant_messages
    t = thread_of(daemon_factory, workspace)
    message = assistant(json.dumps({"author": "/root", "recipient": "/root/worker", "other_recipients": [],
                                    "content": "continue", "trigger_turn": True}))
    t.record(message)
    assert t.items() == [message] and t.prompt()["items"] == [message]


# --- history_tests.rs (newest): reasoning before the latest user message is not sent -------------


def reasoning(text: str, encrypted: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "summary": [{"type": "summary_text", "text": f"summary: {text}"}],
                            "content": [{"type": "reasoning_text", "text": text}]}
    if encrypted is not None:
        item.update(id="rs_all_fields", encrypted_content=encrypted)
    return item


RESOLVED = reasoning("private reasoning", "ZW5jcnlwdGVkIHJlYXNvbmluZw==")
AGENTS_FRAGMENT = user("# AGENTS.md instructions\n\n<INSTRUCTIONS>\ncontext only\n</INSTRUCTIONS>")
LEGACY_INTER_AGENT = assistant("author: /root\nrecipient: /root/worker\nother_recipients: []\nContent: continue")


@pytest.mark.parametrize("items, sent", [
    # Codex: history_tests.rs::for_prompt_preserves_reasoning_when_no_instruction_boundary_exists
    ([RESOLVED, assistant("done")], [0, 1]),
    # Codex: history_tests.rs::for_prompt_evicts_entire_reasoning_item_before_latest_boundary_without_mutating_raw_history
    ([RESOLVED, user("next instruction")], [1]),
    # Codex: history_tests.rs::for_prompt_keeps_current_group_reasoning_through_tool_output_until_next_boundary
    ([custom_call("call-current", "test_tool"), reasoning("current reasoning"),
      custom_output("call-current", "tool result")], [0, 1, 2]),
    ([custom_call("call-current", "test_tool"), reasoning("current reasoning"),
      custom_output("call-current", "tool result"), user("new instruction")], [0, 2, 3]),
    # Codex: history_tests.rs::for_prompt_uses_all_instruction_boundary_kinds (the user message kind)
    ([reasoning("resolved"), user("user instruction")], [1]),
    # Codex: history_tests.rs::for_prompt_does_not_treat_contextual_user_or_legacy_assistant_text_as_boundaries
    ([reasoning("still active"), AGENTS_FRAGMENT, LEGACY_INTER_AGENT], [0, 1, 2]),
    # Codex: history_tests.rs::for_prompt_evicts_multiple_completed_groups_and_keeps_current_reasoning
    ([reasoning("before first"), user("first"), reasoning("before second"), user("second"), reasoning("current")],
     [1, 3, 4]),
    # Codex: history_tests.rs::for_prompt_projects_before_normalizing_retained_call_output_pairs
    ([reasoning("resolved"), custom_call("call-paired", "test_tool"), user("next instruction"),
      custom_output("call-paired", "tool result")], [1, 2, 3]),
], ids=["no-boundary", "evicted", "current-group", "next-boundary", "user-boundary", "not-boundaries",
        "several-groups", "pairs-kept"])
def test_prompt_leaves_out_reasoning_before_the_latest_user_message(daemon_factory, workspace, items, sent) -> None:
    t = thread_of(daemon_factory, workspace)
    t.record(*items)
    assert t.prompt()["items"] == [items[i] for i in sent]
    assert t.items() == items  # the stored ledger keeps every item


# --- history_tests.rs: token estimates -------------------------------------------------------------


def test_items_after_the_api_total_are_added_to_it(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::total_token_usage_includes_all_items_after_last_model_generated_item
    # Codex: history_tests.rs::items_after_last_model_generated_tokens_include_user_and_tool_output
    client = daemon_factory([workspace])
    with_api, alone, tail = (Thread(client, workspace, name) for name in ("api", "alone", "tail"))
    added = [user("new user message"), custom_output("tool-tail", "new tool output")]
    with_api.record(assistant("already counted by API"))
    with_api.call("ctxd/reportTokenUsage", usage={"inputTokens": 80, "outputTokens": 20, "totalTokens": 100})
    snapshot = with_api.record(*added)["usage"]
    alone.record(assistant("already counted by API"))
    tail.record(assistant("already counted by API"), *added)
    assert snapshot["usedTokens"] == 100 + tail.used() - alone.used()
    assert snapshot["source"] == "api+estimate"


def test_a_tool_output_after_the_api_total_is_added_to_it(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::total_token_usage_keeps_server_snapshot_plus_same_group_tool_tail_in_both_modes
    client = daemon_factory([workspace])
    with_api, alone, tail = (Thread(client, workspace, name) for name in ("api", "alone", "tail"))
    added = custom_output("tool-tail", "new tool output")
    with_api.record(assistant("already counted by API"))
    with_api.call("ctxd/reportTokenUsage", usage={"inputTokens": 80, "outputTokens": 20, "totalTokens": 100})
    snapshot = with_api.record(added)["usage"]
    alone.record(assistant("already counted by API"))
    tail.record(assistant("already counted by API"), added)
    assert snapshot["usedTokens"] == 100 + tail.used() - alone.used()


def test_a_new_api_total_replaces_the_estimate(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::total_token_usage_refreshes_from_server_after_next_model_response
    t = thread_of(daemon_factory, workspace)
    t.record({"type": "reasoning", "summary": [], "encrypted_content": "a" * 2000}, assistant("old response"),
             user("new instruction"))
    t.call("ctxd/reportTokenUsage", usage={"inputTokens": 49_000, "outputTokens": 1000, "totalTokens": 50_000})
    t.record(assistant("fresh response"))
    snapshot = t.call("ctxd/reportTokenUsage", usage={"inputTokens": 200, "outputTokens": 22, "totalTokens": 222})
    assert snapshot["usedTokens"] == 222 and snapshot["source"] == "api"


def test_inline_images_cost_a_fixed_amount_not_their_payload(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::image_data_url_payload_does_not_dominate_message_estimate
    # Codex: history_tests.rs::image_data_url_payload_does_not_dominate_function_call_output_estimate
    # Codex: history_tests.rs::image_data_url_payload_does_not_dominate_custom_tool_call_output_estimate
    # Codex: history_tests.rs::multiple_inline_images_apply_multiple_fixed_costs
    # Codex: history_tests.rs::mixed_case_data_url_markers_are_adjusted
    # Codex: history_tests.rs::text_only_items_unchanged
    client = daemon_factory([workspace])
    image_cost = (7373 + 3) // 4  # RESIZED_IMAGE_BYTES_ESTIMATE, in tokens
    text_part = {"type": "input_text", "text": "Here is the screenshot"}

    def used(name: str, *content: dict[str, Any]) -> int:
        return Thread(client, workspace, name).record(
            {"type": "message", "role": "user", "content": [text_part, *content]})["usage"]["usedTokens"]

    text_only = used("text")
    one = used("one", image("data:image/png;base64," + "A" * 100_000))
    assert one - text_only == image_cost
    assert used("mixed-case", image("DATA:image/png;BASE64," + "F" * 1024)) - text_only == image_cost
    two = used("two", image("data:image/png;base64," + "D" * 100), image("data:image/jpeg;base64," + "E" * 200))
    assert two - text_only == 2 * image_cost
    for kind in ("function_call_output", "custom_tool_call_output"):
        thread = Thread(client, workspace, kind)
        plain = thread.record({"type": kind, "call_id": "p", "output": [text_part]})["usage"]["usedTokens"]
        with_image = thread.record({"type": kind, "call_id": "q", "output": [
            text_part, image("data:image/png;base64," + "B" * 50_000)]})["usage"]["usedTokens"]
        assert with_image - 2 * plain == image_cost


def test_encrypted_reasoning_costs_its_decoded_size(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::non_last_reasoning_tokens_ignore_entries_after_last_user
    # (one encrypted reasoning item of 1,000 base64 characters: (1000 * 3/4 - 650) / 4 = 25 tokens)
    t = thread_of(daemon_factory, workspace)
    reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "summary"}],
                 "encrypted_content": "a" * 1000}
    assert t.record(reasoning)["usage"]["usedTokens"] == 25


def test_short_encrypted_reasoning_costs_nothing(daemon_factory, workspace) -> None:
    # Codex: history_tests.rs::non_last_reasoning_tokens_return_zero_when_no_user_messages
    # (800 base64 characters decode to 600 bytes, under the 650-byte overhead: 0 tokens, never fewer)
    t = thread_of(daemon_factory, workspace)
    item = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "summary"}], "encrypted_content": "a" * 800}
    assert t.record(item)["usage"]["usedTokens"] == 0


# --- history_tests.rs / compaction requests: remove_first_item ------------------------------------


@pytest.mark.parametrize("pair", [
    # Codex: history_tests.rs::remove_first_item_removes_matching_call_for_output
    [output("call-2"), {"type": "function_call", "call_id": "call-2", "name": "do_it", "arguments": "{}"}],
    # Codex: history_tests.rs::remove_first_item_removes_matching_output_for_function_call
    [{"type": "function_call", "call_id": "call-1", "name": "do_it", "arguments": "{}"}, output("call-1")],
    # Codex: history_tests.rs::remove_first_item_handles_custom_tool_pair
    [custom_call("tool-1", "my_tool"), custom_output("tool-1")],
], ids=["output-first", "call-first", "custom"])
def test_trimming_an_overflowing_request_drops_a_tool_pair_whole(daemon_factory, workspace, fake, pair) -> None:
    fake.max_input_items = 3  # two items and the instruction
    t = thread_of(daemon_factory, workspace, llm_options(fake))
    t.record(*pair, assistant("findings: " + "the parser drops escaped quotes. " * 60), assistant("b"))
    result = t.call("ctxd/compact", strategy="llm")
    assert result["strategy"] == "llm" and result["trimmedItems"] == 2
    accepted = fake.requests[-1].body["input"]
    assert [item["type"] for item in accepted] == ["message", "message", "message"]
    for request in fake.requests:  # a strict endpoint rejects a call without its output, or the reverse
        sent = request.body["input"]
        calls = {i["call_id"] for i in sent if i["type"] in ("function_call", "custom_tool_call")}
        outputs = {i["call_id"] for i in sent if i["type"] in ("function_call_output", "custom_tool_call_output")}
        assert calls == outputs


# --- compact_tests.rs: what a compaction keeps -----------------------------------------------------


def kept_user_texts(items: list[dict[str, Any]]) -> list[str]:
    return [item["content"][0]["text"] for item in items
            if item.get("role") == "user" and not item["content"][0]["text"].startswith("[Handoff summary]")]


LONG_OUTPUT = "".join(f"tests/test_cli.py::test_{n} PASSED\n" for n in range(200))


def test_a_compaction_asked_for_replaces_even_a_short_thread(daemon_factory, workspace, fake) -> None:
    # Codex: suite/compact.rs::summarize_context_three_requests_and_instructions (a manual compaction of
    # a one-turn thread: the next request holds the user's message and the summary, no assistant reply)
    fake.summary = "SUMMARY_ONLY_CONTEXT"
    t = thread_of(daemon_factory, workspace, llm_options(fake, api="chat"))
    t.record(user("hello world"), assistant("FIRST_REPLY"))
    t.call("ctxd/compact", strategy="llm")
    t.record(user("next turn"))
    sent = t.prompt()["items"]
    assert [item["role"] for item in sent] == ["user", "user", "user"]
    assert sent[0] == user("hello world") and sent[2] == user("next turn")
    assert sent[1]["content"][0]["text"].endswith("\nSUMMARY_ONLY_CONTEXT")
    assert fake.requests[0].body["messages"][-1]["content"] not in json.dumps(sent)  # not the instruction


@pytest.mark.parametrize("strategy", ["llm", "offline"])
def test_compaction_keeps_only_what_the_user_typed(daemon_factory, workspace, fake, strategy) -> None:
    # Codex: compact_tests.rs::collect_user_messages_extracts_user_text_only
    # Codex: compact_tests.rs::collect_user_messages_filters_session_prefix_entries
    # Codex: compact_tests.rs::collect_user_messages_filters_legacy_warnings
    t = thread_of(daemon_factory, workspace, llm_options(fake, api="chat"))
    t.record(
        assistant("ignored"),
        user("# AGENTS.md instructions for project\n\n<INSTRUCTIONS>\ndo things\n</INSTRUCTIONS>"),
        user("<ENVIRONMENT_CONTEXT>cwd=/tmp</ENVIRONMENT_CONTEXT>"),
        user("<skill>\n<name>demo</name>\nbody\n</skill>"),
        user("Warning: The maximum number of unified exec processes you can keep open is 60 and you currently "
             "have 61 processes open. Reuse older processes or close them to prevent automatic pruning of old "
             "processes"),
        user("Warning: apply_patch was requested via exec_command. Use the apply_patch tool instead of exec_command."),
        user("Warning: Your account was flagged for potentially high-risk cyber activity and this request was "
             "routed to gpt-5.2 as a fallback."),
        user("real user message"), call("c"), output("c", LONG_OUTPUT), assistant("done"))
    t.call("ctxd/compact", strategy=strategy)
    assert kept_user_texts(t.items()) == ["real user message"]


@pytest.mark.parametrize("strategy", ["llm", "offline"])
def test_compaction_keeps_a_message_s_non_empty_text_parts_and_skips_image_only_ones(daemon_factory, workspace, fake,
                                                                                    strategy) -> None:
    # Codex: compact_tests.rs::content_items_to_text_joins_non_empty_segments
    # Codex: compact_tests.rs::content_items_to_text_ignores_image_only_content
    t = thread_of(daemon_factory, workspace, llm_options(fake, api="chat"))
    parts = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "hello"}, {"type": "output_text", "text": ""},
        {"type": "output_text", "text": "world"}]}
    only_image = {"type": "message", "role": "user", "content": [image("file://image.png")]}
    t.record(parts, only_image, call("c"), output("c", LONG_OUTPUT), assistant("done"))
    t.call("ctxd/compact", strategy=strategy)
    assert kept_user_texts(t.items()) == ["hello\nworld"]


def test_compaction_keeps_a_user_message_s_turn_metadata(daemon_factory, workspace, fake) -> None:
    # Codex: compact_tests.rs::build_compacted_history_preserves_user_message_passthrough_metadata
    t = thread_of(daemon_factory, workspace, llm_options(fake, api="chat"))
    metadata = {"turn_id": "turn-1"}
    first = {**user("first user message"), "internal_chat_message_metadata_passthrough": metadata}
    t.record(first, call("c"), output("c", LONG_OUTPUT), assistant("done"))
    t.call("ctxd/compact", strategy="llm")
    kept, summary = t.items()
    assert kept == first
    assert "internal_chat_message_metadata_passthrough" not in summary


def test_an_overlong_kept_user_message_is_truncated_and_the_summary_comes_last(daemon_factory, workspace,
                                                                                fake) -> None:
    # Codex: compact_tests.rs::build_token_limited_compacted_history_truncates_overlong_user_messages
    # Codex: compact_tests.rs::build_token_limited_compacted_history_appends_summary_message
    fake.summary = "SUMMARY"
    t = thread_of(daemon_factory, workspace, llm_options(fake, api="chat", compactUserMessageMaxTokens=16))
    big = "word " * 200
    t.record(user(big), call("c"), output("c", LONG_OUTPUT), assistant("done"), GHOST)
    t.call("ctxd/compact", strategy="llm")
    history = t.items()
    assert [item.get("role", item["type"]) for item in history] == ["user", "user", "ghost_snapshot"]
    kept = history[0]["content"][0]["text"]
    assert "tokens truncated" in kept and big not in kept
    assert history[1]["content"][0]["text"].endswith("\nSUMMARY")


def remote_thread(daemon_factory, workspace, fake) -> Thread:
    t = thread_of(daemon_factory, workspace, llm_options(fake))
    t.record(user("older user"), call("c"), output("c", LONG_OUTPUT), assistant("done"), user("latest user"), GHOST)
    t.call("ctxd/setPromptContext", baseInstructions="You are a coding agent.")
    assert t.prompt()["reinjectContext"] is False
    return t


def script_remote(fake: FakeOpenAI, *items: dict[str, Any]) -> None:
    fake.script(Step(path="/v1/responses/compact", body={"id": "cmp_1", "object": "response.compaction",
                                                         "created_at": 0, "output": list(items)}))


def test_remote_compaction_drops_developer_messages_and_asks_for_fresh_context(daemon_factory, workspace,
                                                                             fake) -> None:
    # Codex: compact_tests.rs::process_compacted_history_replaces_developer_messages
    # Codex: compact_tests.rs::process_compacted_history_reinjects_full_initial_context
    t = remote_thread(daemon_factory, workspace, fake)
    script_remote(fake, developer("stale permissions"), user("summary"), developer("stale personality"))
    t.call("ctxd/compact", strategy="remote")
    assert t.items() == [user("summary"), GHOST]
    assert t.prompt()["reinjectContext"] is True


def test_remote_compaction_drops_injected_user_messages_and_warnings(daemon_factory, workspace, fake) -> None:
    # Codex: compact_tests.rs::process_compacted_history_drops_non_user_content_messages
    # Codex: compact_tests.rs::process_compacted_history_drops_legacy_warnings
    t = remote_thread(daemon_factory, workspace, fake)
    compaction = {"type": "compaction", "encrypted_content": "ZW5jcnlwdGVk"}
    script_remote(
        fake,
        user("# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nkeep me updated\n</INSTRUCTIONS>"),
        user("<environment_context>\n  <cwd>/repo</cwd>\n  <shell>zsh</shell>\n</environment_context>"),
        user("<turn_aborted>\n  <turn_id>turn-1</turn_id>\n  <reason>interrupted</reason>\n</turn_aborted>"),
        user("Warning: apply_patch was requested via exec_command. Use the apply_patch tool instead of exec_command."),
        user("summary"),
        developer("stale developer instructions"),
        {"type": "function_call", "call_id": "x", "name": "shell", "arguments": "{}"},
        compaction,
    )
    t.call("ctxd/compact", strategy="remote")
    assert t.items() == [user("summary"), compaction, GHOST]


def test_remote_compaction_keeps_real_user_messages_and_summaries_in_order(daemon_factory, workspace,
                                                                          fake) -> None:
    # Codex: compact_tests.rs::process_compacted_history_inserts_context_before_last_real_user_message_only
    # (ctxd does not insert the fresh context itself: the client re-sends it, `reinjectContext`)
    t = remote_thread(daemon_factory, workspace, fake)
    summary = user("Another language model started to solve this problem and produced a summary of its "
                   "thinking process.\nsummary text")
    script_remote(fake, user("older user"), summary, user("latest user"))
    t.call("ctxd/compact", strategy="remote")
    assert t.items() == [user("older user"), summary, user("latest user"), GHOST]
    assert t.prompt()["reinjectContext"] is True


# --- openai_models.rs: the auto-compact limit ------------------------------------------------------


@pytest.mark.parametrize("options, limit", [
    ({"contextWindow": 200_000, "autoCompactTokenLimit": 400_000}, 180_000),
    ({"contextWindow": 200_000, "autoCompactTokenLimit": 100_000}, 100_000),
    ({"contextWindow": 200_000}, 180_000),
    ({"contextWindow": 200_000, "autoCompactRatio": 0.5}, 100_000),
])
def test_the_auto_compact_limit_is_at_most_90_percent_of_the_window(daemon_factory, workspace, options,
                                                                    limit) -> None:
    # Codex: openai_models.rs::ModelInfo::auto_compact_token_limit (min(configured, window * 9 / 10))
    t = thread_of(daemon_factory, workspace, options)
    assert t.record(user("hi"))["usage"]["autoCompactLimit"] == limit
    assert t.call("ctxd/usage")["usage"]["autoCompactLimit"] == limit


def test_the_cap_follows_a_smaller_model(daemon_factory, workspace) -> None:
    # Codex: openai_models.rs::ModelInfo::auto_compact_token_limit, with the window a thread sets
    t = thread_of(daemon_factory, workspace, {"autoCompactTokenLimit": 400_000})
    snapshot = t.call("ctxd/setPromptContext", contextWindow=16_000)
    assert snapshot["autoCompactLimit"] == 14_400 and snapshot["contextWindow"] == 16_000


def test_compacted_requests_are_json(daemon_factory, workspace, fake) -> None:
    """What a compaction sends is the projection, never a ghost snapshot (Codex never sends them)."""
    # Codex: history_tests.rs::get_history_for_prompt_drops_ghost_commits (the compaction request)
    t = thread_of(daemon_factory, workspace, llm_options(fake))
    t.record(user("fix it"), call("c"), output("c", LONG_OUTPUT), GHOST, assistant("done"))
    t.call("ctxd/compact", strategy="llm")
    sent = json.dumps(fake.requests[0].body["input"])
    assert "ghost_snapshot" not in sent and "fix it" in sent
