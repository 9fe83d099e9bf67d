"""Boards behind SSH tunnels: agents on the boards' loopback, the tracker on ours, nothing exposed."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from toolkit.boards import Inventory
from toolkit.cli.app import app
from toolkit.rpc import provision as prov
from toolkit.rpc.provision import call_health, wait_registered
from toolkit.rpc.ssh import connect_board
from toolkit.rpc.tracker import start_tracker, tracker_summary
from toolkit.rpc.tunnel import BoardTunnel, agent_port_from_state, running_keeper

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


def test_two_tunnelled_boards_share_a_key(sshd, trusted, tmp_path):
    _ok("tracker", "start", "--port", free_port())
    try:
        for name, host in (("ta", "127.0.0.2"), ("tb", "127.0.0.3")):
            _add(sshd, name, host)
            _ok("board", "provision", name, "--tunnel", "--python", sys.executable, "--remote-dir", tmp_path / "r")
            keeper = running_keeper(name)
            assert keeper and keeper["local_port"] != keeper["remote_port"]
        st = json.loads(_ok("tracker", "status", "--json").stdout)
        assert st["summary"]["queue_info"]["tunnel-vta"]["free"] == 2
        servers = [s for s in st["summary"]["server_info"] if s["key"] == "server:tunnel-vta"]
        # clients are sent to the tunnels' local ends, never to a board address
        assert sorted(s["addr"][1] for s in servers) == sorted(running_keeper(n)["local_port"] for n in ("ta", "tb"))
        assert all(s["addr"][0] == "127.0.0.1" for s in servers)
        tracker = (st["host"], st["port"])
        assert call_health(tracker, "tunnel-vta", "ta", 30)["name"] == "ta"
        assert call_health(tracker, "tunnel-vta", "tb", 30)["name"] == "tb"
        rows = {r["name"]: r for r in json.loads(_ok("board", "status", "--json").stdout)}
        assert rows["ta"]["registered"] and rows["tb"]["registered"]
        assert "and its SSH tunnels" in _ok("board", "stop", "ta").stdout
        assert running_keeper("ta") is None
        assert call_health(tracker, "tunnel-vta", "tb", 30)["name"] == "tb"
    finally:
        for name in ("ta", "tb"):
            runner.invoke(app, ["board", "stop", name])
        _ok("tracker", "stop")


def test_a_dropped_tunnel_is_reestablished_and_the_agent_registers_again(sshd, trusted, tmp_path):
    _add(sshd, "tc", "127.0.0.2", key="drop-vta")
    entry = Inventory().get("tc")
    with start_tracker() as tracker:
        paths = prov.agent_paths("tc", str(tmp_path / "r"))
        with BoardTunnel(entry, tracker.address, agent_port=agent_port_from_state(paths["state"])) as tunnel:
            opts = prov.ProvisionOptions(tracker=tracker.address, board_tracker=("127.0.0.1", tunnel.remote_port),
                                         report_host="127.0.0.1", report_port=tunnel.local_port,
                                         remote_dir=str(tmp_path / "r"), python=sys.executable)
            with connect_board(entry) as s:
                prov.run_plan(prov.make_plan(entry, opts), s)
            before = tunnel.remote_port
            tunnel.session.client.close()  # the SSH connection drops
            wait_registered(tracker.address, "drop-vta", tunnel.local_port, 60)
            assert call_health(tracker.address, "drop-vta", "tc", 60)["name"] == "tc"
            assert tunnel.reconnects >= 1 and tunnel.remote_port == before
            with connect_board(entry) as s:
                prov.stop_agent("tc", s)
        info = tracker_summary(*tracker.address)
        assert "drop-vta" not in {s["key"].split(":", 1)[1] for s in info["server_info"]}
