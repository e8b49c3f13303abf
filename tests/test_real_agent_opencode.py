"""The real OpenCode 1.18.33 (pinned, tests/agents.py), hooked by ctxd's plugin and followed by the
real daemon (issue #39), with the checks of tests/test_real_agents.py.

OpenCode runs headless (`opencode run`, then `--session`) against the scripted Chat Completions
server on 127.0.0.1 (tests/model_servers.py), its model's limits low enough (context 20,000,
output 4,000) that it compacts by itself in the second turn. ctxd's plugin and MCP server are
installed by `ctxd hooks install --agent opencode` into OpenCode's own configuration and taken
out again by uninstall, which must give the file back byte for byte.

Waits are generous (a loaded machine); nothing asserts a duration.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agents import OpenCode
from tests.ghost_repo import make_repo
from tests.model_servers import ChatCompletionsServer, Reply, tool
from tests.opencode_db import read_only_checkpoint_free
from tests.rpc import Client
from tests.test_agent_opencode import PRICES_TOML, store_row
from tests.test_hooks import ctxd, env_for

WAIT = 60.0  # seconds: only a broken daemon comes near


def _until(what: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)
    return found


class Gate:
    """Run by the model server before it answers (OpenCode waits meanwhile): whether the daemon
    has shown the fill by then."""

    def __init__(self, client: Client, thread: Callable[[], str], at_least: int) -> None:
        self.client, self.thread, self.at_least = client, thread, at_least
        self.seen: bool | None = None

    def __call__(self) -> None:
        try:
            self.client.wait_for_notification(
                "ctxd/usageChanged", lambda p: p["thread"] == self.thread() and p["usedTokens"] >= self.at_least,
                timeout=WAIT)
            self.seen = True
        except TimeoutError:
            self.seen = False


def test_opencode_turns_checkpoints_compaction_and_install_round_trip(daemon_factory: Callable[..., Client],
                                                                      state_dir: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    repo.write("app.py", "print('v1')\n")
    repo.commit_all("base")
    app, new = repo.root / "app.py", repo.root / "new.txt"
    with ChatCompletionsServer() as server:
        # OpenCode compacts once a step reaches context - min(output, 32,000) = 16,000 tokens here.
        opencode = OpenCode(tmp_path / "agent", server, context=20000, output=4000,
                            extra_env={"XDG_STATE_HOME": str(state_dir)})  # its hooks use the daemon's state dir
        home = tmp_path / "agent" / "home"
        config = opencode.config_dir / "opencode.json"
        original = config.read_bytes()
        # ctxd's own settings for the daemon and the hooks: the model's prices (not in ctxd's table)
        (home / ".config" / "ctxd").mkdir(parents=True)
        (home / ".config" / "ctxd" / "config.toml").write_text(PRICES_TOML)

        env = {**env_for(tmp_path), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
               "XDG_STATE_HOME": str(state_dir)}
        done = ctxd(tmp_path, "hooks", "install", "--agent", "opencode", cwd=repo.root, env=env)
        assert done.returncode == 0, done.stderr
        assert (opencode.config_dir / "plugins" / "ctxd.js").exists()

        client = daemon_factory([repo.root], env={"XDG_DATA_HOME": str(home / ".local" / "share"),
                                                  "XDG_CONFIG_HOME": str(home / ".config")})
        uri = repo.root.as_uri()
        session: list[str] = []
        after_write: dict[str, str] = {}

        def thread() -> str:
            return f"opencode:{session[0]}" if session else ""

        # Turn 1: OpenCode's write tool creates new.txt, its bash tool appends to it.
        server.script(Reply(text="Writing.", calls=[tool("call_1", "write", filePath=str(new), content="hello\n")],
                            usage={"input": 12000, "cached": 10000, "output": 30}),
                      Reply(text="Appending.", calls=[tool("call_b", "bash", command="echo more >> new.txt",
                                                           description="append")],
                            usage={"input": 12050, "cached": 12000, "output": 20},
                            before=lambda: after_write.update(repo.files())),
                      Reply(text="Wrote new.txt.", usage={"input": 12100, "cached": 12000, "output": 10}))
        session.append(opencode.session_id(opencode.run("Create new.txt saying hello.", repo.root)))
        assert new.read_text() == "hello\nmore\n"

        # Turn 2, resumed: read and edit app.py; the edit step overflows, OpenCode compacts, then answers.
        live = Gate(client, thread, 13020)  # the read step's fill, shown while OpenCode waits
        server.script(Reply(text="Reading.", calls=[tool("call_2", "read", filePath=str(app))],
                            usage={"input": 13000, "cached": 12000, "output": 20}),
                      Reply(text="Editing.", calls=[tool("call_3", "edit", filePath=str(app), oldString="v1",
                                                         newString="v2")],
                            usage={"input": 17000, "cached": 13000, "output": 25}, before=live),
                      Reply(text="Changed.", usage={"input": 3000, "cached": 1000, "output": 5}))
        assert opencode.session_id(opencode.run("Bump app.py to v2.", repo.root, session=session[0])) == session[0]
        assert server.pending == 0
        assert app.read_text() == "print('v2')\n"
        assert live.seen, "the daemon did not show the fill while OpenCode was running"
    name = thread()

    # The thread: read-only, the fill by OpenCode's TUI rule (last step with output: 3,000 + 5),
    # the window and compaction point of its configuration, the cost OpenCode recorded.
    info = _until(lambda: next((t for t in client.request("ctxd/threads", {"workspace": uri})["threads"]
                                if t["thread"] == name and t["usage"]["usedTokens"] == 3005), None))
    assert info["readOnly"] is True and info["source"] == "opencode" and info["model"] == "qwen3-coder-plus"
    breakdown = client.request("ctxd/usage", {"workspace": uri, "thread": name})
    assert (breakdown["usage"]["contextWindow"], breakdown["usage"]["autoCompactLimit"]) == (20000, 16000)
    recorded = store_row(opencode.database)
    assert breakdown["cost"]["priced"] is True and recorded["cost"] > 0
    assert breakdown["cost"]["total"] == pytest.approx(recorded["cost"], abs=1e-9)
    assert read_only_checkpoint_free(opencode.database)  # ctxd holds no read transaction open
    [source] = [s for s in client.request("ctxd/status", {"workspace": uri})["sources"] if s["agent"] == "opencode"]
    assert source["unread"] == []

    # Its compaction in history, nothing lost: the first turn's prompt and calls archived, recallable.
    kept = client.request("ctxd/history", {"workspace": uri, "thread": name, "includeArchived": True})
    assert [(c["tokensBefore"], c["tokensAfter"]) for c in kept["compactions"]] == [(17025, 2200)]
    archived = [i for i in kept["items"] if i.get("archived")]
    assert [i["call_id"] for i in archived if i["type"] == "function_call"] == ["call_1", "call_b", "call_2", "call_3"]
    assert any("Create new.txt saying hello." in json.dumps(i) for i in archived)
    found = client.request("ctxd/recall", {"workspace": uri, "thread": name, "query": "write new.txt hello"})
    assert any(hit["archived"] for hit in found["results"]), found

    # A checkpoint before each typed prompt and each file-changing call (not the read), taken by
    # the plugin before OpenCode ran the tool. The write's and the edit's trees are their turns'
    # (nothing changed in between): listed once, under the turn. Each restores the files exactly.
    taken = [line.split(": checkpoint ")[1] for line in (state_dir / "ctxd" / "hooks.log").read_text().splitlines()
             if f"{name}: checkpoint " in line]
    assert [t.split(": ", 1)[1] for t in taken] == ['"Create new.txt saying hello."', "before write new.txt",
                                                   "before bash: echo more >> new.txt", '"Bump app.py to v2."',
                                                   "before edit app.py"], taken
    snaps = [s for s in client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"] if s.get("thread") == name]
    turns = sorted((s for s in snaps if s["trigger"] == "turn"), key=lambda s: s["turn"]["index"])
    [bash] = [s for s in snaps if s["trigger"] == "tool"]
    assert [t["turn"] for t in turns] == [{"index": 1, "text": '"Create new.txt saying hello."'},
                                         {"index": 2, "text": '"Bump app.py to v2."'}]
    assert bash["tool"] == {"name": "bash", "callId": "call_b"} and len(snaps) == 3
    client.request("ctxd/ghost/restore", {"workspace": uri, "thread": name, "id": turns[1]["id"]})
    assert (app.read_text(), new.read_text()) == ("print('v1')\n", "hello\nmore\n")  # before the edit
    client.request("ctxd/ghost/restore", {"workspace": uri, "thread": name, "id": bash["id"]})
    assert repo.files() == after_write  # exactly the files after the write, before the bash
    client.request("ctxd/ghost/restore", {"workspace": uri, "thread": name, "id": turns[0]["id"]})
    assert not new.exists() and app.read_text() == "print('v1')\n"

    # Uninstall gives OpenCode's configuration back byte for byte and removes ctxd's plugin.
    done = ctxd(tmp_path, "hooks", "uninstall", "--agent", "opencode", cwd=repo.root, env=env)
    assert done.returncode == 0, done.stderr
    assert config.read_bytes() == original and not (opencode.config_dir / "plugins" / "ctxd.js").exists()


def test_opencode_goes_on_when_ctxd_hangs_or_is_missing(tmp_path: Path) -> None:
    """ctxd's plugin fails open: a ctxd that never answers is left after 2 s, a missing one is
    skipped, and OpenCode's tool calls run as if there were no plugin."""
    from ctxd.agents.opencode import plugin_text

    work = make_repo(tmp_path / "repo").root
    with ChatCompletionsServer() as server:
        opencode = OpenCode(tmp_path / "agent", server)
        plugins = opencode.config_dir / "plugins"
        plugins.mkdir()
        for words, name in ((["sh", "-c", "sleep 30", "hung-ctxd"], "a.txt"), ([str(tmp_path / "no-such-ctxd")], "b.txt")):
            (plugins / "ctxd.js").write_text(plugin_text(words))
            server.script(Reply(text="Writing.", calls=[tool("call_1", "write", filePath=str(work / name), content="x\n")],
                                usage={"input": 1000, "cached": 0, "output": 5}),
                          Reply(text="Done.", usage={"input": 1100, "cached": 1000, "output": 2}))
            opencode.run(f"Create {name}.", work)
            assert (work / name).read_text() == "x\n" and server.pending == 0
