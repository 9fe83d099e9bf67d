"""The Pynq-Z1 path end to end on an emulated board, through the real CLI as a user runs it: 32-bit ARM (Debian
armhf under qemu-arm), 512 MB, 2 CPUs, numpy from the image, the TVM runtime cross-built on this machine and
uploaded by ``board provision``, the agent's register-level VTA driver on the simulated device at the Pynq's
register base, named with the Pynq bitstream. Timings are emulated; every byte of the path (SSH, tunnels,
tracker, TVM RPC between an x86 client and the armv7 runtime, uploads, the int8 executor on 32-bit Python) is
real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.rpc.agent_control import remote_paths
from toolkit.rpc.runtime_bundle import elf_kind
from toolkit.testing import emulated_board as emu
from toolkit.tuning.journal import read_log

from .test_board_flows import VTA_MODEL, _add, _cli, _keepers, _ok, _on_board, _records, free_port

pytestmark = [pytest.mark.slow, pytest.mark.emulated]
LAYER = "resnet18.C10"
"""A ResNet-18 layer whose programs simulate quickly under emulation (1x1, stride 2, 14x14x256 -> 512)."""


def _timed(steps: dict[str, float], name: str, *args):
    start = time.monotonic()
    r = _ok(*args)
    steps[name] = round(time.monotonic() - start, 1)
    return r


def _measured(log: Path) -> list[tuple[int, list[float]]]:
    _, recs = read_log(log)
    return [(r.index, r.costs) for r in recs]


def _cycles(log: Path) -> list[tuple[int, set[int]]]:
    """Each record's config and the VTA cycle counts its runs took (the Pynq preset's clock is 100 MHz)."""
    return [(index, {round(c * 100e6) for c in costs}) for index, costs in _measured(log)]


def test_the_runtime_bundle_is_32_bit_arm(armv7_runtime):
    libs = sorted(armv7_runtime.rglob("*.so"))
    assert {p.name for p in libs} >= {"libtvm_runtime.so", "libtvm_ffi.so", "core.cpython-311-arm-linux-gnueabihf.so"}
    assert all(elf_kind(p) == (1, 40) for p in libs), [(p.name, elf_kind(p)) for p in libs]


def test_pynq_add_check_bitstream_provision_tune_export_run_resume_stop(pynq, known_hosts, tmp_path):
    steps: dict[str, float] = {}
    known_hosts.write_text(pynq.known_hosts_line)
    _timed(steps, "board add", "board", "add", "pynq1", "--type", "pynq-z1", "--host", pynq.address, "--user", "root",
           "--key", pynq.client_key)
    start = time.monotonic()
    r = _cli("board", "check", "pynq1", "--json")
    steps["board check"] = round(time.monotonic() - start, 1)
    findings = {f["item"]: f for f in json.loads(r.stdout)["findings"]}
    assert r.exit_code == 1 and findings["architecture"]["ok"] and "armv7" in findings["architecture"]["value"]
    assert not findings["tvm runtime"]["ok"] and "edgetune runtime build" in findings["tvm runtime"]["fix"]
    bit = tmp_path / "1x16_i8w8a32_15_15_18_17.bit"
    bit.write_bytes(b"\0a stand-in: the simulated device loads no bitstream, but the board holds it by name")
    _timed(steps, "bitstream add", "bitstream", "add", bit, "--target", "pynq", "--hw-ver", "0.0.2")
    _ok("tracker", "start", "--port", free_port())
    try:
        provision = ("board", "provision", "pynq1", "--system-site-packages", "--executor", "fsim", "--json")
        first = json.loads(_timed(steps, "board provision", *provision).stdout)["steps"]
        changed = {s["name"].split(" (")[0] for s in first if s["changed"]}
        assert changed >= {"upload agent", "virtualenv", "upload TVM runtime", "link TVM runtime into the venv",
                           "upload bitstream pynq/0.0.2/1x16_i8w8a32_15_15_18_17.bit", "start agent"}, first
        again = json.loads(_timed(steps, "board provision (again)", *provision).stdout)["steps"]
        assert [s["name"] for s in again if s["changed"]] == [], again       # a second run changes nothing
        health = [s for s in again if s["name"] == "verify"][0]["detail"]
        assert "'executor': 'fsim'" in health and "'bitstream': '1x16_i8w8a32_15_15_18_17.bit'" in health
        info = json.loads(_on_board("pynq1", "~/.edgetune/venv/bin/python -c 'import json, platform, struct, tvm, "
                                              "numpy; print(json.dumps([platform.machine(), struct.calcsize(\"P\"), "
                                              "tvm.__version__, numpy.__file__]))'"))
        assert info[0] == "armv7l" and info[1] == 4 and info[2].startswith("0.27")
        assert info[3].startswith("/usr/lib/python3/dist-packages/")      # numpy from the image, not uploaded

        # the default tuner on the board: every record bit-exact with the same run on the host's simulator
        log = tmp_path / "pynq.jsonl"
        _timed(steps, "tune (4 trials)", "tune", "--board", "pynq1", "-w", LAYER, "--trials", "4", "--log", log)
        host = tmp_path / "host.jsonl"
        _ok("tune", "--board", "vta-fsim", "-w", LAYER, "--trials", "4", "--log", host)
        assert _cycles(log) == _cycles(host) and len(_cycles(log)) == 4

        # the agent killed mid-tune: the run says what it waits for and stops; provisioning and --resume finish
        # the budget with nothing lost and nothing measured twice
        cmd = [sys.executable, "-m", "toolkit", "tune", "--board", "pynq1", "-w", LAYER, "--trials", "20", "--log",
               str(log), "--resume", "--wait-board", "5"]
        errors = tmp_path / "tune.stderr"
        start = time.monotonic()
        with open(errors, "wb") as err_file:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while _records(log) <= 4 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert proc.poll() is None, errors.read_text()[-800:]
            _on_board("pynq1", f"kill -KILL -- -$(cat {remote_paths('pynq1')['pid']})")
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        said = errors.read_text()
        assert proc.returncode != 0 and "waiting up to 5 s" in said and "Traceback" not in said, said[-800:]
        before = log.read_bytes()
        kept = _measured(log)
        assert 4 < len(kept) < 20
        _ok(*provision)
        _ok("tune", "--board", "pynq1", "-w", LAYER, "--trials", "20", "--log", log, "--resume")
        steps["tune killed, provision, --resume (16 trials)"] = round(time.monotonic() - start, 1)
        assert log.read_bytes().startswith(before)
        after = _measured(log)
        assert after[:len(kept)] == kept and len(after) == 20 and len({i for i, _ in after}) == 20

        # a whole int8 model: VTA layers on the board's device, the rest in numpy on 32-bit Python, bit-exact
        model = tmp_path / "vtanet.py"
        model.write_text(VTA_MODEL)
        _timed(steps, "export --model", "export", "--model", f"{model}:make", "--input-shape", "1,3,8,8", "--board",
               "pynq1", "--out", tmp_path / "model")
        run = json.loads(_timed(steps, "run --check", "run", tmp_path / "model", "--board", "pynq1", "--check",
                                "--per-layer", "--json").stdout)
        d = run["details"]
        assert run["correct"] is True and d["bit_exact"] is True, run
        assert d["vta_seconds"] == d["cpu_seconds"] == "measured on the board" and d["cpu_ms"] > 0 and d["vta_ms"] > 0
        assert [r["device"] for r in d["layers"] if r["op"] == "conv"] == ["vta", "vta", "vta"]   # the first padded

        logs = _timed(steps, "board logs", "board", "logs", "pynq1").stdout
        assert "start serving" in logs
        assert "and its SSH tunnels" in _timed(steps, "board stop", "board", "stop", "pynq1").stdout
        assert "toolkit.rpc.agent" not in _on_board("pynq1", "ps -eo args")
        peak = pynq.memory_peak_mb()
        assert peak is not None and peak < 512
        print(f"\nPynq flow, wall seconds per step (emulated): {json.dumps(steps)}; board memory peak {peak:.0f} MB")
    finally:
        _cli("board", "stop", "pynq1")
        _ok("tracker", "stop")
    assert _keepers("pynq1") == []


def test_a_board_with_too_little_memory_for_the_agent_is_refused(armv7_image, armv7_runtime, known_hosts,
                                                                 monkeypatch):
    monkeypatch.setenv("EDGETUNE_RUNTIME_CACHE", str(armv7_runtime.parent))
    small = emu.start_board(armv7_image, memory_mb=128, cpus=1)   # about 78 MB left once sshd runs
    try:
        known_hosts.write_text(small.known_hosts_line)
        _add(small, "tiny", "pynq-z1")
        _ok("tracker", "start", "--port", free_port())
        try:
            r = _cli("board", "provision", "tiny", "--system-site-packages", "--executor", "fsim")
            assert r.exit_code == 2 and "Traceback" not in r.output, r.output
            assert "MiB of memory free but the agent needs 96 MiB" in r.output
            assert [x for x in r.output.splitlines() if x.startswith("error:")] == r.output.splitlines()[-1:]
            assert "agent" not in _on_board("tiny", "ls ~/.edgetune 2>/dev/null || true")   # nothing was installed
            assert _keepers("tiny") == []                    # nor are the tunnels it opened left running
        finally:
            _cli("board", "stop", "tiny")
            _ok("tracker", "stop")
    finally:
        small.stop()
