"""The modules the agent runs on a board stay within the oldest Python a supported board image has: 3.10 on PYNQ
v3 (Ubuntu 22.04). ``vermin`` reads each file for the language features and library calls it needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.rpc.provision import agent_files

OLDEST_BOARD_PYTHON = "3.10"
VERMIN = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")

pytestmark = pytest.mark.skipif(VERMIN is None, reason="vermin is installed by `make test` (pip install -e '.[dev]')")


def _vermin(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([VERMIN, f"--target={OLDEST_BOARD_PYTHON}-", "--violations", "--no-tips",
                           "--eval-annotations", *map(str, paths)], capture_output=True, text=True)


def test_every_module_the_agent_uploads_runs_on_python_3_10():
    files = [path for _, path in agent_files()]
    assert any(p.name == "agent.py" for p in files) and any(p.name == "sim.py" for p in files)
    r = _vermin(*files)
    assert r.returncode == 0, r.stdout[-2000:]


def test_the_check_catches_what_3_10_lacks(tmp_path):
    newer = tmp_path / "newer.py"
    newer.write_text("import tomllib\nfrom datetime import UTC\n")
    r = _vermin(newer)
    assert r.returncode != 0 and "tomllib" in r.stdout
