"""Storage and concurrency storms for bench/stress.py (issue #13), against real daemons over stdio.

storage: cycles of one storage fault (each in turn) on workspace A (random bytes, truncation, another workspace's
  `-wal`, another process's exclusive lock, the state folder deleted) while workspace B records.
  Counts: faults, answers with 1003 naming the file, wrong answers, B's failures, acknowledged
  items lost (in A before the fault and in B), daemon crashes.
concurrency: rounds of two daemons compacting one thread at once (an LLM compaction against the
  fake endpoint, so that the two overlap); every other round the thread is also rolled back while
  both wait on the model. Counts: compactions committed, refused with 1001 "the history changed",
  other failures, rounds with the wrong outcome, user messages stored twice, rolled-back messages
  that came back.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ctxd.ledger.store import database_path
from tests.fake_openai import FakeOpenAI, Step
from tests.rpc import Client, RpcError, start_daemon

FAULTS = ("random", "truncate", "foreign_wal", "lock", "delete")


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _assistant(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def _texts(client: Client, folder: Path, thread: str = "default") -> list[str]:
    items = client.request("ctxd/history", {"workspace": folder.as_uri(), "thread": thread})["items"]
    return [item["content"][0]["text"] for item in items]


def _record(client: Client, folder: Path, text: str, thread: str = "default") -> bool:
    try:
        client.request("ctxd/record", {"workspace": folder.as_uri(), "thread": thread, "items": [_user(text)]})
        return True
    except RpcError:
        return False


def storage_storm(root: Path, cycles: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"cycles": 0, "faults": {f: 0 for f in FAULTS}, "answered_1003": 0,
                               "wrong_answers": 0, "healthy_failures": 0, "acknowledged_lost": 0, "crashes": 0}
    for cycle in range(cycles):
        base = root / f"c{cycle}"
        a, b, c, state = base / "a", base / "b", base / "c", base / "state"
        for folder in (a, b, c, state):
            folder.mkdir(parents=True)
        fault = FAULTS[cycle % len(FAULTS)]  # every fault equally often
        figures["faults"][fault] += 1
        db_a = database_path(state / "ctxd", a)
        first = start_daemon(state)
        first.initialize([a, b, c])
        acked_a = [f"a{i}" for i in range(5) if _record(first, a, f"a{i}")]
        _record(first, c, "c0")
        if fault == "foreign_wal":
            first.shutdown()
            other = start_daemon(state)
            other.initialize([c])
            _record(other, c, "c1")
            other.kill()  # leaves c's -wal behind
            shutil.copy(f"{database_path(state / 'ctxd', c)}-wal", f"{db_a}-wal")
        else:
            first.shutdown()
        if fault == "random":
            db_a.write_bytes(os.urandom(32 * 1024))
        elif fault == "truncate":
            with db_a.open("r+b") as handle:
                handle.truncate(db_a.stat().st_size // 2)
        client = start_daemon(state)
        lock: sqlite3.Connection | None = None
        try:
            client.initialize([a, b])
            if fault == "lock":
                lock = sqlite3.connect(db_a, timeout=0, isolation_level=None)
                lock.execute("BEGIN EXCLUSIVE")
            if fault == "delete":
                _record(client, a, "a-before-delete")
                _delete_while_written(state / "ctxd")
            acked_b = [f"b{i}" for i in range(5) if _record(client, b, f"b{i}")]
            figures["healthy_failures"] += 5 - len(acked_b)
            try:
                client.request("ctxd/record", {"workspace": a.as_uri(), "items": [_user("during the fault")]})
                if fault != "truncate":  # a truncated file may still take a write at its end
                    figures["wrong_answers"] += 1
                    figures.setdefault("examples", []).append(f"{fault}: acknowledged")
            except RpcError as error:
                if error.code == 1003 and str(db_a) in error.message:
                    figures["answered_1003"] += 1
                elif fault == "truncate" and error.code == 1003:
                    figures["answered_1003"] += 1
                else:
                    figures["wrong_answers"] += 1
                    figures.setdefault("examples", []).append(f"{fault}: {error.code} {error.message[:200]}")
            stored_b = set(_texts(client, b))
            figures["acknowledged_lost"] += len(set(acked_b) - stored_b)
            if lock is not None:
                lock.execute("ROLLBACK")
                stored_a = set(_texts(client, a))
                figures["acknowledged_lost"] += len(set(acked_a) - stored_a)
        except (RpcError, TimeoutError) as error:
            figures["wrong_answers"] += 1
            figures.setdefault("examples", []).append(f"{fault}: {error!s:.200}")
        finally:
            if lock is not None:
                lock.close()
            if client.proc.poll() is not None:
                figures["crashes"] += 1
            client.shutdown()
        figures["cycles"] += 1
        shutil.rmtree(base, ignore_errors=True)
    return figures


def _delete_while_written(folder: Path) -> None:
    """`rm -rf` of a folder the owner may be writing into meanwhile (its log, a ledger's -wal): a
    file made during the walk leaves the folder not empty, and the removal is tried again."""
    for _ in range(20):
        try:
            shutil.rmtree(folder)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    shutil.rmtree(folder)


def concurrency_storm(root: Path, rounds: int) -> dict[str, Any]:
    """Even rounds: two daemons compact one thread at once. Odd rounds: the thread is rolled back
    while the compactions wait on the model. One owner serves both daemons and runs a thread's
    requests in turn, so a round ends in one of several serial histories (bench/README.md, "The
    concurrency storm under one owner"): a race round commits at least once (the second compaction
    commits over the first's result or is refused, 1001); in every round each compaction is
    answered, no user message is doubled, and the rolled-back turn stays gone."""
    figures = {"rounds": 0, "committed": 0, "refused_1001": 0, "other_failures": 0,
               "race_rounds_without_a_commit": 0, "duplicated_user_messages": 0, "rolled_back_returned": 0,
               "items_after": {}}
    with FakeOpenAI() as fake:
        options = {"llm": {"baseUrl": fake.base_url, "model": "m", "maxRetries": 0, "timeoutSeconds": 20}}
        for n in range(rounds):
            folder, state = root / f"r{n}" / "ws", root / f"r{n}" / "state"
            folder.mkdir(parents=True)
            state.mkdir()
            one, two = start_daemon(state), start_daemon(state)
            for client in (one, two):
                client.initialize([folder], options)
            uri = folder.as_uri()
            items: list[dict[str, Any]] = []
            for turn in range(8):
                items += [_user(f"ask {n}-{turn}"), _assistant(f"answer {n}-{turn}")]
            one.request("ctxd/record", {"workspace": uri, "items": items})
            two.request("ctxd/history", {"workspace": uri})
            rollback_round = n % 2 == 1
            asked = len(fake.requests)
            fake.script(Step(delay=1.0 if rollback_round else 0.3), Step(delay=1.0 if rollback_round else 0.3))
            ids = [(c, c.request_async("ctxd/compact", {"workspace": uri, "strategy": "llm"})) for c in (one, two)]
            if rollback_round:
                while len(fake.requests) < asked + 2:  # both compactions have read the history
                    threading.Event().wait(0.01)
                one.request("ctxd/rollback", {"workspace": uri, "turns": 1})
            committed = 0
            for client, msg_id in ids:
                answer = client.response(msg_id, timeout=60)
                if "result" in answer:
                    committed += 1
                elif answer["error"]["code"] == 1001 and "history changed" in answer["error"]["message"]:
                    figures["refused_1001"] += 1
                else:
                    figures["other_failures"] += 1
            figures["committed"] += committed
            if committed == 0 and not rollback_round:
                figures["race_rounds_without_a_commit"] += 1
            history = one.request("ctxd/history", {"workspace": uri})["items"]
            shape = f"{'rollback' if rollback_round else 'race'}: {committed} committed, {len(history)} items"
            figures["items_after"][shape] = figures["items_after"].get(shape, 0) + 1  # which serial histories
            users = [i["content"][0]["text"] for i in history if i.get("role") == "user"]
            figures["duplicated_user_messages"] += len(users) - len(set(users))
            if rollback_round and any(f"ask {n}-7" in text for text in users):
                figures["rolled_back_returned"] += 1
            one.shutdown()
            two.shutdown()
            figures["rounds"] += 1
    return figures


def storms_failed(report: dict[str, Any]) -> list[str]:
    """The storms whose counts miss their goal (every bad count must be 0)."""
    failed = []
    storage = report.get("storage")
    if storage and any(storage[k] for k in ("wrong_answers", "healthy_failures", "acknowledged_lost", "crashes")):
        failed.append("storage")
    concurrency = report.get("concurrency")
    if concurrency and any(concurrency[k] for k in ("other_failures", "race_rounds_without_a_commit",
                                                    "duplicated_user_messages", "rolled_back_returned")):
        failed.append("concurrency")
    sessions = report.get("sessions")
    if sessions and any(sessions[k] for k in ("client_failures", "threads_failures", "impostor_items",
                                              "unnamed_threads", "follow_stalls", "crashes")):
        failed.append("sessions")
    return failed


# --- hostile session files (issue 27) -----------------------------------------------------------------

SESSION_ATTACKS = ("deep_line", "hole", "same_id", "empty_id", "huge_model", "huge_window", "rewritten", "big_import")


def _session_attack(kind: str, n: int, ws: Path, codex_home: Path, victim: Path) -> str | None:
    """Write one hostile session file; returns the thread it may legitimately make (or None)."""
    from tests import session_fixtures as fx

    sid = f"0199a213-dddd-7800-8aa1-{n:012d}"
    path = fx.codex_path(codex_home, sid, day="2025/11/01")
    records = fx.codex_session(ws, sid)
    if kind == "deep_line":
        deep: dict[str, Any] = {"x": 1}
        for _ in range(300):
            deep = {"a": deep}
        records.insert(3, {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                                "content": [{"type": "output_text", "text": "x"}], "d": deep}})
    elif kind == "huge_model":
        records.append({"type": "turn_context", "payload": {"model": "m" * 3_000_000}})
    elif kind == "huge_window":
        records.append({"type": "event_msg", "payload": {"type": "task_started", "model_context_window": int("9" * 401)}})
    elif kind == "empty_id":
        records = fx.codex_session(ws, "")
        sid = ""
    elif kind == "same_id":
        records = [fx.codex_meta(ws, fx.CODEX_ID), *fx.codex_turn("IMPOSTOR", "2025-11-01T10:00:00.000Z", cwd=str(ws))]
        sid = ""
    elif kind == "big_import":
        for k in range(20_000):
            records.append(fx.codex_answer(f"line {k}", "2025-11-01T10:00:00.000Z"))
    fx.write_jsonl(path, records)
    if kind == "hole":
        os.truncate(path, 1 << 40)
        with path.open("ab") as f:
            f.write(b"\n")
    elif kind == "rewritten":
        with victim.open("r+b") as f:  # the victim file written over in place, longer
            f.write(b"".join(__import__("json").dumps(r).encode() + b"\n" for r in fx.codex_session(ws) * 2))
        return f"codex:{fx.CODEX_ID}"
    return f"codex:{sid}" if sid else None


def sessions_storm(root: Path, cycles: int) -> dict[str, Any]:
    """Cycles of one hostile session file each (in turn) written into a followed agent folder while a
    client records into its own thread and reads its gauge and the thread list. Counts: attacks,
    client requests failed, `ctxd/threads` failures, impostor items in the victim's thread, threads
    named by no session id (`codex:`), lines of a healthy session not followed (a stall), daemon
    crashes."""
    from tests import session_fixtures as fx

    ws, state, codex_home = root / "ws", root / "state", root / "codex-home"
    ws.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    victim = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    canary_id = "0199a213-eeee-7800-8aa1-000000000001"
    canary = fx.write_jsonl(fx.codex_path(codex_home, canary_id), fx.codex_session(ws, canary_id))
    client = start_daemon(state, env={"CODEX_HOME": str(codex_home), "CLAUDE_CONFIG_DIR": str(root / "claude")},
                          log_file=root / "daemon.log")
    client.initialize([ws])
    uri = ws.as_uri()
    figures: dict[str, Any] = {"cycles": 0, "attacks": {k: 0 for k in SESSION_ATTACKS}, "client_failures": 0,
                               "threads_failures": 0, "impostor_items": 0, "unnamed_threads": 0, "follow_stalls": 0,
                               "crashes": 0}
    for cycle in range(cycles):
        kind = SESSION_ATTACKS[cycle % len(SESSION_ATTACKS)]
        figures["cycles"] += 1
        figures["attacks"][kind] += 1
        _session_attack(kind, cycle, ws, codex_home, victim)
        for n in range(5):  # the client's own work while the file is followed
            try:
                client.request("ctxd/record", {"workspace": uri, "thread": "mine", "items": [_user(f"{cycle}.{n}")]})
                client.request("ctxd/usage", {"workspace": uri, "thread": "mine"})
            except (RpcError, TimeoutError):
                figures["client_failures"] += 1
        # A healthy session goes on meanwhile: its new line must be followed (20 s: a hang guard).
        fx.append_jsonl(canary, [fx.codex_answer(f"canary {cycle}", "2025-11-01T10:00:00.000Z")])
        deadline = time.monotonic() + 20
        while True:
            try:
                listed = client.request("ctxd/threads", {"workspace": uri})["threads"]
            except (RpcError, TimeoutError):
                figures["threads_failures"] += 1
                break
            counts = {t["thread"]: t["itemCount"] for t in listed}
            if counts.get(f"codex:{canary_id}") == 7 + cycle:
                break
            if time.monotonic() > deadline:
                figures["follow_stalls"] += 1
                break
            time.sleep(0.05)
        figures["unnamed_threads"] += sum(1 for t in listed if t["thread"] in ("codex:", "claude:"))
        if client.proc.poll() is not None:
            figures["crashes"] += 1
            break
    try:
        history = client.request("ctxd/history", {"workspace": uri, "thread": f"codex:{fx.CODEX_ID}"})
        figures["impostor_items"] = sum(1 for item in history["items"] if "IMPOSTOR" in str(item))
    except (RpcError, TimeoutError):
        figures["threads_failures"] += 1
    client.shutdown(timeout=10)
    return figures
