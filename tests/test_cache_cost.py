"""The prompt cache's cost (issue #31): warm or cold by the provider's lifetime, what a cold cache
makes the next turn re-write, each compaction's cache write against what it saves per turn, from
the files the real agents wrote (tests/fixtures/agents), through `ctxd sessions`, the daemon's
`ctxd/threads` and `ctxd/usage`, the status line, and ctxd's own compactions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxd import isotime
from ctxd.agents.claude import ClaudeReader
from ctxd.agents.codex import CodexReader
from ctxd.sessions import cachecost
from ctxd.sessions.pricing import builtin_prices
from ctxd.tokens import prompt_cache

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents"
CLAUDE_ID = "2009bcc5-85ba-431c-b4e2-481f4e482c80"
THREAD = f"claude:{CLAUDE_ID}"
SONNET = builtin_prices()["claude-sonnet-4-5"]
LAST_CLAUDE = "2026-11-26T21:19:03.810Z"  # the fixture's last main-chain reply
LAST_CODEX = "2026-11-26T21:18:42.348Z"  # its last token_count (not its last line)


def claude_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / "claude-2.1.332.jsonl").read_text().splitlines() if line.strip()]


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def read_claude(path: Path) -> ClaudeReader:
    reader = ClaudeReader(str(path), CLAUDE_ID)
    reader.read()
    return reader


def test_claude_cache_warm_then_cold_and_what_the_next_turn_rewrites(tmp_path: Path) -> None:
    reader = read_claude(write_lines(tmp_path / f"{CLAUDE_ID}.jsonl", claude_lines()))
    s = reader.session
    assert s.last_request_at == LAST_CLAUDE and not s.cache_1h
    facts = cachecost.facts(s, builtin_prices())
    last = isotime.seconds(LAST_CLAUDE)
    assert last is not None
    warm = prompt_cache.state(facts, s.baseline or 0, now=last + 299)
    assert warm["state"] == "warm" and warm["lifetimeSeconds"] == 300
    assert warm["expiresAt"] == prompt_cache.iso(last + 300)
    cold = prompt_cache.state(facts, s.baseline or 0, now=last + 301)
    # The next turn writes the whole prompt so far (the fill, 5,135) at the 5-minute write rate.
    assert cold["state"] == "cold" and cold["rewriteTokens"] == 5_135
    assert cold["rewriteCost"] == round(5_135 * SONNET.cache_write / 1e6, 6)


def test_claude_one_hour_writes_keep_the_cache_an_hour_at_the_one_hour_rate(tmp_path: Path) -> None:
    lines = claude_lines()
    for line in lines:  # as Claude Code writes it with the 1-hour cache on
        usage = line.get("message", {}).get("usage") if isinstance(line.get("message"), dict) else None
        if isinstance(usage, dict) and usage.get("cache_creation_input_tokens"):
            usage["cache_creation"] = {"ephemeral_1h_input_tokens": usage["cache_creation_input_tokens"],
                                       "ephemeral_5m_input_tokens": 0}
    s = read_claude(write_lines(tmp_path / f"{CLAUDE_ID}.jsonl", lines)).session
    assert s.cache_1h
    facts = cachecost.facts(s, builtin_prices())
    last = isotime.seconds(LAST_CLAUDE) or 0.0
    assert prompt_cache.state(facts, 5_135, now=last + 1_800)["state"] == "warm"
    cold = prompt_cache.state(facts, 5_135, now=last + 3_601)
    assert cold["lifetimeSeconds"] == 3_600 and cold["rewriteCost"] == round(5_135 * SONNET.cache_write_1h / 1e6, 6)


def test_codex_cache_lifetime_is_openais_and_a_rewrite_is_billed_as_input() -> None:
    reader = CodexReader(str(FIXTURES / "codex-0.171.0.jsonl"))
    reader.read()
    s = reader.session
    assert s.last_request_at == LAST_CODEX
    facts = cachecost.facts(s, builtin_prices())
    last = isotime.seconds(LAST_CODEX) or 0.0
    assert prompt_cache.state(facts, 12_030, now=last + 599)["state"] == "warm"
    cold = prompt_cache.state(facts, 12_030, now=last + 601)
    price = builtin_prices()["gpt-5.5"]
    assert cold["lifetimeSeconds"] == 600 and cold["rewriteCost"] == round(12_030 * price.input / 1e6, 6)


def compacted_claude(tmp_path: Path) -> Path:
    """The fixture, then Claude Code's compaction (its boundary and summary) and the next turn,
    whose request writes the new, shorter prompt to the cache."""
    lines = claude_lines()
    last = lines[-1]
    base = {k: last[k] for k in ("sessionId", "cwd", "version") if k in last}
    lines += [
        {**base, "type": "system", "subtype": "compact_boundary", "uuid": "cb1", "parentUuid": None,
         "timestamp": "2026-11-26T21:30:00.000Z", "compactMetadata": {"trigger": "manual", "preTokens": 5_135}},
        {**base, "type": "user", "uuid": "cs1", "parentUuid": "cb1", "isCompactSummary": True,
         "timestamp": "2026-11-26T21:30:01.000Z", "message": {"role": "user", "content": "Summary: hello.txt added."}},
        {**base, "type": "user", "uuid": "u9", "parentUuid": "cs1", "timestamp": "2026-11-26T21:30:02.000Z",
         "message": {"role": "user", "content": "Now say done"}},
        {**base, "type": "assistant", "uuid": "a9", "parentUuid": "u9", "timestamp": "2026-11-26T21:30:03.000Z",
         "message": {"id": "msg_0099", "role": "assistant", "model": "claude-sonnet-4-5",
                     "content": [{"type": "text", "text": "Done."}],
                     "usage": {"input_tokens": 10, "cache_creation_input_tokens": 1_200, "cache_read_input_tokens": 0,
                               "output_tokens": 5, "cache_creation": {"ephemeral_1h_input_tokens": 0,
                                                                      "ephemeral_5m_input_tokens": 1_200}}}},
    ]
    return write_lines(tmp_path / f"{CLAUDE_ID}.jsonl", lines)


def test_a_claude_compaction_costs_its_cache_write_and_saves_reads_after(tmp_path: Path) -> None:
    s = read_claude(compacted_claude(tmp_path)).session
    [spent] = cachecost.facts(s, builtin_prices())["compactions"]
    # The first request after it wrote 1,200 tokens at the write rate; every later request reads
    # 5,135 - 1,215 fewer cached tokens.
    assert spent == {"at": "2026-11-26T21:30:00.000Z", "cacheWriteTokens": 1_200,
                     "cacheWriteCost": round(1_200 * SONNET.cache_write / 1e6, 6),
                     "savedTokensPerTurn": 5_135 - 1_215,
                     "savedCostPerTurn": round((5_135 - 1_215) * SONNET.cached_input / 1e6, 6)}
    assert s.last_request_at == "2026-11-26T21:30:03.000Z"


def claude_home(tmp_path: Path, transcript: Path, workspace: Path) -> Path:
    """A Claude Code config dir holding `transcript` as a session of `workspace`."""
    from tests.session_fixtures import claude_project_dir

    home = tmp_path / "claude-home"
    project = claude_project_dir(home, workspace)
    project.mkdir(parents=True)
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    for line in lines:
        if "cwd" in line:
            line["cwd"] = str(workspace)
    write_lines(project / f"{CLAUDE_ID}.jsonl", lines)
    return home


def sessions_of(tmp_path: Path, transcript: Path) -> Callable[[str], str]:
    """`ctxd sessions --format <fmt>`'s output, in a workspace whose one session is `transcript`."""
    workspace = tmp_path / "app"
    workspace.mkdir()
    home = claude_home(tmp_path, transcript, workspace)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "HOME": str(tmp_path),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def sessions(fmt: str) -> str:
        done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(workspace), "--format", fmt,
                               "--claude-home", str(home), "--codex-home", str(tmp_path / "no-codex")],
                              capture_output=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    return sessions


def test_ctxd_sessions_shows_the_cache_and_the_compactions_cost(tmp_path: Path) -> None:
    sessions = sessions_of(tmp_path, compacted_claude(tmp_path))
    [row] = json.loads(sessions("json"))
    state = row["cache"]
    assert state["state"] == "cold" and state["lastRequestAt"] == "2026-11-26T21:30:03Z"  # a past session
    assert state["rewriteTokens"] == row["usedTokens"] == 1_215
    assert [c["cacheWriteTokens"] for c in state["compactions"]] == [1_200]
    table = sessions("table")
    assert "CACHE" in table.splitlines()[0]
    assert "cache cold: next turn re-writes 1k ($0.00); compactions wrote $0.00, save $0.0012/turn" in table


@pytest.mark.parametrize("one_hour", [False, True])
def test_statusline_says_until_when_the_cache_is_warm(tmp_path: Path, one_hour: bool) -> None:
    now = time.time()
    stamp = prompt_cache.iso(now - 30)
    transcript = write_lines(tmp_path / "t.jsonl", [
        {"type": "assistant", "timestamp": stamp, "message": {"id": "m1", "usage": {
            "input_tokens": 10, "cache_creation_input_tokens": 2_000, "cache_read_input_tokens": 148_000,
            "output_tokens": 5, "cache_creation": {"ephemeral_1h_input_tokens": 2_000 if one_hour else 0}}}},
        {"type": "user", "timestamp": stamp, "message": {"role": "user", "content": "next"}}])
    data = {"session_id": "abc", "transcript_path": str(transcript), "model": {"id": "claude-sonnet-4-5"},
            "context_window": {"context_window_size": 200_000, "current_usage": {
                "input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 2_000,
                "cache_read_input_tokens": 148_000}}}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
           "XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "ctxd", "statusline", "--no-colour"], input=json.dumps(data).encode(),
                          capture_output=True, env=env, timeout=60, cwd=tmp_path)
    line = done.stdout.decode()
    until = (isotime.seconds(stamp) or 0) + (3_600 if one_hour else 300)
    assert f"cache until {time.strftime('%H:%M', time.localtime(until))}" in line, line

    old = write_lines(tmp_path / "old.jsonl", [
        {"type": "assistant", "timestamp": prompt_cache.iso(now - 7_200), "message": {"id": "m1", "usage": {
            "input_tokens": 10, "cache_creation_input_tokens": 2_000, "cache_read_input_tokens": 148_000,
            "output_tokens": 5}}}])
    done = subprocess.run([sys.executable, "-m", "ctxd", "statusline", "--no-colour"],
                          input=json.dumps({**data, "transcript_path": str(old)}).encode(),
                          capture_output=True, env=env, timeout=60, cwd=tmp_path)
    assert "cache cold: next turn re-writes 150k" in done.stdout.decode(), done.stdout.decode()


