"""`ctxd mcp`: the Model Context Protocol server through which an agent reaches its own history,
budget and checkpoints (backend.py: the workspace, the session and the tools; server.py: the SDK)."""
