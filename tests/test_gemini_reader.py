"""Gemini CLI 0.61.0's session files read by ctxd/agents/gemini.py.

The fixtures are the files Gemini CLI 0.61.0 wrote (tests/fixtures/agents/gemini/, captured by
`python -m tests.fixtures.agents.capture gemini` against tests/model_servers.py's GeminiServer:
`gemini -p`, then `--resume` twice, with a write_file, a replace, an automatic compression and a
subagent call). `$rewindTo` (the interactive `/rewind`, not produced headless) is written here as
`ChatRecordingService.rewindTo` writes it: `{"$rewindTo": "<message id>"}`."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxd import agents
from ctxd.agents.folders import Folders
from ctxd.agents.gemini import AGENT, GeminiReader, GeminiSessions
from ctxd.agents.jsonl import MAX_LINE
from ctxd.agents.session import Usage
from tests.session_fixtures import mirror

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents" / "gemini"
SESSION = "3863ff50-b97a-41c5-8309-110c16f9d66b"
FIXTURE_ROOT = "/home/user/app"  # the workspace the fixture was captured in


def _lines() -> list[str]:
    return (FIXTURES / "session.jsonl").read_text().splitlines()


def _chats(tmp_path: Path, work: Path, slug: str = "app") -> Path:
    """`<home>/tmp/<slug>/chats` with the `.project_root` Gemini CLI writes for `work`."""
    project = tmp_path / ".gemini" / "tmp" / slug
    (project / "chats").mkdir(parents=True)
    (project / ".project_root").write_text(str(work))
    return project / "chats"


def _as_written_in(work: Path) -> list[str]:
    """The fixture's lines as Gemini CLI writes them for a project in `work` (its path and hash)."""
    digest = hashlib.sha256(FIXTURE_ROOT.encode()).hexdigest()
    mine = hashlib.sha256(str(work).encode()).hexdigest()
    return [line.replace(digest, mine).replace(FIXTURE_ROOT, str(work)) for line in _lines()]


def _texts(items: list[dict[str, Any]]) -> list[str]:
    out = []
    for item in items:
        if item["type"] == "message":
            out.append(f"{item['role']}:{' '.join(item['content'][0]['text'].split()[:2])}")
        elif item["type"] == "function_call":
            out.append(f"call:{item['name']}")
        else:
            out.append(f"output:{item['call_id']}")
    return out


def test_the_fixture_reads_as_gemini_cli_loads_it() -> None:
    reader = GeminiReader(str(FIXTURES / "session.jsonl"))
    change = reader.read()
    session = reader.session
    assert session.id == SESSION and session.model == "gemini-2.5-pro" and session.unknown == {}
    assert session.title == "Create hello.txt saying hello." and session.started == "2026-12-02T01:18:14.491Z"
    # Usage: `cached` is part of `input`; each reply once, however often its line was written again
    assert session.cumulative == {"gemini-2.5-pro": Usage(input=(12000 - 10000) + (12100 - 12000) + (600000 - 13000)
                                                          + (4000 - 1000) + (5000 - 4000),
                                                          cached_input=10000 + 12000 + 13000 + 1000 + 4000,
                                                          output=30 + 10 + 25 + 5 + 12)}
    # The fill: the latest reply's tokens.input (the footer's lastPromptTokenCount), covering the window
    # up to that reply (the last reply reported no tokens at all)
    assert session.baseline == 5000 and _texts(session.items[:session.baseline_items])[-1] == "call:invoke_agent"
    # Turns are the typed prompts: not the session context, not the compression's snapshot, not the
    # prompt the compression kept
    assert [t.text for t in session.turns] == ["Create hello.txt saying hello.", "Change it to say hello, world.",
                                              "How many files are there?"]
    # The run's first window, then the compression: a replacement (so the bridge archives what left)
    first, compressed, after = change.steps
    assert not first.replace and _texts(first.items) == [
        "user:<session_context> This", "user:Create hello.txt", "assistant:Writing.", "call:write_file",
        "output:write_file__call_1", "assistant:Wrote hello.txt.", "user:Change it", "assistant:Editing.",
        "call:replace"]
    assert compressed.replace and compressed.compaction == 0 and _texts(compressed.items) == [
        "user:<session_context> This", "user:<state_snapshot>The user", "assistant:Got it.",
        "user:Change it", "assistant:Editing.", "call:replace"]
    assert not after.replace and _texts(after.items)[0] == "output:replace__call_2"
    assert session.compactions == 1 and session.agent_compactions[0]["tokensBefore"] == 600000
    assert session.agent_compactions[0]["tokensAfter"] == 4000  # the first report after it
    # the resumes restated the history: nothing doubled (one output per call)
    outputs = [i["call_id"] for i in session.items if i["type"] == "function_call_output"]
    assert len(outputs) == len(set(outputs))


