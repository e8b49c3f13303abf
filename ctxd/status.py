"""`ctxd/status`: what the daemon knows about itself and one workspace, for `:checkhealth` and a
"Show status" command: versions, where state lives, whether the workspace is trusted, every
settings problem, the tokenizers' state and the session sources."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ctxd import __version__
from ctxd.protocol.methods import PROTOCOL_VERSION
from ctxd.tokens.counter import TOKENIZERS
from ctxd.workspace import Workspace

if TYPE_CHECKING:
    from ctxd.protocol.shapes import SourceState, Status, TokenizerState


def status(workspace: Workspace, sources: list[SourceState]) -> Status:
    return {
        "version": __version__,
        "protocolVersion": PROTOCOL_VERSION,
        "stateDir": str(workspace.state_dir),
        "trusted": workspace.trusted,
        "problems": workspace.status_problems(),
        "tokenizers": cast("list[TokenizerState]", TOKENIZERS.statuses()),  # each a TokenizerStatus
        "sources": sources,
    }
