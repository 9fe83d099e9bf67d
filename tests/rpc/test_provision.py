"""Provisioning over a real sshd: plans, dry-run, provision/status/logs/stop, the tracker CLI."""

from __future__ import annotations

import io
import json
import os
import sys

import numpy as np

import pytest
from tvm import rpc
from typer.testing import CliRunner

from toolkit.boards import resolve_board
from toolkit.cli.app import app
from toolkit.rpc.agent_control import call_health
from toolkit.backends.vta.rpc_runner import VTARPCRunner
from toolkit.tuning.session import tune
from toolkit.tuning.core.builder import LocalBuilder
from toolkit.backends.tvm.rpc_runner import RPCRunner
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.tuners.base import make_tuner
from toolkit.workloads import parse_workload
from toolkit.backends import make_task

from .conftest import free_port

runner = CliRunner()


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def _ok(*args):
    r = _cli(*args)
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture
def tracker():
    r = _ok("tracker", "start", "--port", free_port(), "--json")
    state = json.loads(r.stdout)
    yield ("127.0.0.1", state["port"])
    _ok("tracker", "stop")


def _plan(*args):
    return json.loads(_ok("board", "provision", *args, "--dry-run", "--json").stdout)["steps"]


def test_dry_run_plans_follow_the_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_BITSTREAM_CACHE", str(tmp_path / "bits"))
    monkeypatch.setenv("EDGETUNE_RUNTIME_CACHE", str(tmp_path / "runtime"))
    for name, type_ in (("pz", "pynq-z1"), ("pi", "rpi4"), ("sim", "vta-fsim"), ("j", "jetson-nano")):
        _ok("board", "add", name, "--type", type_, "--host", "10.0.0.9")
    pynq = _plan("pz")
    text = json.dumps(pynq)
    # armv7: the runtime cross-built here is uploaded (not built on the board); before it is built the plan says so
    runtime = [s for s in pynq if s["name"].startswith("upload TVM runtime")][0]
    assert "NOT READY" in runtime["note"] and "edgetune runtime build --arch armv7" in runtime["note"]
    assert pynq[0]["name"] == "free memory for the agent (96 MiB)"
    assert "git clone" not in text and "make runtime" not in text and "pip install" not in text
    assert "--key pynq" in text and "--executor fpga" in text and "sudo -n" in text
    bit = [s for s in pynq if s["name"].startswith("upload bitstream")][0]
    assert "pynq/0.0.2/1x16_i8w8a32_15_15_18_17.bit" in bit["name"] and "NOT CACHED" in bit["note"]
    assert "--bitstream" in text and "1x16_i8w8a32_15_15_18_17.bit" in text
    pi = json.dumps(_plan("pi"))
    assert "apache-tvm==0.27.0.post1" in pi and "make runtime" not in pi and "--bitstream" not in pi
    assert "--executor tvm" in pi and "--key rpi4" in pi
    # a board on the network is reached through SSH tunnels by default: the agent stays on loopback
    full = json.loads(_ok("board", "provision", "pz", "--dry-run", "--json").stdout)
    assert full["tunnel"] is True and "--report-host 127.0.0.1" in json.dumps(full["steps"])
    assert "--host 127.0.0.1" in json.dumps(full["steps"])
    sim = json.dumps(_plan("sim"))
    assert "--executor fsim" in sim and "--key vta-fsim" in sim
    assert "CUDA" in json.dumps(_plan("j"))  # the wheel-has-no-CUDA note is shown
    # a cached bitstream is uploaded with a digest check
    src = tmp_path / "1x16_i8w8a32_15_15_18_17.bit"
    src.write_bytes(b"\x00bitstream")
    _ok("bitstream", "add", src, "--target", "pynq", "--hw-ver", "0.0.2")
    bit = [s for s in _plan("pz") if s["name"].startswith("upload bitstream")][0]
    assert "sha256sum -c" in bit["check"] and bit["upload"].endswith("1x16_i8w8a32_15_15_18_17.bit")
    # a runtime of the user's own is uploaded instead of the bundle
    wheel = tmp_path / "tvm-0.27-cp311-linux_armv7l.whl"
    wheel.write_bytes(b"wheel")
    steps = _plan("pz", "--runtime-path", wheel)
    assert not any(s["name"].startswith("upload TVM runtime (armv7") for s in steps)
    assert any((s["upload"] or "").endswith(wheel.name) for s in steps)
    # human-readable dry-run prints every command
    out = _ok("board", "provision", "pi", "--dry-run").stdout
    assert "python3 -m venv" in out and "toolkit.rpc.agent" in out


