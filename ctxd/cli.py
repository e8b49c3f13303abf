"""The `ctxd` command: the daemon (stdio by default, or TCP) and its terminal views."""

from __future__ import annotations

import argparse
import logging
import os
import re
import stat
import sys
from pathlib import Path

from ctxd import __version__, redact

SECRET_PATTERN = re.compile(r"(sk-[A-Za-z0-9_\-]{8,}|Bearer\s+[A-Za-z0-9_\-\.]{8,})")


class RedactSecrets(logging.Filter):
    """Belt and braces: no API key reaches a log, whatever a message carries."""

    def __init__(self) -> None:
        super().__init__()
        self.values = [v for k, v in os.environ.items() if k.endswith(("_API_KEY", "_TOKEN")) and len(v) >= 8]

    def redact(self, text: str) -> str:
        text = redact.redact(text)  # the configured key's actual value, whatever its shape
        text = SECRET_PATTERN.sub("[redacted]", text)
        for value in self.values:
            text = text.replace(value, "[redacted]")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info:  # a traceback's text can carry a key too (an exception's message)
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def setup_logging(verbose: bool, log_file: str | None) -> None:
    """Logs go to stderr or a file, never stdout (stdout is the protocol)."""
    handler: logging.Handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("ctxd").setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("httpx", "httpcore", "openai", "git", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxd", description="Context-window manager for AI coding agents.",
        epilog="`ctxd usage --help`: the context breakdown of a workspace's thread, in a terminal. "
               "`ctxd sessions --help`: the workspace's Codex and Claude Code sessions.")
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


# glibc's mallopt parameters.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_FREED_BYTES = 64 * 1024 * 1024
# The size asked for the stdio pipes (see `widen_pipes`): Linux lets any user ask up to 1 MB.
PIPE_BYTES = 1024 * 1024


def keep_freed_memory() -> None:
    """Let the daemon reuse the memory of its large strings. By default glibc maps every block
    over a few megabytes afresh and unmaps it when freed, so the JSON of a large prompt (built
    twice) is paid in page faults each time, several times the cost of copying it (bench/README.md).
    Blocks up to 32 MB now come from the heap, which keeps up to 64 MB free for the next prompt
    instead of returning it at once. Elsewhere than glibc: nothing."""
    import ctypes  # the daemon's alone: `ctxd usage` and `ctxd --version` start without it

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)
    mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES)


def widen_pipes() -> None:
    """When stdin and stdout are pipes (a client started with Python's subprocess, Go's os/exec,
    a shell), let a large reply leave in 1 MB pieces instead of Linux's default 64 KB: a large
    prompt then wakes the client sixteen times less often, which matters when the client runs on
    another CPU (`bench/bench_speed.py` prints it beside a plain pipe; bench/README.md). Requests
    get the same room. Editors built on libuv (VS Code,
    Neovim) pass socket pairs, whose buffers are already about 200 KB: nothing to do there, nor
    where pipes cannot be resized (another OS, a lower `/proc/sys/fs/pipe-max-size`)."""
    try:
        import fcntl
    except ImportError:  # Windows
        return
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is None:
        return
    for fd in (0, 1):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                fcntl.fcntl(fd, set_size, PIPE_BYTES)
        except OSError:
            pass


def run_daemon(args: argparse.Namespace) -> int:
    if not args.tcp:
        from ctxd.server import forward

        return forward.run(args)  # the owner serves it (ctxd/server/owner.py), or this process does
    from ctxd.server.app import serve_tcp

    setup_logging(args.verbose, args.log_file)
    keep_freed_memory()
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else None
    serve_tcp(state_dir, args.host, args.port, Path(args.token_file).expanduser() if args.token_file else None)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["usage"]:  # `ctxd usage ...`: the terminal view (ctxd/usage_cli.py)
        from ctxd.usage.cli import main as usage_main

        return usage_main(argv[1:])
    if argv[:1] == ["sessions"]:  # `ctxd sessions ...`: the workspace's agent sessions (ctxd/sessions/cli.py)
        from ctxd.sessions.cli import main as sessions_main

        return sessions_main(argv[1:])
    if argv[:1] == ["hook"]:  # `ctxd hook <agent> <event>`: what the agents' hooks run (ctxd/hooks/hook.py)
        from ctxd.hooks.hook import main as hook_main

        return hook_main(argv[1:])
    if argv[:1] == ["hooks"]:  # `ctxd hooks install|uninstall|status` (ctxd/hooks/install.py)
        from ctxd.hooks.install import main as hooks_main

        return hooks_main(argv[1:])
    if argv[:1] == ["statusline"]:  # Claude Code's status line (ctxd/hooks/statusline.py)
        from ctxd.hooks.statusline import main as statusline_main

        return statusline_main(argv[1:])
    if argv[:1] == ["owner"]:  # the owner of a state dir, started by the first client that needs one
        from ctxd.server.owner import main as owner_main

        owner = argparse.ArgumentParser(prog="ctxd owner")
        owner.add_argument("--state-dir", required=True)
        owner.add_argument("--detach", action="store_true")
        known = owner.parse_args(argv[1:])
        return owner_main(Path(known.state_dir), detached=known.detach)
    if argv[:1] == ["mcp"]:  # `ctxd mcp`: the MCP server for the agent itself (ctxd/agentmcp/server.py)
        from ctxd.agentmcp.server import main as mcp_main

        return mcp_main(argv[1:])
    args = build_parser().parse_args(argv)
    return run_daemon(args)


if __name__ == "__main__":
    raise SystemExit(main())
