"""Processes edgetune starts never import code from the folder a command runs in: a ``tvm.py`` or ``toolkit.py``
planted there stays unread by the tracker, the RPC server, their workers and the build workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import free_port

EDGETUNE = str(Path(sys.executable).parent / "edgetune")
PLANT = "import pathlib\npathlib.Path(__file__).with_suffix('.ran').write_text('imported')\nraise SystemExit(3)\n"


@pytest.mark.slow
def test_planted_modules_in_the_working_folder_are_never_imported(tmp_path):
    for name in ("tvm.py", "toolkit.py", "psutil.py"):
        (tmp_path / name).write_text(PLANT)
    env = {**os.environ}
    env.pop("PYTHONSAFEPATH", None)

    def edgetune(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([EDGETUNE, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    started = edgetune("tracker", "start", "--port", str(free_port()))
    try:
        assert started.returncode == 0, started.stderr
        tuned = edgetune("tune", "-w", "conv2d:H=8,W=8,CI=8,CO=8,K=3,S=1,P=1", "-b", "local", "-t", "random",
                         "-n", "2", "--log", "t.jsonl")
        assert tuned.returncode == 0, tuned.stderr[-2000:]
    finally:
        edgetune("tracker", "stop")
    assert sorted(p.name for p in tmp_path.glob("*.ran")) == []
