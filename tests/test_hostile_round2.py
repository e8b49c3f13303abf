"""Issue #27, security: what a second attack run found, against the real daemon and real git.

A snapshot store that came with the folder, commands in a repository's git config, `.git` layouts
that are not a work tree, unauthenticated TCP connections, the API key in followed sessions, and
escape sequences printed by the command line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxd.errors import GitFailed
from ctxd.ghost import api as ghost
from tests import session_fixtures as fx
from tests.ghost_repo import Repo, isolated_git_env, make_repo
from tests.helpers import user
from tests.rpc import Client, RpcError, daemon_env
from tests.test_sessions_e2e import CODEX_THREAD, homes, wait_thread


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in isolated_git_env(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _marking_script(tmp_path: Path, marker: Path) -> Path:
    """A command that records that it ran (and passes its input through, as a filter would)."""
    script = tmp_path / "ran.sh"
    script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{marker}'\ncat\n")
    script.chmod(0o755)
    return script


def _commands_config(script: Path) -> str:
    """Every git setting we know of that names a command, each pointing at `script`."""
    return (f"[filter \"evil\"]\n\tclean = {script} clean\n\tsmudge = {script} smudge\n"
            f"\tprocess = {script} process\n\trequired = true\n"
            f"[diff \"evil\"]\n\ttextconv = {script} textconv\n\tcommand = {script} diffdriver\n"
            f"[diff]\n\texternal = {script} external\n"
            f"[core]\n\tfsmonitor = {script}\n\tpager = {script} pager\n\tsshCommand = {script} ssh\n"
            f"\taskPass = {script} askpass\n\teditor = {script} editor\n\talternateRefsCommand = {script} alt\n"
            f"[credential]\n\thelper = !{script} credential\n"
            f"[gpg]\n\tprogram = {script}\n[commit]\n\tgpgSign = true\n[user]\n\tsigningKey = ABCDEF\n"
            f"[merge \"evil\"]\n\tdriver = {script} merge\n")


def _plant_store(repo: Repo, script: Path) -> Path:
    """A `.git/ctxd/store` as an archive could bring it: a bare repository whose config runs `script`."""
    store = repo.git_dir / "ctxd" / "store"
    store.parent.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(store)], check=True, capture_output=True)
    with open(store / "config", "a") as handle:
        handle.write(_commands_config(script))
    (store / "info").mkdir(exist_ok=True)
    (store / "info" / "attributes").write_text("* filter=evil diff=evil merge=evil\n")
    return store


def _attributes(repo: Repo) -> None:
    repo.write(".gitattributes", "* filter=evil diff=evil merge=evil\n")
    repo.write("src/app.py", "edited\n")
    repo.write("new.txt", "untracked\n")


def _every_operation(root: Path) -> None:
    snap = ghost.snapshot(root)
    (root / "src" / "app.py").write_text("agent\n")
    ghost.diff(root, snap["id"])
    ghost.diff(root, snap["id"], "src/app.py")
    done = ghost.restore(root, snap["id"])
    ghost.restore(root, done["undoId"])
    ghost.list_snapshots(root)


def test_a_store_that_came_with_the_folder_is_refused_and_runs_nothing(isolated: None, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    marker = tmp_path / "command-ran"
    store = _plant_store(repo, _marking_script(tmp_path, marker))
    _attributes(repo)
    for operation in (lambda: ghost.snapshot(repo.root), lambda: ghost.list_snapshots(repo.root),
                      lambda: ghost.restore(repo.root, "0" * 40)):
        with pytest.raises(GitFailed) as refused:
            operation()
        assert refused.value.code == 1002 and str(store) in refused.value.message
        assert "not made by ctxd" in refused.value.message
    assert not marker.exists()
    # Moved aside, ctxd makes its own and works.
    store.rename(store.with_name("came-with-it"))
    snap = ghost.snapshot(repo.root)
    assert [s["id"] for s in ghost.list_snapshots(repo.root)] == [snap["id"]]
    assert not marker.exists()
    key = tmp_path / "state" / "ctxd" / "ghost" / "owner.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and (store / "ctxd-owner").exists()


def test_a_store_whose_config_was_changed_afterwards_is_refused(isolated: None, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    marker = tmp_path / "command-ran"
    script = _marking_script(tmp_path, marker)
    ghost.snapshot(repo.root)
    store = repo.git_dir / "ctxd" / "store"
    with open(store / "config", "a") as handle:
        handle.write(_commands_config(script))
    _attributes(repo)
    with pytest.raises(GitFailed, match="ownership mark does not match") as refused:
        ghost.snapshot(repo.root)
    assert str(store) in refused.value.message
    # The same with the config put back but the attributes that switch filters off removed.
    subprocess.run(["git", "config", "--file", str(store / "config"), "--remove-section", "filter.evil"], check=True)
    (store / "info" / "attributes").write_text("")
    with pytest.raises(GitFailed, match="ownership mark does not match"):
        ghost.snapshot(repo.root)
    assert not marker.exists()


def test_a_store_reached_through_a_link_or_with_alternates_is_refused(isolated: None, tmp_path: Path) -> None:
    mine = make_repo(tmp_path / "mine")
    ghost.snapshot(mine.root)
    repo = make_repo(tmp_path / "repo")
    (repo.git_dir / "ctxd").mkdir()
    (repo.git_dir / "ctxd" / "store").symlink_to(mine.git_dir / "ctxd" / "store")
    with pytest.raises(GitFailed, match="symbolic link") as refused:
        ghost.snapshot(repo.root)
    assert str(repo.git_dir / "ctxd" / "store") in refused.value.message
    alternates = mine.git_dir / "ctxd" / "store" / "objects" / "info" / "alternates"
    alternates.write_text(str(repo.git_dir / "objects") + "\n")
    with pytest.raises(GitFailed, match="objects/info/alternates"):
        ghost.snapshot(mine.root)


def test_commands_in_the_repositorys_own_config_never_run(isolated: None, tmp_path: Path) -> None:
    """A folder that came with its whole `.git` (an archive): its config is the author's."""
    repo = make_repo(tmp_path / "repo")
    marker = tmp_path / "command-ran"
    script = _marking_script(tmp_path, marker)
    included = tmp_path / "included.gitconfig"
    included.write_text(_commands_config(script).replace("evil", "evil2"))
    with open(repo.git_dir / "config", "a") as handle:
        handle.write(_commands_config(script) + f"[include]\n\tpath = {included}\n")
    (repo.git_dir / "info").mkdir(exist_ok=True)
    (repo.git_dir / "info" / "attributes").write_text("* filter=evil diff=evil merge=evil\n*.txt filter=evil2\n")
    _attributes(repo)
    subprocess.run(["git", "add", "-A"], cwd=repo.root, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
    assert marker.exists()  # git itself runs them
    marker.unlink()
    _every_operation(repo.root)
    assert not marker.exists()


def test_an_automatic_checkpoint_never_runs_a_planted_stores_filter(daemon_factory, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    marker = tmp_path / "command-ran"
    store = _plant_store(repo, _marking_script(tmp_path, marker))
    _attributes(repo)
    codex_home, _, env = homes(tmp_path)
    rollout = fx.write_jsonl(fx.codex_path(codex_home), fx.codex_session(repo.root))
    client = daemon_factory([repo.root], env=env)
    wait_thread(client, repo.root, CODEX_THREAD)
    fx.append_jsonl(rollout, fx.codex_turn("Rewrite app.py", "2025-10-03T10:05:00.000Z", cwd=str(repo.root)))
    log = tmp_path / "daemon-0.log"
    deadline = time.monotonic() + 20
    while "no checkpoint for" not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, "the checkpoint was never attempted"
        time.sleep(0.05)
    assert str(store) in log.read_text(errors="replace")
    with pytest.raises(RpcError) as refused:
        client.request("ctxd/ghost/list", {"workspace": repo.root.as_uri()})
    assert refused.value.code == 1002 and str(store) in refused.value.message
    assert not marker.exists()


# --- .git layouts that are not this folder's work tree ----------------------------------------------


def test_git_internals_opened_as_a_folder_are_refused(isolated: None, tmp_path: Path) -> None:
    other = make_repo(tmp_path / "other")
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(other.root), str(bare)], check=True, capture_output=True)
    pointing = tmp_path / "pointing"
    pointing.mkdir()
    (pointing / ".git").write_text(f"gitdir: {bare}\n")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / ".git").write_text("not a gitdir line\n")
    for folder, named in ((bare, bare), (other.git_dir, other.git_dir), (other.git_dir / "refs", other.git_dir),
                          (pointing, bare), (broken, broken / ".git")):
        before = sorted(p.name for p in folder.iterdir())
        with pytest.raises(GitFailed) as refused:
            ghost.snapshot(folder)
        assert refused.value.code == 1002 and str(named) in refused.value.message, folder
        assert sorted(p.name for p in folder.iterdir()) == before
    assert not (tmp_path / "state" / "ctxd" / "ghost").exists() or not [
        p for p in (tmp_path / "state" / "ctxd" / "ghost").iterdir() if p.name != "owner.key"]


