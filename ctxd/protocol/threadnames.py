"""The thread names the protocol fixes: an ACP session's (`ctxd acp` records it, the owner stores
it). The standard library only: the proxy imports this without pydantic."""

from __future__ import annotations

import hashlib
import re

THREAD_CHARS = 256
"""The longest thread name a request may give (`ctxd.protocol.params.Params.thread`)."""
SESSION_ID_CHARS = THREAD_CHARS - len("acp:")
"""The longest session id a thread is named by as it is (`acp:` and it: the protocol's bound for a
thread's name, 256 characters). One longer, empty, holding half a surrogate pair (the owner cannot
store it as it is) or shaped like a digested name gets a name of its first characters and a digest
of it whole (`acp_thread`): refused, the name lost every record of the session."""
ID_PREFIX_CHARS = 200
_DIGESTED = re.compile(r".*~[0-9a-f]{32}", re.DOTALL)
_SURROGATE = re.compile("[\ud800-\udfff]")


def acp_thread(session_id: str) -> str:
    """`acp:<session id>`, or for an id that cannot be a thread's name as it is, `acp:<its first
    200 characters>~<32 hex digits of its SHA-256>`: the same for the same id (a restarted proxy,
    a spool's records), different for different ids (an id shaped like this is digested too)."""
    if 0 < len(session_id) <= SESSION_ID_CHARS and not _SURROGATE.search(session_id) \
            and not _DIGESTED.fullmatch(session_id):
        return f"acp:{session_id}"
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"acp:{_SURROGATE.sub(chr(0xFFFD), session_id[:ID_PREFIX_CHARS])}~{digest}"
