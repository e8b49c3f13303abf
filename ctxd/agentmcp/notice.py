"""The one line a hook adds after a compaction, telling the model that what was compacted can be
found again (issue #29, "told at the right time"). `ctxd hook` prints it in the agent's hook
output after the agent's own compaction (or ctxd's) only when `ctxd mcp` is installed for that
agent; deciding that is the hook's job, this module only words it."""

from __future__ import annotations

SERVER_NAME = "ctxd"  # the name `ctxd hooks install` registers the MCP server under

# The tool's name as Claude Code shows MCP tools to its model; others get the server's name beside it.
_TOOL_NAMES = {"claude": f"`mcp__{SERVER_NAME}__recall` tool"}


def recall_notice(agent: str, archived_items: int | None = None) -> str:
    """One line: earlier details are searchable with `recall` (and read whole with
    `history_item`). `archived_items`, when known, says how many items the compaction replaced."""
    tool = _TOOL_NAMES.get(agent, f"`recall` tool of the `{SERVER_NAME}` MCP server")
    what = f"the {archived_items} items" if archived_items else "everything"
    return (f"ctxd kept {what} this compaction replaced: search them with the {tool} (words or "
            "\"quoted phrases\") and read one whole with `history_item` before redoing earlier work.")
