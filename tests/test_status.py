"""`ctxd/status` (v2): versions, state dir, trust, settings problems, tokenizers, sources."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tests.rpc import Client


def test_status_reports_trust_problems_and_tokenizers(daemon_factory: Callable[..., Client], workspace: Path,
                                                      state_dir: Path) -> None:
    (workspace / ".ctxd.toml").write_text("no_such_setting = 1\n")
    client = daemon_factory([workspace])
    status = client.request("ctxd/status", {"workspace": workspace.as_uri()})
    assert status["protocolVersion"] == 2 and status["version"]
    assert status["trusted"] is False
    assert status["stateDir"].startswith(str(state_dir))
    assert any("no_such_setting" in problem["message"] for problem in status["problems"]), status["problems"]
    assert {t["name"] for t in status["tokenizers"]} == {"o200k_base", "cl100k_base"}
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
    """PROTOCOL.md, ctxd/threads: reading a thread that does not exist creates nothing."""
    ws = workspace.as_uri()
    client.request("ctxd/record", {"workspace": ws, "thread": "real", "items": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]})
    for method in ("ctxd/usage", "ctxd/history", "ctxd/prompt"):
        client.request(method, {"workspace": ws, "thread": "ghost-town"})
    threads = [t["thread"] for t in client.request("ctxd/threads", {"workspace": ws})["threads"]]
    assert "ghost-town" not in threads and "real" in threads, threads
