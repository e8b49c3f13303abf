"""Discovery and live following of agent sessions (issue #16), with the real watcher.

Both watcher modes run: watchdog's native observer (inotify) and the polling fallback.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxd.agents.claude import encode_project
from ctxd.sessions import discovery
from ctxd.sessions.follower import DEFERRED_BATCH, Follower, Update
from tests import session_fixtures as fx


@pytest.fixture(params=["native", "polling"])
def follow(request: pytest.FixtureRequest, tmp_path: Path):
    """Start a follower over temporary CODEX_HOME / CLAUDE_CONFIG_DIR; yields (follower, updates, homes)."""
    codex_home, claude_home = tmp_path / "codex", tmp_path / "claude"
    updates: queue.Queue[Update] = queue.Queue()
    followers: list[Follower] = []

    def start(folders: list[Path]) -> Follower:
        sources = discovery.sources({"codex": str(codex_home), "claude": str(claude_home)}, env={"HOME": str(tmp_path)})
        follower = Follower(updates.put, sources, poll=request.param == "polling")
        follower.set_folders(folders)
        follower.start()
        followers.append(follower)
        return follower

    yield start, updates, codex_home, claude_home
    for follower in followers:
        follower.stop()


def next_update(updates: queue.Queue[Update], thread: str, timeout: float = 10.0) -> Update:
    deadline = time.monotonic() + timeout
    while True:
        update = updates.get(timeout=max(0.01, deadline - time.monotonic()))
        if update.session.thread == thread:
            return update


def test_growth_while_following(follow, tmp_path: Path) -> None:
    start, updates, codex_home, claude_home = follow
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    codex_file = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws / "pkg")[:6])
    follower = start([ws])
    first = next_update(updates, f"codex:{fx.CODEX_ID}")
    assert first.new and first.folder == ws and len(first.session.items) == 2
    # The agent goes on writing: each append arrives as a change with just the new items.
    fx.append_jsonl(codex_file, fx.codex_session(ws / "pkg")[6:])
    seen = []
    while sum(len(u.change.appended) for u in seen) < 4 or first.session.baseline != 12_000:
        seen.append(next_update(updates, f"codex:{fx.CODEX_ID}"))
    assert not any(u.new for u in seen)
    # A Claude session that starts while following is found too (its project folder is new).
    claude_file = fx.write_jsonl(fx.claude_path(claude_home, ws), fx.claude_session(ws)[:2])
    update = next_update(updates, f"claude:{fx.CLAUDE_ID}")
    assert update.new and update.session.title == "Add a --verbose flag to the CLI"
    fx.append_jsonl(claude_file, fx.claude_session(ws)[2:])
    while update.session.baseline != 15_546:
        update = next_update(updates, f"claude:{fx.CLAUDE_ID}")
    assert {s.thread for s in follower.sessions(ws)} == {f"codex:{fx.CODEX_ID}", f"claude:{fx.CLAUDE_ID}"}
    assert {s.agent: s.sessions for s in follower.status() if s.sessions} == {"codex": 1, "claude": 1}  # other agents: none


def test_a_session_made_while_the_watch_starts_after_the_first_listing_is_followed(
        follow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file watch starts once the first scan has listed the sessions (a cold listing does not
    wait for it): a session the agent starts after that scan looked, before the watch is there,
    is found by the scan that follows the watch's start, and an append to it after is seen."""
    start, updates, codex_home, claude_home = follow
    ws = tmp_path / "ws"
    ws.mkdir()
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws)[:6])
    fx.claude_path(claude_home, ws).parent.mkdir(parents=True)  # (its project's folder there: only the file is new)
    watching = Follower._start_observer
    made: list[Path] = []

    def start_observer(self: Follower) -> None:
        if not made:  # the agent writes its first lines while the watch is being set up
            made.append(fx.write_jsonl(fx.claude_path(claude_home, ws), fx.claude_session(ws)[:2]))
        watching(self)

    monkeypatch.setattr(Follower, "_start_observer", start_observer)
    start([ws])
    update = next_update(updates, f"claude:{fx.CLAUDE_ID}")
    assert made and update.new and update.session.title == "Add a --verbose flag to the CLI"
    fx.append_jsonl(made[0], fx.claude_session(ws)[2:])
    while update.session.baseline != 15_546:
        update = next_update(updates, f"claude:{fx.CLAUDE_ID}")


def test_the_first_listing_is_told_once_it_is_done(tmp_path: Path) -> None:
    """`Follower.listed` (what the owner's imports for compactions and snapshots wait for, so as not
    to run beside a cold listing) is set once the first scan handed every session to the listing,
    not before; and at once for a follower with nothing to follow, or stopped."""
    ws = tmp_path / "ws"
    ws.mkdir()
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), fx.claude_session(ws))
    sources = discovery.sources({"codex": str(tmp_path / "codex"), "claude": str(tmp_path / "claude")},
                                env={"HOME": str(tmp_path)})
    told: list[tuple[int, bool]] = []
    follower: Follower

    def listing(files: Iterable[tuple[str, Path, str]]) -> None:
        told.append((len(list(files)), follower.listed.is_set()))

    follower = Follower(lambda update: None, sources, poll=True, listing=listing)
    follower.set_folders([ws])
    assert not follower.listed.is_set()
    follower.start()
    try:
        assert follower.listed.wait(10)
        assert told == [(1, False), (1, False)]  # (the newest at once, then the rest)
    finally:
        follower.stop()

    nothing = Follower(lambda update: None, [], poll=True)
    nothing.start()
    assert nothing.listed.is_set()
    stopped = Follower(lambda update: None, sources, poll=True)
    stopped.stop()
    assert stopped.listed.is_set()