def test_executor_fsim_runs_an_fpga_boards_agent_on_the_simulated_device(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_BITSTREAM_CACHE", str(tmp_path / "bits"))
    for name, type_ in (("zcu", "zcu102"), ("pi", "rpi4")):
        _ok("board", "add", name, "--type", type_, "--host", "10.0.0.9")
    text = json.dumps(_plan("zcu", "--executor", "fsim"))
    assert "--executor fsim" in text and "--vta-config zcu102" in text
    assert "upload bitstream" not in text and "--bitstream" not in text and "sudo" not in text  # no FPGA, no root
    assert "sudo -n" in json.dumps(_plan("zcu"))                     # the FPGA itself still needs both
    for args, words in ((("zcu", "--executor", "fpga"), "the only other executor is fsim"),
                        (("pi", "--executor", "fsim"), "runs no VTA programs"),
                        (("zcu", "--executor", "fsim", "--bitstream", "zcu102/0.0.2/x"), "rename the file")):
        r = _cli("board", "provision", *args, "--dry-run")
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output


@pytest.mark.slow
def test_provision_status_logs_stop_over_ssh(sshd, trusted, tracker, tmp_path):
    boards = {"sim1": ("vta-fsim", "127.0.0.2"), "loc1": ("local", "127.0.0.3")}
    for name, (type_, host) in boards.items():
        _ok("board", "add", name, "--type", type_, "--host", host, "--port", sshd.port, "--user", "root",
            "--key", sshd.client_key)
    args = ["--python", sys.executable, "--remote-dir", tmp_path / "remote", "--json"]
    for name in boards:
        first = json.loads(_ok("board", "provision", name, *args).stdout)["steps"]
        assert any(s["changed"] for s in first)
        assert "answers" in first[-1]["detail"]
        again = json.loads(_ok("board", "provision", name, *args).stdout)["steps"]
        assert not any(s["changed"] for s in again), again  # idempotent
    for name, (type_, _) in boards.items():
        health = call_health(tracker, "vta-fsim" if type_ == "vta-fsim" else "local", name, 30)
        assert health["executor"] == ("fsim" if type_ == "vta-fsim" else "tvm")
    rows = {r["name"]: r for r in json.loads(_ok("board", "status", "--json").stdout)}
    for name in boards:
        assert rows[name]["reachable"] and rows[name]["agent_up"] and rows[name]["registered"], rows[name]
        assert rows[name]["queue"].startswith("1/")
    st = json.loads(_ok("tracker", "status", "--json").stdout)
    assert {"vta-fsim", "local"} <= set(st["summary"]["queue_info"])
    assert "agent sim1" in _ok("board", "logs", "sim1").stdout
    # a short tune through the tracker on each board
    for name, runner_ in (("sim1", VTARPCRunner(resolve_board("sim1"), wait_s=30)),
                          ("loc1", RPCRunner(tracker[0], tracker[1], key="local"))):
        task = make_task(parse_workload("conv2d:H=8,W=8,CI=16,CO=16,K=3,S=1,P=1"), resolve_board(name))
        summary = tune(task, make_tuner("random", seed=0), 3, runner=runner_, builder=LocalBuilder(n_parallel=0),
                       measure_options=MeasureOptions(repeat=1))
        assert summary.trials == 3 and summary.best_seconds < float("inf"), summary
    assert VTARPCRunner(resolve_board("sim1"), wait_s=30).tracker == tracker
    # the agent's other functions; a broken program is an in-band error, not a lost board
    remote = rpc.connect_tracker(*tracker).request("vta-fsim", session_timeout=30)
    info = json.loads(remote.get_function("edgetune.board_info")())
    assert info["arch"] == os.uname().machine and info["tvm"] and info["executor"] == "fsim"
    out = np.load(io.BytesIO(bytes(remote.get_function("edgetune.vta.run")(b"not a program", b"", 1))))
    assert "ProgramFormatError" in bytes(out["__error__"]).decode()
    del remote
    for name in boards:
        assert "stopped the agent" in _ok("board", "stop", name).stdout
        assert "no agent was running" in _ok("board", "stop", name).stdout
    rows = {r["name"]: r for r in json.loads(_ok("board", "status", "--json").stdout)}
    assert not rows["sim1"]["agent_up"] and not rows["sim1"]["registered"]
