"""``edgetune tracker start`` run twice at once starts one tracker: the other finds it, and ``tracker stop``
leaves no orphan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from .conftest import free_port

EDGETUNE = str(Path(sys.executable).parent / "edgetune")


def test_racing_tracker_starts_leave_one_tracker_that_stop_ends(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    port = str(free_port())
    procs = [subprocess.Popen([EDGETUNE, "tracker", "start", "--port", port, "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        states = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
        assert all(p.returncode == 0 for p in procs)
        pids = {s["pid"] for s in states}
        assert len(pids) == 1 and sum(1 for s in states if not s.get("already_running")) == 1
    finally:
        stop = subprocess.run([EDGETUNE, "tracker", "stop"], env=env, capture_output=True, text=True, timeout=60)
    assert stop.returncode == 0, stop.stderr
    pid = pids.pop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
