"""`ctxd mcp`: the Model Context Protocol server through which an agent reaches its own history,
budget and checkpoints (backend.py: the workspace, the session and the tools, asked of the owner;
protocol.py: MCP by the standard library; server.py: the tools and the entry point). Not the MCP
SDK's package `mcp`: ctxd's own modules are always imported as `ctxd.mcp`."""