def test_a_session_in_another_folder_is_read_no_further_than_its_first_line(follow, tmp_path: Path) -> None:
    start, updates, codex_home, claude_home = follow
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    ws.mkdir()
    elsewhere.mkdir()
    big_tail = [fx.codex_answer("x" * 100_000, f"2025-10-03T10:00:{n:02d}.000Z") for n in range(10)]
    outside = fx.write_jsonl(fx.codex_path(codex_home, "0199a213-0000-7800-8aa1-000000000001"),
                             fx.codex_session(elsewhere, "0199a213-0000-7800-8aa1-000000000001") + big_tail)
    # A Claude project whose folder name shows it is not inside the workspace: never opened.
    claude_outside = fx.write_jsonl(fx.claude_path(claude_home, elsewhere), fx.claude_session(elsewhere))
    # A sibling whose name starts like the workspace's ("ws-old"): opened only to its cwd line.
    sibling = tmp_path / "ws-old"
    claude_sibling = fx.write_jsonl(fx.claude_path(claude_home, sibling, "11111111-2222-4333-8444-555555555555"),
                                    fx.claude_session(sibling, "11111111-2222-4333-8444-555555555555"))
    inside = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    follower = start([ws])
    next_update(updates, f"codex:{fx.CODEX_ID}")
    assert follower.wait_idle()
    fx.append_jsonl(outside, big_tail)
    time.sleep(0.5)
    assert follower.wait_idle()
    first_line = len(outside.read_bytes().split(b"\n", 1)[0]) + 1
    assert 0 < follower.bytes_read(str(outside)) <= first_line + 4096  # one read chunk past it, never parsed
    assert follower.bytes_read(str(claude_outside)) == 0
    head = claude_sibling.read_bytes().split(b"\n")
    assert 0 < follower.bytes_read(str(claude_sibling)) <= len(head[0]) + len(head[1]) + 2 + 4096
    assert follower.bytes_read(str(inside)) >= inside.stat().st_size
    assert [s.thread for s in follower.sessions()] == [f"codex:{fx.CODEX_ID}"]
    # Opening the other folder later follows its sessions from what is already known.
    follower.set_folders([ws, elsewhere])
    next_update(updates, "codex:0199a213-0000-7800-8aa1-000000000001")
    next_update(updates, f"claude:{fx.CLAUDE_ID}")


def test_roots_that_appear_later_are_watched(follow, tmp_path: Path) -> None:
    start, updates, codex_home, _ = follow
    ws = tmp_path / "ws"
    ws.mkdir()
    start([ws])  # neither agent has ever run: no roots yet
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    update = next_update(updates, f"codex:{fx.CODEX_ID}", timeout=15)
    assert update.session.title == "Fix the failing test in parser.py please"


def test_discovery_rules(tmp_path: Path) -> None:
    roots = {"codex": tmp_path / "c" / "sessions", "claude": tmp_path / "h" / "projects"}
    assert discovery.agent_of(str(roots["codex"] / "2025/10/03/rollout-x.jsonl"), roots) == "codex"
    assert discovery.agent_of(str(roots["codex"] / "2025/10/03/other.jsonl"), roots) is None
    assert discovery.agent_of(str(roots["claude"] / "-w/abc.jsonl"), roots) == "claude"
    assert discovery.agent_of(str(roots["claude"] / "-w/agent-1.jsonl"), roots) is None  # a subagent's file
    assert discovery.agent_of(str(roots["claude"] / "-w/abc/subagents/x.jsonl"), roots) is None
    assert discovery.folder_of("/a/b/c", [Path("/a/b"), Path("/a/b/c")]) == Path("/a/b/c")
    assert discovery.folder_of("/a/bc", [Path("/a/b")]) is None
    assert encode_project("/home/u/my.proj") == "-home-u-my-proj"
    env = {"HOME": "/home/u", "CODEX_HOME": "/x/codex", "CLAUDE_CONFIG_DIR": "/y/claude"}
    two = ("codex", "claude")  # (the other agents' rules: their own tests)
    assert [s.root for s in discovery.sources(env=env) if s.agent in two] == [Path("/x/codex/sessions"),
                                                                              Path("/y/claude/projects")]
    assert [s.root for s in discovery.sources(env={"HOME": "/home/u"}) if s.agent in two] == [
        Path("/home/u/.codex/sessions"), Path("/home/u/.claude/projects")]


