"""Hostile workspaces, repositories and secrets, through the real daemon (issue 8).

Confinement: workspace URIs with `..`, symlinked folders that lead out, non-file URIs are refused.
Secrets: the API key reaches no log (`-v --log-file`), no error, no `ctxd/history` answer and no
byte of the state directory, even when the model server echoes it back. Repositories: ghost
snapshot and restore under hostile conditions end in a result or a clear 1002, and the user's
git state is byte-identical afterwards.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, Step
from tests.ghost_repo import Repo, isolated_git_env, make_repo
from tests.helpers import assistant, call, output, user
from tests.rpc import Client, RpcError, daemon_env

KEY = "sk-test-ctxd-reliability-0123456789abcdef"

# --- confinement ----------------------------------------------------------------------------------


def refused(client: Client, method: str, params: dict[str, Any]) -> RpcError:
    with pytest.raises(RpcError) as error:
        client.request(method, params)
    assert error.value.code == -32602, error.value
    return error.value


def test_workspace_uris_that_leave_the_workspace_are_refused(daemon_factory: Callable[..., Client],
                                                             tmp_path: Path) -> None:
    inside = tmp_path / "ws"
    outside = tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (inside / "escape").symlink_to(outside, target_is_directory=True)
    client = daemon_factory([inside])
    uri = inside.as_uri()
    hostile = [
        f"{uri}/../outside", f"{uri}/%2E%2E/outside", f"{uri}/escape", f"{uri}/escape/..", outside.as_uri(),
        "file://evil.example.com" + str(inside), "https://example.com/ws", "untitled:Untitled-1",
        "vscode-remote://ssh-remote+host" + str(inside), "file:relative/path", "", "file:///tmp/a%00b",
    ]
    for bad in hostile:
        error = refused(client, "ctxd/record", {"workspace": bad, "items": [user("x")]})
        assert "workspace" in error.message
        refused(client, "ctxd/threads", {"workspace": bad})
    # adding the malformed ones as folders opens nothing (a real folder the editor adds, even one
    # reached through a symlink, is the user's choice and opens normally)
    malformed = [bad for bad in hostile if bad not in (f"{uri}/escape", outside.as_uri())]
    client.request("ctxd/record", {"workspace": uri, "items": [user("opened")]})  # stores open on first use
    before = {p.name for p in tmp_path.rglob("*.sqlite3")}
    client.notify("workspace/didChangeWorkspaceFolders", {"event": {
        "added": [{"uri": bad, "name": "x"} for bad in malformed], "removed": []}})
    for bad in (f"{uri}/../outside", outside.as_uri() + "/../ws/../outside"):
        refused(client, "ctxd/usage", {"workspace": bad})
    assert client.request("ctxd/record", {"workspace": uri, "items": [user("still here")]})["itemCount"] == 2
    assert {p.name for p in tmp_path.rglob("*.sqlite3")} == before
    assert sorted(p.name for p in outside.iterdir()) == []


def test_initialize_with_hostile_folders_opens_only_the_good_one(daemon_factory: Callable[..., Client],
                                                                tmp_path: Path) -> None:
    good = tmp_path / "ws"
    good.mkdir()
    client = daemon_factory(initialize=False)
    client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                  "workspaceFolders": [{"uri": f"{good.as_uri()}/../ws", "name": "dots"},
                                                       {"uri": "https://example.com/x", "name": "web"},
                                                       {"uri": "file://[::1/tmp/x", "name": "broken host"},
                                                       {"uri": good.as_uri() + "/x" * 3000, "name": "too long"},
                                                       {"uri": good.as_uri(), "name": "good"}]})
    client.notify("initialized", {})
    assert client.request("ctxd/threads", {"workspace": good.as_uri()}) == {"threads": []}
    refused(client, "ctxd/threads", {"workspace": f"{good.as_uri()}/../ws"})
    refused(client, "ctxd/threads", {"workspace": "file://[::1/tmp/x"})
    warnings = [n["message"] for n in client.notes("window/showMessage")]
    assert sum("not opening" in w for w in warnings) == 4, warnings


def test_a_state_dir_of_an_unknown_user_is_reported_not_fatal(daemon_factory: Callable[..., Client],
                                                             workspace: Path) -> None:
    client = daemon_factory([workspace], {"stateDir": "~nosuchuser-ctxd/state"})
    assert client.request("ctxd/threads", {"workspace": workspace.as_uri()}) == {"threads": []}
    warnings = [n["message"] for n in client.notes("window/showMessage")]
    assert any("stateDir '~nosuchuser-ctxd/state' cannot be used" in w for w in warnings), warnings


# --- secrets --------------------------------------------------------------------------------------


@pytest.fixture
def echoing_server() -> Iterator[FakeOpenAI]:
    """A model server that fails, and repeats the key it was sent in its error messages."""
    with FakeOpenAI() as server:
        yield server


def test_api_key_never_leaks(daemon_factory: Callable[..., Client], workspace: Path, state_dir: Path,
                             tmp_path: Path, echoing_server: FakeOpenAI) -> None:
    echoing_server.script(
        Step(status=401, code="invalid_api_key", message=f"Incorrect API key provided: {KEY}."),
        Step(status=401, code="invalid_api_key", message=f"Incorrect API key provided: {KEY}."),
        Step(status=400, message=f"bad request (Authorization: Bearer {KEY})"),
        Step(status=400, message=f"bad request (Authorization: Bearer {KEY})"),
    )
    options = {"llm": {"baseUrl": echoing_server.base_url, "model": "fake-model", "api": "chat",
                       "maxRetries": 0, "retryBudgetSeconds": 5, "timeoutSeconds": 5}}
    client = daemon_factory([workspace], options, env={"OPENAI_API_KEY": KEY}, args=("-v",))
    uri = workspace.as_uri()
    # a tool output that dumps the environment: the request log must not show the key
    client.request("ctxd/record", {"workspace": uri, "items": [
        user("fix the login"), call("c1"), output("c1", "HOME=/root"), assistant("done")]})
    client.request("ctxd/setPromptContext", {"workspace": uri, "baseInstructions": "be brief"})
    seen: list[str] = []
    for strategy in ("llm", "auto"):
        try:
            result = client.request("ctxd/compact", {"workspace": uri, "strategy": strategy}, timeout=60)
            seen.append(json.dumps(result))
        except RpcError as error:
            assert error.code == 1001
            seen.append(f"{error.message} {json.dumps(error.data)}")
    assert echoing_server.requests, "the daemon never called the model server"
    assert echoing_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    # an endpoint that repeats the key in a summary it returns, in a thread worth compacting, with
    # the key in the prompt context too
    echoing_server.clear()
    echoing_server.summary = f"Handoff: the login uses {KEY}."
    client.request("ctxd/record", {"workspace": uri, "items": [output("c1", "log line\n" * 3000), assistant("ok")]})
    client.request("ctxd/setPromptContext", {"workspace": uri, "baseInstructions": f"env: OPENAI_API_KEY={KEY}"})
    result = client.request("ctxd/compact", {"workspace": uri, "strategy": "llm"}, timeout=60)
    assert "Handoff: the login uses" in result["summary"]
    seen.append(json.dumps(result))
    client.send_raw(f"Authorization {KEY}\r\n\r\n".encode())  # a broken frame: its error names the line
    seen.append(json.dumps(client.request("ctxd/history", {"workspace": uri, "includeArchived": True})))
    seen.append(json.dumps(client.stray))
    seen.append(json.dumps(client.request("ctxd/threads", {"workspace": uri})))
    seen.append(json.dumps(client.request("ctxd/usage", {"workspace": uri})))
    seen.append(json.dumps(client.notifications))
    # -v logs every request: one that carries the key (a tool output that dumped the environment)
    # and is refused (so nothing of it is stored) must show up in the log redacted
    with pytest.raises(RpcError):
        client.request("ctxd/record", {"workspace": uri, "items": [output("c2", f"OPENAI_API_KEY={KEY}"),
                                                                   {"type": "bogus"}]})
    client.shutdown()
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("daemon-*.log"))
    assert "request ctxd/record" in logs and "OPENAI_API_KEY=[redacted]" in logs
    for where, text in [("answers and notifications", "\n".join(seen)), ("log", logs)]:
        assert KEY not in text, f"the key leaked into the {where}"
        assert KEY[8:] not in text, f"part of the key leaked into the {where}"
    files = [path for path in state_dir.rglob("*") if path.is_file()]
    assert any(path.name.endswith(".sqlite3") for path in files)
    for path in files:
        assert KEY[8:].encode() not in path.read_bytes(), f"{path.name} holds the key"


# --- repository hostility (ghost commits) ---------------------------------------------------------

@pytest.fixture
def git_env(tmp_path: Path) -> dict[str, str]:
    return isolated_git_env(tmp_path / "home")


@pytest.fixture
def repo(workspace: Path, git_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Repo:
    for key, value in git_env.items():
        monkeypatch.setenv(key, value)
    return make_repo(workspace)


def ghost(client: Client, repo: Repo, method: str, **params: Any) -> Any:
    return client.request(f"ctxd/ghost/{method}", {"workspace": repo.root.as_uri(), **params}, timeout=60)


def git_failed(client: Client, repo: Repo, method: str, **params: Any) -> str:
    with pytest.raises(RpcError) as error:
        ghost(client, repo, method, **params)
    assert error.value.code == 1002, error.value
    return error.value.message


def test_restore_over_a_file_replaced_by_a_directory(daemon_factory: Callable[..., Client], repo: Repo,
                                                     git_env: dict[str, str]) -> None:
    client = daemon_factory([repo.root], env=git_env)
    snap = ghost(client, repo, "snapshot", message="before")
    (repo.root / "README.md").unlink()
    repo.write("README.md/inner.txt", "a directory now\n")
    before, files = repo.state(), repo.files()
    # The directory holds a file no snapshot has: restoring would destroy it, so the restore is
    # refused, clearly, with nothing changed. Once the user moves it away, the restore works.
    message = git_failed(client, repo, "restore", id=snap["id"])
    assert "README.md/inner.txt" in message
    assert repo.state() == before and repo.files() == files
    shutil.move(repo.root / "README.md" / "inner.txt", repo.root.parent / "inner.txt")
    result = ghost(client, repo, "restore", id=snap["id"])
    assert (repo.root / "README.md").read_text() == "hello\n" and "README.md" in result["restored"]


def test_symlink_pointing_outside_is_never_followed(daemon_factory: Callable[..., Client], repo: Repo,
                                                    git_env: dict[str, str], tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me\n")
    os.symlink(outside / "precious.txt", repo.root / "leak")
    os.symlink(outside, repo.root / "leakdir", target_is_directory=True)
    client = daemon_factory([repo.root], env=git_env)
    snap = ghost(client, repo, "snapshot")
    files = repo.store("ls-tree", "-r", "--full-tree", snap["id"])
    assert "precious" not in files and "keep me" not in repo.store("show", f"{snap['id']}:leak")
    (repo.root / "src" / "app.py").write_text("changed\n")
    ghost(client, repo, "restore", id=snap["id"])
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert (outside / "precious.txt").read_text() == "keep me\n"
    assert os.readlink(repo.root / "leak") == str(outside / "precious.txt")


def test_linked_worktree_where_dot_git_is_a_file(daemon_factory: Callable[..., Client], repo: Repo,
                                                 git_env: dict[str, str], tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    repo.git("worktree", "add", "-q", str(tree))
    linked = Repo(tree)
    assert (tree / ".git").is_file()
    client = daemon_factory([tree], env=git_env)
    before = linked.state()
    snap = ghost(client, linked, "snapshot")
    linked.write("src/app.py", "agent edit\n")
    ghost(client, linked, "restore", id=snap["id"])
    assert (tree / "src/app.py").read_text() == "print('app')\n"
    assert linked.state() == before


def test_read_only_file(daemon_factory: Callable[..., Client], repo: Repo, git_env: dict[str, str]) -> None:
    """A file the user made read-only after the snapshot is restored like any other (its folder is
    writable, so git replaces it), with the content it had at the snapshot, its owner's mode as
    then; its group and others get no more than they have now (a restore never widens who may read
    a file: a 0600 key file came back 0644)."""
    client = daemon_factory([repo.root], env=git_env)
    target = repo.write("config.ini", "v1\n")
    mode = stat.S_IMODE(target.stat().st_mode)
    snap = ghost(client, repo, "snapshot")
    target.write_text("v2\n")
    target.chmod(stat.S_IRUSR)
    try:
        result = ghost(client, repo, "restore", id=snap["id"])
        assert target.read_text() == "v1\n" and "config.ini" in result["restored"]
        assert stat.S_IMODE(target.stat().st_mode) == mode & 0o700
    finally:
        target.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_repository_locked_by_another_git_process(daemon_factory: Callable[..., Client], repo: Repo,
                                                  git_env: dict[str, str]) -> None:
    client = daemon_factory([repo.root], env=git_env)
    snap = ghost(client, repo, "snapshot")
    repo.write("src/app.py", "agent edit\n")
    lock = repo.git_dir / "index.lock"
    lock.write_bytes(b"held by another git")
    before, files = repo.state(), repo.files()
    message = git_failed(client, repo, "restore", id=snap["id"])
    assert "index.lock" in message
    assert repo.state() == before and repo.files() == files
    assert lock.read_bytes() == b"held by another git"
    lock.unlink()
    ghost(client, repo, "restore", id=snap["id"])
    assert (repo.root / "src/app.py").read_text() == "print('app')\n"


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE semantics checked on Linux")
def test_disk_full_during_a_snapshot(repo: Repo, git_env: dict[str, str], state_dir: Path, tmp_path: Path) -> None:
    """`ulimit -f`: writing any file over 256 KiB fails (EFBIG) in the daemon and its git children.
    The snapshot fails with a clear 1002; the repository is byte-identical; the daemon goes on."""
    from tests.rpc import Client as RpcClient

    (repo.root / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))  # incompressible, untracked
    before, files = repo.state(), repo.files()
    limit = 256 * 1024

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.Popen([sys.executable, "-m", "ctxd", "--log-file", str(tmp_path / "full.log")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=daemon_env(state_dir, git_env), cwd=str(Path(__file__).resolve().parents[1]),
                            preexec_fn=small_files)
    client = RpcClient(proc)
    try:
        client.initialize([repo.root])
        message = git_failed(client, repo, "snapshot")
        assert message
        assert repo.state() == before and repo.files() == files
        assert client.request("ctxd/record", {"workspace": repo.root.as_uri(), "items": [user("still ok")]})
    finally:
        client.shutdown()
