"""Errors that carry their JSON-RPC code.

Pure modules raise these; the server turns them into JSON-RPC error responses. They know nothing
of pygls so that the ledger, store, compaction and ghost modules stay importable on their own.
"""

from __future__ import annotations


class CtxdError(Exception):
    """Base class: `code` is the JSON-RPC error code sent to the client."""

    code: int = -32603

    def __init__(self, message: str, data: object | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class InvalidParams(CtxdError):
    """Bad params: unknown workspace, bad item, bad field. Nothing was recorded."""

    code = -32602


class CompactionFailed(CtxdError):
    """The compaction could not finish. The ledger is exactly as before."""

    code = -32001


class GitFailed(CtxdError):
    """git failed, or the workspace is not a repository. The repository is as before."""

    code = -32002


class Cancelled(CtxdError):
    """The client cancelled the request ($/cancelRequest). Nothing half-done is kept."""

    code = -32800


class ServerNotInitialized(CtxdError):
    """A request arrived before `initialize` (LSP's ServerNotInitialized)."""

    code = -32002
