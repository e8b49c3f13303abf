"""ctxd: a context-window manager for AI coding agents, served over LSP-style JSON-RPC."""

__version__ = "0.1.0"

