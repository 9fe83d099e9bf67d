"""The board agent on this machine (a real process behind a real tracker): an idle TCP connection to its
port does not stop it from serving other clients."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.rpc.provision import call_health
from toolkit.rpc.tracker import require_server, start_tracker

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_an_idle_connection_does_not_block_the_agent(tmp_path):
    tracker = start_tracker()
    host, port = tracker.address
    state = tmp_path / "agent.json"
    agent = subprocess.Popen([sys.executable, "-m", "toolkit.rpc.agent", "--tracker", f"{host}:{port}",
                              "--key", "guard", "--executor", "tvm", "--name", "g", "--state-file", str(state)],
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        require_server(host, port, "guard", "g", grace_s=90)
        agent_port = json.loads(state.read_text())["port"]
        idle = socket.create_connection(("127.0.0.1", agent_port))   # connects, then says nothing
        try:
            time.sleep(0.2)
            assert call_health((host, port), "guard", "g", timeout=60)["name"] == "g"
        finally:
            idle.close()
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        tracker.stop()