def test_a_git_file_naming_another_folders_worktree_is_refused(isolated: None, tmp_path: Path) -> None:
    other = make_repo(tmp_path / "other")
    other.git("worktree", "add", "-q", str(tmp_path / "linked"))
    assert ghost.snapshot(tmp_path / "linked")["id"]  # the real worktree works
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(tmp_path / "linked" / ".git", copy / ".git")
    (copy / "mine.txt").write_text("mine\n")
    with pytest.raises(GitFailed, match="worktree of another folder") as refused:
        ghost.snapshot(copy)
    assert str(tmp_path / "linked") in refused.value.message


def test_a_git_file_naming_a_git_dir_that_names_no_work_tree_is_refused(isolated: None, tmp_path: Path) -> None:
    """`git init --separate-git-dir` records no work tree: any folder's `.git` file could point at
    another project's git dir and take its snapshots (and get its own). Only a git dir whose
    `core.worktree` names the folder is used through a `.git` file; submodules record it."""
    own, own_git = tmp_path / "own", tmp_path / "own.git"
    subprocess.run(["git", "init", "-q", "-b", "main", "--separate-git-dir", str(own_git), str(own)], check=True)
    repo = Repo(own)
    repo.write("a.txt", "own\n")
    repo.commit_all()
    intruder = tmp_path / "intruder"
    intruder.mkdir()
    (intruder / ".git").write_text(f"gitdir: {own_git}\n")
    (intruder / "mine.txt").write_text("mine\n")
    before = sorted(p.name for p in own_git.iterdir())
    for folder in (intruder, own):
        with pytest.raises(GitFailed) as refused:
            ghost.snapshot(folder)
        assert refused.value.code == 1002 and str(folder / ".git") in refused.value.message, folder
        assert "core.worktree" in refused.value.message
    assert sorted(p.name for p in own_git.iterdir()) == before  # no store made in it
    # The owner says the git dir is this folder's: its snapshots work, and the intruder is still refused.
    repo.git("config", "--file", str(own_git / "config"), "core.worktree", str(own))
    assert ghost.snapshot(own)["id"]
    with pytest.raises(GitFailed) as refused:
        ghost.snapshot(intruder)
    assert refused.value.code == 1002 and str(own) in refused.value.message

    # A submodule's `.git` file names the superproject's `.git/modules/<name>`, whose core.worktree
    # names the submodule: it works. The same git dir named from elsewhere is refused.
    sup = make_repo(tmp_path / "sup")
    sup.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(make_repo(tmp_path / "lib").root), "lib")
    sup.commit_all("add lib")
    (sup.root / "lib" / "new.txt").write_text("in the submodule\n")
    assert ghost.snapshot(sup.root / "lib")["id"]
    thief = tmp_path / "thief"
    thief.mkdir()
    (thief / ".git").write_text(f"gitdir: {sup.git_dir / 'modules' / 'lib'}\n")
    with pytest.raises(GitFailed) as refused:
        ghost.snapshot(thief)
    assert refused.value.code == 1002 and str(sup.root / "lib") in refused.value.message


