"""Errors that carry their JSON-RPC code.

Domain code raises these; the server turns each into an error reply with its code and message.
They import nothing else from ctxd so that every package can raise them. Codes are protocol v2's:
JSON-RPC's and LSP's own meanings stay; ctxd's own failures use 1001-1003, outside their ranges.
"""

from __future__ import annotations


class CtxdError(Exception):
    """Base class: `code` is the JSON-RPC error code sent to the client."""

    code: int = -32603

    def __init__(self, message: str, data: object | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class InvalidRequest(CtxdError):
    """Not a valid JSON-RPC request, or not valid now (after `shutdown`, a second `initialize`)."""

    code = -32600


class MethodNotFound(CtxdError):
    code = -32601


class InvalidParams(CtxdError):
    """Bad params: unknown workspace, bad item, bad field, a followed thread written to. Nothing
    was recorded."""

    code = -32602


class InternalError(CtxdError):
    code = -32603


class ServerNotInitialized(CtxdError):
    """A request arrived before `initialize` (LSP's ServerNotInitialized)."""

    code = -32002


class Cancelled(CtxdError):
    """The client cancelled the request ($/cancelRequest). Nothing half-done is kept."""

    code = -32800


class CompactionFailed(CtxdError):
    """The compaction could not finish. The ledger is exactly as before."""

    code = 1001


class GitFailed(CtxdError):
    """git failed, or a restore would lose data it cannot protect. The repository is as before."""

    code = 1002


class StoreUnavailable(CtxdError):
    """The workspace's store cannot be used (read-only, corrupt, another workspace's, locked, disk
    full). The message names the file and what to do; other workspaces are unaffected. `kind`
    (locked, readonly, full, corrupt, cantopen, ioerr, other) lets opening tell "cannot write"
    (fall back to read-only) from the rest."""

    code = 1003

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind
