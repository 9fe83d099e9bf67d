"""End to end on emulated aarch64 boards, through the real CLI as a user runs it: an ``rpi4`` (TVM's
aarch64 runtime times cross-compiled conv2d libraries) and a ``zcu102`` (the edgetune agent and the
register-level VTA driver on aarch64 Python, against the simulated device). Timings are emulated;
every byte of the path (SSH, tunnels, tracker, uploads, loading, running, checking) is real."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from toolkit.boards import Inventory
from toolkit.cli.app import app
from toolkit.rpc.agent_control import remote_paths
from toolkit.rpc.ssh import connect_board
from toolkit.tuning.journal import read_log

pytestmark = [pytest.mark.slow, pytest.mark.emulated]
runner = CliRunner()
CPU_WORKLOAD = "conv2d:H=8,W=8,CI=16,CO=16,K=3,S=1,P=1"
VTA_WORKLOAD = "conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def _ok(*args):
    r = _cli(*args)
    assert r.exit_code == 0, r.output
    return r


def _records(log: Path) -> int:
    try:
        return max(0, log.read_bytes().count(b"\n") - 1)
    except FileNotFoundError:
        return 0


def _on_board(name: str, command: str) -> str:
    with connect_board(Inventory().get(name)) as s:
        return s.run(command, check=True).stdout


def _keepers(name: str) -> list[str]:
    """This machine's tunnel keepers of board ``name`` still running (none should outlive ``board stop``)."""
    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        args = proc.info["cmdline"] or []
        if proc.info["status"] != psutil.STATUS_ZOMBIE and "toolkit.rpc.tunnel" in args and name in args:
            out.append(" ".join(args))
    return out


def _add(board, name: str, type_: str) -> None:
    _ok("board", "add", name, "--type", type_, "--host", board.address, "--user", "root", "--key", board.client_key)


def test_an_unknown_or_changed_host_key_is_refused(board, known_hosts):
    _add(board, "pi", "rpi4")
    r = _cli("board", "check", "pi")
    assert r.exit_code != 0 and "unknown ssh host key" in r.output.lower() and "Traceback" not in r.output
    other = board.known_hosts_line.split()
    known_hosts.write_text(f"{other[0]} ssh-ed25519 "
                           "AAAAC3NzaC1lZDI1NTE5AAAAIBvQ2C+3ErKCJKq8e4b0eZsJdtwA1mgf8DCsA5y2bx3S\n")
    r = _cli("board", "check", "pi")
    assert r.exit_code != 0 and "changed" in r.output.lower() and "Traceback" not in r.output


