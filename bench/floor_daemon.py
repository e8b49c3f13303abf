"""The floor of the speed benchmark: the least a Python JSON-RPC daemon over stdio must do to answer
ctxd's requests, so that a ratio to it shows what ctxd's own layers cost (issue #12).

Same transport (LSP framing over stdin/stdout), same parser (`json`), same durability for a record
(one SQLite transaction in WAL mode with synchronous=NORMAL, as ctxd's store), and nothing else: no
validation, no normalization, no token counting beyond bytes/4, no pygls. It answers the same method
names with the same params as ctxd:

- `ctxd/record`: stores the items (one row each, one commit), then answers.
- `ctxd/usage`: answers a snapshot kept in memory.
- `ctxd/prompt`: sends the thread's items back as they were recorded.

    python bench/floor_daemon.py STATE_DIR
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any, BinaryIO

CONTEXT_WINDOW = 128_000


def read_message(stream: BinaryIO) -> bytes | None:
    """One framed body, or None at end of input."""
    length = 0
    while True:
        line = stream.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return stream.read(length)


def write_message(stream: BinaryIO, message: dict[str, Any]) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    stream.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    stream.flush()


class Floor:
    """Threads in memory, items durable in SQLite."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(state_dir / "floor.sqlite3", isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS items (thread TEXT NOT NULL, seq INTEGER NOT NULL, "
                        "body TEXT NOT NULL, PRIMARY KEY (thread, seq)) WITHOUT ROWID")
        self.items: dict[str, list[Any]] = {}
        self.tokens: dict[str, int] = {}

    def record(self, params: dict[str, Any]) -> dict[str, Any]:
        thread = params.get("thread", "default")
        items = self.items.setdefault(thread, [])
        bodies = [json.dumps(item, separators=(",", ":")) for item in params["items"]]
        self.db.execute("BEGIN IMMEDIATE")
        self.db.executemany("INSERT INTO items (thread, seq, body) VALUES (?, ?, ?)",
                            [(thread, len(items) + i, body) for i, body in enumerate(bodies)])
        self.db.execute("COMMIT")
        items.extend(params["items"])
        self.tokens[thread] = self.tokens.get(thread, 0) + sum(len(body) for body in bodies) // 4
        return {"historyVersion": len(items), "accepted": len(bodies)}

    def usage(self, params: dict[str, Any]) -> dict[str, Any]:
        thread = params.get("thread", "default")
        used = self.tokens.get(thread, 0)
        return {"usedTokens": used, "contextWindow": CONTEXT_WINDOW, "percent": 100 * used / CONTEXT_WINDOW,
                "historyVersion": len(self.items.get(thread, ()))}

    def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        thread = params.get("thread", "default")
        return {"items": self.items.get(thread, []), "historyVersion": len(self.items.get(thread, ())),
                "estimatedTokens": self.tokens.get(thread, 0)}


def main(argv: list[str]) -> int:
    floor = Floor(Path(argv[0]))
    handlers = {"ctxd/record": floor.record, "ctxd/usage": floor.usage, "ctxd/prompt": floor.prompt,
                "initialize": lambda params: {"capabilities": {}}, "shutdown": lambda params: None}
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (body := read_message(stdin)) is not None:
        message = json.loads(body)
        method = message.get("method")
        if method == "exit":
            break
        if "id" not in message:
            continue
        handler = handlers.get(method)
        if handler is None:
            write_message(stdout, {"jsonrpc": "2.0", "id": message["id"],
                                   "error": {"code": -32601, "message": f"no method {method}"}})
        else:
            write_message(stdout, {"jsonrpc": "2.0", "id": message["id"], "result": handler(message.get("params"))})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
