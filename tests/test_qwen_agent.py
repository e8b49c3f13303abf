"""qwen-code's module (ctxd/agents/qwen.py): its chat recordings read into items, usage, turns,
compressions and rewinds; its window and compaction point; its hook payloads; its status line;
its configuration installed and given back byte for byte.

The session files are the ones qwen-code 0.24.4 wrote (tests/fixtures/agents/qwen/, captured by
tests/fixtures/agents/capture.py against the fake model servers; README.md there says how):
`session.jsonl` (`qwen -p`, two `--resume`s, write_file, read_file + edit, `/compress`, a
subagent) and `session-rewind.jsonl` (over ACP: two prompts, `rewindSession` to turn 1, a third
prompt). The hook payloads are its hooks' stdin from the same runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from ctxd import agents
from ctxd.agents import jsonl
from ctxd.agents.base import AgentConfig
from ctxd.agents.folders import Folders
from ctxd.agents.qwen import AGENT, QwenReader, QwenSessions, compact_limits, encode_project
from ctxd.protocol.items import validate_items
from ctxd.sessions import pricing

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "agents" / "qwen"
SESSION = FIXTURES / "session.jsonl"
REWIND = FIXTURES / "session-rewind.jsonl"
SESSION_ID = "2ffe4e28-b3a5-4bf4-b6b6-045e6b77ba91"
WORK = "/home/user/app"


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def chats(home: Path, cwd: str = WORK) -> Path:
    folder = home / "projects" / encode_project(cwd) / "chats"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def hook(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "hooks" / f"{name}.json").read_text())


# --- the reader -----------------------------------------------------------------------------------


def test_a_session_as_qwen_wrote_it() -> None:
    reader = QwenReader(str(SESSION), SESSION_ID)
    change = reader.read()
    s = reader.session
    assert (s.id, s.cwd, s.model, s.context_window, s.version) == (SESSION_ID, WORK, "qwen3-coder-plus", 1_000_000,
                                                                 "0.24.4")
    assert s.title == "Create hello.txt saying hello."
    assert [t.text for t in s.turns] == ["Create hello.txt saying hello.", "Change it to say hello, world.",
                                         "How many files are there?"]  # the notification is no turn
    assert s.unknown == {} and s.bad_lines == 0
    validate_items(s.items)
    # the window before /compress: three turns' items, each tool call with its output
    before = change.steps[0].items
    calls = [(i["call_id"], i["name"]) for i in before if i["type"] == "function_call"]
    outputs = [i["call_id"] for i in before if i["type"] == "function_call_output"]
    assert calls == [("call_1", "write_file"), ("call_2", "read_file"), ("call_3", "edit")]
    assert outputs == ["call_1", "call_2", "call_3"]
    assert json.loads(before[2]["arguments"]) == {"file_path": "/home/user/app/hello.txt", "content": "hello\n"}
    # /compress replaced it with qwen's compressedHistory; the next turn appended to that
    assert [(st.replace, st.compaction) for st in change.steps] == [(False, None), (True, 0), (False, None)]
    assert "<state_snapshot>" in change.steps[1].items[0]["content"][0]["text"]
    assert s.items[: len(change.steps[1].items)] == change.steps[1].items
    assert s.compactions == 1 and s.agent_compactions[0]["trigger"] == "manual"
    assert (s.agent_compactions[0]["tokensBefore"], s.agent_compactions[0]["tokensAfter"]) == (14_000, 11_577)


def test_the_fill_is_the_footers_prompt_tokens() -> None:
    """qwen's footer: the last reply's promptTokenCount (output not added), or a compression's
    newTokenCount until the next reply."""
    data = lines(SESSION)
    reader = QwenReader(str(SESSION))
    fills = []
    for count in range(1, len(data) + 1):
        r = QwenReader("unused")
        r.feed(b"".join(data[:count]))
        fills.append(r.session.baseline)
    assert fills[3] == 12_000  # the first reply: 12,000 prompt tokens (12,030 with its output)
    assert fills[21] == 14_000
    assert fills[23] == 11_577  # after /compress: qwen's own estimate of what it kept
    assert fills[-1] == 2_000
    reader.read()
    assert reader.session.baseline_items == len(reader.session.items)  # the report covers the reply


def test_the_cost_counts_every_request_with_cached_input() -> None:
    """qwen records no cost: every request's telemetry is priced, the compression's and the
    subagent's included (they have no assistant record of the main chain), cached input apart."""
    reader = QwenReader(str(SESSION))
    reader.read()
    records = [json.loads(line) for line in lines(SESSION)]
    reports = [r["systemPayload"]["uiEvent"] for r in records if r.get("subtype") == "ui_telemetry"
               and r["systemPayload"]["uiEvent"]["event.name"] == "qwen-code.api_response"]
    assistants = [r for r in records if r["type"] == "assistant"]
    assert len(reports) == len(assistants) + 2  # the /compress request and the subagent's
    usage = reader.session.cumulative["qwen3-coder-plus"]
    assert usage.cached_input == sum(r["cached_content_token_count"] for r in reports)
    assert usage.input == sum(r["input_token_count"] - r["cached_content_token_count"] for r in reports)
    assert usage.output == sum(r["output_token_count"] for r in reports)
    table = pricing.price_table({"qwen3-coder-plus": {"input": 1.0, "cachedInput": 0.1, "output": 5.0}})
    cost = pricing.cost(reader.session.cumulative, table)
    assert cost["priced"] and cost["total"] == pytest.approx(
        (usage.input * 1.0 + usage.cached_input * 0.1 + usage.output * 5.0) / 1e6)


