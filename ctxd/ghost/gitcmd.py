"""Running git for ghost snapshots without side effects.

Every git child ctxd starts for snapshots goes through `run`:
- it gets a small, explicit environment: nothing of the daemon's own (no API keys), and none of the
  variables `git rev-parse --local-env-vars` lists (`GIT_DIR`, `GIT_INDEX_FILE`, ...) unless ctxd
  sets them itself for that one call;
- no hook can run (`core.hooksPath` points at an empty directory), no `core.fsmonitor` command, no
  replace refs, no optional locks on the user's index;
- on Linux a command that can write the working tree dies with the daemon (`PR_SET_PDEATHSIG`),
  so a `kill -9` of the daemon never leaves a `checkout-index` rewriting it on its own. Commands
  that only read it and write ctxd's store (`STORE_ONLY`) are started without that, which lets
  Python start them with `vfork` instead of copying the daemon's whole memory map at each call.

No command named in any git config runs. Calls on ctxd's store read no global, system or repository
config but the store's own, which ctxd wrote and sealed (`gitstore.check_owned`); its `info/attributes`
unsets `filter` for every path, over any `.gitattributes`, so no `clean`, `smudge` or `process`
command applies, and `diff` runs with `--no-ext-diff --no-textconv`.
Calls in the user's repository (`Site.user`) read its config (ignore rules, object format) but
are only `rev-parse`, `ls-files`, `config --get`, `for-each-ref` and `update-ref`: none of them
converts content, pages, signs, asks for credentials or opens a connection, and the hooks and
fsmonitor are switched off below.

Beside `run` and `start`, what every caller of git here shares: `Background` (a call waited for
on a thread of its own while another git process runs), `nul` (paths for `-z --stdin`) and
`check_cancel` (a cancelled request stops between two commands).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from ctxd.errors import Cancelled, GitFailed

GIT = os.environ.get("GIT_PYTHON_GIT_EXECUTABLE") or "git"

KEPT_ENV = ("PATH", "HOME", "XDG_CONFIG_HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
            "SYSTEMROOT", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_SYSTEM",
            "GIT_EXEC_PATH")
"""What a git child may inherit from the daemon: enough to find git, the user's global git config
(for `core.excludesFile`) and the locale. Everything else (API keys, `GIT_DIR`, ...) stays behind."""

EMPTY_HOOKS = Path(os.devnull)
"""`core.hooksPath` for every call: git finds no hook under /dev/null, so none ever runs."""

SAFE_CONFIG = (
    "-c", f"core.hooksPath={EMPTY_HOOKS}",
    "-c", "core.fsmonitor=false",
    "-c", f"core.attributesFile={os.devnull}",
    "-c", "core.autocrlf=false",
    "-c", "core.safecrlf=false",
    "-c", "core.untrackedCache=false",
    "-c", "core.splitIndex=false",
    "-c", "commit.gpgSign=false",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
    "-c", "advice.detachedHead=false",
    "--no-replace-objects",
)
"""Options before the subcommand of every call: settings from any config layer that would run a
command or change bytes are switched off."""

FIXED_ENV = {
    "GIT_OPTIONAL_LOCKS": "0",  # never refresh the user's index behind their back
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_ATTR_NOSYSTEM": "1",  # no system-wide attributes file
    "LC_ALL": "C",  # messages and quoting that do not depend on the user's locale
    # glibc gives freed memory back to the system once 128 KiB are free at the top of the heap, and
    # zlib's deflate state is about 270 KiB: git would map, zero and unmap it again for every object
    # it writes (half the time of a capture that stores 1,000 changed files).
    "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=268435456:glibc.malloc.top_pad=1048576",
    "GIT_AUTHOR_NAME": "ctxd", "GIT_AUTHOR_EMAIL": "ctxd@localhost",
    "GIT_COMMITTER_NAME": "ctxd", "GIT_COMMITTER_EMAIL": "ctxd@localhost",
}

_PR_SET_PDEATHSIG = 1
_libc: Any = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - every Linux libc has prctl
        _libc = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGKILL this child when the daemon dies; if it already died, exit now."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        os._exit(1)


STORE_ONLY = frozenset({
    "add", "update-index", "write-tree", "commit-tree", "ls-files", "rev-parse", "diff-tree", "cat-file",
    "pack-objects", "rev-list", "for-each-ref", "config", "init", "diff",
})
"""Subcommands (as ctxd calls them) that never write the working tree: a child left running by a
killed daemon only finishes writing the store or a temporary index."""


def _subcommand(args: list[str]) -> str:
    """The subcommand of `args` (after global options such as `-c x=y`, `--git-dir=...`)."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "-c":
            skip = True
        elif not arg.startswith("-"):
            return arg
    return ""