def test_line_by_line_reads_the_same_as_at_once(tmp_path: Path) -> None:
    path = tmp_path / "session-2026-12-02T01-18-3863ff50.jsonl"
    path.write_text("")
    reader = GeminiReader(str(path))
    steps = []
    for line in _lines():
        with path.open("a") as f:
            f.write(line + "\n")
        steps += reader.read().steps
    whole = GeminiReader(str(FIXTURES / "session.jsonl"))
    whole.read()
    assert reader.session.items == whole.session.items and reader.session.baseline == whole.session.baseline
    assert [(s.replace, s.compaction) for s in steps if s.replace] == [(True, 0)]
    assert [t.text for t in reader.session.turns] == [t.text for t in whole.session.turns]


def test_a_resume_stub_is_no_session_and_does_not_empty_the_window(tmp_path: Path) -> None:
    # A resume in a later minute leaves a file of two lines (header + the session context): no id,
    # so it never claims the session's thread
    stub = tmp_path / "session-2026-12-02T01-19-3863ff50.jsonl"
    stub.write_text("\n".join(_lines()[:2]) + "\n")
    reader = GeminiReader(str(stub))
    reader.read()
    assert reader.session.id is None
    # In the original file, the stub's `$set` (line 13) is followed by the whole history: no replacement
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(_lines()[:15]) + "\n")
    reader = GeminiReader(str(path))
    change = reader.read()
    assert not change.replaced and _texts(reader.session.items)[-1] == "assistant:Wrote hello.txt."


def test_a_rewind_drops_the_message_and_what_followed_and_is_a_replacement(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(_lines()[:20]) + "\n")  # up to the reply with its replace call
    reader = GeminiReader(str(path))
    reader.read()
    assert len(reader.session.turns) == 2
    with path.open("a") as f:
        f.write(json.dumps({"$rewindTo": "38becc43-f312-4f29-8e6d-93653c2510cc"}) + "\n")  # the second prompt
    change = reader.read()
    [step] = change.steps
    assert step.replace and step.compaction is None and reader.session.rewinds == 1
    assert _texts(reader.session.items)[-1] == "assistant:Wrote hello.txt."
    assert [t.text for t in reader.session.turns] == ["Create hello.txt saying hello."]
    with path.open("a") as f:  # an id it never wrote: everything goes, as Gemini CLI's loader does
        f.write(json.dumps({"$rewindTo": "no-such-id"}) + "\n")
    assert reader.read().replaced and reader.session.items == []


@pytest.mark.parametrize("trimmed", [False, True])
@pytest.mark.parametrize("dropped", ["after the report", "the reported turn"])
def test_a_rewind_keeps_the_last_report_only_while_the_window_holds_what_it_counted(
        tmp_path: Path, dropped: str, trimmed: bool) -> None:
    """A `$set.messages` that drops messages without a snapshot is a rewind: Gemini's last report
    stays the fill when what it counted is all still there (a prompt after it taken back), and is
    no fill once the turn it counted is taken back (until Gemini reports again), whether the
    reader holds the window or is a daemon's that remembers little and reads the file again."""
    at = "2026-12-02T01:19:00.000Z"
    lines = _lines()[:11]
    first_run = [json.loads(lines[i]) for i in (2, 6, 7, 9)]  # (the reply with its tool call, as last written)
    context = json.loads(lines[1])["$set"]["messages"]
    reported = [json.loads(_record(at, "p2", "user", [{"text": "Explain hello.txt."}])),
                json.loads(_record(at, "r2", "gemini", "One line.", model="gemini-2.5-pro",
                                   tokens={"input": 13_000, "output": 5, "cached": 12_000}))]
    lines += [json.dumps(m) for m in reported] + [_record(at, "p3", "user", [{"text": "And in French?"}])]
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    reader = GeminiReader(str(path), window=not trimmed)
    window: list[dict[str, Any]] = []
    _read_all(reader, window)
    assert reader.session.baseline == 13_000
    if trimmed:
        reader.trim(2)
    kept = [*context, *first_run, *(reported if dropped == "after the report" else [])]
    with path.open("a") as f:
        f.write(json.dumps({"$set": {"messages": kept}}) + "\n")
    _read_all(reader, window)
    assert reader.session.rewinds == 1 and reader.session.baseline == (13_000 if dropped == "after the report" else None)
    assert reader.session.tail == []