def test_rpi4_add_check_provision_tune_export_run_and_survive_a_lost_server(board, known_hosts, tmp_path):
    known_hosts.write_text(board.known_hosts_line)
    _add(board, "pi", "rpi4")
    check = json.loads(_ok("board", "check", "pi", "--json").stdout)
    assert check["facts"]["arch"] == "aarch64" and check["facts"]["tvm"].startswith("0.27")
    _ok("tracker", "start", "--port", free_port())
    try:
        _ok("board", "provision", "pi", "--system-site-packages")
        info = json.loads(_on_board("pi", "cat ~/.edgetune/agents/pi/agent.json"))
        assert info["tracker"].startswith("127.0.0.1:")   # the board reaches the tracker through the tunnel
        log = tmp_path / "pi.jsonl"
        _ok("tune", "--board", "pi", "-w", CPU_WORKLOAD, "--tuner", "random", "--trials", "4", "--log", log)
        _, recs = read_log(log)
        assert len(recs) == 4 and all(r.valid for r in recs), [r.message for r in recs]

        # the board's RPC server is killed mid-tune: the run waits, provisioning brings it back, nothing is lost
        cmd = [sys.executable, "-m", "toolkit", "tune", "--board", "pi", "-w", CPU_WORKLOAD, "--tuner", "random",
               "--trials", "60", "--log", str(log), "--resume", "--wait-board", "300", "--json"]
        errors = tmp_path / "tune.stderr"
        with open(errors, "wb") as err_file:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err_file, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while _records(log) < 8 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert proc.poll() is None, errors.read_text()[-800:]
            before = log.read_bytes()
            _on_board("pi", f"kill -KILL -- -$(cat {remote_paths('pi')['pid']})")
            while "waiting up to 300 s" not in errors.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)                                   # the run says what it waits for
            assert "waiting up to 300 s" in errors.read_text() and proc.poll() is None, errors.read_text()[-800:]
            _ok("board", "provision", "pi", "--system-site-packages")
            out, _ = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 0, errors.read_text()[-800:]
        assert json.loads(out)["trials"] == 60
        after = log.read_bytes()
        assert after.startswith(before[: before.rfind(b"\n") + 1]), "a record written before the kill changed"
        _, recs = read_log(log)
        assert len(recs) == 60 and len({r.index for r in recs}) == 60 and all(r.valid for r in recs)

        out_dir = tmp_path / "export"
        _ok("export", "--log", log, "--out", out_dir, "--board", "pi")
        result = json.loads(_ok("run", out_dir, "--board", "pi", "--json").stdout)
        assert all(k["correct"] for k in result["results"]), result
        assert "and its SSH tunnels" in _ok("board", "stop", "pi").stdout
        assert "toolkit.rpc.agent" not in _on_board("pi", "ps -eo args")
        assert _keepers("pi") == []
    finally:
        _cli("board", "stop", "pi")
        _ok("tracker", "stop")
    assert _keepers("pi") == []


def test_zcu102_agent_and_register_driver_on_aarch64_tune_and_run_bit_exact(board, known_hosts, tmp_path):
    known_hosts.write_text(board.known_hosts_line)
    _add(board, "zcu", "zcu102")
    r = _cli("board", "check", "zcu", "--json")
    findings = {f["item"]: f for f in json.loads(r.stdout)["findings"]}
    assert r.exit_code == 1 and not findings["pynq package"]["ok"] and not findings["fpga manager"]["ok"]
    assert findings["architecture"]["ok"] and findings["tvm runtime"]["ok"]
    _ok("tracker", "start", "--port", free_port())
    try:
        _ok("board", "provision", "zcu", "--system-site-packages", "--executor", "fsim")
        health = json.loads(_ok("board", "status", "--json").stdout)
        assert {h["name"]: h for h in health}["zcu"]["registered"]
        log = tmp_path / "zcu.jsonl"
        _ok("tune", "--board", "zcu", "-w", VTA_WORKLOAD, "--tuner", "random", "--trials", "6", "--log", log)
        _, recs = read_log(log)
        assert len(recs) == 6 and any(r.valid for r in recs)
        out_dir = tmp_path / "export"
        _ok("export", "--log", log, "--out", out_dir, "--board", "zcu")
        result = json.loads(_ok("run", out_dir, "--board", "zcu", "--json").stdout)
        assert all(k["correct"] for k in result["results"]) and "bit-exact" in json.dumps(result), result
        # a whole int8 model in one agent call: its VTA convs on the board's device, the rest in numpy on aarch64
        model = tmp_path / "vtanet.py"
        model.write_text(VTA_MODEL)
        _ok("export", "--model", f"{model}:make", "--input-shape", "1,3,8,8", "--board", "zcu", "--out",
            tmp_path / "model")
        run = json.loads(_ok("run", tmp_path / "model", "--board", "zcu", "--check", "--per-layer", "--json").stdout)
        d = run["details"]
        assert run["correct"] is True and d["bit_exact"] is True, run
        assert d["vta_seconds"] == d["cpu_seconds"] == "measured on the board" and d["cpu_ms"] > 0
        assert [r["device"] for r in d["layers"] if r["op"] == "conv"] == ["vta", "vta", "vta"]   # the first padded
        agent = _on_board("zcu", "ps -eo args | grep toolkit.rpc.agent | grep -v grep")
        assert "--executor fsim" in agent and "--vta-config zcu102" in agent
        assert "aarch64" in _on_board("zcu", "uname -m")
    finally:
        _cli("board", "stop", "zcu")
        _ok("tracker", "stop")
    assert _keepers("zcu") == []