class Told:
    """What a compaction tells the client (the server's side of `ctxd.compact.run.Events`), kept."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def usage_now(self, uri: str, thread: str) -> None:
        pass

    def compacted(self, params: dict[str, Any]) -> None:
        self.sent.append(params)

    def warn(self, message: str) -> None:
        pass

    def progress(self, token: int | str | None, value: dict[str, Any]) -> None:
        pass


def text_item(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def test_ctxd_compacts_early_when_the_cache_is_cold_and_reports_spent_against_saved(tmp_path: Path) -> None:
    from ctxd.compact import run
    from ctxd.sessions.pricing import client_cost
    from ctxd.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir()
    ws = Workspace(root.as_uri(), root, tmp_path / "state",
                   {"autoCompactTokenLimit": 4_000, "model": "claude-sonnet-4-5"})
    ws.pricer = lambda spend: client_cost(spend)
    try:
        body = "\n".join(f"line {i}: collecting tests from module_{i}.py and more words" for i in range(40))
        n = 0
        while ws.usage("t")["tier"] == "ok":
            ws.record("t", [text_item("user", f"turn {n}: fix bug {n}"), text_item("assistant", body + str(n))])
            n += 1
        assert ws.usage("t")["tier"] == "warn"
        before = ws.usage("t")["usedTokens"]
        ws.report_usage("t", before, {"input": 10, "cachedInput": before - 10, "output": 5})
        told = Told()
        run.auto_compact(ws, "t", told)  # warm: nothing to gain before the limit
        assert told.sent == [] and ws.usage("t")["usedTokens"] == before
        facts = ws.state("t")["cacheFacts"]
        assert facts["provider"] == "anthropic" and facts["writeRate"] == SONNET.input
        ws.update_state("t", cacheFacts={**facts, "lastRequestAt": prompt_cache.iso(time.time() - 301)})
        run.auto_compact(ws, "t", told)  # cold: the next request re-writes everything anyway
        [params] = told.sent
        after = ws.usage("t")["usedTokens"]
        spent = params["cacheCost"]
        assert spent["coldCache"] is True and spent["cacheWriteTokens"] == after == params["tokensAfter"]
        assert spent["savedTokensPerTurn"] == before - after > 0
        assert spent["cacheWriteCost"] == round(after * SONNET.input / 1e6, 6)
        assert spent["savedCostPerTurn"] == round((before - after) * SONNET.cached_input / 1e6, 6)
        # Listed with the thread's cache, as the breakdown shows it.
        assert ws.breakdown("t")["cache"]["compactions"] == [spent]
    finally:
        ws.close()


def followed(daemon_factory: Any, tmp_path: Path, transcript: Path,
             ready: Callable[[dict[str, Any]], bool] = lambda thread: True) -> tuple[Any, str, dict[str, Any]]:
    """A daemon following `transcript` as the one session of a workspace, the workspace's URI, and
    the session's thread as `ctxd/threads` lists it once `ready` says so."""
    workspace = tmp_path / "app"
    workspace.mkdir()
    home = claude_home(tmp_path, transcript, workspace)
    client = daemon_factory([workspace], env={"CLAUDE_CONFIG_DIR": str(home), "CODEX_HOME": str(tmp_path / "nx")})
    uri = workspace.as_uri()
    deadline = time.monotonic() + 30
    while True:
        listed = [t for t in client.request("ctxd/threads", {"workspace": uri})["threads"] if t["thread"] == THREAD]
        if listed and ready(listed[0]):
            return client, uri, listed[0]
        assert time.monotonic() < deadline, listed
        time.sleep(0.05)


