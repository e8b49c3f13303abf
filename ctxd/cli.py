"""The `ctxd` command: the daemon (stdio by default, or TCP) and its terminal views."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctxd import __version__
from ctxd.logs import setup_logging


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxd", description="Context-window manager for AI coding agents.",
        epilog="`ctxd usage --help`: the context breakdown of a workspace's thread, in a terminal. "
               "`ctxd sessions --help`: the workspace's agent sessions. "
               "`ctxd acp -- <agent command>`: an ACP agent behind ctxd (docs/acp.md).")
    parser.add_argument("--version", action="version", version=f"ctxd {__version__}")
    parser.add_argument("--stdio", action="store_true", help="serve on stdin/stdout (the default)")
    parser.add_argument("--tcp", action="store_true",
                        help="serve one client over TCP; it must send the token written to --token-file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=2087, help="0: any free port (named in the token file's name)")
    parser.add_argument("--token-file", help="where --tcp writes its token, mode 0600 (default "
                                             "<state dir>/tcp/<port>.token)")
    parser.add_argument("--state-dir", help="where ledgers are stored (default $XDG_STATE_HOME/ctxd)")
    parser.add_argument("--log-file", help="log here instead of stderr")
    parser.add_argument("-v", "--verbose", action="store_true", help="log requests (API keys redacted)")
    parser.add_argument("--clientProcessId", help=argparse.SUPPRESS)  # some clients append it
    return parser


def run_daemon(args: argparse.Namespace) -> int:
    if not args.tcp:
        from ctxd.server import forward

        return forward.run(args)  # the owner serves it (ctxd/server/owner.py), or this process does
    from ctxd.server.app import serve_tcp
    from ctxd.server.process import daemon_process

    setup_logging(args.verbose, args.log_file)
    daemon_process()
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else None
    serve_tcp(state_dir, args.host, args.port, Path(args.token_file).expanduser() if args.token_file else None)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Every command but `ctxd hook`, `ctxd statusline`, `ctxd mcp` and `ctxd acp`, which
    `ctxd.entry` starts before this module is imported."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["usage"]:  # `ctxd usage ...`: the terminal view (ctxd/usage/report.py)
        from ctxd.usage.report import main as usage_main

        return usage_main(argv[1:])
    if argv[:1] == ["sessions"]:  # `ctxd sessions ...`: the workspace's agent sessions (ctxd/sessions/overview.py)
        from ctxd.sessions.overview import main as sessions_main

        return sessions_main(argv[1:])
    if argv[:1] == ["hooks"]:  # `ctxd hooks install|uninstall|status` (ctxd/hooks/install.py)
        from ctxd.hooks.install import main as hooks_main

        return hooks_main(argv[1:])
    if argv[:1] == ["owner"]:  # the owner of a state dir, started by the first client that needs one
        from ctxd.server.owner import main as owner_main

        owner = argparse.ArgumentParser(prog="ctxd owner")
        owner.add_argument("--state-dir", required=True)
        owner.add_argument("--detach", action="store_true")
        owner.add_argument("--keep", help="a folder to watch for the hooks from the start")
        known = owner.parse_args(argv[1:])
        return owner_main(Path(known.state_dir), detached=known.detach,
                          keep=Path(known.keep) if known.keep else None)
    args = build_parser().parse_args(argv)
    return run_daemon(args)

