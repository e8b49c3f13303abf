"""A minimal stdio MCP server, the standard library only: the reference beside `ctxd mcp` in
bench_agents.py ("hooks + bare MCP"). It lists the tools of the JSON file it is given (ctxd's own,
so the agent sends the model the same tool definitions) and answers nothing else: what the agent
then pays is what any Python MCP server with ctxd's tools costs it, not ctxd's work.

    python bench/bare_mcp.py TOOLS.json
"""

from __future__ import annotations

import json
import sys

LISTS = {"resources/list": "resources", "resources/templates/list": "resourceTemplates", "prompts/list": "prompts"}


def main(tools_file: str) -> None:
    with open(tools_file, encoding="utf-8") as handle:
        tools = json.load(handle)
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or "id" not in message:
            continue  # a notification
        method = message.get("method")
        if method == "initialize":
            asked = (message.get("params") or {}).get("protocolVersion") or "2025-06-18"
            result = {"protocolVersion": asked, "capabilities": {"tools": {}, "resources": {}},
                      "serverInfo": {"name": "ctxd", "version": "0"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method in LISTS:
            result = {LISTS[method]: []}
        elif method == "ping":
            result = {}
        else:
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "not served"}}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
            continue
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
