"""One history per session when the owner's writes fail (docs/processes.md): what the agent wrote
while the owner could not write its ledger is mirrored once it can, never lost, never twice.

Real subprocesses (the editor's `ctxd` and the owner it starts), a real Claude Code transcript
(tests/session_fixtures.py) and a real full file system (a small tmpfs, which needs root: CI runs
as root). Waits are bounded and generous; nothing asserts a duration.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxd.server.daemon import WATCH_FOLLOWER_SECONDS
from tests import session_fixtures as fx
from tests.rpc import Client, start_daemon
from tests.test_restore_full_disk import NEEDS_ROOT, fill, small_fs
from tests.test_sessions_e2e import CLAUDE_THREAD, homes

WAIT = 60.0  # seconds: only a broken owner comes near


def transcript(cwd: Path, turns: int) -> list[dict[str, Any]]:
    """A Claude Code transcript of `turns` turns, each a prompt, a Read, its result and an answer:
    four lines, four items."""
    records: list[dict[str, Any]] = []
    parent: str | None = None
    for n in range(turns):
        ts = f"2026-02-10T09:{n // 60:02d}:{n % 60:02d}.000Z"
        records.append(fx.claude_user(f"Turn {n}: carry on", f"u{n}", parent, cwd, ts))
        records += fx.claude_assistant([{"type": "tool_use", "id": f"toolu_{n}", "name": "Read",
                                         "input": {"file_path": f"{cwd}/n{n}.txt"}}], f"msg_{n}a", f"a{n}", f"u{n}",
                                       cwd, ts, fx.claude_usage(5, 10, 2_000 + n, 5))
        records.append(fx.claude_user([{"type": "tool_result", "tool_use_id": f"toolu_{n}",
                                         "content": f"the contents of n{n}.txt"}], f"r{n}", f"a{n}", cwd, ts))
        records += fx.claude_assistant([{"type": "text", "text": f"Turn {n} done."}], f"msg_{n}b", f"b{n}", f"r{n}",
                                       cwd, ts, fx.claude_usage(5, 10, 2_100 + n, 5))
        parent = f"b{n}"
    return records


def item_text(item: dict[str, Any]) -> str:
    if item.get("type") == "function_call":
        return f"call {item.get('call_id')}"
    if item.get("type") == "function_call_output":
        return f"output {item.get('call_id')}"
    content = item.get("content")
    return content if isinstance(content, str) else "".join(
        str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


def expected(turns: range) -> list[str]:
    return [text for n in turns for text in (f"Turn {n}: carry on", f"call toolu_{n}", f"output toolu_{n}",
                                             f"Turn {n} done.")]


def mirrored(client: Client, ws: Path) -> list[str]:
    """The thread's items, archived ones included, once the owner is idle."""
    deadline = time.monotonic() + WAIT
    while not client.request("ctxd/sessions/sync", {"workspace": ws.as_uri()}, timeout=WAIT)["idle"]:
        assert time.monotonic() < deadline, "the owner never became idle"
        time.sleep(0.05)
    history = client.request("ctxd/history", {"workspace": ws.as_uri(), "thread": CLAUDE_THREAD,
                                              "includeArchived": True, "limit": 10_000}, timeout=WAIT)
    return [item_text(item) for item in history["items"]]


