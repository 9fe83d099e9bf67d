"""The board agent on this machine (a real process behind a real tracker): an idle TCP connection to its
port, a slow handshake or a malformed one does not stop it from serving other clients."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit.rpc.agent import handshake_problem
from toolkit.rpc.agent_control import call_health
from toolkit.rpc.tracker import require_server, start_tracker

ROOT = Path(__file__).resolve().parents[2]


MAGIC = struct.pack("<i", 0xFF271)
HOSTILE = {
    "key length -1": MAGIC + struct.pack("<i", -1),
    "key length 0": MAGIC + struct.pack("<i", 0),
    "key not UTF-8": MAGIC + struct.pack("<i", 4) + b"\xff\xfe\xfd\xfc",
    "blank key": MAGIC + struct.pack("<i", 3) + b"   ",
    "bad timeout": MAGIC + struct.pack("<i", 22) + b"client:x -timeout=abcd",
    "key length 2^31-1, then silence": MAGIC + struct.pack("<i", 2**31 - 1),
    "one byte, then silence": b"\x71",
    "half a key, then silence": MAGIC + struct.pack("<i", 40) + b"client:",
}


@given(st.binary(max_size=64))
def test_handshake_problem_never_raises(frame):
    assert handshake_problem(frame) is None or isinstance(handshake_problem(frame), str)


def test_handshake_problem_names_each_hostile_frame():
    for name, frame in HOSTILE.items():
        assert handshake_problem(frame) is not None, name
    good = MAGIC + struct.pack("<i", 24) + b"client:abc -timeout=10.5"
    assert handshake_problem(good) is None and handshake_problem(b"GET / HTTP/1.1") is None


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
        for name, frame in HOSTILE.items():             # each frame alone, then a real client
            with socket.create_connection(("127.0.0.1", agent_port)) as hostile:
                hostile.sendall(frame)
                time.sleep(0.1)
                assert call_health((host, port), "guard", "g", timeout=60)["name"] == "g", name
            assert agent.poll() is None, f"the agent died on a handshake with {name}"
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        tracker.stop()