def test_daemon_threads_and_usage_carry_the_cache_of_a_followed_session(daemon_factory, tmp_path: Path) -> None:
    client, uri, listed = followed(daemon_factory, tmp_path, compacted_claude(tmp_path),
                                   lambda thread: bool(thread.get("cache", {}).get("compactions")))
    info = listed["cache"]
    assert info["state"] == "cold" and info["rewriteTokens"] == listed["usage"]["usedTokens"]
    assert info["compactions"][0]["cacheWriteTokens"] == 1_200
    usage = client.request("ctxd/usage", {"workspace": uri, "thread": THREAD})
    assert usage["cache"]["compactions"] == info["compactions"] and usage["cache"]["state"] == "cold"



def test_the_lifetimes_applied_are_the_ones_prices_json_cites() -> None:
    from importlib import resources

    listed = json.loads(resources.files("ctxd.sessions").joinpath("prices.json").read_text())["cacheLifetimes"]
    assert {k: v["seconds"] for k, v in listed.items()} == prompt_cache.LIFETIMES
    assert listed["anthropic"]["oneHourSeconds"] == prompt_cache.ANTHROPIC_1H
    assert all(v["source"] and v["checked"] for v in listed.values())


def test_a_compaction_through_the_daemon_reports_its_cache_cost(daemon_factory, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    client = daemon_factory([workspace], {"model": "claude-sonnet-4-5"})
    uri = workspace.as_uri()
    body = "\n".join(f"line {i}: collecting tests from module_{i}.py and more words" for i in range(40))
    items = [item for n in range(8) for item in (text_item("user", f"turn {n}: fix bug {n}"),
                                                 text_item("assistant", body + str(n)))]
    client.request("ctxd/record", {"workspace": uri, "items": items})
    used = client.request("ctxd/usage", {"workspace": uri})["usage"]["usedTokens"]
    client.request("ctxd/reportTokenUsage", {"workspace": uri, "usage": {
        "inputTokens": used, "cachedInputTokens": used - 10, "outputTokens": 5, "totalTokens": used + 5}})
    assert client.request("ctxd/usage", {"workspace": uri})["cache"]["state"] == "warm"
    result = client.request("ctxd/compact", {"workspace": uri, "strategy": "offline"})
    notice = client.wait_for_notification("ctxd/compacted")
    spent = result["cacheCost"]
    assert notice["cacheCost"] == spent and "coldCache" in spent and spent["coldCache"] is False
    assert spent["cacheWriteTokens"] == result["tokensAfter"]
    assert spent["savedTokensPerTurn"] == result["tokensBefore"] - result["tokensAfter"] > 0
    assert spent["cacheWriteCost"] == round(result["tokensAfter"] * SONNET.input / 1e6, 6)


def last_request_in_year_9999(tmp_path: Path) -> Path:
    """The fixture with its every time at the end of year 9999: the cache's expiry, a lifetime
    later, is past what Python's datetime can write (a damaged or hostile file)."""
    lines = claude_lines()
    for line in lines:
        if "timestamp" in line:
            line["timestamp"] = "9999-12-31T23:59:59.000Z"
    return write_lines(tmp_path / f"{CLAUDE_ID}.jsonl", lines)


def test_a_session_whose_cache_would_expire_after_year_9999_is_listed_with_no_expiry(tmp_path: Path) -> None:
    assert prompt_cache.state({"provider": "anthropic", "lastRequestAt": "9999-12-31T23:59:59Z"}, 0)["expiresAt"] is None
    for edge in ("9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"):  # (UTC: years 10000 and 0)
        assert prompt_cache.state({"provider": "anthropic", "lastRequestAt": edge}, 0)["lastRequestAt"] is None
    sessions = sessions_of(tmp_path, last_request_in_year_9999(tmp_path))
    [row] = json.loads(sessions("json"))
    assert row["cache"]["state"] == "warm" and row["cache"]["expiresAt"] is None
    assert row["cache"]["lastRequestAt"] == "9999-12-31T23:59:59Z"
    [line] = [line for line in sessions("table").splitlines() if line.startswith("claude")]
    assert "cache warm  9999-12-31 23:59:59" in line  # (no time left: none can be written)


def test_the_daemon_lists_and_gauges_a_session_whose_cache_would_expire_after_year_9999(daemon_factory,
                                                                                       tmp_path: Path) -> None:
    client, uri, listed = followed(daemon_factory, tmp_path, last_request_in_year_9999(tmp_path))
    assert listed["cache"]["state"] == "warm" and listed["cache"]["expiresAt"] is None
    usage = client.request("ctxd/usage", {"workspace": uri, "thread": THREAD})
    assert usage["cache"]["expiresAt"] is None and usage["usage"]["usedTokens"] == listed["usage"]["usedTokens"]


def test_iso_writes_every_time_as_datetime_does() -> None:
    """`prompt_cache.iso` writes most times by `time.strftime` (twice as fast as datetime): for every
    time, what it writes, or the error it raises, is datetime's, at the edges where datetime's rounding
    to microseconds carries into the next second, before 1970, at year 10000, NaN and infinities."""
    import math
    import random
    from datetime import UTC, datetime

    def by_datetime(seconds: float) -> str:
        try:
            return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError) as error:
            return type(error).__name__

    def by_iso(seconds: float) -> str:
        try:
            return prompt_cache.iso(seconds)
        except (OverflowError, OSError, ValueError) as error:
            return type(error).__name__

    edges = [0, 0.0, -0.0, 1e-7, -1e-7, -1, -0.4999999, 0.9999994, 0.9999995, 0.99999951, 1.9999999,
             1795727917.564, 1795727917.9999996, 253402300799.0, 253402300799.9999, 253402300800, 1e20,
             math.nan, math.inf, -math.inf]
    rng = random.Random(38)
    times = edges + [rng.uniform(0, 2.6e11) for _ in range(20_000)] + [rng.uniform(-1e10, 0) for _ in range(2_000)]
    times += [rng.randint(0, 2**38) + rng.choice([0.5, 0.999999, 0.9999995, 0.9999999]) for _ in range(5_000)]
    wrong = [(t, by_datetime(t), by_iso(t)) for t in times if by_datetime(t) != by_iso(t)]
    assert not wrong, wrong[:5]