def base_env(user_config: bool = True) -> dict[str, str]:
    """The environment of a git child. Without `user_config`, no global or system config is read:
    ctxd's own store is then configured by its own config file and the `-c` options alone."""
    env = {key: os.environ[key] for key in KEPT_ENV if key in os.environ}
    env.update(FIXED_ENV)
    if not user_config:
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        env["GIT_CONFIG_GLOBAL"] = os.devnull
        env.pop("GIT_CONFIG_SYSTEM", None)
    return env


def run(args: list[str], *, cwd: Path, env: dict[str, str], stdin: bytes | None = None,
        ok: tuple[int, ...] = (0,), timeout: float | None = None) -> tuple[int, bytes]:
    """Run `git <SAFE_CONFIG> <args>`; raise GitFailed (naming the subcommand) unless the status is
    in `ok`, or when it has not ended after `timeout` seconds (it is killed)."""
    name = next((a for a in args if not a.startswith("-") and "=" not in a), "")
    try:
        tied = _libc is not None and _subcommand(args) not in STORE_ONLY
        done = subprocess.run([GIT, *SAFE_CONFIG, *args], cwd=cwd, env=env, input=stdin if stdin is not None else b"",
                              capture_output=True, preexec_fn=_die_with_parent if tied else None, close_fds=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GitFailed(f"git {name} had not ended after {timeout:g} s (a FIFO or a device where it reads?): "
                        "stopped") from None
    except OSError as error:
        raise GitFailed(f"git could not be started: {error}") from None
    if done.returncode not in ok:
        message = done.stderr.decode("utf-8", "replace").strip()
        raise GitFailed(f"git {name} failed: {message or _status(done.returncode)}")
    return done.returncode, done.stdout


def _status(code: int) -> str:
    """An exit status as a person reads it: a signal by its name (SIGXFSZ: a file size limit)."""
    if code >= 0:
        return f"exit status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"killed by signal {-code}"
    return f"killed by {name}" + (" (a file over the size limit, RLIMIT_FSIZE)" if name == "SIGXFSZ" else "")


def start(args: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start `git <SAFE_CONFIG> <args>` with pipes to talk to it as it runs (`cat-file --batch`):
    only for the subcommands of STORE_ONLY, which never write the working tree."""
    if _subcommand(args) not in STORE_ONLY:
        raise ValueError(f"git {_subcommand(args)} writes the working tree: use run()")
    try:
        return subprocess.Popen([GIT, *SAFE_CONFIG, *args], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True, bufsize=1 << 16)
    except OSError as error:
        raise GitFailed(f"git could not be started: {error}") from None


def nul(paths: Iterable[str]) -> bytes:
    """Paths as `-z --stdin` reads them."""
    return b"".join(os.fsencode(p) + b"\0" for p in paths)


def check_cancel(cancel: threading.Event | None) -> None:
    """Between two git commands: stop when the request was cancelled."""
    if cancel is not None and cancel.is_set():
        raise Cancelled("snapshot cancelled")


T = TypeVar("T")


class Background(Generic[T]):
    """A call on a thread of its own (a git process to wait for meanwhile); `result` waits and
    raises what the call raised."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), name="ctxd-ghost", daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], T]) -> None:
        try:
            self._value = call()
        except BaseException as error:  # noqa: BLE001 - handed to whoever asks for the result
            self._error = error

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return cast(T, self._value)
