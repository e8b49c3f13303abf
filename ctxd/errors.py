"""Errors that carry their JSON-RPC code, and the one table of those codes.

Domain code raises these; the server turns each into an error reply with its code and message
(`ctxd/server/app.py`, through `Outbox.fail`). No other module writes a code as a number: the
reader's problems (a broken frame, a body that is not JSON) become these exceptions too and are
answered the same way. They import nothing else from ctxd so that every package can raise them.
Codes are protocol v2's: JSON-RPC's and LSP's own meanings stay; ctxd's own failures use
1001-1003, outside their ranges.
"""

from __future__ import annotations

from enum import IntEnum


class Code(IntEnum):
    """Every error code ctxd sends."""

    PARSE_ERROR = -32700  # JSON-RPC: the frame or its JSON cannot be read
    INVALID_REQUEST = -32600  # JSON-RPC: not a request, or not one that is valid now
    METHOD_NOT_FOUND = -32601  # JSON-RPC
    INVALID_PARAMS = -32602  # JSON-RPC
    INTERNAL_ERROR = -32603  # JSON-RPC: a bug of ours
    SERVER_NOT_INITIALIZED = -32002  # LSP: a request before `initialize`
    REQUEST_CANCELLED = -32800  # LSP: `$/cancelRequest` reached it
    COMPACTION_FAILED = 1001  # ctxd: the ledger is exactly as before
    GIT_FAILED = 1002  # ctxd: the repository is as before
    STORE_UNAVAILABLE = 1003  # ctxd: the workspace's store cannot be used


class CtxdError(Exception):
    """Base class: `code` is the JSON-RPC error code sent to the client."""

    code: int = Code.INTERNAL_ERROR

    def __init__(self, message: str, data: object | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class ParseError(CtxdError):
    """A frame that cannot be read, or a body that is not JSON (answered with id null)."""

    code = Code.PARSE_ERROR


class InvalidRequest(CtxdError):
    """Not a valid JSON-RPC request, or not valid now (after `shutdown`, a second `initialize`)."""

    code = Code.INVALID_REQUEST


class MethodNotFound(CtxdError):
    """A request for a method ctxd does not have."""

    code = Code.METHOD_NOT_FOUND


class InvalidParams(CtxdError):
    """Bad params: unknown workspace, bad item, bad field, a followed thread written to. Nothing
    was recorded."""

    code = Code.INVALID_PARAMS


class InternalError(CtxdError):
    code = Code.INTERNAL_ERROR


class ServerNotInitialized(CtxdError):
    """A request arrived before `initialize` (LSP's ServerNotInitialized)."""

    code = Code.SERVER_NOT_INITIALIZED


class Cancelled(CtxdError):
    """The client cancelled the request ($/cancelRequest). Nothing half-done is kept."""

    code = Code.REQUEST_CANCELLED


class CompactionFailed(CtxdError):
    """The compaction could not finish. The ledger is exactly as before."""

    code = Code.COMPACTION_FAILED


class GitFailed(CtxdError):
    """git failed, or a restore would lose data it cannot protect. The repository is as before."""

    code = Code.GIT_FAILED


class StoreUnavailable(CtxdError):
    """The workspace's store cannot be used (read-only, corrupt, another workspace's, locked, disk
    full). The message names the file and what to do; other workspaces are unaffected. `kind`
    (locked, readonly, full, corrupt, cantopen, ioerr, other) lets opening tell "cannot write"
    (fall back to read-only) from the rest."""

    code = Code.STORE_UNAVAILABLE

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind
