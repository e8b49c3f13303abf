"""Followed Codex / Claude Code sessions through the real daemon (issue #16, protocol v2).

The daemon runs as a subprocess with CODEX_HOME and CLAUDE_CONFIG_DIR in temporary folders; the
session files are written as the agents write them (tests/session_fixtures.py, with provenance).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import session_fixtures as fx
from tests.ghost_repo import make_repo
from tests.rpc import Client, RpcError

CODEX_THREAD = f"codex:{fx.CODEX_ID}"
CLAUDE_THREAD = f"claude:{fx.CLAUDE_ID}"


def homes(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    codex_home, claude_home = tmp_path / "codex-home", tmp_path / "claude-home"
    return codex_home, claude_home, {"CODEX_HOME": str(codex_home), "CLAUDE_CONFIG_DIR": str(claude_home)}


def wait_thread(client: Client, ws: Path, thread: str, check: Callable[[dict[str, Any]], bool] = lambda t: True,
                timeout: float = 15.0) -> dict[str, Any]:
    """Poll ctxd/threads until `thread` is listed and satisfies `check`, then until what the owner
    found is mirrored (`ctxd/sessions/sync`: a session is listed from its summary before its items
    are, and a read's first slice shows the agent's fill before its last slice is written). Idle
    is asked after the listing (asked before, it could predate the read the listing shows), and the
    thread returned is listed again after it (the one listed before showed the summary's fill with
    none of the items idle then waited for)."""
    deadline = time.monotonic() + timeout

    def listing() -> dict[str, dict[str, Any]]:
        return {t["thread"]: t for t in client.request("ctxd/threads", {"workspace": ws.as_uri()})["threads"]}

    while True:
        listed = listing()
        if thread in listed and check(listed[thread]) \
                and client.request("ctxd/sessions/sync", {"workspace": ws.as_uri()})["idle"]:
            listed = listing()
            if thread in listed and check(listed[thread]):
                return listed[thread]
        if time.monotonic() > deadline:
            raise AssertionError(f"{thread} not as expected in {sorted(listed)}: {listed.get(thread)}")
        time.sleep(0.05)


def test_followed_threads_are_listed_mirrored_priced_and_live(daemon_factory, workspace: Path, tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace)[:10])
    claude_file = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    client.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == uri, timeout=15)
    codex = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 9_000)
    claude = wait_thread(client, workspace, CLAUDE_THREAD)
    assert {k: codex[k] for k in ("source", "title", "model", "readOnly")} == {
        "source": "codex", "title": "Fix the failing test in parser.py please", "model": "gpt-5-codex",
        "readOnly": True}
    assert codex["usage"]["contextWindow"] == 272_000 and codex["usage"]["source"] == "api"
    assert claude["source"] == "claude" and claude["usage"]["usedTokens"] == 15_546 and claude["usage"]["source"] == "api"
    assert claude["usage"]["contextWindow"] == 200_000
    listed = client.request("ctxd/threads", {"workspace": uri})["threads"]
    assert [t["thread"] for t in listed] == [CLAUDE_THREAD, CODEX_THREAD]  # newest activity first
    history = client.request("ctxd/history", {"workspace": uri, "thread": CLAUDE_THREAD})
    assert [i["type"] for i in history["items"]] == ["message", "reasoning", "message", "function_call",
                                                     "function_call_output", "message"]
    # Cost in the breakdown, from the reported usage and the built-in prices.
    breakdown = client.request("ctxd/usage", {"workspace": uri, "thread": CLAUDE_THREAD})
    assert breakdown["cost"]["priced"] is True and breakdown["cost"]["currency"] == "USD"
    assert breakdown["cost"]["total"] == pytest.approx(10 * 3e-6 + 27_000 * 0.3e-6 + 3_500 * 3.75e-6 + 160 * 15e-6,
                                                       abs=1e-6)
    assert breakdown["usage"]["usedTokens"] == claude["usage"]["usedTokens"]
    # Growth: the agent reports a new usage; it arrives as ctxd/usageChanged with the agent's figure.
    seen = len(client.notifications)
    fx.append_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace)[10:])
    pushed = client.wait_for_notification(
        "ctxd/usageChanged", lambda p: p["thread"] == CODEX_THREAD and p["usedTokens"] == 12_000 and p["source"] == "api",
        timeout=10, after=seen)
    assert pushed["workspace"] == uri and pushed["contextWindow"] == 272_000
    # A compaction in Claude Code: the mirrored history is replaced, the old items archived.
    fx.append_jsonl(claude_file, fx.claude_compact("c1", "a2", workspace, "2025-10-03T11:05:00.000Z", "We added it."))
    wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["itemCount"] == 1)
    after = client.request("ctxd/history", {"workspace": uri, "thread": CLAUDE_THREAD, "includeArchived": True})
    assert after["total"] == 7 and sum(1 for i in after["items"] if i.get("archived")) == 6
    assert client.request("ctxd/usage", {"workspace": uri, "thread": CLAUDE_THREAD})["usage"]["source"] == "estimate"


def test_a_followed_thread_is_read_only(daemon_factory, workspace: Path, tmp_path: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    before = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["itemCount"] == 6)
    writes = [
        ("ctxd/record", {"items": [{"type": "message", "role": "user", "content": "hi"}]}),
        ("ctxd/compact", {"strategy": "offline"}),
        ("ctxd/rollback", {"turns": 1}),
        ("ctxd/ghost/restore", {"id": "0" * 40, "conversation": True}),
    ]
    for method, params in writes:
        with pytest.raises(RpcError) as refused:
            client.request(method, {"workspace": uri, "thread": CODEX_THREAD, **params})
        assert refused.value.code == -32602, method
        assert "the agent owns that history" in refused.value.message and CODEX_THREAD in refused.value.message
    after = client.request("ctxd/history", {"workspace": uri, "thread": CODEX_THREAD})
    assert after["total"] == before["itemCount"] and after["historyVersion"] == before["historyVersion"]
    # The agent's file was not touched.
    assert fx.codex_path(codex_home).read_bytes() == b"".join(
        __import__("json").dumps(r).encode() + b"\n" for r in fx.codex_session(workspace))


def test_a_session_in_another_folder_is_not_a_thread(daemon_factory, workspace: Path, tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    fx.write_jsonl(fx.codex_path(codex_home, "0199a213-0000-7800-8aa1-000000000002"),
                   fx.codex_session(other, "0199a213-0000-7800-8aa1-000000000002"))
    fx.write_jsonl(fx.claude_path(claude_home, other), fx.claude_session(other))
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD)
    threads = [t["thread"] for t in client.request("ctxd/threads", {"workspace": workspace.as_uri()})["threads"]]
    assert threads == [CODEX_THREAD]
    # Opening the other folder makes its sessions threads of it.
    client.notify("workspace/didChangeWorkspaceFolders", {"event": {
        "added": [{"uri": other.as_uri(), "name": "other"}], "removed": []}})
    wait_thread(client, other, CLAUDE_THREAD)
    wait_thread(client, other, "codex:0199a213-0000-7800-8aa1-000000000002")


def test_sources_can_be_turned_off(daemon_factory, workspace: Path, tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    client = daemon_factory([workspace], {"sources": {"codex": False}}, env=env)
    wait_thread(client, workspace, CLAUDE_THREAD)
    time.sleep(0.5)
    threads = [t["thread"] for t in client.request("ctxd/threads", {"workspace": workspace.as_uri()})["threads"]]
    assert threads == [CLAUDE_THREAD]
    sources = client.request("ctxd/status", {"workspace": workspace.as_uri()})["sources"]
    assert [(s["agent"], s["root"], s["enabled"], s["sessions"]) for s in sources if s["agent"] in ("codex", "claude")] == [
        ("codex", str(codex_home / "sessions"), False, 0), ("claude", str(claude_home / "projects"), True, 1)]


def followed_codex_repo(daemon_factory, tmp_path: Path, files: dict[str, str]) -> tuple[Any, Path, Client]:
    """A git repository with `files` committed, a Codex session in it, and a daemon following it."""
    repo = make_repo(tmp_path / "repo")
    for name, text in files.items():
        repo.write(name, text)
    repo.commit_all("base")
    codex_home, _, env = homes(tmp_path)
    rollout = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(repo.root))
    client = daemon_factory([repo.root], env=env)
    wait_thread(client, repo.root, CODEX_THREAD)
    return repo, rollout, client


def test_automatic_checkpoint_restores_what_a_shell_command_changed(daemon_factory, tmp_path: Path) -> None:
    repo, rollout, client = followed_codex_repo(daemon_factory, tmp_path, {"src/app.py": "print('v1')\n",
                                                                           "notes.txt": "keep me\n"})
    repo.write("src/app.py", "print('v2, not committed')\n")  # the user's uncommitted work
    ws = repo.root
    uri = ws.as_uri()
    before = repo.files()
    # The user starts a new turn; the checkpoint is taken before the agent runs anything.
    fx.append_jsonl(rollout, fx.codex_turn("Delete the notes and rewrite app.py", "2025-10-03T10:05:00.000Z",
                                           cwd=str(ws)))
    deadline = time.monotonic() + 15
    snapshots: list[dict[str, Any]] = []
    while not snapshots and time.monotonic() < deadline:
        snapshots = [s for s in client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]
                     if s["message"] == "Delete the notes and rewrite app.py"]
        time.sleep(0.05)
    assert snapshots, "no automatic checkpoint for the new turn"
    # The agent acts through a shell command (not an edit tool): files change, one is deleted, one added.
    subprocess.run(["sh", "-c", "rm notes.txt && echo \"print('v3')\" > src/app.py && echo tmp > new.txt"],
                   cwd=ws, check=True)
    fx.append_jsonl(rollout, fx.codex_tool_round("call_9", "rm notes.txt ...", "", "2025-10-03T10:05:02.000Z"))
    assert repo.files() != before
    result = client.request("ctxd/ghost/restore", {"workspace": uri, "thread": CODEX_THREAD, "id": snapshots[0]["id"]})
    assert repo.files() == before
    assert "notes.txt" in result["restored"] and "new.txt" in result["removed"]
    # Historical turns found at start-up are not checkpointed: only the one new turn was.
    assert len([s for s in client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]
                if "parser.py" in s["message"]]) == 0


def test_turns_written_at_once_take_one_checkpoint(daemon_factory, tmp_path: Path) -> None:
    repo, rollout, client = followed_codex_repo(daemon_factory, tmp_path, {"a.txt": "a\n"})
    ws = repo.root
    uri = ws.as_uri()
    labels = [f"batch turn {n}" for n in range(5)]
    fx.append_jsonl(rollout, [r for n, text in enumerate(labels)
                              for r in fx.codex_turn(text, f"2025-10-03T10:05:0{n}.000Z", cwd=str(ws))])
    deadline = time.monotonic() + 15
    taken: list[str] = []
    while labels[-1] not in taken and time.monotonic() < deadline:
        taken = [s["message"] for s in client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]]
        time.sleep(0.05)
    # Checkpoints run one at a time in the order asked: had the earlier turns been asked, they would be done.
    assert [m for m in taken if m.startswith("batch turn")] == [labels[-1]]


def test_claude_fill_is_one_rule_in_the_gauge_the_breakdown_and_ctxd_sessions(daemon_factory, workspace: Path,
                                                                                tmp_path: Path) -> None:
    """docs/sessions.md: the latest main-chain reply's input + cache writes + cache reads + output,
    plus ctxd's count of what was written after it. Here a tool's output came after the last
    report, so all three show the report and the same estimate of that output."""
    _, claude_home, env = homes(tmp_path)
    records = fx.claude_session(workspace)
    records.append(fx.claude_user([{"type": "tool_result", "tool_use_id": "toolu_09", "content": "word " * 300}],
                                  "u9", "a2", workspace, "2025-10-03T11:00:09.000Z"))
    fx.write_jsonl(fx.claude_path(claude_home, workspace), records)
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    gauge = wait_thread(client, workspace, CLAUDE_THREAD, lambda t: t["usage"]["source"] == "api+estimate")["usage"]
    breakdown = client.request("ctxd/usage", {"workspace": uri, "thread": CLAUDE_THREAD})["usage"]
    done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(workspace), "--format", "json",
                           "--claude-home", str(claude_home)], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    [row] = __import__("json").loads(done.stdout)
    reported = 6 + 500 + 15_000 + 40
    assert gauge["usedTokens"] > reported + 250  # the 300 words of output are counted on top
    assert breakdown["usedTokens"] == gauge["usedTokens"] == row["usedTokens"]


def test_status_names_the_kinds_of_record_each_agent_version_wrote_that_ctxd_does_not_read(
        daemon_factory, workspace: Path, tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    rollout = fx.codex_session(workspace)
    rollout[3:3] = [{"timestamp": "2025-10-03T10:00:01.500Z", "type": "hologram", "payload": {"x": 1}},
                    {"timestamp": "2025-10-03T10:00:01.600Z", "type": "hologram", "payload": {"x": 2}},
                    {"timestamp": "2025-10-03T10:00:01.700Z", "type": "teleport", "payload": {}}]
    fx.write_jsonl(fx.codex_path(codex_home), rollout)
    fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    client = daemon_factory([workspace], env=env)
    wait_thread(client, workspace, CODEX_THREAD)
    wait_thread(client, workspace, CLAUDE_THREAD)
    sources = {s["agent"]: s for s in client.request("ctxd/status", {"workspace": workspace.as_uri()})["sources"]}
    assert sources["codex"]["unread"] == [{"version": "0.46.0", "kinds": ["hologram", "teleport"], "records": 3}]
    assert sources["claude"]["unread"] == []
    # `ctxd sessions` says it too, on stderr (its output stays the table).
    done = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(workspace),
                           "--codex-home", str(codex_home), "--claude-home", str(claude_home)],
                          capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent)
    assert done.stderr == "ctxd sessions: Codex 0.46.0 wrote 2 kinds of record ctxd does not read: hologram, teleport\n"
    assert done.stdout.startswith("AGENT")


# --- sessions that start while the daemon runs (issue 25) ---


def wait_checkpoint(client: Client, ws: Path, label: str, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [s for s in client.request("ctxd/ghost/list", {"workspace": ws.as_uri()})["snapshots"]
                 if s["message"] == label]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint labelled {label!r}")


def new_session_files(agent: str, codex_home: Path, claude_home: Path, ws: Path, label: str) -> tuple[Path, list]:
    """A session's first lines as the agent writes them when it starts: Codex's meta and first turn,
    Claude Code's first user line."""
    if agent == "codex":
        sid = "0199a213-5555-7800-8aa1-000000000001"
        return fx.codex_path(codex_home, sid, day="2025/10/04"), [
            fx.codex_meta(ws, sid), *fx.codex_turn(label, "2025-10-04T10:00:01.000Z", cwd=str(ws))]
    sid = "5555aaaa-3b4a-4c5d-8e6f-0a1b2c3d4e5f"
    return fx.claude_path(claude_home, ws, sid), [fx.claude_user(label, "n1", None, ws, "2025-10-04T10:00:01.000Z", sid)]


@pytest.mark.parametrize("agent", ["codex", "claude"])
def test_the_first_turn_of_a_session_started_while_following_is_checkpointed(daemon_factory, tmp_path: Path,
                                                                             agent: str) -> None:
    repo = make_repo(tmp_path / "repo")
    repo.write("app.py", "print('v1')\n")
    repo.commit_all("base")
    repo.write("app.py", "print('v2, not committed')\n")
    codex_home, claude_home, env = homes(tmp_path)
    ws = repo.root
    # A session from before the daemon started: caught up, its turns are history (no checkpoint).
    fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(ws))
    client = daemon_factory([ws], env=env)
    wait_thread(client, ws, CODEX_THREAD)
    before = repo.files()
    label = f"{agent}: rename app.py"
    path, lines = new_session_files(agent, codex_home, claude_home, ws, label)
    fx.write_jsonl(path, lines)  # the user starts the agent now
    snapshot = wait_checkpoint(client, ws, label)
    (ws / "app.py").unlink()  # the agent's first change
    repo.write("main.py", "print('v3')\n")
    client.request("ctxd/ghost/restore", {"workspace": ws.as_uri(), "thread": "t", "id": snapshot["id"]})
    assert repo.files() == before
    assert not [s for s in client.request("ctxd/ghost/list", {"workspace": ws.as_uri()})["snapshots"]
                if "parser.py" in s["message"]]


def test_the_first_session_of_an_agent_never_run_before_is_followed_and_checkpointed(daemon_factory,
                                                                                    tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    repo.write("a.txt", "a\n")
    repo.commit_all("base")
    codex_home, claude_home, env = homes(tmp_path)
    ws = repo.root
    fx.write_jsonl(fx.claude_path(claude_home, ws), fx.claude_session(ws))  # Claude was used before; Codex never
    client = daemon_factory([ws], env=env)
    wait_thread(client, ws, CLAUDE_THREAD)
    assert not codex_home.exists()
    seen = len(client.notifications)
    label = "first codex turn ever"
    path, lines = new_session_files("codex", codex_home, claude_home, ws, label)
    fx.write_jsonl(path, lines)  # makes CODEX_HOME/sessions/2025/10/04 at once, as Codex does
    client.wait_for_notification("ctxd/threadsChanged", lambda p: p["workspace"] == ws.as_uri(), after=seen, timeout=15)
    wait_thread(client, ws, "codex:0199a213-5555-7800-8aa1-000000000001")
    wait_checkpoint(client, ws, label)


def test_a_session_found_again_after_a_restart_is_kept_or_appended_to(daemon_factory, workspace: Path,
                                                                      tmp_path: Path) -> None:
    codex_home, _, env = homes(tmp_path)
    rollout = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace)[:10])
    client = daemon_factory([workspace], env=env)
    uri = workspace.as_uri()
    before = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 9_000)
    client.shutdown()
    client = daemon_factory([workspace], env=env)  # the file as it was: nothing rewritten
    wait_thread(client, workspace, CODEX_THREAD)
    client.request("ctxd/ghost/list", {"workspace": uri})  # a round trip after the daemon's first read
    same = wait_thread(client, workspace, CODEX_THREAD)
    assert (same["historyVersion"], same["itemCount"]) == (before["historyVersion"], before["itemCount"])
    client.shutdown()
    fx.append_jsonl(rollout, fx.codex_session(workspace)[10:])  # the agent went on while ctxd was not running
    client = daemon_factory([workspace], env=env)
    grown = wait_thread(client, workspace, CODEX_THREAD, lambda t: t["usage"]["usedTokens"] == 12_000)
    history = client.request("ctxd/history", {"workspace": uri, "thread": CODEX_THREAD, "includeArchived": True})
    assert grown["historyVersion"] == before["historyVersion"] and grown["itemCount"] == 6
    assert not [i for i in history["items"] if i.get("archived")]