def test_hostile_lines_lose_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    lines = _lines()
    huge = json.dumps({"id": "x", "type": "user", "content": [{"text": "a" * (MAX_LINE + 10)}]})
    path.write_text(lines[0] + "\n" + huge + "\n" + "{not json\n" + "\n".join(lines[1:11]) + "\n"
                    + json.dumps({"$set": {"messages": "not a list"}}) + "\n" + '{"id": 5}\n' + lines[11][:40])
    reader = GeminiReader(str(path))
    reader.read()
    session = reader.session
    assert session.bad_lines == 2  # the huge line and the bad JSON
    assert _texts(session.items)[-1] == "assistant:Wrote hello.txt." and session.baseline == 12100
    assert not any("aaaa" in json.dumps(i) for i in session.items)
    # the torn last line is read once its newline comes
    with path.open("a") as f:
        f.write(lines[11][40:] + "\n")
    reader.read()
    assert session is reader.session and reader.session.bad_lines == 2


def test_a_hostile_session_id_and_a_newer_versions_records(tmp_path: Path) -> None:
    lines = _lines()
    header = json.loads(lines[0])
    path = tmp_path / "session.jsonl"
    for bad in ("a\u0000b", "../x", ".."):  # never a folder to read subagents from, never a crash
        path.write_text("\n".join([json.dumps({**header, "sessionId": bad}), *lines[1:11]]) + "\n")
        reader = GeminiReader(str(path))
        reader.read()
        assert reader.session.id == bad and reader.session.baseline == 12100
    path.write_text("\n".join([*lines[:3], json.dumps({"id": "n1", "type": "hologram", "content": "?"}),
                               json.dumps({"id": "n2", "type": "info", "content": "Session resumed."}),
                               json.dumps({"$unheard": 1})]) + "\n")
    reader = GeminiReader(str(path))
    reader.read()
    assert reader.session.unknown == {"message.hologram": 1, "$unheard": 1}  # info is its own, not unread
    assert _texts(reader.session.items)[-1] == "user:Create hello.txt"


def test_a_file_rewritten_in_place_is_read_afresh(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(_lines()[:11]) + "\n")
    reader = GeminiReader(str(path))
    reader.read()
    other = [line.replace("hello.txt", "howdy.txt").replace(SESSION[:8], "aaaaaaaa") for line in _lines()[:11]]
    with path.open("r+") as f:  # same inode, same size or more
        f.write("\n".join(other) + "\n")
    reader.read()
    assert "howdy.txt" in json.dumps(reader.session.items) and "hello.txt" not in json.dumps(reader.session.items)
    assert reader.session.id == "aaaaaaaa" + SESSION[8:]


def test_the_store_opens_only_sessions_of_open_folders_by_gemini_clis_own_rule(tmp_path: Path) -> None:
    work = tmp_path / "app"
    work.mkdir()
    chats = _chats(tmp_path, work)
    session = chats / "session-2026-12-02T01-18-3863ff50.jsonl"
    session.write_text("\n".join(_as_written_in(work)) + "\n")
    (chats / SESSION).mkdir()  # a subagent's folder: not a session
    (chats / SESSION / "sub.jsonl").write_text((FIXTURES / "subagent.jsonl").read_text())
    store = AGENT.sessions(AGENT.session_root(tmp_path / ".gemini"))
    assert isinstance(store, GeminiSessions)
    assert store.keys() == [str(session)] and store.owns(str(session))
    assert not store.owns(str(chats / SESSION / "sub.jsonl"))
    assert store.peek_cwd(str(session), Folders([work])) == (str(work), True, store.peek_cwd(str(session), Folders([work]))[2])
    # a folder that is not open: the session file is not even opened
    assert store.peek_cwd(str(session), Folders([tmp_path / "elsewhere"])) == (None, True, 0)
    # a `.project_root` naming an open folder whose hash the header does not state: not followed
    liar = _chats(tmp_path, work, "liar")
    claimed = liar / "session-2026-12-02T01-18-aaaaaaaa.jsonl"
    claimed.write_text("\n".join(_lines()) + "\n")  # the hash of /home/user/app
    assert store.peek_cwd(str(claimed), Folders([work]))[0] is None


