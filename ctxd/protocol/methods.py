"""The names on the wire: every method and notification ctxd answers or sends (protocol v4)."""

from __future__ import annotations

PROTOCOL_VERSION = 4

# LSP lifecycle and the notifications ctxd takes from the client
INITIALIZE = "initialize"
INITIALIZED = "initialized"
SHUTDOWN = "shutdown"
EXIT = "exit"
CANCEL_REQUEST = "$/cancelRequest"
DID_CHANGE_WORKSPACE_FOLDERS = "workspace/didChangeWorkspaceFolders"

# ctxd's requests
RECORD = "ctxd/record"
REPORT_TOKEN_USAGE = "ctxd/reportTokenUsage"
SET_PROMPT_CONTEXT = "ctxd/setPromptContext"
USAGE = "ctxd/usage"
PROMPT = "ctxd/prompt"
COMPACT = "ctxd/compact"
ROLLBACK = "ctxd/rollback"
HISTORY = "ctxd/history"
THREADS = "ctxd/threads"
STATUS = "ctxd/status"
GHOST_SNAPSHOT = "ctxd/ghost/snapshot"
GHOST_LIST = "ctxd/ghost/list"
GHOST_RESTORE = "ctxd/ghost/restore"
GHOST_DIFF = "ctxd/ghost/diff"
GHOST_DELETE = "ctxd/ghost/delete"
UNDO = "ctxd/undo"  # v3
RECALL = "ctxd/recall"  # v3
ITEM = "ctxd/item"  # v3
SESSIONS_SYNC = "ctxd/sessions/sync"  # v4: ctxd's own tools wait for what the agents just wrote
# v4: only the session of a `ctxd acp` proxy (ownerlink.Session with role "acp") may call these
ACP_RECORD = "ctxd/acp/record"
ACP_CHECKPOINT = "ctxd/acp/checkpoint"

REQUESTS = frozenset({RECORD, REPORT_TOKEN_USAGE, SET_PROMPT_CONTEXT, USAGE, PROMPT, COMPACT, ROLLBACK, HISTORY,
                      THREADS, STATUS, GHOST_SNAPSHOT, GHOST_LIST, GHOST_RESTORE, GHOST_DIFF, GHOST_DELETE, UNDO,
                      RECALL, ITEM, SESSIONS_SYNC, ACP_RECORD, ACP_CHECKPOINT})

# notifications ctxd sends
USAGE_CHANGED = "ctxd/usageChanged"
COMPACTED = "ctxd/compacted"
THREADS_CHANGED = "ctxd/threadsChanged"
GHOST_CHANGED = "ctxd/ghostChanged"
SHOW_MESSAGE = "window/showMessage"
PROGRESS = "$/progress"

# window/showMessage types
MESSAGE_ERROR = 1
MESSAGE_WARNING = 2
MESSAGE_INFO = 3