def test_without_telemetry_the_replies_are_priced(tmp_path: Path) -> None:
    kept = [line for line in lines(SESSION) if b'"ui_telemetry"' not in line]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(kept))
    reader = QwenReader(str(path))
    reader.read()
    usage = reader.session.cumulative["qwen3-coder-plus"]
    assert usage.cached_input == 10_000 + 12_000 + 12_000 + 13_000 + 13_500 + 1_500 + 3_000 + 0


def test_a_rewind_takes_the_dead_branch_out_of_the_window() -> None:
    reader = QwenReader(str(REWIND))
    change = reader.read()
    s = reader.session
    texts = [p["text"] for i in s.items for p in i["content"]]
    assert texts == ["First question.", "Answer 1.", "Second question, again.", "Answer 2b."]
    assert s.rewinds == 1 and s.compactions == 0 and s.unknown == {}
    # what the rewind dropped was in the window before it: the step before the replacement holds it
    assert [(st.replace, st.compaction) for st in change.steps] == [(False, None), (True, None), (False, None)]
    assert [p["text"] for i in change.steps[0].items for p in i["content"]][2:] == ["Second question.", "Answer 2."]
    assert [t.text for t in s.turns] == ["First question.", "Second question, again."]


def _read_all(reader: QwenReader) -> None:
    """Read on while a read asks for the file again from its start (as the follower does)."""
    reader.read()
    while reader.replay:
        reader.reset()
        reader.read()


def _shown(reader: QwenReader) -> dict[str, Any]:
    """What a session shows and the gauge counts from, without where it was read."""
    state = reader.session.to_state()
    return {**state, "tail": [json.dumps(item, sort_keys=True) for item in state["tail"]]}


@pytest.mark.parametrize("fixture", [SESSION, REWIND], ids=["compress", "rewind"])
def test_a_reader_taken_up_at_any_record_ends_as_one_read_of_the_whole_file(tmp_path: Path, fixture: Path) -> None:
    """qwen-code's sessions are taken up where a reader stood (a restart, a dormant session's
    reader let go; its summary for `ctxd sessions`), not read again whole with every window held
    in memory: from any record on, with what it remembers trimmed to two records (a rewind to one
    it forgot reads the file again), the session is the one a single read of the whole file
    shows; and the daemon's reader (the window not held) counts what a reader holding it holds."""
    data = fixture.read_bytes()
    whole = QwenReader(str(fixture), SESSION_ID, window=False)
    _read_all(whole)
    held = QwenReader(str(fixture), SESSION_ID)
    held.read()
    assert (whole.session.window, whole.session.turn_total, whole.session.baseline) == (
        len(held.session.items), len(held.session.turns), held.session.baseline)
    assert whole.session.tail == held.session.items[held.session.baseline_items:]
    assert whole.session.cumulative == held.session.cumulative
    path = tmp_path / fixture.name
    ends = [n + 1 for n, byte in enumerate(data) if byte == ord("\n")]
    replays = 0
    for cut in ends[:-1]:
        path.write_bytes(data[:cut])
        first = QwenReader(str(path), SESSION_ID, window=False)
        _read_all(first)
        first.trim(2)
        state = json.loads(json.dumps(first.state()))  # as the store keeps it
        path.write_bytes(data)
        later = QwenReader(str(path), SESSION_ID, window=False)
        later.restore(state)
        later.read()
        replays += later.replay
        while later.replay:
            later.reset()
            later.read()
        assert later.offset == len(data) and _shown(later) == _shown(whole), cut
    assert replays > 0 if fixture == REWIND else replays == 0  # the rewind's parent was forgotten