def _more_lines() -> list[str]:
    """The fixture, then a session going on: a reply written again with its tool call, a rewind,
    the latest reply written again otherwise, and a rewind to a message from before the compression."""
    def message(key: str, kind: str, content: Any, **more: Any) -> str:
        return json.dumps({"id": key, "timestamp": "2026-12-02T01:19:00.000Z", "type": kind, "content": content, **more})

    usage = {"input": 7000, "output": 9, "cached": 5000, "thoughts": 0, "tool": 0, "total": 7009}
    call = {"id": "ls__call_9", "name": "list_directory", "args": {"dir_path": "."}}
    return [*_lines(),
            message("u1", "user", [{"text": "List the files."}]),
            message("r1", "gemini", "Listing.", tokens=usage, model="gemini-2.5-pro"),
            message("r1", "gemini", "Listing.", tokens=usage, model="gemini-2.5-pro", toolCalls=[call]),
            message("f1", "user", [{"functionResponse": {"id": "ls__call_9", "name": "list_directory",
                                                         "response": {"output": "hello.txt"}}}]),
            message("r2", "gemini", "One file.", tokens={**usage, "input": 7100}, model="gemini-2.5-pro"),
            json.dumps({"$rewindTo": "f1"}),
            message("u2", "user", [{"text": "And the folders?"}]),
            message("r3", "gemini", "None.", tokens={**usage, "input": 7300}, model="gemini-2.5-pro"),
            message("r3", "gemini", "No folders.", tokens={**usage, "input": 7400}, model="gemini-2.5-pro"),
            json.dumps({"$rewindTo": "140debc1-0464-433e-94a6-628ae63c4f21"}),
            message("u3", "user", [{"text": "Start over."}]),
            message("r4", "gemini", "Sure.", tokens={**usage, "input": 900}, model="gemini-2.5-pro")]


def _read_all(reader: GeminiReader, window: list[dict[str, Any]]) -> int:
    """Read on while a read asks for the file again from its start (as the follower does), with
    `window` kept as the daemon's store keeps it from the steps of each read; how often it asked."""
    replays = 0
    while True:
        mirror(window, reader.read())
        if not reader.replay:
            return replays
        replays += 1
        reader.reset()


def _shown(reader: GeminiReader) -> dict[str, Any]:
    """What a session shows and the gauge counts from, without where it was read."""
    session = reader.session
    return {"window": session.window, "turns": session.turn_total, "baseline": session.baseline,
            "tail": session.tail, "cost": session.cumulative, "title": session.title, "id": session.id,
            "compactions": session.compactions, "first": session.first_request}


def test_a_reader_taken_up_at_any_line_ends_as_one_read_of_the_whole_file(tmp_path: Path) -> None:
    """The daemon's readers hold no window and are taken up where they stood (a restart, a dormant
    session's reader let go), not read again whole with every window held in memory: from any line
    on, with what it remembers trimmed to two messages (a rewind to one it forgot, or an earlier
    message written again, reads the file again), the session is the one a single read of the
    whole file shows, and the window the steps leave is the one a reader holding it holds."""
    lines = _more_lines()
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    held = GeminiReader(str(path))
    held.read()
    assert _texts(held.session.items)[-3:] == ["output:replace__call_2", "user:Start over.", "assistant:Sure."]
    whole_window: list[dict[str, Any]] = []
    whole = GeminiReader(str(path), window=False)
    _read_all(whole, whole_window)
    assert whole_window == held.session.items and whole.session.items == []
    # (a reader holding the window keeps the turns of every rebuild before the latest: not compared)
    assert _shown(whole) == {**_shown(held), "tail": held.session.items[held.session.baseline_items:], "turns": 3}
    replays = 0
    for cut in range(1, len(lines)):
        path.write_text("\n".join(lines[:cut]) + "\n")
        window: list[dict[str, Any]] = []
        first = GeminiReader(str(path), window=False)
        _read_all(first, window)
        first.trim(2)
        state = json.loads(json.dumps(first.state()))  # as the store keeps it
        path.write_text("\n".join(lines) + "\n")
        later = GeminiReader(str(path), window=False)
        later.restore(state)
        replays += _read_all(later, window)
        assert later.offset == path.stat().st_size and _shown(later) == _shown(whole), cut
        assert window == whole_window, cut
    assert replays > 0  # the rewinds to messages forgotten


