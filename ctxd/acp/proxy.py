"""`ctxd acp [--workspace DIR] [--state-dir DIR] -- <agent command…>`: an ACP proxy (docs/acp.md).

It runs the agent as its child and passes each line (one JSON-RPC message) between the editor
(this process's stdin and stdout) and the agent, each direction on one thread, in order, as it
came. What it adds (protocol v4, `ctxd acp`):

- ctxd's MCP server appended to `mcpServers` of `session/new`, `session/load` (and the unstable
  `session/resume`, `session/fork`) unless one named "ctxd" is there, with `CTXD_ACP_LINK`
  naming the file that will say which session it serves (`ctxd.acplink`);
- a checkpoint before a `session/prompt` goes on (trigger "turn"), before the editor's answer
  allowing a tool call of kind edit, delete, move or execute goes on, and before an agent's
  `fs/write_text_file` goes on to the editor (trigger "tool");
- the session recorded as the read-only thread `acp:<session id>` (`transcript.py`, written by the
  owner; an id too long for a thread's name is named by a digest, `ctxd.protocol.threadnames`); the
  agent's `usage_update` is its gauge, and after a turn without one the editor gets a
  `usage_update` from ctxd's own count;
- `_meta.ctxd` on the answers to `initialize` and to the session requests (`{version}`, then
  `{thread, workspace}`): ACP's place for extensions, which a side that does not know it ignores.

Fail open: a message this process cannot read (not JSON) passes unchanged; any failure of ctxd's
own work is logged and the message goes on unchanged. When the agent ends, its output's end
reaches the editor and this process ends as the agent did (its exit code, or its signal).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ctxd import __version__, acplink
from ctxd.acp.owner import Owner, describe, log
from ctxd.acp.transcript import CALL_ID_CHARS, CHANGING_KINDS, Transcript
from ctxd.places import ctxd_command

USAGE = "usage: ctxd acp [--workspace DIR] [--state-dir DIR] -- <agent command> [args...]"
SESSION_REQUESTS = ("session/new", "session/load", "session/resume", "session/fork")
"""Requests that carry `mcpServers` and open a session (load and resume name it; new and fork get it)."""
ALLOWS = ("allow_once", "allow_always")
READ_BYTES = 1 << 16
MAX_LINE_BYTES = 64 * 1024 * 1024
"""A line longer than this goes on in pieces as it arrives, unread by ctxd (memory stays bounded)."""


def default_state_dir() -> Path:
    """`ctxd.settings.default_state_dir`, without importing the settings for it."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ctxd"


def lines(fd: int) -> Any:
    """Each line read from `fd`, newline included (the last one may lack it), until its end. Past
    MAX_LINE_BYTES without a newline, what came is yielded as it is: a piece of a line is no JSON
    message, so it passes unchanged, and so does the rest of that line."""
    pending = bytearray()
    while True:
        try:
            chunk = os.read(fd, READ_BYTES)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            if pending:
                yield bytes(pending)
            return
        scan = len(pending)  # what came before holds no newline: only the new bytes are searched
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", scan)) >= 0:
            yield bytes(pending[start:end + 1])
            start = scan = end + 1
        if start:
            del pending[:start]
        if len(pending) > MAX_LINE_BYTES:
            yield bytes(pending)
            pending.clear()


class Out:
    """One side's input: whole lines, written under a lock (the proxy adds messages of its own)."""

    def __init__(self, fd: int, close: Any) -> None:
        self.fd = fd
        self._close = close
        self.lock = threading.Lock()
        self.closed = False

    def write(self, data: bytes) -> bool:
        with self.lock:
            if self.closed:
                return False
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError:
                self.closed = True  # the reader is gone; what follows is dropped as it would be
                return False
            return True

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                try:
                    self._close()
                except OSError:
                    pass