def test_sessions_cli_lists_the_workspace_sessions_newest_first(tmp_path: Path) -> None:
    import json as _json
    import subprocess
    import sys

    from tests.rpc import REPO

    ws = tmp_path / "ws"
    ws.mkdir()
    codex_home, claude_home = tmp_path / "codex", tmp_path / "claude"
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    fx.write_jsonl(fx.claude_path(claude_home, ws), fx.claude_session(ws))
    fx.write_jsonl(fx.codex_path(codex_home, "0199a213-0000-7800-8aa1-000000000009"),
                   fx.codex_session(tmp_path / "other", "0199a213-0000-7800-8aa1-000000000009"))
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(codex_home), "CLAUDE_CONFIG_DIR": str(claude_home),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(ws), "--format", "json"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rows = _json.loads(run.stdout)
    assert [r["thread"] for r in rows] == [f"claude:{fx.CLAUDE_ID}", f"codex:{fx.CODEX_ID}"]  # newest first
    claude, codex = rows
    assert (codex["model"], codex["usedTokens"], codex["contextWindow"], codex["percent"]) == (
        "gpt-5-codex", 12_000, 272_000, 4.4)
    assert codex["cost"]["priced"] and codex["cost"]["total"] > 0
    assert claude["contextWindow"] == 200_000 and claude["usedTokens"] == 15_546  # window from the catalogue
    table = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(ws)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=60)
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["AGENT", "TITLE", "MODEL", "FILL", "COST", "CACHE", "LAST", "ACTIVITY"]
    assert lines[1].startswith("claude") and "8% 15k/200k" in lines[1] and lines[2].startswith("codex")
    assert "cache cold: next turn re-writes 15k" in lines[1]  # a 2025 session: long expired (issue #31)


# --- hostile files (the worker must never block, read outside the roots, or stop on one file) ---


def idle_follower(folders: list[Path], tmp_path: Path, on_update=None) -> tuple[Follower, list[Update]]:
    """A follower that is not started: the test drives it (scan_once, or _read as an event would)."""
    updates: list[Update] = []
    sources = discovery.sources({"codex": str(tmp_path / "codex"), "claude": str(tmp_path / "claude")},
                                env={"HOME": str(tmp_path)})
    follower = Follower(on_update or updates.append, sources, poll=True)
    follower.set_folders(folders)
    return follower, updates


def test_fifos_and_symlinks_in_the_roots_neither_block_nor_are_read(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    secret = tmp_path / "id_rsa"
    fx.write_jsonl(secret, fx.codex_session(ws, "0199a213-0000-7800-8aa1-00000000000f"))  # would be a thread
    codex_dir = fx.codex_path(tmp_path / "codex").parent
    claude_dir = fx.claude_project_dir(tmp_path / "claude", ws)
    codex_dir.mkdir(parents=True)
    claude_dir.mkdir(parents=True)
    fifos = [codex_dir / "rollout-fifo.jsonl", claude_dir / "fifo.jsonl"]
    links = [codex_dir / "rollout-link.jsonl", claude_dir / "link.jsonl"]
    for fifo, link in zip(fifos, links):
        os.mkfifo(fifo)
        link.symlink_to(secret)
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    follower, updates = idle_follower([ws], tmp_path)
    worker = threading.Thread(target=lambda: [follower.scan_once(), *map(follower._read, map(str, fifos + links))],
                              daemon=True)
    worker.start()
    worker.join(10)
    for fifo in fifos:  # release the worker if it blocked opening one
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert not worker.is_alive()
    assert [u.session.thread for u in updates] == [f"codex:{fx.CODEX_ID}"]
    assert all(follower.bytes_read(str(p)) == 0 for p in fifos + links)


def test_one_bad_file_does_not_stop_the_others(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ids = [f"0199a213-0000-7800-8aa1-00000000000{n}" for n in range(3)]
    for session_id in ids:
        fx.write_jsonl(fx.codex_path(tmp_path / "codex", session_id), fx.codex_session(ws, session_id))
    # A Claude file whose name is not UTF-8: its id comes from the lines, not the name.
    project = fx.claude_project_dir(tmp_path / "claude", ws)
    project.mkdir(parents=True)
    with open(os.path.join(os.fsencode(project), b"7f2c1d9e-\xff\xfe.jsonl"), "wb") as f:
        f.write(b"".join(json.dumps(r).encode() + b"\n" for r in fx.claude_session(ws)))
    delivered: list[Update] = []

    def on_update(update: Update) -> None:
        if not delivered:
            delivered.append(update)
            raise UnicodeEncodeError("utf-8", "x", 0, 1, "the first one fails")  # as a store would
        delivered.append(update)

    follower, _ = idle_follower([ws], tmp_path, on_update)
    follower.scan_once()
    threads = {u.session.thread for u in delivered}
    assert len(delivered) == 4 and threads >= {f"claude:{fx.CLAUDE_ID}"}
    assert all(u.session.path.encode("utf-8") for u in delivered)  # every reply can carry it


def test_an_undecided_file_is_peeked_again_only_when_it_changes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    meta = json.dumps(fx.codex_meta(ws)).encode()
    path = fx.codex_path(tmp_path / "codex")
    path.parent.mkdir(parents=True)
    path.write_bytes(meta[:100])  # the agent is still writing its first line
    follower, updates = idle_follower([ws], tmp_path)
    follower.scan_once()
    follower._mode = "polling"  # every tick looks at undecided files
    for _ in range(5):
        follower._tick()
        follower._read(str(path))  # an event without a write
    assert follower.bytes_read(str(path)) == 100
    path.write_bytes(meta + b"\n")
    follower._tick()
    assert [u.session.thread for u in updates] == [f"codex:{fx.CODEX_ID}"]


def test_a_replaced_file_is_decided_again(tmp_path: Path) -> None:
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    other.mkdir()
    records = fx.codex_session(ws) + [fx.codex_answer("padding " * 500, "2025-10-03T10:00:09.000Z")]
    path = fx.write_jsonl(fx.codex_path(tmp_path / "codex"), records)
    follower, updates = idle_follower([ws], tmp_path)
    follower.scan_once()
    # Truncated and written again: found anew (so its turns are not new turns to checkpoint).
    path.write_bytes(b"")
    follower._read(str(path))
    fx.write_jsonl(path, records)
    follower._read(str(path))
    assert [u.new for u in updates] == [True, True] and len(updates[-1].session.items) == 7
    # Replaced by a smaller session of another folder: not a session of ws, read no further than its head.
    stranger = [fx.codex_meta(other, "0199a213-ffff-7800-8aa1-0000000000bb"),
                *fx.codex_turn("SECRET of the other project", "2025-10-03T11:00:00.000Z", cwd=str(other))]
    os.replace(fx.write_jsonl(tmp_path / "tmp.json", stranger), path)
    follower._read(str(path))
    assert len(updates) == 2 and follower.sessions(ws) == []
    assert follower.bytes_read(str(path)) <= len(json.dumps(stranger[0])) + 1 + 4096


def test_folder_of_normalises_the_cwd() -> None:
    folders = [Path("/a/w")]
    for cwd in ("/a/w/../other", "/a/w/./../other", "/a/w/sub/../../other", "/a/wx", "w/sub", "/A/W"):
        assert discovery.folder_of(cwd, folders) is None, cwd
    for cwd in ("/a/w", "/a/w/", "/a/w/sub", "/a/w//sub/./x", "/a/other/../w"):
        assert discovery.folder_of(cwd, folders) == Path("/a/w"), cwd


# --- a first-time user: the agents' folders appear after the follower started (issue 25) ---


def test_a_root_made_later_is_watched_without_the_safety_tick(follow, tmp_path: Path, monkeypatch) -> None:
    from ctxd.sessions import follower as follower_mod

    monkeypatch.setattr(follower_mod, "TICK_SECONDS", 3600.0)  # the safety net never comes in this test
    start, updates, codex_home, claude_home = follow
    ws = tmp_path / "ws"
    ws.mkdir()
    assert start([ws]).wait_idle()  # the initial scan is done: what comes now started while following
    assert not codex_home.exists() and not claude_home.exists()
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))  # CODEX_HOME, sessions, the day: all new
    update = next_update(updates, f"codex:{fx.CODEX_ID}", timeout=30)
    assert update.fresh and update.new  # found while following: its turns are live
    fx.write_jsonl(fx.claude_path(claude_home, ws), fx.claude_session(ws)[:2])
    update = next_update(updates, f"claude:{fx.CLAUDE_ID}", timeout=30)
    assert update.fresh and [t.text for t in update.change.turns] == ["Add a --verbose flag to the CLI"]