def _a_session_going_on(rng: random.Random) -> list[str]:
    """The fixture, then what Gemini CLI writes, at random: prompts, replies (with a tool call and
    its result, or not), the latest message written again, rewinds (to any message, or to one it
    never wrote), and `$set.messages` as a resume (the whole history again, perhaps one more), a
    compression (a snapshot, then some of the latest messages) or a rewind (some of the first)."""
    lines = _lines()
    held = GeminiReader(str(FIXTURES / "session.jsonl"))
    held.read()
    window = list(held._messages)  # the ids in the window, as the loader has them
    message = functools.partial(_record, "2026-12-02T01:19:00.000Z")
    for n in range(rng.randint(5, 40)):
        roll = rng.random()
        if roll < 0.3:
            window.append(f"u{n}")
            lines.append(message(f"u{n}", "user", [{"text": f"prompt {n}"}]))
        elif roll < 0.55:
            window.append(f"r{n}")
            calls = [{"id": f"c{n}", "name": "ls", "args": {}}] if rng.random() < 0.5 else []
            lines.append(message(f"r{n}", "gemini", f"reply {n}", tokens={"input": 1000 + n, "output": 5, "cached": 100},
                                 model="m", toolCalls=calls))
            if calls and rng.random() < 0.7:
                window.append(f"f{n}")
                lines.append(message(f"f{n}", "user", [{"functionResponse": {"id": f"c{n}", "name": "ls",
                                                                             "response": {"output": f"out {n}"}}}]))
        elif roll < 0.65 and window:
            latest = window[-1] if rng.random() < 0.7 else rng.choice(window[-2:])
            lines.append(message(latest, "gemini", f"again {n}", tokens={"input": 2000 + n, "output": 3, "cached": 0},
                                 model="m", toolCalls=[{"id": f"x{n}", "name": "ls", "args": {}}])
                         if rng.random() < 0.5 else message(latest, "user", [{"text": f"edited {n}"}]))
        elif roll < 0.75 and window:
            target = rng.choice([*window, "nope"])
            lines.append(json.dumps({"$rewindTo": target}))
            window = window[:window.index(target)] if target in window else []
        elif roll < 0.85:
            kind = rng.random()
            if kind < 0.5:
                window = window + ([f"n{n}"] if rng.random() < 0.3 else [])
            elif kind < 0.8:
                window = [f"snapshot{n}"] + window[len(window) - rng.randint(0, max(0, len(window) - 1)):]
            else:
                window = window[:rng.randint(0, max(0, len(window) - 1))]
            lines.append(json.dumps({"$set": {"messages": [json.loads(message(key, "user", [{"text": (
                "<state_snapshot>s</state_snapshot>" if key.startswith("snapshot") else f"m {key}")}]))
                for key in window]}}))
        else:
            lines.append(json.dumps({"$set": {"lastUpdated": "2026-12-02T01:20:00.000Z"}}))
    return lines


def _record(at: str, key: str, kind: str, content: Any, **more: Any) -> str:
    return json.dumps({"id": key, "timestamp": at, "type": kind, "content": content, **more})


@pytest.mark.parametrize("seed", range(200))
def test_a_reader_trimmed_and_taken_up_at_random_follows_a_session_going_on_as_one_holding_it(
        tmp_path: Path, seed: int) -> None:
    """Read as it is written, trimmed to what it remembers once caught up (2, 3 or 64 messages)
    and taken up from its saved state at random points, the daemon's reader (no window held)
    leaves the window, fill and cost that one read of the whole file holding the window does."""
    rng = random.Random(seed)
    lines = _a_session_going_on(rng)
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    held = GeminiReader(str(path))
    held.read()
    path.write_text("")
    window: list[dict[str, Any]] = []
    reader = GeminiReader(str(path), window=False)
    for cut in [*sorted(rng.sample(range(1, len(lines)), min(6, len(lines) - 1))), len(lines)]:
        path.write_text("\n".join(lines[:cut]) + "\n")
        _read_all(reader, window)
        reader.trim(rng.choice([2, 3, 64]))
        if rng.random() < 0.5:
            state = json.loads(json.dumps(reader.state()))
            reader = GeminiReader(str(path), window=False)
            reader.restore(state)
    _read_all(reader, window)
    session = reader.session
    assert window == held.session.items and session.window == len(window)
    assert (session.baseline, session.cumulative) == (held.session.baseline, held.session.cumulative)