def test_a_ctxd_path_that_is_a_file_is_named(isolated: None, tmp_path: Path, daemon_factory) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo.git_dir / "ctxd").write_text("a file\n")
    client = daemon_factory([repo.root])
    with pytest.raises(RpcError) as refused:
        client.request("ctxd/ghost/snapshot", {"workspace": repo.root.as_uri(), "thread": "t"})
    assert refused.value.code == 1002 and str(repo.git_dir / "ctxd") in refused.value.message


# --- TCP: authentication, more than one connection ---------------------------------------------------


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read_reply(connection: socket.socket) -> dict | None:
    """The daemon's first message on a raw connection, or None when it closed without one."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(4096)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.split(b":")[1])
    while len(body) < length:
        body += connection.recv(4096)
    return json.loads(body[:length])


def _initialize(token: str | None, msg_id: int = 1) -> dict:
    params: dict = {"processId": None, "rootUri": None, "capabilities": {}}
    if token is not None:
        params["authToken"] = token
    return {"jsonrpc": "2.0", "id": msg_id, "method": "initialize", "params": params}


def test_tcp_needs_the_owners_token_and_a_stalled_prober_blocks_no_one(state_dir: Path, workspace: Path,
                                                                       tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token_file = tmp_path / "run" / "ctxd.token"
    proc = subprocess.Popen([sys.executable, "-m", "ctxd", "--tcp", "--port", str(port),
                             "--token-file", str(token_file),
                             "--log-file", str(tmp_path / "daemon.log")], env=daemon_env(state_dir),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=str(Path(__file__).resolve().parents[1]))
    try:
        deadline = time.monotonic() + 20
        while not token_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no token file"
            time.sleep(0.05)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        token = token_file.read_text().strip()
        stalled = socket.create_connection(("127.0.0.1", port))  # connects first and sends nothing
        for offered in (None, "wrong-token", token + "x"):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as prober:
                prober.sendall(_frame(_initialize(offered)))
                reply = _read_reply(prober)
                assert reply is not None and reply["error"]["code"] == -32600 and reply["id"] == 1
                assert "authToken" in reply["error"]["message"] and token not in json.dumps(reply)
                assert _read_reply(prober) is None  # then closed: no session
        with socket.create_connection(("127.0.0.1", port), timeout=30) as prober:  # not initialize first
            prober.sendall(_frame({"jsonrpc": "2.0", "id": 7, "method": "ctxd/threads",
                                   "params": {"workspace": workspace.as_uri(), "authToken": token}}))
            reply = _read_reply(prober)
            assert reply is not None and reply["error"]["code"] == -32600 and reply["id"] == 7
        connection = socket.create_connection(("127.0.0.1", port))
        client = Client(proc, connection.makefile("wb"), connection.makefile("rb"))
        client.auth_token = token
        client.initialize([workspace])
        client.request("ctxd/record", {"workspace": workspace.as_uri(), "items": [user("hello")]})
        # A second client with the right token while the first is served: served too (test_tcp_sessions.py).
        with socket.create_connection(("127.0.0.1", port), timeout=30) as second:
            second.sendall(_frame(_initialize(token)))
            reply = _read_reply(second)
            assert reply is not None and reply["result"]["serverInfo"]["name"] == "ctxd"
        # The stalled prober is closed by the daemon, and its leaving ends nothing.
        stalled.settimeout(60)
        assert stalled.recv(1) == b""
        stalled.close()
        assert client.request("ctxd/history", {"workspace": workspace.as_uri()})["total"] == 1
        assert proc.poll() is None
        assert client.shutdown() == 0
        assert not token_file.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


# --- the API key in followed sessions -------------------------------------------------------------------


KEY = "sk-proj-round2-" + "Zq8" * 12


def _files_holding(root: Path, needle: bytes) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and needle in path.read_bytes():
            found.append(str(path))
    return found


def test_the_api_key_is_redacted_in_followed_titles_instructions_and_checkpoint_labels(
        daemon_factory, state_dir: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    codex_home, _, env = homes(tmp_path)
    meta = fx.codex_meta(repo.root)
    meta["payload"]["instructions"] = f"You are Codex. The deploy key is {KEY}; never print it."
    prompt = f"Use the key {KEY} to call the staging API and fix the failing test"  # the key past TITLE_CHARS' cut
    records = [meta, *fx.codex_turn(prompt, "2025-10-03T10:00:02.000Z", cwd=str(repo.root))]
    rollout = fx.write_jsonl(fx.codex_path(codex_home), records)
    client = daemon_factory([repo.root], env={**env, "OPENAI_API_KEY": KEY})
    uri = repo.root.as_uri()
    listed = wait_thread(client, repo.root, CODEX_THREAD)
    assert "[redacted]" in listed["title"] and KEY[:12] not in listed["title"]
    fx.append_jsonl(rollout, fx.codex_turn(f"now rotate {KEY} please", "2025-10-03T10:05:00.000Z", cwd=str(repo.root)))
    deadline = time.monotonic() + 20
    labels: list[str] = []
    while not labels:
        assert time.monotonic() < deadline, "no automatic checkpoint"
        labels = [s["message"] for s in client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]]
        time.sleep(0.05)
    assert labels == ["now rotate [redacted] please"]
    context = client.request("ctxd/prompt", {"workspace": uri, "thread": CODEX_THREAD})
    assert KEY not in json.dumps(context) and KEY not in json.dumps(client.request("ctxd/threads", {"workspace": uri}))
    client.shutdown()
    assert _files_holding(state_dir, KEY.encode()) == []
    store = repo.git_dir / "ctxd" / "store"
    messages = subprocess.run(["git", f"--git-dir={store}", "log", "--format=%B", "--all"], capture_output=True,
                              text=True, check=True).stdout
    assert "now rotate [redacted] please" in messages and KEY not in messages


# --- escape sequences on the terminal ---------------------------------------------------------------


CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x07"  # OSC 52: set the clipboard
CLEAR = "\x1b[2J\x1b[H"
BIDI = "\u202e"


def test_the_command_line_shows_escape_sequences_escaped(daemon_factory, state_dir: Path, workspace: Path,
                                                         tmp_path: Path) -> None:
    codex_home, claude_home, env = homes(tmp_path)
    records = [fx.codex_meta(workspace),
               *fx.codex_turn(f"Title{CLIPBOARD}{CLEAR}{BIDI}end", "2025-10-03T10:00:02.000Z",
                              model=f"gpt-5{CLEAR}", cwd=str(workspace))]
    fx.write_jsonl(fx.codex_path(codex_home), records)
    cli_env = {**daemon_env(state_dir), **env}
    repo_root = str(Path(__file__).resolve().parents[1])
    sessions = subprocess.run([sys.executable, "-m", "ctxd", "sessions", "--workspace", str(workspace)],
                              capture_output=True, text=True, env=cli_env, cwd=repo_root, timeout=60)
    assert sessions.returncode == 0, sessions.stderr
    assert "Title" in sessions.stdout
    assert "\x1b" not in sessions.stdout and "\x07" not in sessions.stdout and BIDI not in sessions.stdout
    assert "\\x1b]52;c;" in sessions.stdout and "gpt-5\\x1b[2J" in sessions.stdout

    client = daemon_factory([workspace])
    uri = workspace.as_uri()
    client.request("ctxd/setPromptContext", {"workspace": uri, "model": f"gpt-4o{CLEAR}", "tools": [
        {"name": f"tool{CLIPBOARD}", "description": "d", "schema": {"type": "object"}}]})
    client.request("ctxd/record", {"workspace": uri, "items": [user("hello")]})
    client.request("ctxd/reportTokenUsage", {"workspace": uri, "usage": {"inputTokens": 1_000, "totalTokens": 1_000}})
    detail = subprocess.run([sys.executable, "-m", "ctxd", "usage", "--workspace", str(workspace), "--detail"],
                            capture_output=True, text=True, env=cli_env, cwd=repo_root, timeout=60)
    assert detail.returncode == 0, detail.stderr
    assert "\x1b" not in detail.stdout and "\x07" not in detail.stdout
    assert "tool\\x1b]52;c;" in detail.stdout and "gpt-4o\\x1b[2J" in detail.stdout


def test_terminal_safe_text_keeps_ordinary_text() -> None:
    from ctxd.terminal import safe

    assert safe("Fix the bug in café.py — now 日本語 ✓") == "Fix the bug in café.py — now 日本語 ✓"
    assert safe("a\x1b[31mb\x9bc\u202ed\ud800\n") == "a\\x1b[31mb\\x9bc\\u202ed\\ud800\\x0a"


# --- numbers in settings ------------------------------------------------------------------------------


HUGE = int("9" * 401)


def test_huge_numbers_in_an_untrusted_workspace_file_are_reported_and_defaults_kept(daemon_factory,
                                                                                   workspace: Path) -> None:
    (workspace / ".ctxd.toml").write_text(
        f"context_window = {HUGE}\nauto_compact_token_limit = {HUGE}\ntool_output_token_limit = {HUGE}\n"
        f"auto_compact_ratio = nan\n[ghost]\nwarn_after_seconds = inf\nmax_age_days = {HUGE}\nkeep = {HUGE}\n")
    client = daemon_factory([workspace])
    uri = workspace.as_uri()
    recorded = client.request("ctxd/record", {"workspace": uri, "items": [user("hello")]})
    assert recorded["usage"]["contextWindow"] == 128_000 and recorded["usage"]["usedTokens"] > 0
    assert client.request("ctxd/usage", {"workspace": uri})["contextWindow"] == 128_000
    client.request("ctxd/ghost/snapshot", {"workspace": uri})
    problems = client.request("ctxd/status", {"workspace": uri})["problems"]
    keys = {p.get("key") for p in problems}
    assert {"context_window", "auto_compact_token_limit", "tool_output_token_limit", "auto_compact_ratio",
            "ghost.warn_after_seconds", "ghost.max_age_days", "ghost.keep"} <= keys
    assert all(len(p["message"]) < 300 for p in problems)
    assert any("401 digits" in p["message"] for p in problems)


def test_a_number_past_pythons_conversion_limit_is_reported(daemon_factory, workspace: Path) -> None:
    (workspace / ".ctxd.toml").write_text(f"context_window = {'9' * 5000}\n")
    client = daemon_factory([workspace])
    uri = workspace.as_uri()
    assert client.request("ctxd/record", {"workspace": uri, "items": [user("hi")]})["usage"]["contextWindow"] == 128_000
    problems = client.request("ctxd/status", {"workspace": uri})["problems"]
    assert any(p["source"].endswith(".ctxd.toml") and "4300" in p["message"] for p in problems)


def test_a_huge_price_is_reported_not_raised() -> None:
    from ctxd.sessions import pricing
    from ctxd.settings import Problem

    problems: list[Problem] = []
    table = pricing.price_table({"my-model": {"input": HUGE, "output": 1.0}}, problems)
    assert "my-model" not in table and [p.key for p in problems] == ["prices.my-model"]


# --- memory: bounded caches ------------------------------------------------------------------------------


def test_the_usage_view_keeps_a_bounded_number_of_threads() -> None:
    """Every thread ever asked about used to stay cached. Now only the recent ones are kept,
    whatever the number touched."""
    import gc
    import tracemalloc

    from ctxd.ledger.thread import ThreadLedger
    from ctxd.settings import Settings
    from ctxd.tokens.counter import TOKENIZERS
    from ctxd.usage.view import UsageView

    view = UsageView(Settings(tokenizer="estimate:o200k"), lambda s: TOKENIZERS.counter(s.model, s.tokenizer))

    def touch(first: int, last: int) -> None:
        for n in range(first, last):
            ledger = ThreadLedger(thread=f"t{n}", prompt_context={"model": "gpt-4o", "tools": [{"name": f"x{n}"}]})
            view.breakdown(ledger)
            view.facts(ledger)

    touch(0, 400)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        touch(400, 2400)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 2000 * 800, f"{grown} bytes kept for 2,000 threads"


def test_checking_a_plain_folder_for_an_interrupted_restore_starts_no_git(isolated: None, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Run for every folder opened: thousands of folders added at once started two git processes
    each on the workers that answer requests, and the first workspace waited for them."""
    log = tmp_path / "git-ran"
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    real_git = shutil.which("git")
    (shim_dir / "git").write_text(f"#!/bin/sh\necho \"$@\" >> '{log}'\nexec '{real_git}' \"$@\"\n")
    (shim_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim_dir}{os.pathsep}{os.environ['PATH']}")
    plain = tmp_path / "plain" / "folder"
    plain.mkdir(parents=True)
    assert ghost.interrupted_restore(plain, create=False) is None
    assert not log.exists()
    repo = make_repo(tmp_path / "repo")
    assert ghost.interrupted_restore(repo.root, create=False) is None
    assert log.exists()  # the shim sees git when a repository is there


# --- ways out: install from what exists ------------------------------------------------------------------


def test_no_document_says_to_install_the_unpublished_package_name() -> None:
    """`ctxd-daemon` is not on PyPI (issue #27, Install): every install line names a clone or a path."""
    root = Path(__file__).resolve().parents[1]
    documents = [root / "README.md", *root.glob("docs/*.md"), *root.glob("editors/*/README.md"),
                 *root.glob("editors/nvim/doc/*.txt")]
    advertised = [f"{path.relative_to(root)}: {line.strip()}" for path in documents
                  for line in path.read_text("utf-8").splitlines()
                  if re.search(r"pipx? install\s+(-\S+\s+)*['\"]?ctxd-daemon", line)]
    assert advertised == []
