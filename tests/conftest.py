"""Shared fixtures: a real daemon subprocess per test, with its state in a temporary folder."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rpc import Client, start_daemon


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    return folder


@pytest.fixture
def transport() -> str:
    """How tests talk to the daemon; test_spine.py runs its tests over both stdio and TCP."""
    return "stdio"


@pytest.fixture
def daemon_factory(state_dir: Path, tmp_path: Path, transport: str, request: pytest.FixtureRequest) -> Iterator[Callable[..., Client]]:
    """Start daemons on demand; every one is shut down (or killed) at the end; logs shown on failure."""
    clients: list[Client] = []
    logs: list[Path] = []

    def start(folders: list[Path] | None = None, options: dict[str, Any] | None = None,
              env: dict[str, str] | None = None, initialize: bool = True, args: tuple[str, ...] = ()) -> Client:
        log_file = tmp_path / f"daemon-{len(logs)}.log"
        logs.append(log_file)
        client = start_daemon(state_dir, *args, env=env, log_file=log_file, transport=transport)
        clients.append(client)
        if initialize:
            client.initialize(folders or [], options)
        return client

    yield start
    shape_errors = [problem for client in clients for problem in client.shape_errors]
    for client in clients:
        if client.proc.poll() is None:
            client.shutdown(timeout=5)
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for log_file in logs:
            if log_file.exists():
                print(f"--- {log_file.name} ---\n{log_file.read_text(errors='replace')[-5000:]}")
    assert not shape_errors, f"notifications that do not match ctxd/protocol/shapes.py: {shape_errors[:3]}"


@pytest.fixture
def client(daemon_factory: Callable[..., Client], workspace: Path) -> Client:
    return daemon_factory([workspace])


_ran: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        _ran.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run in which no test passed proves nothing: all skipped or deselected is exit 5, like "no
    tests collected", so `.ci/run` (set -e) fails instead of passing silently."""
    if exitstatus == pytest.ExitCode.OK and not _ran and not session.config.option.collectonly:
        print("\nno test ran (every collected test was skipped or deselected)")
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