def wait_for(check: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


@NEEDS_ROOT
def test_what_a_session_wrote_while_the_state_dirs_disk_was_full_is_mirrored_once_there_is_room(
        tmp_path: Path, workspace: Path) -> None:
    """The state dir's disk fills while Claude Code works: the owner cannot write the turns it reads
    then. Before, they were dropped for good: the turns written after room was made were appended
    after the gap, the file's position stored past it, so neither this owner nor the next one ever
    mirrored them (the history lacked turns 25 to 39, restarts included)."""
    _, claude_home, env = homes(tmp_path)
    records = transcript(workspace, 60)
    session = fx.write_jsonl(fx.claude_path(claude_home, workspace), records[:100])  # turns 0-24
    log = tmp_path / "daemon.log"
    with small_fs(tmp_path / "small", "16m") as small:
        state_dir = small / "state"
        state_dir.mkdir()
        client = start_daemon(state_dir, env=env, log_file=log)
        try:
            client.initialize([workspace])
            wait_for(lambda: mirrored(client, workspace) == expected(range(25)), "the first turns mirrored")
            filler = fill(small, 0)  # the disk is full
            fx.append_jsonl(session, records[100:160])  # turns 25-39, while it is
            wait_for(lambda: "cannot mirror" in log.read_text(), "the owner failed to write them")
            filler.unlink()  # room again
            fx.append_jsonl(session, records[160:])  # turns 40-59
            wait_for(lambda: "Turn 59 done." in mirrored(client, workspace), "the last turn mirrored")
            assert mirrored(client, workspace) == expected(range(60))
        finally:
            client.shutdown()
        # The next owner, from what this one stored: the same history, nothing twice.
        client = start_daemon(state_dir, env=env, log_file=tmp_path / "daemon-2.log")
        try:
            client.initialize([workspace])
            wait_for(lambda: CLAUDE_THREAD in json.dumps(client.request("ctxd/threads", {"workspace": workspace.as_uri()})),
                     "the thread listed again")
            assert mirrored(client, workspace) == expected(range(60))
        finally:
            client.shutdown()


def test_an_owner_whose_state_dir_was_removed_and_taken_over_stops_writing_it(
        tmp_path: Path, state_dir: Path, workspace: Path) -> None:
    """The state dir is removed while an editor's session runs on the owner, and another editor's
    `ctxd` comes before the owner looked at its socket again (its check runs once a second; here
    the owner is held with SIGSTOP meanwhile, so that the order is sure): the newcomer starts a
    second owner in the folder made again. The first saw *a* socket there, not its own, and went
    on following the sessions and writing the ledgers the second writes: every turn after that
    was in the history twice. Now it leaves (its editor's `ctxd` exits, as when an owner dies)."""
    import os
    import shutil
    import signal

    from tests.rpc import wait_gone

    _, claude_home, env = homes(tmp_path)
    records = transcript(workspace, 30)
    session = fx.write_jsonl(fx.claude_path(claude_home, workspace), records[:40])  # turns 0-9
    first = start_daemon(state_dir, env=env, log_file=tmp_path / "daemon-1.log")
    second = None
    try:
        first.initialize([workspace])
        old_owner = first.daemon_pid
        wait_for(lambda: mirrored(first, workspace) == expected(range(10)), "the first turns mirrored")
        os.kill(old_owner, signal.SIGSTOP)
        try:
            shutil.rmtree(state_dir / "ctxd")  # the user resets ctxd's state
            second = start_daemon(state_dir, env=env, log_file=tmp_path / "daemon-2.log")
            second.initialize([workspace])
            assert second.daemon_pid != old_owner  # a new owner, in the folder made again
        finally:
            os.kill(old_owner, signal.SIGCONT)
        wait_for(lambda: mirrored(second, workspace) == expected(range(10)), "the new owner mirrored them")
        for turn in range(10, 30, 2):  # Claude Code goes on, a turn or two at a time
            fx.append_jsonl(session, records[4 * turn:4 * turn + 8])
            last = f"Turn {turn + 1} done."
            wait_for(lambda last=last: last in mirrored(second, workspace), last)
        assert mirrored(second, workspace) == expected(range(30))
        assert first.proc.wait(timeout=WAIT) == 1  # the old owner left: its editor restarts its `ctxd`
        wait_gone(old_owner, WAIT)
        again = start_daemon(state_dir, env=env, log_file=tmp_path / "daemon-3.log")  # ... which finds the new owner
        try:
            again.initialize([workspace])
            assert again.daemon_pid == second.daemon_pid
            assert mirrored(again, workspace) == expected(range(30))
        finally:
            again.shutdown(timeout=10)
    finally:
        first.shutdown(timeout=10)
        if second is not None:
            second.shutdown(timeout=10)


def test_an_owner_out_of_descriptors_for_a_moment_answers_the_clients_after_it(
        tmp_path: Path, state_dir: Path, workspace: Path) -> None:
    """Clients that connect and never speak each hold one of the owner's descriptors until the
    handshake's bound (30 s). Enough of them used the owner's up (its limit here lowered to what it
    uses and a little more, as the usual 1024 would be by a busier owner) and its `accept` failed
    with EMFILE: its accepting thread ended there, for good. The owner went on holding the state
    dir's lock and following the sessions, and answered no one again: every later client (an
    editor's `ctxd`, a hook, `ctxd mcp`) waited for an answer that never came, and no other owner
    could start. Once the silent clients are gone, it must answer again."""
    import os
    import resource

    from ctxd import ownerlink

    first = start_daemon(state_dir, log_file=tmp_path / "daemon-1.log")
    second = None
    silent = []
    try:
        first.initialize([workspace])
        owner = first.daemon_pid
        used = len(os.listdir(f"/proc/{owner}/fd"))
        resource.prlimit(owner, resource.RLIMIT_NOFILE, (used + 32, resource.prlimit(owner, resource.RLIMIT_NOFILE)[1]))
        for _ in range(64):  # more than it has room for; the rest wait in its queue
            conn = ownerlink.connect(state_dir / "ctxd", 5.0)
            if conn is not None:
                silent.append(conn)
        assert len(silent) > 32
        limit = used + 32
        wait_for(lambda: len(os.listdir(f"/proc/{owner}/fd")) >= limit - 1, "the owner out of descriptors")
        time.sleep(0.5)  # (its next `accept` meets EMFILE meanwhile: the clients beyond wait in its queue)
        for conn in silent:
            conn.close()  # they leave
        answer = ownerlink.ask(state_dir / "ctxd", {"op": "ping"}, 20.0)
        assert answer is not None and answer["pid"] == owner, "the owner answers no one any more"
        second = start_daemon(state_dir, log_file=tmp_path / "daemon-2.log")  # another editor: the same owner
        second.initialize([workspace])
        assert second.daemon_pid == owner
    finally:
        for conn in silent:
            conn.close()
        first.shutdown(timeout=10)
        if second is not None:
            second.shutdown(timeout=10)


def _synced(client: Client, ws: Path, turns: range) -> bool:
    """The daemon is idle and the thread holds `turns`, each item once (False: not yet)."""
    texts = mirrored(client, ws)
    assert len(texts) <= len(expected(turns)), f"items mirrored twice: {texts}"
    return texts == expected(turns)


def _one_writer_among(tmp_path: Path, state_dir: Path, ws: Path, owners: tuple[bool, bool]) -> None:
    """Two daemons on one state dir with one workspace open and one Claude Code session; each serves
    alone (`CTXD_OWNER=0`, docs/processes.md) or through the owner, as `owners` says. Both see the
    session's items exactly once, those the file had and those the agent appends while both run."""
    _, claude_home, env = homes(tmp_path)
    records = transcript(ws, 20)
    session = fx.write_jsonl(fx.claude_path(claude_home, ws), records[:20])  # turns 0-4
    clients: list[Client] = []
    try:
        for n, owner in enumerate(owners):
            client = start_daemon(state_dir, env={**env, **({} if owner else {"CTXD_OWNER": "0"})},
                                  log_file=tmp_path / f"daemon-{n}.log")
            clients.append(client)
            client.initialize([ws])
        for client in clients:
            wait_for(lambda client=client: _synced(client, ws, range(5)), "the first turns mirrored once")
        for turn in range(5, 20, 5):  # Claude Code goes on while both run
            fx.append_jsonl(session, records[4 * turn:4 * turn + 20])
            for client in clients:
                wait_for(lambda client=client, turn=turn: _synced(client, ws, range(turn + 5)),
                         f"turns {turn}-{turn + 4} mirrored once")
        for client in clients:
            assert mirrored(client, ws) == expected(range(20))
    finally:
        for client in clients:
            client.shutdown(timeout=10)


def test_two_daemons_serving_alone_on_one_state_dir_mirror_a_session_once(
        tmp_path: Path, state_dir: Path, workspace: Path) -> None:
    """Two editors' `ctxd` with `CTXD_OWNER=0` on one state dir, the same folder open: each followed
    the agents' sessions and mirrored them into the one ledger, so every item of a followed session
    was there twice. One of them follows now (the state dir's follow lock); the other reads."""
    _one_writer_among(tmp_path, state_dir, workspace, (False, False))


def test_a_daemon_serving_alone_beside_the_owner_mirrors_a_session_once(
        tmp_path: Path, state_dir: Path, workspace: Path) -> None:
    """An editor's `ctxd` with `CTXD_OWNER=0` beside the owner another editor's `ctxd` started: the
    owner and the lone daemon each followed the sessions into the same ledger."""
    _one_writer_among(tmp_path, state_dir, workspace, (False, True))
    _one_writer_among(tmp_path / "again", state_dir / "again", workspace, (True, False))


@contextlib.contextmanager
def _two_serving_alone(tmp_path: Path, state_dir: Path, workspace: Path) -> Iterator[tuple[Client, Client, Path,
                                                                                             list[dict[str, Any]]]]:
    """Two daemons serving alone on one state dir, the first following a Claude session (turns 0-4
    written, 5-9 given to append) and the second reading what it writes: (first, second, the
    session's file, its records)."""
    _, claude_home, env = homes(tmp_path)
    records = transcript(workspace, 10)
    session = fx.write_jsonl(fx.claude_path(claude_home, workspace), records[:20])  # turns 0-4
    alone = {**env, "CTXD_OWNER": "0"}
    first = start_daemon(state_dir, env=alone, log_file=tmp_path / "daemon-1.log")
    second = None
    try:
        first.initialize([workspace])
        wait_for(lambda: _synced(first, workspace, range(5)), "the first turns mirrored by the first daemon")
        second = start_daemon(state_dir, env=alone, log_file=tmp_path / "daemon-2.log")
        second.initialize([workspace])
        wait_for(lambda: _synced(second, workspace, range(5)), "the second daemon reads them")
        yield first, second, session, records
    finally:
        first.shutdown(timeout=10)
        if second is not None:
            second.shutdown(timeout=10)


def test_a_daemon_serving_alone_follows_the_sessions_once_the_one_that_did_leaves(
        tmp_path: Path, state_dir: Path, workspace: Path) -> None:
    """Of two daemons serving alone, the first follows the session and the second reads what it
    writes; when the first leaves, the second follows on from where the first stopped: what the
    agent appends afterwards is mirrored, once."""
    with _two_serving_alone(tmp_path, state_dir, workspace) as (first, second, session, records):
        first.shutdown(timeout=WAIT)
        fx.append_jsonl(session, records[20:])  # turns 5-9, after the first left
        wait_for(lambda: _synced(second, workspace, range(10)), "the second daemon mirrored the new turns")
        assert "follows them now" in (tmp_path / "daemon-2.log").read_text()


def _last_usage(client: Client, thread: str) -> dict[str, Any]:
    """The latest `ctxd/usageChanged` the client had for the thread (its gauge)."""
    return [note for note in client.notes("ctxd/usageChanged") if note["thread"] == thread][-1]


def test_a_daemon_that_does_not_follow_the_sessions_tells_its_editor_what_the_follower_wrote(
        tmp_path: Path, state_dir: Path, workspace: Path) -> None:
    """Of two daemons serving alone on one state dir, the second reads the threads the first
    writes. Its editor was told nothing of those writes: no `ctxd/threadsChanged`, no
    `ctxd/usageChanged`, so its thread list and gauge stayed as they were until the user asked
    again. Now it is told the new turns as the follower's editor is, with the same figures."""
    with _two_serving_alone(tmp_path, state_dir, workspace) as (first, second, session, records):
        assert "another ctxd process follows" in (tmp_path / "daemon-2.log").read_text()
        before = _last_usage(first, CLAUDE_THREAD)
        time.sleep(3 * WATCH_FOLLOWER_SECONDS)  # (the second daemon's first look noted the ledger as it is)
        told = len(second.notifications)
        fx.append_jsonl(session, records[20:])  # turns 5-9, the first daemon follows them
        wait_for(lambda: _synced(first, workspace, range(10)), "the first daemon mirrored the new turns")
        after = _last_usage(first, CLAUDE_THREAD)
        assert after["historyVersion"] != before["historyVersion"] or after["usedTokens"] != before["usedTokens"]
        second.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == workspace.as_uri()
                                     and CLAUDE_THREAD in p.get("threads", []), timeout=WAIT, after=told)
        pushed = second.wait_for_notification(
            "ctxd/usageChanged", lambda p: p["thread"] == CLAUDE_THREAD and p["usedTokens"] == after["usedTokens"]
            and p["historyVersion"] == after["historyVersion"], timeout=WAIT, after=told)
        assert {key: pushed[key] for key in ("workspace", "source", "contextWindow", "percent")} == {
            key: after[key] for key in ("workspace", "source", "contextWindow", "percent")}
        assert not second.shape_errors