@pytest.mark.parametrize("then", ["resume", "rewind"])
def test_a_reader_following_a_long_session_reads_again_for_each_change_that_needs_it(tmp_path: Path,
                                                                                      then: str) -> None:
    """A daemon's reader lives as long as its session is followed, and reads its file again from
    the start (`read_again_for`) for each compression it sees once trimmed. Those reads were
    counted for the reader's life: after 16 compressions, a resume (its history restating a
    snapshot the reader forgot) was taken for a 17th compression (its fill gone), and a rewind to
    a message it forgot was not followed. They are counted per change now."""
    message = functools.partial(_record, "2026-12-02T01:19:00.000Z")
    context = json.loads(_lines()[1])["$set"]["messages"]
    lines, window, n = _lines()[:1] + [json.dumps({"$set": {"messages": context}})], list(context), 0
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    reader = GeminiReader(str(path), window=False)
    mirrored: list[dict[str, Any]] = []

    def turns(count: int) -> None:
        nonlocal n
        for _ in range(count):
            n += 1
            for key, kind, content in ((f"u{n}", "user", [{"text": f"prompt {n}"}]), (f"r{n}", "gemini", f"reply {n}")):
                line = message(key, kind, content, **({"tokens": {"input": 1000 + n, "output": 5, "cached": 0},
                                                       "model": "m"} if kind == "gemini" else {}))
                lines.append(line)
                window.append(json.loads(line))

    def written() -> None:  # as the follower reads: after each write, trimmed once caught up
        path.write_text("\n".join(lines) + "\n")
        _read_all(reader, mirrored)
        reader.trim()

    written()
    for compression in range(20):
        turns(3)
        written()
        snapshot = json.loads(message(f"snapshot{compression}", "user", [{"text": "<state_snapshot>s</state_snapshot>"}]))
        window[:] = [*context, snapshot, json.loads(message(f"got{compression}", "gemini", "Got it.")), *window[-2:]]
        lines.append(json.dumps({"$set": {"messages": window}}))
        written()
    turns(40)  # the latest snapshot leaves the messages a trimmed reader remembers
    written()
    if then == "resume":
        lines.extend([_lines()[0], json.dumps({"$set": {"messages": context}}), json.dumps({"$set": {"messages": window}})])
    else:
        lines.append(json.dumps({"$rewindTo": f"u{n - 38}"}))
    written()
    whole = GeminiReader(str(path), window=False)
    whole_window: list[dict[str, Any]] = []
    _read_all(whole, whole_window)
    # (a rewind drops the report that counted what it took back: no fill until Gemini reports again)
    assert whole.session.compactions == 20 and (whole.session.baseline is not None) == (then == "resume")
    assert mirrored == whole_window and _shown(reader) == _shown(whole)


def test_what_was_read_before_the_session_had_an_id_reaches_its_window(tmp_path: Path) -> None:
    """A run's first lines (the header, the session context) have no session id yet: the daemon's
    follower tells no thread of them. When a later read finds the id (the first prompt), the
    daemon's reader reads the file again from its start, so that the thread gets the session
    context too (a real Gemini CLI run lost it, and its compression then replaced the whole window)."""
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(_lines()[:2]) + "\n")  # the header and the session context
    reader = GeminiReader(str(path), window=False)
    window: list[dict[str, Any]] = []
    _read_all(reader, window)
    assert reader.session.id is None
    window.clear()  # (told to no thread)
    path.write_text("\n".join(_lines()[:11]) + "\n")
    assert _read_all(reader, window) == 1
    held = GeminiReader(str(path))
    held.read()
    assert window == held.session.items and _texts(window)[0] == "user:<session_context> This"


