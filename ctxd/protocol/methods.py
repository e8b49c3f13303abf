"""The wire: method names, notification names, and the conversion of errors to JSON-RPC.

The only module that knows how ctxd looks on the wire besides the param models in `models.py`.
"""

from __future__ import annotations

from pygls.exceptions import JsonRpcException

from ctxd.errors import CtxdError

RECORD = "ctxd/record"
REPORT_TOKEN_USAGE = "ctxd/reportTokenUsage"
SET_PROMPT_CONTEXT = "ctxd/setPromptContext"
USAGE = "ctxd/usage"
PROMPT = "ctxd/prompt"
COMPACT = "ctxd/compact"
ROLLBACK = "ctxd/rollback"
HISTORY = "ctxd/history"
THREADS = "ctxd/threads"
GHOST_SNAPSHOT = "ctxd/ghost/snapshot"
GHOST_LIST = "ctxd/ghost/list"
GHOST_RESTORE = "ctxd/ghost/restore"

USAGE_CHANGED = "ctxd/usageChanged"
COMPACTED = "ctxd/compacted"
SHOW_MESSAGE = "window/showMessage"
PROGRESS = "$/progress"

# window/showMessage type of the warnings ctxd sends
MESSAGE_WARNING = 2


def to_rpc_error(error: CtxdError) -> JsonRpcException:
    return JsonRpcException(message=error.message, code=error.code, data=error.data)