def test_an_editor_that_comes_after_another_left_the_owner_follows_new_sessions(daemon_factory,
                                                                               tmp_path: Path) -> None:
    """The owner outlives an editor (it idles before it leaves): a second editor, on another folder,
    sees a Codex session that starts in its folder (the Neovim tour after the float scenario)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    codex_home, claude_home, env = homes(tmp_path)
    env["CTXD_OWNER_IDLE_SECONDS"] = "30"
    editor = daemon_factory([first], env=env)
    owner = editor.daemon_pid
    editor.shutdown(timeout=10)
    later = daemon_factory([second], env=env)
    assert later.daemon_pid == owner  # the same owner serves it
    path, lines = new_session_files("codex", codex_home, claude_home, second, "a session in the later folder")
    fx.write_jsonl(path, lines)
    wait_thread(later, second, "codex:0199a213-5555-7800-8aa1-000000000001")
    os.kill(owner, signal.SIGTERM)


def test_a_first_owner_leaves_the_summaries_its_listing_read(daemon_factory, workspace: Path, tmp_path: Path,
                                                              state_dir: Path) -> None:
    """A state dir's first owner lists the sessions from their summaries, read then, and writes
    them to the state dir once every thread is listed (bridge.py, LIST_SAVE_ROWS): `ctxd sessions`
    and the next owner find them there, each with the fill the listing showed."""
    from ctxd.sessions import summaries

    codex_home, claude_home, env = homes(tmp_path)
    claude = fx.write_jsonl(fx.claude_path(claude_home, workspace), fx.claude_session(workspace))
    codex = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    client = daemon_factory([workspace], env=env)
    listed = {thread: wait_thread(client, workspace, thread)["usage"]["usedTokens"]
              for thread in (CLAUDE_THREAD, CODEX_THREAD)}
    kept = summaries.Summaries(state_dir / "ctxd").load()
    client.shutdown()
    assert sorted(kept) == sorted([str(claude), str(codex)])
    assert {kept[str(claude)].facts["used"], kept[str(codex)].facts["used"]} == set(listed.values()), (kept, listed)


@pytest.mark.parametrize("change", ["rewritten", "restored", "truncated"])
def test_the_owner_never_lists_a_summary_of_a_file_changed_under_it(daemon_factory, workspace: Path, tmp_path: Path,
                                                                   state_dir: Path, change: str) -> None:
    """`ctxd sessions` left a summary of the file in the state dir the owner shares (issue #38);
    the file was then rewritten in place (its mtime put back, too) or cut short while no daemon
    ran. From its first listing on, the owner shows the file as it is now, never the summary's
    title or fill."""
    from tests.rpc import REPO, daemon_env

    _, claude_home, env = homes(tmp_path)
    first = [fx.claude_user("Add a flag AAAA", "u1", None, workspace, "2025-10-03T11:00:01.000Z"),
             *fx.claude_assistant([{"type": "text", "text": "Done."}], "msg_01", "a1", "u1", workspace,
                                  "2025-10-03T11:00:02.000Z", fx.claude_usage(4, 100, 15_000, 20))]
    second = [fx.claude_user("Now the docs", "u2", "a1", workspace, "2025-10-03T11:01:01.000Z"),
              *fx.claude_assistant([{"type": "text", "text": "Done."}], "msg_02", "a2", "u2", workspace,
                                   "2025-10-03T11:01:02.000Z", fx.claude_usage(4, 100, 30_000, 20))]
    path = fx.write_jsonl(fx.claude_path(claude_home, workspace), first + second)

    def cli_rows() -> list[tuple[str, int]]:
        run = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(workspace), "--format",
                              "json"], capture_output=True, text=True, env=daemon_env(state_dir, env), cwd=str(REPO),
                             timeout=120)
        assert run.returncode == 0, run.stderr
        return [(r["title"], r["usedTokens"]) for r in json.loads(run.stdout)]

    assert cli_rows() == [("Add a flag AAAA", 30_124)]
    if change in ("rewritten", "restored"):  # in place (the same inode), the same size: another prompt, another fill
        st = path.stat()
        with path.open("r+b") as out:
            out.write(path.read_bytes().replace(b"AAAA", b"BBBB").replace(b"30000", b"31000"))
        if change == "restored":  # its mtime put back too
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        expected = ("Add a flag BBBB", 31_124)
    else:  # the second turn cut off
        fx.write_jsonl(path, first)
        expected = ("Add a flag AAAA", 15_124)
    client = daemon_factory([workspace], env=env)
    seen: list[tuple[str, int]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        idle = client.request("ctxd/sessions/sync", {"workspace": workspace.as_uri()})["idle"]
        listed = {t["thread"]: t for t in client.request("ctxd/threads", {"workspace": workspace.as_uri()})["threads"]}
        if CLAUDE_THREAD in listed:
            entry = listed[CLAUDE_THREAD]
            seen.append((entry["title"], entry["usage"]["usedTokens"]))
            if idle:
                break
        time.sleep(0.02)
    assert seen and set(seen) == {expected}, seen
    client.shutdown()
    assert cli_rows() == [expected]  # the summary the owner left is of the file as it is


def test_two_files_of_one_session_id_make_one_thread_mirrored_once(daemon_factory, workspace: Path,
                                                                   tmp_path: Path) -> None:
    """A rollout copied to another day's folder and continued there (the same session id in two
    files): the first listing (which takes a thread its store has not for the first file that
    names it, without asking the store per session) makes one thread, which holds one file's
    items, never both files' together, and the other file is said not mirrored."""
    from ctxd.agents.codex import CodexReader

    codex_home, _, env = homes(tmp_path)
    first = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(workspace))
    copy = fx.codex_path(codex_home, day="2025/10/04")
    copy.parent.mkdir(parents=True)
    copy.write_bytes(first.read_bytes())
    fx.append_jsonl(copy, fx.codex_turn("Now add a test for it", "2025-10-04T09:00:00.000Z", cwd=str(workspace)))
    counts = set()
    for path in (first, copy):
        alone = CodexReader(str(path))
        alone.read()
        counts.add(len(alone.session.items))
    assert len(counts) == 2
    client = daemon_factory([workspace], env=env)
    listed = wait_thread(client, workspace, CODEX_THREAD)
    threads = client.request("ctxd/threads", {"workspace": workspace.as_uri()})["threads"]
    assert [t["thread"] for t in threads] == [CODEX_THREAD]
    assert listed["itemCount"] in counts
    # The other file is named once, as the one not mirrored (`SessionBridge._warn`).
    claim = f"claims session id {fx.CODEX_ID!r}"
    deadline = time.monotonic() + 10
    while claim not in (log := (tmp_path / "daemon-0.log").read_text(errors="replace")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.count(claim) == 1, log[-3000:]
