"""`ctxd/status`: what the daemon knows about itself and one workspace, for `:checkhealth` and a
"Show status" command: versions, where state lives, whether the workspace is trusted, every
settings problem, the tokenizers' state and the session sources."""

from __future__ import annotations

from typing import Any

from ctxd import __version__
from ctxd.protocol.methods import PROTOCOL_VERSION
from ctxd.tokens.counter import TOKENIZERS
from ctxd.workspace import Workspace


def status(workspace: Workspace, sources: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": __version__,
        "protocolVersion": PROTOCOL_VERSION,
        "stateDir": str(workspace.state_dir),
        "trusted": workspace.trusted,
        "problems": workspace.status_problems(),
        "tokenizers": TOKENIZERS.statuses(),
        "sources": sources,
    }