def test_files_found_at_start_are_history_and_files_made_later_are_fresh(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))
    follower, updates = idle_follower([ws], tmp_path)
    follower.scan_once()
    later = fx.write_jsonl(fx.codex_path(tmp_path / "codex", "0199a213-0000-7800-8aa1-0000000000aa"),
                           fx.codex_session(ws, "0199a213-0000-7800-8aa1-0000000000aa"))
    follower._read(str(later))
    assert [(u.session.id, u.new, u.fresh) for u in updates] == [
        (fx.CODEX_ID, True, False), ("0199a213-0000-7800-8aa1-0000000000aa", True, True)]


# --- hostile files, round two (issue 27) ---


def test_a_sparse_terabyte_hole_is_skipped_not_read(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    path = fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws)[:6])
    other = fx.write_jsonl(fx.codex_path(tmp_path / "codex", "0199a213-0000-7800-8aa1-0000000000bb"),
                           fx.codex_session(ws, "0199a213-0000-7800-8aa1-0000000000bb")[:6])
    follower, updates = idle_follower([ws], tmp_path)
    follower.scan_once()
    read_before = follower.bytes_read(str(path))
    os.truncate(path, 1 << 40)  # 1 TB, all of it a hole
    with path.open("ab") as f:  # and the agent goes on writing after it
        f.write(b"\n" + json.dumps(fx.codex_answer("after the hole", "2025-10-03T10:09:00.000Z")).encode() + b"\n")
    fx.append_jsonl(other, fx.codex_session(ws, "0199a213-0000-7800-8aa1-0000000000bb")[6:])
    worker = threading.Thread(target=lambda: (follower._read(str(path)), follower._read(str(other))), daemon=True)
    worker.start()
    worker.join(60)  # a hang guard: read byte by byte, the hole takes many minutes
    assert not worker.is_alive(), "reading through the hole"
    assert follower.bytes_read(str(path)) - read_before < 64 * 1024 * 1024
    assert updates[-2].session.items[-1]["content"][0]["text"] == "after the hole"
    assert updates[-1].session.id == "0199a213-0000-7800-8aa1-0000000000bb"


