"""`ctxd/status` (v2): versions, state dir, trust, settings problems, tokenizers, sources."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

from tests.rpc import Client


def test_status_reports_trust_problems_and_tokenizers(daemon_factory: Callable[..., Client], workspace: Path,
                                                      state_dir: Path) -> None:
    (workspace / ".ctxd.toml").write_text("no_such_setting = 1\n")
    client = daemon_factory([workspace])
    status = client.request("ctxd/status", {"workspace": workspace.as_uri()})
    assert status["protocolVersion"] == 4 and status["version"]
    assert status["trusted"] is False
    assert status["stateDir"].startswith(str(state_dir))
    assert any("no_such_setting" in problem["message"] for problem in status["problems"]), status["problems"]
    assert {t["name"] for t in status["tokenizers"]} == {"o200k_base", "cl100k_base", "qwen2.5", "qwen3.6",
                                                          "deepseek-v3", "llama3", "tekken"}
    assert all(t["status"] in ("idle", "loading", "exact") for t in status["tokenizers"]), status["tokenizers"]
    assert isinstance(status["sources"], list)

    trusting = daemon_factory([workspace], {"trusted": True})
    assert trusting.request("ctxd/status", {"workspace": workspace.as_uri()})["trusted"] is True
    assert "ctxd/status" in trusting.initialize_result["capabilities"]["experimental"]["ctxd"]["methods"]


def test_the_checked_in_schema_is_generated_from_the_shapes() -> None:
    """docs/protocol.schema.json is what the editors' types are generated from: never stale."""
    from ctxd.protocol.shapes import schema_text
    from tests.rpc import REPO

    checked_in = (REPO / "docs" / "protocol.schema.json").read_text()
    assert checked_in == schema_text(), "stale: run `python -m ctxd.protocol.shapes > docs/protocol.schema.json`"


def test_every_request_has_one_handler_one_params_shape_and_one_result_shape() -> None:
    """The wire is declared once: each request method of `methods.py` has params (`params.PARAMS`,
    in the schema too), a result shape (`shapes.RESULTS`) and a handler, and nothing else has."""
    from ctxd.protocol import methods
    from ctxd.protocol.params import PARAMS
    from ctxd.protocol.shapes import RESULTS, schema
    from ctxd.server.handlers import HANDLERS

    assert set(PARAMS) == set(RESULTS) == set(HANDLERS) == methods.REQUESTS
    assert all(HANDLERS[m][0] is PARAMS[m] for m in methods.REQUESTS)
    declared = schema()["properties"]
    assert all(f"{m.replace('/', '_')}_params" in declared for m in methods.REQUESTS)


def test_the_vscode_types_are_generated_from_the_current_schema() -> None:
    """editors/vscode/ctxd-protocol.d.ts records the SHA-256 of the schema it was generated from;
    when the shapes change, regenerate it: `cd editors/vscode && npm run gen:protocol`."""
    import hashlib

    from tests.rpc import REPO

    schema = (REPO / "docs" / "protocol.schema.json").read_bytes()
    generated = (REPO / "editors" / "vscode" / "ctxd-protocol.d.ts").read_text()
    assert f"schema sha256: {hashlib.sha256(schema).hexdigest()}" in generated, (
        "editors/vscode/ctxd-protocol.d.ts is stale: cd editors/vscode && npm run gen:protocol")


def test_reading_a_thread_that_does_not_exist_creates_nothing(client: Client, workspace: Path) -> None:
    """docs/protocol.md, ctxd/threads: reading a thread that does not exist creates nothing."""
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "thread": "real", "items": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]})
    for method in ("ctxd/usage", "ctxd/history", "ctxd/prompt"):
        client.request(method, {"workspace": ws, "thread": "ghost-town"})
    threads = [t["thread"] for t in client.request("ctxd/threads", {"workspace": ws})["threads"]]
    assert "ghost-town" not in threads and "real" in threads, threads


def test_reading_usage_writes_nothing_and_threads_sum_unloaded_threads(daemon_factory, workspace: Path,
                                                                       state_dir: Path) -> None:
    """The gauge's read path never writes (every stored row stays as it was), and
    `ctxd/threads` of a freshly started daemon reports every thread's usage as `ctxd/usage` does
    without loading the threads' items."""
    ws = workspace.as_uri()
    first = daemon_factory([workspace], {"model": "gpt-4o"})
    for thread, text in (("a", "short"), ("b", "a longer request " * 50)):
        first.request("ctxd/setPromptContext", {"workspace": ws, "thread": thread, "baseInstructions": "be brief"})
        first.request("ctxd/record", {"workspace": ws, "thread": thread, "items": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]})
    first.request("ctxd/reportTokenUsage", {"workspace": ws, "thread": "b", "usage": {"inputTokens": 900, "totalTokens": 900}})
    first.request("ctxd/record", {"workspace": ws, "thread": "b", "items": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}]})
    first.shutdown()

    [database] = (state_dir / "ctxd" / "workspaces").glob("*.sqlite3")

    def stored() -> tuple[list, list]:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            return (db.execute("SELECT * FROM threads ORDER BY thread").fetchall(),
                    db.execute("SELECT * FROM items ORDER BY thread, seq").fetchall())

    before = stored()
    # Other settings than the first daemon's: the read path still writes nothing (the facts
    # `ctxd usage` reads are updated by the next write, not by a read).
    second = daemon_factory([workspace], {"model": "gpt-4o", "contextWindow": 100_000})
    listed = {t["thread"]: t["usage"] for t in second.request("ctxd/threads", {"workspace": ws})["threads"]}
    for thread in ("a", "b"):
        usage = second.request("ctxd/usage", {"workspace": ws, "thread": thread})["usage"]
        assert listed[thread]["usedTokens"] == usage["usedTokens"] and listed[thread]["source"] == usage["source"], (thread, listed[thread], usage)
    assert listed["b"]["source"] == "api+estimate" and listed["b"]["usedTokens"] > 900
    assert listed["a"]["contextWindow"] == 100_000
    assert stored() == before, "reading usage changed a thread's stored facts"


def test_the_neovim_plugins_luacats_annotations_are_generated_from_the_shapes() -> None:
    """editors/nvim/lua/ctxd/protocol.lua is generated from ctxd/protocol/shapes.py; when the shapes
    change, regenerate it: `python -m ctxd.protocol.luacats > editors/nvim/lua/ctxd/protocol.lua`."""
    from ctxd.protocol.luacats import luacats
    from tests.rpc import REPO

    checked_in = (REPO / "editors" / "nvim" / "lua" / "ctxd" / "protocol.lua").read_text()
    assert checked_in == luacats(), "editors/nvim/lua/ctxd/protocol.lua is stale: python -m ctxd.protocol.luacats"
    assert "---@class ctxd.UsageSnapshot" in checked_in and '---@field tier "ok"|"warn"|"compact"' in checked_in