# --- hostile files --------------------------------------------------------------------------------


def test_a_torn_last_line_waits_for_its_end(tmp_path: Path) -> None:
    data = SESSION.read_bytes()
    path = tmp_path / "s.jsonl"
    cut = data.index(b"\n", len(data) // 2) + 200  # inside a line
    path.write_bytes(data[:cut])
    reader = QwenReader(str(path))
    reader.read()
    partial = len(reader.session.items)
    assert reader.offset < cut and reader.session.bad_lines == 0
    with path.open("ab") as f:
        f.write(data[cut:])
    reader.read()
    whole = QwenReader(str(SESSION))
    whole.read()
    assert reader.session.items == whole.session.items and partial < len(whole.session.items) + 13
    assert reader.session.cumulative == whole.session.cumulative


def test_a_huge_line_is_skipped_not_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl, "READ_CHUNK", 1024)  # (a line longer than a chunk is read again, larger)
    monkeypatch.setattr(jsonl, "MAX_LINE", 4096)
    data = lines(SESSION)
    huge = json.loads(data[3])
    huge["message"]["parts"][0]["text"] = "Q" * 50_000
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(data[:3]) + json.dumps(huge).encode() + b"\n" + b"".join(data[4:]))
    reader = QwenReader(str(path))
    reader.read()
    assert reader.session.bad_lines == 1 and reader.offset == path.stat().st_size
    assert not any("QQQQ" in json.dumps(i) for i in reader.session.items)
    assert [t.text for t in reader.session.turns][:2] == ["Create hello.txt saying hello.",
                                                         "Change it to say hello, world."]


def test_a_rewritten_file_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(SESSION.read_bytes())
    reader = QwenReader(str(path))
    reader.read()
    with path.open("r+b") as f:  # the same inode, other bytes, no shorter
        f.write(REWIND.read_bytes()[:1000].ljust(path.stat().st_size, b"\n"))
    reader.read()
    assert [t.text for t in reader.session.turns] == ["First question."]  # the new bytes' one line, nothing before
    assert reader.session.compactions == 0 and reader.session.model is None
    path.write_bytes(REWIND.read_bytes())
    reader.read()
    assert [t.text for t in reader.session.turns] == ["First question.", "Second question, again."]
    assert reader.session.cumulative["qwen3-coder-plus"].cached_input < 20_000  # nothing of the first file


