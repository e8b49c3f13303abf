"""The reliability suite's long runs (issue 8), against the real daemon over stdio.

1. fuzz: 10,000 hostile cases (params, envelopes, raw bodies; the strategies of
   tests/test_reliability_fuzz.py) against one daemon: crashes, hangs, internal errors.
2. crash storm: 100 cycles of recording and `kill -9` at a random moment: items lost/duplicated.
3. size: 1,000,000 items across 100 threads: peak RSS while recording and after loading every
   thread again, and the ledger's load time after a restart (vs an empty thread's, same run).
   Bound: while recording, and after loading every thread again, the peak RSS is at most the RSS
   before loading plus MAX_LOADED_ITEMS items at the per-item cost measured on the second thread
   loaded, plus half again.
4. a 200 MB tool output: peak RSS growth and time. Bound: the peak grows by at most
   BIG_OUTPUT_MIB (the frame reader keeps 8 MiB of any string, whatever its size).
5. storage: 50 cycles of one storage fault on a workspace while another records (bench/storms.py).
6. concurrency: 20 rounds of two daemons compacting one thread at once, with rollbacks (bench/storms.py).
7. planted, tcp, numbers: issue #27's attacks (bench/hostile_storms.py): hostile snapshot stores
   and git config, unauthenticated TCP probers, huge numbers in settings. Every bad count is 0.
8. threads: RSS as a client touches 20,000 threads (bench/hostile_storms.py): bounded growth.
9. folders: 2,000 folders added at once (bench/hostile_storms.py): the first workspace's slowest
   answer meanwhile, at most a tenth of the time they take to open; a line a followed session
   writes then shown within that time.
10. sessions: 40 hostile session files (8 kinds in turn: a line nested 300 deep, a 1 TB hole, a second
   file with a session's id, an empty id, a 3 MB model name, a 401-digit window, a file rewritten in
   place, a 20,000-line import) written into a followed agent folder while a client records and
   reads its gauge (bench/storms.py). Every bad count is 0.
11. gitfile: `.git` files naming foreign git dirs, beside legitimate worktrees, submodules and separate
   git dirs (bench/hostile_storms.py). Every bad count is 0.
12. leaks: followed sessions carrying the API key and escape sequences in titles, instructions, model
   names and prompts (bench/hostile_storms.py): the key never answered, printed or written; no raw
   control character printed by `ctxd sessions`.
13. frame: one 47 MB `ctxd/record` frame after another (bench/hostile_storms.py): the RSS after each
   answer grows at most FRAME_GROWTH_MIB over the daemon's own before the first, and its peak while
   it takes each (VmHWM) at most FRAME_PEAK_TIMES the frame.

14. install: `ctxd hooks install | uninstall` over random user configurations, changed between the
   two as the agents change them (bench/round3_install.py): uninstall leaves every byte ctxd did
   not write.
15. hooks: real `ctxd hook` and `ctxd statusline` processes in hostile repositories (FIFOs, links to
   /dev/zero, huge `.git` files, flooding status-line commands) (bench/round3_hooks.py): every run
   within 2 s and its memory bound, nothing left behind.
16. restore: ghost restores that fail part-way (full disk, a filling disk, RLIMIT_FSIZE, SIGKILL)
   (bench/round3_restore.py): every file exactly as it was or exactly as the snapshot has it.
17. followed: agent sessions with their own compactions, seen after the fact, live or across a
   restart (bench/round3_followed.py): no gauge over 100%, no item lost or doubled.
18. history: random sequences of history operations and their undo against the reference model
   (bench/round3_history.py): no disagreement, duplicate or loss.
19. recall: hostile queries (pasted logs of 200 and 1,000 words, every FTS5 operator) and damaged
   recall indexes (bench/round3_recall.py): every answer within a second, every fact found again.

The exit status is 1 when any goal or bound is missed.

Run: python bench/stress.py            (everything; about 5-10 minutes on 2 cores)
     python bench/stress.py --quick    (a tenth of each)
     python bench/stress.py --only fuzz,storm,storage,concurrency,sessions
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st

from bench.hostile_storms import (  # noqa: E402
    folders_storm,
    frame_storm,
    gitfile_storm,
    hostile_failed,
    leaks_storm,
    numbers_storm,
    planted_storm,
    tcp_storm,
    threads_memory,
)
from bench.round3_followed import followed_failed, followed_storm  # noqa: E402
from bench.round3_history import history_failed, history_storm  # noqa: E402
from bench.round3_hooks import hooks_failed, hooks_storm  # noqa: E402
from bench.round3_install import install_failed, install_storm  # noqa: E402
from bench.round3_recall import recall_failed, recall_storm  # noqa: E402
from bench.round3_restore import restore_failed, restore_storm  # noqa: E402
from bench.storms import concurrency_storm, sessions_storm, storage_storm, storms_failed  # noqa: E402
from ctxd.ledger.cache import MAX_LOADED_ITEMS  # noqa: E402
from tests import test_reliability_fuzz as fuzz  # noqa: E402
from tests.rpc import Client, start_daemon  # noqa: E402
from tests.test_reliability_faults import crash_storm, peak_rss_kib  # noqa: E402

BIG_OUTPUT_MIB = 64  # at most this much peak RSS growth for a huge tool output


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def daemon(root: Path, options: dict[str, Any] | None = None) -> tuple[Client, Path]:
    workspace, state = root / "ws", root / "state"
    workspace.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    client = start_daemon(state, log_file=root / "daemon.log")
    client.initialize([workspace], options)
    return client, workspace


# --- 1. fuzz ----------------------------------------------------------------------------------------


def run_fuzz(root: Path, cases: int) -> dict[str, Any]:
    figures = {"cases": 0, "crashes": 0, "hangs": 0, "internal_errors": 0, "wrong_codes": 0}
    examples: list[str] = []
    client, workspace = daemon(root, {"toolOutputTokenLimit": 200})
    target = fuzz.Fuzzed(client, workspace, root / "daemon.log")

    def case(body: Callable[[], None], label: str) -> None:
        nonlocal client, target
        figures["cases"] += 1
        try:
            body()
        except TimeoutError:
            figures["hangs"] += 1
            examples.append(f"hang: {label:.200}")
        except AssertionError as error:
            key = "internal_errors" if "-32603" in str(error) else "wrong_codes"
            figures[key] += 1
            examples.append(f"{key}: {error!s:.300}")
        if client.proc.poll() is not None:
            figures["crashes"] += 1
            examples.append(f"crash (exit {client.proc.poll()}): {label:.200}")
            client, _ = daemon(root, {"toolOutputTokenLimit": 200})
            target = fuzz.Fuzzed(client, workspace, root / "daemon.log")

    quiet = settings(max_examples=1, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    shares = {"params": cases * 6 // 10, "envelopes": cases * 2 // 10}
    shares["bodies"] = cases - shares["params"] - shares["envelopes"]

    @settings(quiet, max_examples=shares["params"])
    @given(item=fuzz.ctxd_params())
    def params(item: tuple[str, Any]) -> None:
        case(lambda: fuzz.test_ctxd_params_fuzz.hypothesis.inner_test(target, item), repr(item))

    @settings(quiet, max_examples=shares["envelopes"])
    @given(message=fuzz.envelopes())
    def envelopes(message: dict[str, Any]) -> None:
        case(lambda: fuzz.test_envelope_fuzz.hypothesis.inner_test(target, message), repr(message))

    @settings(quiet, max_examples=shares["bodies"])
    @given(body=st.one_of(st.binary(max_size=200), st.text(max_size=100).map(str.encode),
                          fuzz.json_values.map(lambda v: json.dumps(v).encode())))
    def bodies(body: bytes) -> None:
        case(lambda: fuzz.test_raw_body_fuzz.hypothesis.inner_test(target, body), repr(body))

    started = time.perf_counter()
    for run in (params, envelopes, bodies):
        run()
    figures["seconds"] = round(time.perf_counter() - started, 1)
    target.alive()
    client.shutdown()
    figures["examples"] = examples[:10]
    return figures


# --- 3. a million items -------------------------------------------------------------------------------


def item(thread: int, i: int) -> dict[str, Any]:
    if i % 2:
        return {"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": f"t{thread} item {i}: looked at src/module_{i % 97}.py"}]}
    return {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": f"t{thread} item {i}: what does function_{i} do?"}]}


def run_size(root: Path, total: int, threads: int) -> dict[str, Any]:
    client, workspace = daemon(root)
    uri = workspace.as_uri()
    base_rss = rss_kib(client.daemon_pid)
    per_thread = total // threads
    batch = 1000
    started = time.perf_counter()
    pending: list[int] = []
    for start in range(0, per_thread, batch):
        for t in range(threads):
            items = [item(t, i) for i in range(start, min(start + batch, per_thread))]
            pending.append(client.request_async("ctxd/record", {"workspace": uri, "thread": f"t{t}", "items": items}))
            if len(pending) >= 16:
                client.result(pending.pop(0), timeout=120)
    for msg_id in pending:
        client.result(msg_id, timeout=120)
    record_seconds = time.perf_counter() - started
    record_peak = peak_rss_kib(client.daemon_pid)
    after_record = rss_kib(client.daemon_pid)
    client.shutdown()

    # Restart: the first request on an empty thread (baseline), then on a full one (load time).
    client = start_daemon(root / "state", log_file=root / "daemon2.log")
    client.initialize([workspace])
    t0 = time.perf_counter()
    client.request("ctxd/usage", {"workspace": uri, "thread": "empty"})
    empty_seconds = time.perf_counter() - t0
    before_loading = rss_kib(client.daemon_pid)
    t0 = time.perf_counter()
    usage = client.request("ctxd/usage", {"workspace": uri, "thread": "t0"}, timeout=120)
    load_seconds = time.perf_counter() - t0
    # The per-item cost, measured on a second thread: the first load also pays one-time costs.
    before_second = rss_kib(client.daemon_pid)
    client.request("ctxd/usage", {"workspace": uri, "thread": "t1"}, timeout=120)
    per_item_kib = max(rss_kib(client.daemon_pid) - before_second, 0) / per_thread
    bound = before_loading + 1.5 * MAX_LOADED_ITEMS * per_item_kib
    t0 = time.perf_counter()
    for t in range(threads):
        client.request("ctxd/usage", {"workspace": uri, "thread": f"t{t}"}, timeout=120)
    all_seconds = time.perf_counter() - t0
    listed = client.request("ctxd/threads", {"workspace": uri})["threads"]
    stored = sum(t["itemCount"] for t in listed)
    load_peak = peak_rss_kib(client.daemon_pid)
    client.shutdown()
    return {
        "items": stored, "threads": len(listed), "record_seconds": round(record_seconds, 1),
        "items_per_second": round(stored / record_seconds),
        "idle_rss_mib": round(base_rss / 1024, 1),
        "peak_rss_recording_mib": round(record_peak / 1024, 1),
        "rss_after_recording_mib": round(after_record / 1024, 1),
        "peak_rss_after_loading_every_thread_mib": round(load_peak / 1024, 1),
        "load_one_thread_ms": round(load_seconds * 1000, 1),
        "first_request_on_empty_thread_ms": round(empty_seconds * 1000, 1),
        "load_ratio": round(load_seconds / max(empty_seconds, 1e-6), 1),
        "load_every_thread_seconds": round(all_seconds, 2), "tokens_in_t0": usage["usage"]["usedTokens"],
        "loaded_item_kib": round(per_item_kib, 3), "rss_bound_mib": round(bound / 1024, 1),
        "within_bound": max(record_peak, load_peak) <= bound,
    }


# --- 4. a 200 MB tool output ------------------------------------------------------------------------------


def run_big_output(root: Path, mib: int) -> dict[str, Any]:
    client, workspace = daemon(root, {"toolOutputTokenLimit": 10000})
    uri = workspace.as_uri()
    client.request("ctxd/record", {"workspace": uri, "items": [item(0, 0)]})
    base = peak_rss_kib(client.daemon_pid)
    line = "2026-11-22T14:00:00Z build step 1234: compiling src/module.rs ... \"ok\"\n"
    big = line * (mib * 1024 * 1024 // len(line))
    message = {"type": "function_call_output", "call_id": "big", "output": big}
    del big
    started = time.perf_counter()
    result = client.request("ctxd/record", {"workspace": uri, "items": [message]}, timeout=600)
    seconds = time.perf_counter() - started
    del message
    peak = peak_rss_kib(client.daemon_pid)
    stored = client.request("ctxd/history", {"workspace": uri, "offset": 1})["items"][0]["output"]
    reported = any("string value" in n["message"] for n in client.notes("window/showMessage"))
    client.shutdown()
    return {"output_mib": mib, "seconds": round(seconds, 1), "peak_rss_before_mib": round(base / 1024, 1),
            "peak_rss_after_mib": round(peak / 1024, 1), "peak_growth_mib": round((peak - base) / 1024, 1),
            "growth_vs_output": round((peak - base) / 1024 / mib, 3), "stored_chars": len(stored),
            "reported_to_client": reported, "item_count": result["itemCount"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of every run")
    parser.add_argument("--only", default="fuzz,storm,size,big,storage,concurrency,planted,tcp,numbers,threads,"
                        "folders,sessions,gitfile,leaks,frame,install,hooks,restore,followed,history,recall",
                        help="comma-separated: fuzz,storm,size,big,storage,concurrency,planted,tcp,numbers,"
                             "threads,folders,sessions,gitfile,leaks,frame,install,hooks,restore,followed,history,recall")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    only = set(args.only.split(","))
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ctxd-stress-") as tmp:
        root = Path(tmp)
        for name, run in [
            ("fuzz", lambda d: run_fuzz(d, 10_000 // scale)),
            ("storm", lambda d: crash_storm(d / "state", d / "ws", 100 // scale, seed=1)),
            ("size", lambda d: run_size(d, 1_000_000 // scale, 100)),
            ("big", lambda d: run_big_output(d, 200 // scale)),
            ("storage", lambda d: storage_storm(d, 50 // scale)),
            ("concurrency", lambda d: concurrency_storm(d, 20 // scale)),
            ("planted", lambda d: planted_storm(d, 60 // scale)),
            ("tcp", lambda d: tcp_storm(d, 10 // scale)),
            ("numbers", lambda d: numbers_storm(d, 30 // scale)),
            ("threads", lambda d: threads_memory(d, max(2000, 20_000 // scale))),
            ("folders", lambda d: folders_storm(d, 2000 // scale)),
            ("sessions", lambda d: sessions_storm(d, max(8, 40 // scale))),  # every kind at least once
            ("gitfile", lambda d: gitfile_storm(d, max(15, 60 // scale))),  # every pair of kinds at least once
            ("leaks", lambda d: leaks_storm(d, max(6, 30 // scale))),
            ("frame", lambda d: frame_storm(d, 3, 47 // (1 if scale == 1 else 5))),
            ("install", lambda d: install_storm(d, 300 // scale)),
            ("hooks", lambda d: hooks_storm(d, 26)),  # every kind twice
            ("restore", lambda d: restore_storm(d, max(8, 40 // scale))),  # every mode twice
            ("followed", lambda d: followed_storm(d, max(8, 24 // scale))),
            ("history", lambda d: history_storm(d, 300 // scale)),
            ("recall", lambda d: recall_storm(d, max(9, 30 // scale))),  # every damage at least once (every third cycle)
        ]:
            if name not in only:
                continue
            folder = root / name
            folder.mkdir()
            (folder / "ws").mkdir()
            (folder / "state").mkdir()
            started = time.perf_counter()
            report[name] = run(folder)
            report[name]["wall_seconds"] = round(time.perf_counter() - started, 1)
            print(f"{name}: {json.dumps(report[name], indent=2)}", flush=True)
    failed = []
    if "fuzz" in report and any(report["fuzz"][k] for k in ("crashes", "hangs", "internal_errors", "wrong_codes")):
        failed.append("fuzz")
    if "storm" in report and (report["storm"]["lost"] or report["storm"]["duplicated"]):
        failed.append("storm")
    if "size" in report and not report["size"]["within_bound"]:
        failed.append("size (memory over its bound)")
    if "big" in report and report["big"]["peak_growth_mib"] > BIG_OUTPUT_MIB:
        failed.append(f"big (peak grew over {BIG_OUTPUT_MIB} MiB)")
    failed += storms_failed(report)
    failed += hostile_failed(report)
    failed += install_failed(report) + hooks_failed(report) + restore_failed(report)
    failed += followed_failed(report["followed"]) if "followed" in report else []
    failed += history_failed(report["history"]) if "history" in report else []
    failed += recall_failed(report["recall"]) if "recall" in report else []
    print("FAILED: " + ", ".join(failed) if failed else "all goals met")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