def _close_stdout() -> None:
    """The editor sees this process's output end: /dev/null takes fd 1's place (closing the pipe)."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _dump(message: dict[str, Any], line: bytes) -> bytes:
    """A message changed by the proxy, ended as its line was. Raises ValueError when it cannot be
    written as the JSON it came as (a number past a double's range, read as infinity): the line
    then goes on unchanged."""
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return data + (b"\r\n" if line.endswith(b"\r\n") else b"\n" if line.endswith(b"\n") else b"")


def _params(message: dict[str, Any]) -> dict[str, Any]:
    params = message.get("params")
    return params if isinstance(params, dict) else {}


def _id_key(message: dict[str, Any]) -> Any:
    msg_id = message.get("id")
    return msg_id if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) else None


class Proxy:
    """The two directions and what ctxd adds to them."""

    def __init__(self, state_dir: Path, workspace: Path | None, editor_out: Out, agent_in: Out) -> None:
        self.state_dir = state_dir
        self.workspace = workspace
        self.editor = editor_out
        self.agent = agent_in
        self.owner: Owner | None = None
        self.sessions: dict[str, Transcript] = {}
        self.folders: dict[str, Path] = {}  # session id -> its workspace folder
        self.links = 0
        # requests in flight, by id, in each direction: what their answers need
        self.from_editor: dict[Any, tuple[str, dict[str, Any]]] = {}
        self.from_agent: dict[Any, tuple[str, dict[str, Any]]] = {}
        self.lock = threading.Lock()  # the two directions share the sessions
        self._owner_lock = threading.Lock()

    # --- the owner ---

    def folder_of(self, cwd: Any) -> Path:
        """The workspace of a session: `--workspace`, else the one enclosing its `cwd`."""
        if self.workspace is not None:
            return self.workspace
        from ctxd.places import find_workspace

        start = Path(cwd) if isinstance(cwd, str) and os.path.isabs(cwd) else Path.cwd()
        return find_workspace(start, self.state_dir).folder

    def start_owner(self) -> Owner:
        """The owner's session, opened in the background the first time it is wanted."""
        with self._owner_lock:  # both directions may want it first
            if self.owner is None:
                self.owner = Owner(self.state_dir)
            return self.owner

    # --- editor -> agent ---

    def from_editor_line(self, line: bytes) -> None:
        message = _parse(line) if line.strip() else None
        if message is not None:
            try:
                line = self._editor_message(message, line)
            except Exception as error:  # noqa: BLE001 - fail open: the message goes on as it came
                log(self.state_dir, f"reading an editor message failed: {describe(error)}")
        self.agent.write(line)

    def _editor_message(self, message: dict[str, Any], line: bytes) -> bytes:
        method, key = message.get("method"), _id_key(message)
        params = _params(message)
        if isinstance(method, str):
            if key is not None:
                self.from_editor[key] = (method, params)
            if method == "initialize":
                self.start_owner()  # early: an owner starts while the agent does
            elif method in SESSION_REQUESTS:
                return self._open_session(method, message, params, line)
            elif method == "session/prompt":
                self._prompt(params)
            return line
        if key is not None and ("result" in message or "error" in message):
            asked = self.from_agent.pop(key, None)
            if asked is not None and asked[0] == "session/request_permission":
                self._permission_answered(asked[1], message.get("result"))
        return line

    def _open_session(self, method: str, message: dict[str, Any], params: dict[str, Any], line: bytes) -> bytes:
        folder = self.folder_of(params.get("cwd"))
        self.start_owner().want(folder)
        servers = params.get("mcpServers")
        link: Path | None = None
        if isinstance(servers, list) and not any(isinstance(s, dict) and s.get("name") == "ctxd" for s in servers):
            try:
                self.links += 1
                link = acplink.link_path(self.state_dir, self.links)
            except OSError as error:
                log(self.state_dir, f"no link file for ctxd's MCP server: {describe(error)}")
            command = ctxd_command()
            entry = {"name": "ctxd", "command": command[0], "args": [*command[1:], "mcp"],
                     "env": [{"name": acplink.ENV, "value": os.fspath(link)}] if link is not None else []}
            message = {**message, "params": {**params, "mcpServers": [*servers, entry]}}
            line = _dump(message, line)
        session_id = params.get("sessionId")
        key = _id_key(message)
        if key is not None:
            self.from_editor[key] = (method, {**params, "_folder": folder, "_link": link})
        if method in ("session/load", "session/resume") and isinstance(session_id, str):
            self._session_known(session_id, folder, link, replaying=method == "session/load")
        return line

    def _session_known(self, session_id: str, folder: Path, link: Path | None, replaying: bool = False) -> None:
        with self.lock:
            transcript = self.sessions.get(session_id)
            if transcript is None:
                transcript = self.sessions[session_id] = Transcript(session_id)
            transcript.replaying = replaying
            self.folders[session_id] = folder
        if link is not None:
            try:
                acplink.write(link, transcript.thread, folder)
            except OSError as error:
                log(self.state_dir, f"{transcript.thread}: the link file for ctxd's MCP server could not be written: "
                                    f"{describe(error)}")

    def _prompt(self, params: dict[str, Any]) -> None:
        session_id = params.get("sessionId")
        with self.lock:
            transcript = self.sessions.get(session_id) if isinstance(session_id, str) else None
            if transcript is None:
                return
            turn = transcript.prompt(params)
        self._flush(transcript)
        label = turn["text"][:72] or f"turn {turn['index']}"
        self._checkpoint(transcript, {"trigger": "turn", "turn": turn, "tool": None, "message": label})

    def _permission_answered(self, asked: dict[str, Any], result: Any) -> None:
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
            return
        chosen = next((o for o in asked.get("options") or [] if isinstance(o, dict)
                       and o.get("optionId") == outcome.get("optionId")), None)
        if chosen is None or chosen.get("kind") not in ALLOWS:
            return
        session_id = asked.get("sessionId")
        with self.lock:
            transcript = self.sessions.get(session_id) if isinstance(session_id, str) else None
            if transcript is None:
                return
            call = transcript.tool_seen(asked.get("toolCall"))
        if call.kind not in CHANGING_KINDS:
            return
        tool: dict[str, Any] = {"name": call.kind}
        call_id = (asked.get("toolCall") or {}).get("toolCallId")
        if isinstance(call_id, str) and 0 < len(call_id) <= CALL_ID_CHARS:  # (a longer one is no id: left out)
            tool["callId"] = call_id
        if call.paths():
            tool["paths"] = call.paths()
        label = f"before {call.kind}: {call.title}".rstrip(": ")[:120]
        self._checkpoint(transcript, {"trigger": "tool", "turn": self._turn(transcript), "tool": tool, "message": label})

    # --- agent -> editor ---

    def from_agent_line(self, line: bytes) -> None:
        message = _parse(line) if line.strip() else None
        if message is not None:
            try:
                line = self._agent_message(message, line)
            except Exception as error:  # noqa: BLE001 - fail open: the message goes on as it came
                log(self.state_dir, f"reading an agent message failed: {describe(error)}")
        self.editor.write(line)

    def _agent_message(self, message: dict[str, Any], line: bytes) -> bytes:
        method, key = message.get("method"), _id_key(message)
        params = _params(message)
        if isinstance(method, str):
            if key is not None:
                self.from_agent[key] = (method, params)
            if method == "session/update":
                self._update(params)
            elif method == "fs/write_text_file":
                self._write_file(params)
            elif method == "session/request_permission":
                with self.lock:
                    transcript = self.sessions.get(str(params.get("sessionId")))
                    if transcript is not None:
                        transcript.tool_seen(params.get("toolCall"))
            return line
        if key is None or not ("result" in message or "error" in message):
            return line
        asked = self.from_editor.pop(key, None)
        if asked is None:
            return line
        asked_method, asked_params = asked
        result = message.get("result")
        if asked_method == "initialize" and isinstance(result, dict):
            return _dump(_with_meta(message, {"version": __version__}), line)
        if asked_method in SESSION_REQUESTS:
            return self._session_answered(asked_method, asked_params, message, line)
        if asked_method == "session/prompt":
            self._turn_ended(asked_params)
        return line

    def _session_answered(self, method: str, params: dict[str, Any], message: dict[str, Any], line: bytes) -> bytes:
        result = message.get("result")
        session_id = params.get("sessionId") if method in ("session/load", "session/resume") else (
            result.get("sessionId") if isinstance(result, dict) else None)
        folder = params["_folder"]
        if method in ("session/load", "session/resume") and isinstance(session_id, str):
            with self.lock:  # the replay ends with the answer, whatever it is
                replayed = self.sessions.get(session_id)
                if replayed is not None and replayed.replaying:
                    replayed.turn_ended()  # its last agent message is the replay's, not the next turn's
                    replayed.replaying = False
            if replayed is not None and not isinstance(result, dict):
                self._flush(replayed)
        if not isinstance(session_id, str) or not isinstance(result, dict):
            return line  # refused: nothing opened
        if method in ("session/new", "session/fork"):
            self._session_known(session_id, folder, params.get("_link"))
        with self.lock:
            transcript = self.sessions[session_id]
            transcript.replaying = False
            models = result.get("models")
            if isinstance(models, dict):
                transcript.set_model(models.get("currentModelId"))
        self._flush(transcript)
        return _dump(_with_meta(message, {"thread": transcript.thread, "workspace": folder.as_uri()}), line)

    def _update(self, params: dict[str, Any]) -> None:
        update = params.get("update")
        session_id = params.get("sessionId")
        if not isinstance(update, dict) or not isinstance(session_id, str):
            return
        with self.lock:
            transcript = self.sessions.get(session_id)
            if transcript is None:
                return
            transcript.update(update)
            now = transcript.has_pending() and update.get("sessionUpdate") != "agent_message_chunk"
        if now:
            self._flush(transcript)

    def _turn_ended(self, params: dict[str, Any]) -> None:
        session_id = params.get("sessionId")
        with self.lock:
            transcript = self.sessions.get(session_id) if isinstance(session_id, str) else None
            if transcript is None:
                return
            transcript.turn_ended()
            reported = transcript.usage_in_turn
        self._flush(transcript, tell_editor=not reported)

    def _write_file(self, params: dict[str, Any]) -> None:
        session_id = params.get("sessionId")
        with self.lock:
            transcript = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if transcript is None:
            return
        path = params.get("path")
        tool: dict[str, Any] = {"name": "fs/write_text_file"}
        folder = self.folders.get(transcript.session_id)
        if isinstance(path, str):
            shown = path
            if folder is not None and os.path.isabs(path):
                relative = os.path.relpath(os.path.normpath(path), folder)
                shown = path if relative.startswith("..") else relative
            tool["paths"] = [shown]
        label = f"before fs/write_text_file {tool.get('paths', [''])[0]}".rstrip()
        self._checkpoint(transcript, {"trigger": "tool", "turn": self._turn(transcript), "tool": tool, "message": label})

    # --- ctxd's work ---

    @staticmethod
    def _turn(transcript: Transcript) -> dict[str, Any] | None:
        return dict(transcript.turn) if transcript.turn is not None else None

    def _checkpoint(self, transcript: Transcript, params: dict[str, Any]) -> None:
        folder = self.folders.get(transcript.session_id)
        if folder is None:
            return
        owner = self.start_owner()
        owner.checkpoint(folder, {"thread": transcript.thread, **params})

    def _flush(self, transcript: Transcript, tell_editor: bool = False) -> None:
        """Send what the transcript holds to the owner, in order, without waiting for it. With
        `tell_editor`, the editor then gets the thread's gauge as a `usage_update`."""
        folder = self.folders.get(transcript.session_id)
        if folder is None:
            return
        owner = self.start_owner()

        def answered(answer: Any) -> None:
            usage = answer.get("usage") if isinstance(answer, dict) else None
            if tell_editor and isinstance(usage, dict):
                self.editor.write(json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
                    "sessionId": transcript.session_id,
                    "update": {"sessionUpdate": "usage_update", "used": int(usage.get("usedTokens") or 0),
                               "size": int(usage.get("contextWindow") or 0),
                               "_meta": {"ctxd": {"source": usage.get("source"), "thread": transcript.thread}}}},
                }, separators=(",", ":")).encode("utf-8") + b"\n")

        with self.lock:
            notes, transcript.notes = transcript.notes, []
        for note in notes:  # what was left out of its records (their other fields are sent)
            log(self.state_dir, note)
        with self.lock:  # taken and numbered in one order (both directions flush)
            items, replay, used = transcript.take()
            if not items and used is None and not tell_editor:
                return
            owner.submit(folder, {"thread": transcript.thread, "items": items, "title": transcript.title,
                                  "model": transcript.model, "used": used,
                                  "size": transcript.size if used is not None else None, "replay": replay}, answered)


