"""The `ctxd` command's first step: the commands an agent runs often (`ctxd hook`, `ctxd statusline`)
and the ones an agent waits for (`ctxd mcp`, `ctxd acp`) start without importing the daemon's command line (argparse, logging); everything else goes to
`ctxd.cli`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["hook"]:
        from ctxd.hooks.hook import main as hook_main

        return hook_main(argv[1:])
    if argv[:1] == ["statusline"]:
        from ctxd.statusline import main as statusline_main

        return statusline_main(argv[1:])
    if argv[:1] == ["mcp"]:  # agents start it with a timeout: it answers before anything heavy is imported
        from ctxd.mcp.server import main as mcp_main

        return mcp_main(argv[1:])
    if argv[:1] == ["acp"]:  # the editor waits for the agent behind it: no daemon imports first
        from ctxd.acp.proxy import main as acp_main

        return acp_main(argv[1:])
    from ctxd.cli import main as cli_main

    for stream in (sys.stdout, sys.stderr):  # a terminal that is not UTF-8 shows an escape, no traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        return cli_main(argv)
    except BrokenPipeError:  # `ctxd sessions | head`: the reader went away, nothing is left to say
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # (and Python's own flush at exit writes nowhere)
        return 1