def test_ultra96_provisions_and_tunes_on_the_aarch64_board_like_the_zcu102(board, known_hosts, tmp_path):
    """The Ultra96 (Zynq UltraScale+, aarch64) shares the ZCU102's path: wheel runtime, fsim device at its own
    register base, its own VTA preset (333 MHz, 128-bit bus)."""
    known_hosts.write_text(board.known_hosts_line)
    _add(board, "u96", "ultra96")
    _ok("tracker", "start", "--port", free_port())
    try:
        _ok("board", "provision", "u96", "--system-site-packages", "--executor", "fsim")
        agent = _on_board("u96", "ps -eo args | grep toolkit.rpc.agent | grep -v grep")
        assert "--executor fsim" in agent and "--vta-config ultra96" in agent and "--key ultra96" in agent
        log = tmp_path / "u96.jsonl"
        _ok("tune", "--board", "u96", "-w", VTA_WORKLOAD, "--tuner", "random", "--trials", "4", "--log", log)
        header, recs = read_log(log)
        assert len(recs) == 4 and any(r.valid for r in recs)
        assert header.task["hw"]["TARGET"] == "ultra96" and header.task["hw"]["CLOCK_MHZ"] == 333
    finally:
        _cli("board", "stop", "u96")
        _ok("tracker", "stop")
    assert _keepers("u96") == []


VTA_MODEL = '''
import torch
from torch import nn


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(16, 4)).eval()
'''

MODEL = '''
import torch
from torch import nn


def make():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(16, 4)).eval()
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    return net
'''


def test_rpi4_whole_model_tuned_exported_and_run_by_the_aarch64_runtime(board, known_hosts, tmp_path):
    import numpy as np
    import torch

    known_hosts.write_text(board.known_hosts_line)
    _add(board, "pi", "rpi4")
    (tmp_path / "net.py").write_text(MODEL)
    model = f"{tmp_path / 'net.py'}:make"
    _ok("tracker", "start", "--port", free_port())
    try:
        _ok("board", "provision", "pi", "--system-site-packages")
        log = tmp_path / "net.jsonl"
        _ok("tune", "--model", model, "--input-shape", "1,3,8,8", "--board", "pi", "-t", "random", "-n", "4",
            "--round-trials", "4", "--log", log)
        out_dir = tmp_path / "export"
        manifest = json.loads(_ok("export", "--model", model, "--input-shape", "1,3,8,8", "--board", "pi", "--log", log,
                                  "--out", out_dir, "--json").stdout)
        # 4 trials over the two convs: each gets its share of the first round, so both are tuned
        assert manifest["arch"] == "aarch64" and [c["schedule"] for c in manifest["model"]["convs"]] == ["tuned"] * 2
        check = manifest["model"]["check"]          # not runnable here: checked on the provisioned board over RPC
        assert (check["checked"], check["where"]) == (True, "on board pi"), check
        x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        result = json.loads(_ok("run", out_dir, "--board", "pi", "--input", tmp_path / "x.npy",
                                "--output", tmp_path / "y.npy", "--json").stdout)
        assert result["correct"] is True and result["inputs"] == 2 and result["latency_ms"] > 0
        namespace: dict = {}
        exec(MODEL, namespace)
        with torch.no_grad():
            want = namespace["make"]()(torch.from_numpy(x)).numpy()    # computed here, on x86
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    finally:
        _cli("board", "stop", "pi")
        _ok("tracker", "stop")
    assert _keepers("pi") == []
