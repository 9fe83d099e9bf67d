"""A board behind SSH tunnels survives its SSH connection dropping (two tunnelled boards sharing a key
are exercised in test_fleet.py)."""

from __future__ import annotations

import json
import sys
import time

import psutil

import pytest
from typer.testing import CliRunner

from toolkit.cli.app import app
from toolkit.rpc.agent_control import call_health, wait_registered
from toolkit.state import state_dir
from toolkit.rpc.tunnel import running_keeper

from .conftest import free_port

pytestmark = pytest.mark.slow
runner = CliRunner()


def _ok(*args):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def _add(sshd, name, host, key="tunnel-vta"):
    _ok("board", "add", name, "--type", "vta-fsim", "--host", host, "--port", sshd.port, "--user", "root",
        "--key", sshd.client_key, "--rpc-key", key)


def test_a_dropped_tunnel_is_reestablished_and_the_agent_registers_again(sshd, trusted, tmp_path):
    _add(sshd, "tc", "127.0.0.2", key="drop-vta")
    _ok("tracker", "start", "--port", free_port())
    try:
        _ok("board", "provision", "tc", "--tunnel", "--python", sys.executable, "--remote-dir", tmp_path / "r")
        keeper = running_keeper("tc")
        tracker = tuple(json.loads(_ok("tracker", "status", "--json").stdout)[k] for k in ("host", "port"))
        for conn in psutil.Process(sshd.pid).children():  # the board's sshd drops every connection
            conn.kill()
        log = state_dir() / "tunnels" / "tc.log"
        deadline = time.monotonic() + 60
        while "reconnected" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "reconnected" in log.read_text()
        assert running_keeper("tc")["remote_port"] == keeper["remote_port"]  # same ports after the drop
        wait_registered(tracker, "drop-vta", keeper["local_port"], 60)
        assert call_health(tracker, "drop-vta", "tc", 30)["name"] == "tc"
    finally:
        runner.invoke(app, ["board", "stop", "tc"])
        _ok("tracker", "stop")
