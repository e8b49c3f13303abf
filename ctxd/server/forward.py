"""The editor's `ctxd`: it hands its stdin and stdout to the owner and waits (gopls's
`-remote=auto`). The owner serves the editor's pipes directly, so nothing is relayed and a request
costs what it cost in-process; this process only keeps the editor's view (a child that lives as
long as the session) and exits with the session's code.

The state dir decides which owner: `--state-dir`, else `initializationOptions.ctxd.stateDir` or
the user's config (so the editor's `initialize` is read first, and handed over with the pipes),
else the default. When no owner can be reached or started in time (no Unix sockets, a state dir
that is not this user's alone), the session is served in this process, as before owners existed;
`CTXD_OWNER=0` asks for that.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from ctxd import ownerlink

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 8192
MAX_FIRST_BYTES = 4 * 1024 * 1024


def read_first_frame(fd: int) -> tuple[bytes, dict[str, Any] | None]:
    """What arrived up to the end of the first frame (perhaps a little more), and that frame's
    `initialize` params when it is one. Nothing is lost: the caller passes every byte on."""
    data = b""
    while True:
        end = data.find(b"\r\n\r\n")
        if end >= 0 or len(data) > MAX_HEADER_BYTES:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            return data, None
        data += chunk
    if end < 0:
        return data, None
    length = None
    for line in data[:end].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            length = int(value.strip())
    if length is None or length > MAX_FIRST_BYTES:
        return data, None
    while len(data) < end + 4 + length:
        chunk = os.read(fd, 65536)
        if not chunk:
            return data, None
        data += chunk
    try:
        message = json.loads(data[end + 4: end + 4 + length])
    except ValueError:
        return data, None
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return data, None
    params = message.get("params")
    return data, params if isinstance(params, dict) else {}


def chosen_state_dir(argument: str | None, params: dict[str, Any] | None) -> Path:
    """The state dir the daemon would use (`app.CtxdServer._configure`), decided before it runs."""
    from ctxd.settings import load_settings

    if argument:
        return Path(argument).expanduser()
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    ctxd_options = options.get("ctxd") if isinstance(options, dict) else None
    return load_settings(None, ctxd_options if isinstance(ctxd_options, dict) else {}, []).chosen_state_dir()


def let_go() -> None:
    """The editor's pipes are the owner's now: only its copies keep them open."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def run(args: argparse.Namespace) -> int:
    from ctxd.logs import setup_logging
    from ctxd.server.process import widen_pipes

    widen_pipes()  # the pipes themselves: the owner serves them wide too
    head, params = read_first_frame(0)
    state_dir = chosen_state_dir(args.state_dir, params)
    why = "CTXD_OWNER=0" if os.environ.get("CTXD_OWNER") == "0" else "no owner could be reached"
    if why != "CTXD_OWNER=0" and ownerlink.available():
        message = {"op": "session", "head": base64.b64encode(head).decode("ascii"),
                   "logFile": os.path.abspath(args.log_file) if args.log_file else None, "verbose": bool(args.verbose)}
        try:
            code = ownerlink.hand_over(state_dir, message, [0, 1], let_go)
        except ownerlink.Unsafe as error:
            code, why = None, str(error)
        if code is not None:
            return code
    setup_logging(args.verbose, args.log_file)
    log.warning("serving in this process, alone (%s; state dir %s)", why, state_dir)
    from ctxd.server.app import serve_stdio
    from ctxd.server.connection import with_head
    from ctxd.server.process import daemon_process

    daemon_process()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the protocol stream
    serve_stdio(Path(args.state_dir).expanduser() if args.state_dir else None, with_head(head, stdin), stdout)
    return 0