def _with_meta(message: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """The answer with `result._meta.ctxd` added (never replacing what the agent put there)."""
    result = message.get("result")
    if not isinstance(result, dict):
        return message
    meta = result.get("_meta")
    if meta is not None and not isinstance(meta, dict) or isinstance(meta, dict) and "ctxd" in meta:
        return message
    return {**message, "result": {**result, "_meta": {**(meta or {}), "ctxd": ours}}}


def parse(argv: list[str]) -> tuple[Path | None, Path | None, list[str]] | None:
    """--workspace, --state-dir and the agent's command; None when the command line is wrong."""
    if "--" not in argv:
        return None
    ours, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    workspace = state_dir = None
    while ours:
        name = ours.pop(0)
        if name not in ("--workspace", "--state-dir") or not ours:
            return None
        value = Path(os.path.abspath(os.path.expanduser(ours.pop(0))))
        if name == "--workspace":
            workspace = value
        else:
            state_dir = value
    return (workspace, state_dir, command) if command else None


def main(argv: list[str]) -> int:
    parsed = parse(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    workspace, state_dir, command = parsed
    state_dir = state_dir or default_state_dir()
    if workspace is not None and not workspace.is_dir():
        print(f"ctxd acp: --workspace {workspace} is not a folder", file=sys.stderr)
        return 2
    try:
        agent = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                                 preexec_fn=_die_with_parent(os.getpid()))  # (no thread runs yet)
    except OSError as error:
        print(f"ctxd acp: cannot run {command[0]}: {error.strerror or error}", file=sys.stderr)
        return 127 if isinstance(error, FileNotFoundError) else 126
    assert agent.stdin is not None and agent.stdout is not None
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # the editor stops the agent through us
        signal.signal(number, lambda sig, _frame: _forward_signal(agent, sig))
    threading.Thread(target=acplink.remove_stale, args=(state_dir,), name="ctxd-acp-clean", daemon=True).start()
    proxy = Proxy(state_dir, workspace, Out(1, _close_stdout), Out(agent.stdin.fileno(), agent.stdin.close))
    editor_side = threading.Thread(target=_pump_editor, args=(proxy,), name="ctxd-acp-editor", daemon=True)
    editor_side.start()
    for line in lines(agent.stdout.fileno()):
        proxy.from_agent_line(line)
    proxy.editor.close()  # the agent's output ended: so does ours, as the editor would see it alone
    code = agent.wait()
    if proxy.owner is not None:
        proxy.owner.drain(2.0)
        proxy.owner.close()
    acplink.remove_own(state_dir)
    if code < 0:  # killed by a signal: end the same way
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal that does not end a process (the shell's convention otherwise)
    return code


def _die_with_parent(parent: int) -> Any:
    """The agent's `preexec_fn`: it is killed when this process is (Linux's parent-death signal).
    An editor that kills `ctxd acp` with SIGKILL would have killed the agent itself; without this
    an agent that does not end at its input's end keeps running, orphaned."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def set_signal() -> None:
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # this process ended before it was set
            os.kill(os.getpid(), signal.SIGKILL)

    return set_signal


def _pump_editor(proxy: Proxy) -> None:
    for line in lines(sys.stdin.fileno()):
        proxy.from_editor_line(line)
    proxy.agent.close()  # the editor closed its side: the agent sees its input end


def _forward_signal(agent: subprocess.Popen[bytes], number: int) -> None:
    try:
        agent.send_signal(number)
    except OSError:
        pass
