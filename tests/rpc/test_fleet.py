"""End to end: two vta-fsim boards provisioned behind SSH tunnels under one RPC key, a tune through
the tracker using both, one agent killed mid-run."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from toolkit.boards import Inventory, resolve_board
from toolkit.cli.app import app
from toolkit.rpc.agent_control import remote_paths
from toolkit.rpc.ssh import connect_board
from toolkit.rpc.tunnel import running_keeper
from toolkit.backends.vta.rpc_runner import VTARPCRunner
from toolkit.tuning.session import tune
from toolkit.tuning.core.result import ErrorClass
from toolkit.tuning.journal import read_log
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.tuners.base import make_tuner
from toolkit.workloads import parse_workload
from toolkit.backends import make_task

from .conftest import free_port

pytestmark = pytest.mark.slow
runner = CliRunner()
WORKLOAD = "conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1"


def _ok(*args):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def _kill_agent(name: str) -> None:
    """SIGKILL the agent's process group, like a crash (no clean unregistering)."""
    pid = remote_paths(name)["pid"]
    with connect_board(Inventory().get(name)) as s:
        s.run(f"kill -KILL -- -$(cat {pid})", check=True)


def test_two_boards_one_key_survive_a_lost_agent(sshd, trusted, tmp_path):
    _ok("tracker", "start", "--port", free_port())
    try:
        for name, host in (("fa", "127.0.0.2"), ("fb", "127.0.0.3")):
            _ok("board", "add", name, "--type", "vta-fsim", "--host", host, "--port", sshd.port, "--user", "root",
                "--key", sshd.client_key, "--rpc-key", "fleet-vta")
            _ok("board", "provision", name, "--tunnel", "--python", sys.executable, "--remote-dir", tmp_path / "remote")
        st = json.loads(_ok("tracker", "status", "--json").stdout)
        servers = [s for s in st["summary"]["server_info"] if s["key"] == "server:fleet-vta"]
        # clients are sent to the SSH tunnels' local ends on loopback, never to a board address
        assert sorted(s["addr"][1] for s in servers) == sorted(running_keeper(n)["local_port"] for n in ("fa", "fb"))
        assert all(s["addr"][0] == "127.0.0.1" for s in servers)
        task = make_task(parse_workload(WORKLOAD), resolve_board("fa"))
        vta = VTARPCRunner(resolve_board("fa"), wait_s=60)
        killed = threading.Event()

        def killer():
            while sum(vta.served.values()) < 5:
                time.sleep(0.05)
            _kill_agent("fb")
            killed.set()

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        log = tmp_path / "fleet.jsonl"
        summary = tune(task, make_tuner("random", seed=0), 16, log=log, runner=vta,
                       measure_options=MeasureOptions(repeat=1))
        thread.join(timeout=30)
        assert killed.is_set()
        _, records = read_log(log)
        assert summary.trials == len(records) == 16 and len({r.index for r in records}) == 16
        assert not any(r.error == ErrorClass.BOARD_LOST for r in records)
        assert any(r.valid for r in records)
        assert vta.served["fa"] > 0 and vta.served["fb"] > 0, vta.served  # both boards measured
        after = sum(vta.served.values())
        assert vta.served["fa"] + vta.served["fb"] == after
        # the killed board is reported down, the other still registered
        rows = {r["name"]: r for r in json.loads(_ok("board", "status", "--json").stdout)}
        assert rows["fa"]["registered"] and not rows["fb"]["agent_up"]
        # re-provisioning brings it back under the same key
        _ok("board", "provision", "fb", "--tunnel", "--python", sys.executable, "--remote-dir", tmp_path / "remote")
        rows = {r["name"]: r for r in json.loads(_ok("board", "status", "--json").stdout)}
        assert rows["fb"]["registered"] and rows["fb"]["queue"].startswith("2/")
        assert "and its SSH tunnels" in _ok("board", "stop", "fb").stdout and running_keeper("fb") is None
    finally:
        for name in ("fa", "fb"):
            runner.invoke(app, ["board", "stop", name])
        _ok("tracker", "stop")