def test_a_file_rewritten_in_place_to_a_longer_one_is_read_from_its_start(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    path = fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws)[:6])
    follower, updates = idle_follower([ws], tmp_path)
    follower.scan_once()
    inode, size = path.stat().st_ino, path.stat().st_size
    rewritten = [fx.codex_meta(ws), *fx.codex_turn("A different first prompt, longer than the one before it", "2025-10-03T12:00:00.000Z",
                                                   cwd=str(ws)),
                 fx.codex_answer("done " * 200, "2025-10-03T12:00:01.000Z")]
    with path.open("r+b") as f:  # the same file (inode), written over from its start
        f.write(b"".join(json.dumps(r).encode() + b"\n" for r in rewritten))
    assert path.stat().st_ino == inode and path.stat().st_size > size
    follower._read(str(path))
    last = updates[-1]
    assert last.new and last.session.title == "A different first prompt, longer than the one before it"
    assert [i["content"][0]["text"] for i in last.session.items] == [
        "A different first prompt, longer than the one before it", "done " * 200]


def test_a_line_nested_too_deeply_is_skipped_and_the_rest_read(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    deep: dict = {"x": 1}
    for _ in range(300):
        deep = {"a": deep}
    records = fx.codex_session(ws)
    records.insert(4, {"timestamp": "2025-10-03T10:00:02.000Z", "type": "response_item", "payload": {
        "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "NESTED-LINE"}], "extra": deep}})
    fx.write_jsonl(fx.codex_path(tmp_path / "codex"), records)
    follower, updates = idle_follower([ws], tmp_path)
    follower.scan_once()
    session = updates[-1].session
    assert session.bad_lines == 1 and len(session.items) == 6
    assert "NESTED-LINE" not in json.dumps(session.items)


@pytest.mark.parametrize("session_id", ["", "x" * 201, "a b", "bell\x07"])
def test_a_session_id_that_is_none_is_not_followed(tmp_path: Path, session_id: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    fx.write_jsonl(fx.codex_path(tmp_path / "codex", "bad"), fx.codex_session(ws, session_id))
    follower, updates = idle_follower([ws], tmp_path)
    follower.scan_once()
    assert updates == []


def test_a_root_deleted_and_made_again_is_followed_again(follow, tmp_path: Path) -> None:
    start, updates, codex_home, _ = follow
    ws = tmp_path / "ws"
    ws.mkdir()
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    follower = start([ws])
    next_update(updates, f"codex:{fx.CODEX_ID}")
    import shutil

    shutil.rmtree(codex_home)  # the user removes ~/.codex, and runs Codex again later
    follower._tick()  # the safety net notices the root gone (as it does every 2 s)
    sid = "0199a213-0000-7800-8aa1-0000000000cc"
    fx.write_jsonl(fx.codex_path(codex_home, sid), fx.codex_session(ws, sid))
    assert next_update(updates, f"codex:{sid}", timeout=30).fresh


def test_a_follower_stopped_before_it_started_starts_nothing(tmp_path: Path) -> None:
    """A daemon that closes while its warm-up is still starting the follower (the editor left at
    once): the stop wins, no watcher or worker thread is left running, and nothing raises."""
    sources = discovery.sources({"codex": str(tmp_path / "codex"), "claude": str(tmp_path / "claude")},
                                env={"HOME": str(tmp_path)})
    follower = Follower(lambda update: None, sources, poll=False)
    follower.stop()
    follower.start()  # too late: a no-op
    try:
        assert follower._worker is None and follower._observer is None
    finally:
        follower.stop()


def test_the_newest_session_is_listed_before_the_other_heads_are_peeked(tmp_path: Path) -> None:
    """Issue #38: a cold owner's first scan lists the newest session of the open folders at once
    (its gauge is the one shown), then the other files of the open folders as their heads are
    peeked at (the listing's readers start on the first ones meanwhile): on a history of thousands
    of files, peeking at every head first delayed that gauge by a second, and then the readers."""
    ws, elsewhere = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    elsewhere.mkdir()
    ids = [f"0199a213-0000-7800-8aa1-{n:012d}" for n in range(6)]
    for n, session_id in enumerate(ids):  # ids[5] the newest, in another folder; ids[4] the newest here
        path = fx.write_jsonl(fx.codex_path(tmp_path / "codex", session_id),
                              fx.codex_session(elsewhere if n == 5 else ws, session_id))
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))
    calls: list[tuple[list[str], int, int]] = []
    follower: Follower | None = None

    def peeked() -> int:
        assert follower is not None
        return sum(1 for state in follower._files.values() if state.decided)

    def listing(files: Iterable[tuple[str, Path, str]]) -> None:
        given = peeked()
        calls.append(([Path(path).stem[-36:] for path, _, _ in files], given, peeked()))

    sources = discovery.sources({"codex": str(tmp_path / "codex"), "claude": str(tmp_path / "claude")},
                                env={"HOME": str(tmp_path)})
    follower = Follower(lambda update: None, sources, poll=True, listing=listing)
    follower.set_folders([ws])
    follower.scan_once()
    # The newest here, listed when only it and the newer one elsewhere were peeked at; the rest given
    # once the next is, each of the others peeked at as the listing takes it.
    assert calls == [([ids[4]], 2, 2), ([ids[3], ids[2], ids[1], ids[0]], 3, 6)]


def test_the_first_scan_peeks_and_lists_quiet_and_later_scans_do_not(tmp_path: Path) -> None:
    """Issue #38: the owner's first look at the session files runs in `quiet` (no tokenizer starts
    loading meanwhile: ctxd/tokens/counter.py), from the first head peeked to the last session
    listed; a file found by a later scan is not held up so."""
    ws = tmp_path / "ws"
    ws.mkdir()
    codex_home = tmp_path / "codex"
    for n in range(3):
        fx.write_jsonl(fx.codex_path(codex_home, f"0199a213-0000-7800-8aa1-{n:012d}"),
                       fx.codex_session(ws, f"0199a213-0000-7800-8aa1-{n:012d}"))
    held: list[bool] = []
    seen: list[tuple[int, bool]] = []  # (files listed, quiet held) per listing

    @contextlib.contextmanager
    def quiet() -> Iterator[None]:
        held.append(True)
        try:
            yield
        finally:
            held.pop()

    def listing(files: Iterable[tuple[str, Path, str]]) -> None:
        seen.append((len(list(files)), bool(held)))

    sources = discovery.sources({"codex": str(codex_home), "claude": str(tmp_path / "claude")},
                                env={"HOME": str(tmp_path)})
    follower = Follower(lambda update: None, sources, poll=True, listing=listing, quiet=quiet)
    follower.set_folders([ws])
    follower.scan_once()
    assert seen == [(1, True), (2, True)] and not held
    fx.write_jsonl(fx.codex_path(codex_home, "0199a213-0000-7800-8aa1-000000000009"),
                   fx.codex_session(ws, "0199a213-0000-7800-8aa1-000000000009"))
    follower.scan_once()
    assert seen[2:] == [(1, False)]


def test_a_folder_opened_while_a_session_is_being_peeked_at_follows_it(tmp_path: Path) -> None:
    """The editor opens a folder while the follower is deciding a session's folder (the initial
    scan of thousands of sessions takes a while): that session must be matched against the
    folders as they are now, not the ones before (it was decided "outside every folder" and
    never read, a race seen with OpenCode's store on a loaded machine)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    codex_home = tmp_path / "codex"
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    sources = discovery.sources({"codex": str(codex_home), "claude": str(tmp_path / "claude")},
                                env={"HOME": str(tmp_path)})
    updates: queue.Queue[Update] = queue.Queue()
    follower = Follower(updates.put, sources, poll=True)
    store = follower.stores["codex"]
    peek = store.peek_cwd
    opened: list[bool] = []

    def peek_while_the_folder_opens(key: str, folders: Any) -> tuple[str | None, bool, int]:
        found = peek(key, folders)
        if not opened:  # the user opens the workspace folder just as this peek ends
            opened.append(True)
            follower.set_folders([ws])
        return found

    store.peek_cwd = peek_while_the_folder_opens  # type: ignore[method-assign]
    follower.start()
    try:
        update = next_update(updates, f"codex:{fx.CODEX_ID}", timeout=15)
        assert opened and update.folder == ws
        assert update.session.title == "Fix the failing test in parser.py please"
    finally:
        follower.stop()


# --- a history of thousands: readers held only while their store is behind (issue #38) ---


def _old(path: Path) -> Path:
    """Written an hour ago (older than DORMANT_SECONDS)."""
    before = time.time() - 3600
    os.utime(path, (before, before))
    return path


def test_an_old_sessions_reader_goes_as_soon_as_its_store_holds_where_it_stood(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The store is behind when the reader of an old session is first looked at (a first scan reads
    thousands of files long before they are all mirrored): the reader is kept, and goes as soon as
    the consumer says it stored where it stood, not DORMANT_SECONDS later."""
    ws = tmp_path / "ws"
    ws.mkdir()
    path = str(_old(fx.write_jsonl(fx.codex_path(tmp_path / "codex"), fx.codex_session(ws))))
    stored: dict[str, Any] = {}  # the consumer's store: where each file's reader stood, once written
    updates: list[Update] = []
    sources = discovery.sources({"codex": str(tmp_path / "codex"), "claude": str(tmp_path / "claude")},
                                env={"HOME": str(tmp_path)})
    follower = Follower(updates.append, sources, poll=True, resume=lambda _folder, key: stored.get(key))
    follower.set_folders([ws])
    follower.scan_once()
    assert [u.session.thread for u in updates] == [f"codex:{fx.CODEX_ID}"] and updates[0].state is not None
    caplog.set_level("INFO", logger="ctxd.sessions.follower")
    follower._let_go_dormant()  # (its tick) the store is behind: kept
    assert "dormant session readers" not in caplog.text
    stored[path] = json.loads(json.dumps(updates[0].state))
    follower.stored(path)
    follower._let_go_dormant()
    assert "let go of 1 dormant session readers (0 kept)" in caplog.text
    assert [s.thread for s in follower.sessions(ws)] == [f"codex:{fx.CODEX_ID}"]  # (its session is still shown)


def test_while_the_consumer_is_behind_the_old_files_a_first_scan_found_wait(tmp_path: Path) -> None:
    """While the consumer is behind (`backlog`), the old files a first scan found wait to be read,
    however small (each read one would hold its reader until it is stored), then are all read, a
    batch at a time; one written lately (a session that may be going on) and a session that starts
    meanwhile are read at once."""
    ws = tmp_path / "ws"
    ws.mkdir()
    codex_home = tmp_path / "codex"
    old = [f"0199a213-6666-7800-8aa1-{n:012d}" for n in range(DEFERRED_BATCH + 6)]
    for session_id in old:
        _old(fx.write_jsonl(fx.codex_path(codex_home, session_id), fx.codex_session(ws, session_id)))
    going_on = "0199a213-5555-7800-8aa1-000000000008"
    fx.write_jsonl(fx.codex_path(codex_home, going_on, day="2025/10/02"), fx.codex_session(ws, going_on))
    behind = threading.Event()
    behind.set()
    updates: queue.Queue[Update] = queue.Queue()
    sources = discovery.sources({"codex": str(codex_home), "claude": str(tmp_path / "claude")},
                                env={"HOME": str(tmp_path)})
    follower = Follower(updates.put, sources, poll=True, backlog=behind.is_set)
    follower.set_folders([ws])
    follower.start()
    try:
        deadline = time.monotonic() + 15
        while not follower._scanned and time.monotonic() < deadline:  # the first scan is done
            time.sleep(0.01)
        assert next_update(updates, f"codex:{going_on}", timeout=15).new  # written lately: read while behind
        later = "0199a213-5555-7800-8aa1-000000000009"
        fx.write_jsonl(fx.codex_path(codex_home, later, day="2025/10/04"), fx.codex_session(ws, later))
        assert next_update(updates, f"codex:{later}", timeout=15).new  # the new session: read while behind
        assert updates.empty()  # the old ones still wait
        behind.clear()
        deadline = time.monotonic() + 30
        read: set[str] = set()
        while len(read) < len(old) and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                read.add(updates.get(timeout=1).session.thread)
        assert read == {f"codex:{session_id}" for session_id in old}
    finally:
        follower.stop()


def test_a_file_unchanged_since_an_earlier_read_found_its_cwd_is_decided_without_its_head_peeked_at(
        tmp_path: Path) -> None:
    """Issue #38: a restart peeked at every head again (3,000 of them) before it listed; a file
    whose stamp is the one an earlier read of it had (`known_cwds`, from the summaries) is decided
    by the cwd that read found, in the folder or not; one changed since, or not known, is peeked at."""
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    ws.mkdir()
    elsewhere.mkdir()
    codex_home = tmp_path / "codex"
    ids = [f"0199a213-7777-7800-8aa1-{n:012d}" for n in range(4)]
    paths = [str(fx.write_jsonl(fx.codex_path(codex_home, session_id), fx.codex_session(ws, session_id)))
             for session_id in ids]
    for n, path in enumerate(paths):
        os.utime(path, (1_700_000_000 + n, 1_700_000_000 + n))

    def stamp(path: str) -> tuple[int, ...]:
        st = os.lstat(path)
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    known = {paths[0]: (stamp(paths[0]), str(ws)),  # unchanged: not peeked at
             paths[1]: (stamp(paths[1]), str(elsewhere)),  # unchanged, found elsewhere: not listed
             paths[2]: ((*stamp(paths[2])[:3], 1), str(elsewhere))}  # written since: peeked at
    asked: list[list[str]] = []

    def known_cwds(wanted: list[str]) -> dict[str, tuple[tuple[int, ...], str]]:
        asked.append(sorted(wanted))
        return {path: found for path, found in known.items() if path in wanted}

    listed: list[str] = []
    sources = discovery.sources({"codex": str(codex_home), "claude": str(tmp_path / "claude")},
                                env={"HOME": str(tmp_path)})
    follower = Follower(lambda update: None, sources, poll=True, known_cwds=known_cwds,
                        listing=lambda files: listed.extend(path for path, _, _ in files))
    store = follower.stores["codex"]
    peeked: list[str] = []
    peek = store.peek_cwd

    def counted(key: str, folders: Any) -> tuple[str | None, bool, int]:
        peeked.append(key)
        return peek(key, folders)

    store.peek_cwd = counted  # type: ignore[method-assign]
    follower.set_folders([ws])
    follower.scan_once()
    assert asked == [sorted(paths)]
    assert sorted(peeked) == sorted([paths[2], paths[3]])
    assert listed == [paths[3], paths[2], paths[0]]  # newest first; the one found elsewhere left out


# --- a file rewritten in place while it grew; one rewritten with its mtime put back, taken up later ---


def _costed(ws: Path, first: int, count: int) -> list[dict[str, Any]]:
    """Claude Code lines: `count` replies from `first` on, 1,000 input tokens each."""
    return [line for n in range(first, first + count) for line in fx.claude_assistant(
        [{"type": "text", "text": f"Reply {n}."}], f"msg_{n:04d}", f"a{n}", None, ws, "2025-10-03T11:00:01.000Z",
        fx.claude_usage(1_000, 0, 0, 500))]


def _rewrite_usage(path: Path, message: str) -> int:
    """Give the reply `message` 9,000 input tokens, in place (same inode, same length); where."""
    data = path.read_bytes()
    at = data.index(b'"input_tokens": 1000', data.index(message.encode()))
    with path.open("r+b") as out:
        out.seek(at)
        out.write(b'"input_tokens": 9000')
    return at


def _whole(path: Path) -> dict[str, int]:
    from ctxd.agents.claude import ClaudeReader

    fresh = ClaudeReader(str(path))
    fresh.read()
    return fresh.session.total_usage().as_dict()


@pytest.mark.parametrize("long", [False, True], ids=["checked-whole", "sampled"])
def test_a_file_rewritten_in_its_middle_while_it_grew_is_read_again(tmp_path: Path, long: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A session file whose middle is rewritten in place (another usage, the same length: its first
    bytes and those before the offset the same) while it also grew is no file appended to: the
    live reader reads it again (it kept the old usage, the rewrite taken for an append). A file
    read no further than FULL_CHECK_BYTES is checked whole; a longer one by the blocks sampled as
    it was read (here a bound of 0 bytes: the block at its start holds the rewritten usage)."""
    from ctxd.agents import jsonl
    from ctxd.agents.claude import ClaudeReader

    if long:
        monkeypatch.setattr(jsonl, "FULL_CHECK_BYTES", 0)
    ws = tmp_path / "ws"
    ws.mkdir()
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), _costed(ws, 0, 40))
    reader = ClaudeReader(str(path))
    reader.read()
    assert reader.session.total_usage().input == 40_000
    assert 64 < _rewrite_usage(path, "msg_0001") < jsonl.SAMPLE_BYTES - 64
    fx.append_jsonl(path, _costed(ws, 40, 1))
    reader.read()
    assert reader.session.total_usage().as_dict() == _whole(path)
    assert reader.session.total_usage().input == 49_000

    follower, updates = idle_follower([ws], tmp_path)  # the owner's reader: the file decided and read afresh
    follower.scan_once()
    assert updates[-1].session.total_usage().input == 49_000
    _rewrite_usage(path, "msg_0002")
    fx.append_jsonl(path, _costed(ws, 41, 1))
    follower._read(str(path))
    assert updates[-1].session.total_usage().as_dict() == _whole(path)
    assert updates[-1].session.total_usage().input == 58_000


def test_a_long_file_rewritten_past_its_sampled_blocks_is_read_again_once_it_doubled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A longer file's rewrite that no sampled block holds is found, at the latest, at the first change
    after its reader's offset doubled since every byte read was last checked (each byte is read at
    most about twice more over the file's life)."""
    from ctxd.agents import jsonl
    from ctxd.agents.claude import ClaudeReader

    monkeypatch.setattr(jsonl, "FULL_CHECK_BYTES", 0)
    ws = tmp_path / "ws"
    ws.mkdir()
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), _costed(ws, 0, 40))
    reader = ClaudeReader(str(path))
    reader.read()
    size = path.stat().st_size
    assert _rewrite_usage(path, "msg_0030") > jsonl.SAMPLE_BYTES
    fx.append_jsonl(path, _costed(ws, 40, 40))
    assert path.stat().st_size >= 2 * size
    reader.read()  # (read twice as far as checked whole: the next change checks it whole)
    fx.append_jsonl(path, _costed(ws, 80, 1))
    reader.read()
    assert reader.session.total_usage().as_dict() == _whole(path)
    assert reader.session.total_usage().input == 89_000


def test_a_file_rewritten_with_its_mtime_put_back_is_not_taken_up_where_a_reader_stood(tmp_path: Path) -> None:
    """A restarted owner takes a session's reader up where the one before stood (`resume`), at once
    when the file is stamped as it was. One rewritten in place meanwhile with its size and mtime put
    back (`os.utime`: only its ctime moved) is read again (it was taken up, its old usage kept)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    path = fx.write_jsonl(fx.claude_path(tmp_path / "claude", ws), _costed(ws, 0, 3))
    stored: dict[str, Any] = {}

    def owner() -> tuple[Follower, list[Update]]:
        updates: list[Update] = []
        sources = discovery.sources({"codex": str(tmp_path / "codex"), "claude": str(tmp_path / "claude")},
                                    env={"HOME": str(tmp_path)})
        follower = Follower(updates.append, sources, poll=True, resume=lambda _folder, key: stored.get(key))
        follower.set_folders([ws])
        return follower, updates

    follower, updates = owner()
    follower.scan_once()
    assert updates[-1].session.total_usage().input == 3_000 and updates[-1].state is not None
    stored[str(path)] = json.loads(json.dumps(updates[-1].state))  # the consumer's store, then a restart
    follower, updates = owner()
    follower.scan_once()
    assert updates == []  # (unchanged: taken up where it stood, nothing to tell)
    st = path.stat()
    _rewrite_usage(path, "msg_0001")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    follower, updates = owner()
    follower.scan_once()
    [update] = [u for u in updates if u.session.thread == f"claude:{fx.CLAUDE_ID}"]
    assert update.session.total_usage().as_dict() == _whole(path)
    assert update.session.total_usage().input == 11_000
