"""`board stop` ends a board's tunnel keeper and whatever it started, even when the keeper does not end on SIGTERM
(a tunnel whose close blocks): nothing is left running."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from toolkit.state import read_state
from toolkit.rpc.tunnel import running_keeper, stop_keeper

STUBBORN = """
import signal, subprocess, sys, time
from toolkit.procs import identity
from toolkit.state import write_state
signal.signal(signal.SIGTERM, signal.SIG_IGN)            # a keeper stuck closing its tunnels
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "time.sleep(600)"])
write_state("tunnels/stuck", {**identity(), "ready": True, "child": child.pid})
time.sleep(600)
"""


def test_a_keeper_that_ignores_sigterm_is_stopped_with_what_it_started():
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while running_keeper("stuck") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        state = running_keeper("stuck")
        assert state is not None and state["pid"] == proc.pid
        child = psutil.Process(int(state["child"]))
        assert stop_keeper("stuck") is True
        proc.wait(timeout=10)
        child.wait(timeout=10)                              # raises if it still ran
        assert read_state("tunnels/stuck") is None
        assert stop_keeper("stuck") is False                # nothing left to stop
    finally:
        if proc.poll() is None:
            proc.kill()