def test_links_fifos_and_devices_are_never_opened(tmp_path: Path) -> None:
    home = tmp_path / "qwen"
    folder = chats(home)
    (folder / "real.jsonl").write_bytes(SESSION.read_bytes())
    (folder / "to-device.jsonl").symlink_to("/dev/zero")
    (folder / "to-secret.jsonl").symlink_to(SESSION)
    os.mkfifo(folder / "fifo.jsonl")
    store = QwenSessions(home / "projects")
    assert store.keys() == [str(folder / "real.jsonl")]
    results: list[Any] = []

    def read_all() -> None:
        for name in ("to-device.jsonl", "to-secret.jsonl", "fifo.jsonl"):
            reader = QwenReader(str(folder / name))
            results.append((reader.read().empty, reader.bytes_read, store.peek_cwd(str(folder / name),
                                                                                   Folders([Path(WORK)]))))

    worker = threading.Thread(target=read_all, daemon=True)  # a plain open() of a FIFO blocks for good
    worker.start()
    worker.join(10)
    try:
        os.close(os.open(folder / "fifo.jsonl", os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass
    assert results == [(True, 0, (None, False, 0))] * 3
    assert [s.regular for s in map(store.stamp, [str(folder / "to-device.jsonl"), str(folder / "fifo.jsonl")])
            if s] == [False, False]


def test_a_session_outside_the_open_folders_is_not_opened(tmp_path: Path) -> None:
    home = tmp_path / "qwen"
    elsewhere = chats(home, "/srv/other") / "x.jsonl"
    elsewhere.write_bytes(SESSION.read_bytes())
    inside = chats(home, WORK + "/sub") / "y.jsonl"
    inside.write_bytes(SESSION.read_bytes())
    store = QwenSessions(home / "projects")
    folders = Folders([Path(WORK)])
    assert store.peek_cwd(str(elsewhere), folders) == (None, True, 0)
    cwd, complete, read = store.peek_cwd(str(inside), folders)
    assert (cwd, complete) == (WORK, True) and 0 < read < 5_000
    assert store.owns(str(inside)) and not store.owns(str(home / "projects" / "x" / "subagents" / "a" / "b.jsonl"))


# --- limits, hooks, status line -------------------------------------------------------------------


def test_window_and_compaction_point_by_qwens_rule(tmp_path: Path) -> None:
    none = AGENT.read_config(tmp_path)
    assert compact_limits("qwen3-coder-plus", 1_000_000, none)[::2][:2] == (1_000_000, 850_000)  # /context: auto 850.0k
    assert compact_limits("qwen3-coder-plus", 1_000_000, none).warn_at == 830_000
    assert compact_limits("qwen3-max", None, none).window == 262_144
    assert compact_limits("claude-sonnet-4-5", None, none)[::2][:2] == (200_000, 167_000)  # window - 33,000 is lower
    assert compact_limits("mystery", None, none).window == 200_000
    (tmp_path / "settings.json").write_text(json.dumps({
        "context": {"autoCompactThreshold": 0.5},
        "model": {"name": "my-model", "generationConfig": {"contextWindowSize": 64_000}}}))
    config = AGENT.read_config(tmp_path)
    assert config.compact_percent == 50 and config.windows == {"my-model": 64_000}
    limits = AGENT.limits("my-model", None, config)
    assert (limits.window, limits.limit) == (64_000, 31_000) and str(tmp_path) in limits.window_source
    assert AGENT.limits("qwen3-coder-plus", 1_000_000, config).limit == 500_000
    (tmp_path / "settings.json").write_text("{not json")
    assert AGENT.read_config(tmp_path) == AgentConfig(source=str(tmp_path / "settings.json"))


def test_hook_payloads_in_ctxds_words() -> None:
    typed = AGENT.hook_input("UserPromptSubmit", hook("UserPromptSubmit"))
    assert typed is not None and typed.action == "turn" and typed.prompt and typed.session_id and typed.cwd
    repeat = AGENT.hook_input("UserPromptSubmit", hook("UserPromptSubmit-after-tool-results"))
    assert repeat is not None and repeat.action == "ignore"  # qwen's repeat after a tool batch
    for name, changes in (("write_file", True), ("edit", True), ("read_file", False)):
        tool = AGENT.hook_input("PreToolUse", hook(f"PreToolUse-{name}"))
        assert tool is not None and tool.action == "tool" and tool.tool_name == name
        assert tool.tool_id == hook(f"PreToolUse-{name}")["tool_call_id"]  # the transcript's call id, not toolu_...
        assert AGENT.changes_files(tool.tool_name, tool.tool_input) is changes
        assert AGENT.tool_paths(tool.tool_name, tool.tool_input) == [tool.tool_input["file_path"]]
    assert AGENT.shell_command("run_shell_command", {"command": "rm -rf build"}) == "rm -rf build"
    assert AGENT.shell_command("write_file", {"command": "x"}) is None and AGENT.changes_files("run_shell_command", {})
    for name, action in (("SessionStart-compact", "after-compaction"), ("SessionStart-resume", "ignore"),
                         ("PostCompact", "compacted")):
        event = name.partition("-")[0]
        found = AGENT.hook_input(event, hook(name))
        assert found is not None and found.action == action, name


def test_the_status_line_input() -> None:
    data = json.loads((FIXTURES / "statusline-stdin.json").read_text())
    usage = AGENT.statusline_usage(data)
    assert (usage.used_tokens, usage.context_window, usage.compact_at, usage.known) == (12_000, 1_000_000, 850_000, True)
    assert (usage.model, usage.cwd) == ("qwen3-coder-plus", WORK) and usage.session_id
    assert AGENT.statusline_usage({}).known is False


def test_registered_by_its_line() -> None:
    assert "qwen" in agents.names() and agents.get("qwen") is AGENT and agents.followed("qwen:abc") == "qwen"


# --- ctxd hooks install / uninstall --agent qwen ----------------------------------------------------


def ctxd(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxd", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_install_and_uninstall_keep_the_users_settings_byte_for_byte(tmp_path: Path) -> None:
    home = tmp_path / "qwen"
    home.mkdir()
    settings = home / "settings.json"
    # the user's own: tab-indented, a hook and a status line of theirs, an MCP server, no final newline
    original = ('{\n\t"$version": 4,\n\t"hooks": {\n\t\t"PreToolUse": [\n\t\t\t{"matcher": "edit", "hooks": '
                '[{"type": "command", "command": "lint.sh"}]}\n\t\t]\n\t},\n\t"ui": {"theme": "dark", '
                '"statusLine": {"type": "command", "command": "my-line"}},\n\t"mcpServers": {"docs": '
                '{"command": "docs-mcp"}}\n}')
    settings.write_text(original)
    env = {**os.environ, "QWEN_HOME": str(home), "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    dry = ctxd("hooks", "install", "--agent", "qwen", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "hook qwen PreToolUse" in dry.stdout and settings.read_text() == original
    done = ctxd("hooks", "install", "--agent", "qwen", env=env)
    assert done.returncode == 0, done.stderr
    value = json.loads(settings.read_text())
    assert settings.read_text().startswith('{\n\t"$version"')  # its own indentation
    commands = {e: [h["command"] for g in value["hooks"][e] for h in g["hooks"]] for e in value["hooks"]}
    assert "lint.sh" in commands["PreToolUse"] and any("hook qwen PreToolUse" in c for c in commands["PreToolUse"])
    assert set(commands) == {"PreToolUse", "UserPromptSubmit", "PostCompact", "SessionStart"}
    assert all(h["timeout"] == 10 for g in value["hooks"]["UserPromptSubmit"] for h in g["hooks"])  # seconds
    assert "statusline --agent qwen" in value["ui"]["statusLine"]["command"] and value["ui"]["theme"] == "dark"
    assert set(value["mcpServers"]) == {"docs", "ctxd"}
    status = ctxd("hooks", "status", "--agent", "qwen", env=env)
    assert "qwen user: hooks UserPromptSubmit, PreToolUse, PostCompact, SessionStart; status line yes; MCP server yes" \
        in status.stdout, status.stdout
    again = ctxd("hooks", "install", "--agent", "qwen", env=env)  # twice: nothing added twice
    assert again.returncode == 0 and json.loads(settings.read_text()) == value
    gone = ctxd("hooks", "uninstall", "--agent", "qwen", env=env)
    assert gone.returncode == 0, gone.stderr
    assert settings.read_text() == original
    # changed by the user in between: only ctxd's entries leave
    ctxd("hooks", "install", "--agent", "qwen", env=env)
    changed = json.loads(settings.read_text())
    changed["ui"]["theme"] = "light"
    settings.write_text(json.dumps(changed, indent="\t"))
    assert ctxd("hooks", "uninstall", "--agent", "qwen", env=env).returncode == 0
    left = json.loads(settings.read_text())
    assert left == {**json.loads(original), "ui": {"theme": "light", "statusLine": {"type": "command",
                                                                                    "command": "my-line"}}}


def test_a_settings_file_install_creates_is_stamped_as_qwen_would_and_removed_by_uninstall(tmp_path: Path) -> None:
    """qwen-code adds "$version" to a settings.json without it when it starts: the file ctxd
    creates has it already, so qwen leaves it as ctxd wrote it and uninstall removes it whole."""
    home = tmp_path / "qwen"
    env = {**os.environ, "QWEN_HOME": str(home), "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = ctxd("hooks", "install", "--agent", "qwen", env=env)
    assert done.returncode == 0, done.stderr
    value = json.loads((home / "settings.json").read_text())
    assert list(value)[0] == "$version" and value["$version"] == 4 and "note:" not in done.stdout
    assert ctxd("hooks", "uninstall", "--agent", "qwen", env=env).returncode == 0
    assert not (home / "settings.json").exists()
