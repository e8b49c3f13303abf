"""The line a hook adds after a compaction (ctxd/agentmcp/notice.py): one line, naming the tool as
the agent shows it to its model."""

from __future__ import annotations

from ctxd.agentmcp.notice import recall_notice


def test_the_notice_is_one_line_naming_the_agents_tool() -> None:
    claude, codex = recall_notice("claude", 42), recall_notice("codex")
    assert "\n" not in claude and "\n" not in codex
    assert "`mcp__ctxd__recall`" in claude and "42 items" in claude and "history_item" in claude
    assert "`recall` tool of the `ctxd` MCP server" in codex and "everything" in codex