def test_ctxd_sessions_lists_a_resumes_stub_as_no_session(tmp_path: Path) -> None:
    """A resume in a later minute leaves a file of its header and the session context alone: no
    session id, no session. Summarized (ctxd sessions), it was listed as `gemini:None` (a real
    Gemini CLI run resumed across a minute's end)."""
    work = tmp_path / "app"
    work.mkdir()
    chats = _chats(tmp_path, work)
    lines = _as_written_in(work)
    (chats / "session-2026-12-02T01-18-3863ff50.jsonl").write_text("\n".join(lines) + "\n")
    (chats / "session-2026-12-02T01-19-3863ff50.jsonl").write_text("\n".join(lines[11:13]) + "\n")
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"),
           "CODEX_HOME": str(tmp_path / "none"), "CLAUDE_CONFIG_DIR": str(tmp_path / "none"),
           "QWEN_HOME": str(tmp_path / "none"), "XDG_DATA_HOME": str(tmp_path / "none")}
    for _ in range(2):  # read, then from the summaries
        done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(work), "--format", "json",
                               "--gemini-home", str(tmp_path / ".gemini")], capture_output=True, text=True, timeout=60,
                              env=env, cwd=Path(__file__).resolve().parent.parent)
        assert done.returncode == 0, done.stderr
        assert [row["thread"] for row in json.loads(done.stdout)] == [f"gemini:{SESSION}"]


def test_subagents_are_billed_to_their_session(tmp_path: Path) -> None:
    chats = _chats(tmp_path, tmp_path)
    path = chats / "session-2026-12-02T01-18-3863ff50.jsonl"
    path.write_text((FIXTURES / "session.jsonl").read_text())
    reader = GeminiReader(str(path))
    reader.read()
    alone = reader.session.total_usage()
    (chats / SESSION).mkdir()
    (chats / SESSION / "sub.jsonl").write_text((FIXTURES / "subagent.jsonl").read_text())
    assert reader.read().usage
    sub = [json.loads(line) for line in (FIXTURES / "subagent.jsonl").read_text().splitlines()]
    replies = {r["id"]: r["tokens"] for r in sub if r.get("type") == "gemini" and "tokens" in r}
    assert replies  # the subagent's replies state their tokens
    total = reader.session.total_usage()
    assert total.cached_input - alone.cached_input == sum(t["cached"] for t in replies.values())
    assert total.output - alone.output == sum(t["output"] + t["thoughts"] for t in replies.values())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_links_fifos_and_devices_are_never_sessions_nor_opened(tmp_path: Path) -> None:
    work = tmp_path / "app"
    work.mkdir()
    chats = _chats(tmp_path, work)
    os.mkfifo(chats / "session-2026-12-02T01-18-fifo0000.jsonl")
    (chats / "session-2026-12-02T01-18-device00.jsonl").symlink_to("/dev/zero")
    (chats / "session-2026-12-02T01-18-link0000.jsonl").symlink_to(FIXTURES / "session.jsonl")
    store = GeminiSessions(tmp_path / ".gemini" / "tmp")
    assert store.keys() == []
    for name in ("fifo0000", "device00", "link0000"):  # a reader handed one anyway never blocks nor reads it
        reader = GeminiReader(str(chats / f"session-2026-12-02T01-18-{name}.jsonl"))
        assert reader.read().empty and reader.bytes_read == 0
    # a `.project_root` that is a FIFO: not opened, no cwd
    fifo_project = tmp_path / ".gemini" / "tmp" / "fifo" / "chats"
    fifo_project.mkdir(parents=True)
    os.mkfifo(fifo_project.parent / ".project_root")
    (fifo_project / "session-2026-12-02T01-18-3863ff50.jsonl").write_text((FIXTURES / "session.jsonl").read_text())
    assert store.peek_cwd(str(fifo_project / "session-2026-12-02T01-18-3863ff50.jsonl"), Folders([work])) == (None, True, 0)


def test_limits_are_gemini_clis() -> None:
    assert agents.get("gemini") is AGENT
    limits = AGENT.limits("gemini-2.5-pro", None, AGENT.read_config(Path("/nonexistent")))
    assert (limits.window, limits.limit) == (1_048_576, 524_288)
    assert AGENT.limits("gemma-4-31b-it", None, AGENT.read_config(Path("/nonexistent"))).window == 256_000


