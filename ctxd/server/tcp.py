"""Serving over TCP: only a client that proves it can read the owner's token gets a session.

Any local user can connect to a TCP port. So, as Jupyter does, the daemon makes a random token at
start and writes it to a file only its owner can read (`<state dir>/tcp/<port>.token`, 0600 in a
0700 folder, or `--token-file`). A connection's first message must be `initialize` carrying that
token (`params.authToken`) and must arrive within `AUTH_SECONDS`; otherwise the connection is
closed and never reaches the server. Connections are accepted and checked in parallel, so one
that stalls delays no one; each that authenticates gets a session of its own, on its own thread,
over the same workspaces (`daemon.Daemon`), so two editors (or an editor and a script) are served at
once. The daemon leaves when its last session ends, as over stdio, and removes the token file.

A Unix socket with owner-only permissions is not offered: the token file is what a client needs,
on every platform the daemon runs on, and TCP binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

from ctxd.errors import InvalidRequest
from ctxd.server.codec import error_body
from ctxd.server.connection import Connection, StreamConnection, with_head

log = logging.getLogger(__name__)

AUTH_SECONDS = 5.0
"""How long a new connection has to send its authenticated `initialize`."""
MAX_CHECKING = 256
"""Connections checked at once (a thread each, for at most AUTH_SECONDS); more are closed at once."""
MAX_HEADER_BYTES = 8 * 1024
MAX_FIRST_BYTES = 4 * 1024 * 1024
"""The largest first message read before the client is known."""


class Refused(Exception):
    """The connection did not authenticate; the text says why (it never holds the token)."""


def token_path(state_dir: Path, port: int) -> Path:
    return Path(state_dir) / "tcp" / f"{port}.token"


def write_token(path: Path, token: str) -> None:
    """Written under a fresh name with mode 0600 and moved into place: never readable by others."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    pending = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    handle = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(handle, token.encode("ascii") + b"\n")
    finally:
        os.close(handle)
    os.replace(pending, path)


def read_first(reader: BinaryIO) -> tuple[bytes, dict[str, Any]]:
    """The first frame: its raw bytes and its JSON object (bounded sizes). `reader` is unbuffered:
    nothing past the frame is taken from the socket (the session may go to the owner)."""
    head = b""
    length = None
    while True:
        line = reader.readline(MAX_HEADER_BYTES)
        if not line:
            raise Refused("the connection closed before initialize")
        head += line
        if len(head) > MAX_HEADER_BYTES:
            raise Refused("header too long")
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip()) if value.strip().isdigit() else -1
    if length is None or not 0 <= length <= MAX_FIRST_BYTES:
        raise Refused("no valid Content-Length in the first message")
    body = b""
    while len(body) < length:
        chunk = reader.read(length - len(body))
        if not chunk:
            raise Refused("the connection closed before initialize")
        body += chunk
    try:
        message = json.loads(body)
    except ValueError:
        raise Refused("the first message is not JSON") from None
    if not isinstance(message, dict):
        raise Refused("the first message is not a JSON object")
    return head + body, message


def check_token(message: dict[str, Any], token: str) -> None:
    params = message.get("params")
    offered = params.get("authToken") if isinstance(params, dict) else None
    if message.get("method") != "initialize":
        raise Refused("the first message must be initialize with params.authToken")
    if not isinstance(offered, str) or not hmac.compare_digest(offered.encode("utf-8", "replace"),
                                                             token.encode("ascii")):
        raise Refused("authentication failed: params.authToken is missing or wrong (read it from the token file)")


def _reply_error(connection: socket.socket, message: dict[str, Any] | None, text: str) -> None:
    msg_id = message.get("id") if message else None
    if not (isinstance(msg_id, int) and not isinstance(msg_id, bool)) and not (
            isinstance(msg_id, str) and len(msg_id) <= 200):
        msg_id = None
    body = error_body(msg_id, InvalidRequest(f"Invalid Request: {text}"))
    try:
        connection.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass


def serve(host: str, port: int, state_dir: Path, token_file: Path | None,
          session: Callable[[Connection], int | None],
          hand_over: Callable[[socket.socket, bytes], int | None] | None = None) -> int:
    """Listen, check connections in parallel, and run each that authenticates on a thread of its
    own: `hand_over(socket, first bytes)` gives it to the owner (its exit code, or None when no
    owner took it), else `session(connection)` serves it here. Return the exit code when the last
    session has ended."""
    token = secrets.token_urlsafe(32)
    checking = threading.BoundedSemaphore(MAX_CHECKING)
    lock = threading.Lock()
    served = {"active": 0, "code": 0, "ended": False}
    ended = threading.Event()

    def check(connection: socket.socket) -> None:
        try:
            authenticate(connection)
        finally:
            checking.release()

    def authenticate(connection: socket.socket) -> None:
        late = threading.Lock()  # held by whichever comes first: the check's end or the deadline

        def deadline() -> None:
            if late.acquire(blocking=False):
                _shut(connection)

        closer = threading.Timer(AUTH_SECONDS, deadline)
        closer.daemon = True
        closer.start()
        reader = cast(BinaryIO, connection.makefile("rb", buffering=0))
        message = None
        try:
            head, message = read_first(reader)
            check_token(message, token)
            if not late.acquire(blocking=False):
                raise Refused("no authenticated initialize in time")
        except (Refused, OSError, ValueError) as error:
            closer.cancel()
            text = str(error) if isinstance(error, Refused) else "no authenticated initialize in time"
            log.warning("tcp: connection refused: %s", text)
            _reply_error(connection, message, text)
            _shut(connection)
            return
        closer.cancel()
        with lock:
            if served["ended"]:
                _reply_error(connection, message, "this ctxd is exiting (its last client left); start another daemon")
                _shut(connection)
                return
            served["active"] += 1
        connection.settimeout(None)
        run(connection, head, reader)

    def run(connection: socket.socket, head: bytes, raw: BinaryIO) -> None:
        """One authenticated client's session, on this (its own) thread."""
        code: int | None = None
        try:
            code = hand_over(connection, head) if hand_over is not None else None
            if code is None:
                with connection, with_head(head, raw) as reader, connection.makefile("wb") as writer:
                    code = session(StreamConnection(reader, writer, on_exit=lambda _code: _shut(connection)))
            else:
                _shut(connection)
        except Exception:  # noqa: BLE001 - one session's failure ends only that session
            log.exception("tcp: a session failed")
        finally:
            with lock:
                served["active"] -= 1
                served["code"] = code if code is not None else 0
                if served["active"] == 0:
                    served["ended"] = True
                    ended.set()

    with socket.create_server((host, port)) as listener:
        bound = listener.getsockname()[1]
        path = token_file or token_path(state_dir, bound)
        write_token(path, token)
        log.warning("listening on %s:%d; the token clients must send is in %s", host, bound, path)

        def accept() -> None:
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return
                if not checking.acquire(blocking=False):
                    _shut(connection)  # a flood of connections: no thread for this one
                    continue
                threading.Thread(target=check, args=(connection,), daemon=True, name="ctxd-tcp-session").start()

        threading.Thread(target=accept, daemon=True, name="ctxd-tcp-accept").start()
        try:
            ended.wait()
        finally:
            path.unlink(missing_ok=True)  # the daemon leaves with its last client: no one else may come
    return served["code"]


def _shut(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    connection.close()