def test_the_configured_compression_threshold_moves_the_point(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(json.dumps({"model": {"compressionThreshold": 0.7}}))
    limits = AGENT.limits("gemini-2.5-pro", None, AGENT.read_config(tmp_path))
    assert limits.limit == int(1_048_576 * 0.7) and "0.7" in limits.limit_source


def test_hook_payloads_as_gemini_cli_sends_them() -> None:
    def payload(name: str) -> dict[str, Any]:
        return dict(json.loads((FIXTURES / "hooks" / f"{name}.json").read_text()))

    turn = AGENT.hook_input("BeforeAgent", payload("BeforeAgent"))
    assert turn is not None and turn.action == "turn" and turn.prompt == "Create hello.txt saying hello."
    assert turn.session_id == SESSION and turn.cwd == FIXTURE_ROOT
    for name, tool in (("BeforeTool-write_file", "write_file"), ("BeforeTool-replace", "replace")):
        hooked = AGENT.hook_input("BeforeTool", payload(name))
        assert hooked is not None and hooked.action == "tool" and hooked.tool_name == tool
        assert AGENT.changes_files(tool, hooked.tool_input)
        assert AGENT.tool_paths(tool, hooked.tool_input) == [f"{FIXTURE_ROOT}/hello.txt"]
    assert not AGENT.changes_files("read_file", {}) and not AGENT.changes_files("invoke_agent", {})
    assert AGENT.shell_command("run_shell_command", {"command": "ls"}) == "ls"
    assert AGENT.shell_command("write_file", {}) is None
    # PreCompress fires before every request: not a compaction signal, not installed
    assert "PreCompress" not in AGENT.hook_events


def _rewound_to_nothing_then_resumed() -> list[str]:
    """The fixture, a `$rewindTo` an id no message has (Gemini CLI's loader drops every message),
    a turn, then a resume: its stub (the session context), and the history again, the session
    context first."""
    lines = _lines()
    header, context = json.loads(lines[26]), json.loads(lines[27])["$set"]["messages"]
    tokens = {"input": 3000, "output": 5, "cached": 0, "thoughts": 0, "tool": 0, "total": 3005}
    turn = [_record("2026-12-02T01:30:00.000Z", "u8", "user", [{"text": "Start again."}]),
            _record("2026-12-02T01:30:01.000Z", "r8", "gemini", "Again.", tokens=tokens, model="gemini-2.5-pro")]
    return [*lines, json.dumps({"$rewindTo": "no-such-id"}), *turn,
            json.dumps({**header, "startTime": "2026-12-02T01:31:00.000Z"}), json.dumps({"$set": {"messages": context}}),
            json.dumps({"$set": {"sessionId": header["sessionId"]}}),
            json.dumps({"$set": {"messages": [*context, *map(json.loads, turn)]}}),
            _record("2026-12-02T01:31:02.000Z", "u9", "user", [{"text": "And more."}]),
            _record("2026-12-02T01:31:03.000Z", "r9", "gemini", "More.", tokens={**tokens, "input": 3500},
                    model="gemini-2.5-pro")]


def test_a_rewind_to_an_unknown_id_then_a_resume_is_the_window_gemini_cli_loads(tmp_path: Path) -> None:
    """After a `$rewindTo` naming no message the window is empty; a resume then restates the
    session context before the turn that followed. The window is the loader's, whether the file is
    read at once or by the daemon's reader taken up at any line: before, one that had caught up
    after the turn lost the session context (taken for a message it had forgotten), and one that
    read it at once took the resume's stub for a rewind (the turn archived, then written again)."""
    lines = _rewound_to_nothing_then_resumed()
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    held = GeminiReader(str(path))
    change = held.read()
    assert _texts(held.session.items) == ["user:<session_context> This", "user:Start again.", "assistant:Again.",
                                          "user:And more.", "assistant:More."]
    assert held.session.baseline == 3500 and held.session.after_report() == []
    # the rewind, then the session context put back before the turn: no stub taken for a rewind
    rebuilt = [_texts(step.items) for step in change.steps if step.replace and step.compaction is None]
    assert rebuilt == [[], ["user:<session_context> This", "user:Start again.", "assistant:Again."]]
    for cut in range(len(_lines()), len(lines)):
        path.write_text("\n".join(lines[:cut]) + "\n")
        window: list[dict[str, Any]] = []
        reader = GeminiReader(str(path), window=False)
        _read_all(reader, window)
        reader.trim()
        path.write_text("\n".join(lines) + "\n")
        _read_all(reader, window)
        assert window == held.session.items and reader.session.baseline == 3500, cut
