"""Exports: real tunes -> export -> run on `local` (real TVM build, real RPC on loopback) and `vta-fsim`
(bit-exact), cross-compiled ARM libraries, the manifest schema, bad logs and wrong boards."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from toolkit.boards import BoardEntry, Inventory, load_profile, resolve_board
from toolkit.cli.app import app
from toolkit.testing.cli import one_line_error, sim_agent
from toolkit.errors import EdgetuneError
from toolkit.export import (
    KERNEL_KEYS,
    MANIFEST_KEYS,
    ExportError,
    export,
    load_export,
)
from toolkit.rpc.tracker import ensure_local_rpc
from toolkit.tuning.session import tune
from toolkit.tuning.core.builder import LocalBuilder, build_one
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.journal import Journal, LogHeader, Record, read_log
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.tuners.base import make_tuner
from toolkit.vta.config import get_preset
from toolkit.vta.program import Program
from toolkit.vta.reference import random_inputs
from toolkit.workloads import parse_workload
from toolkit.backends import make_task

CPU_WL = "conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1"
VTA_WL = "conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1"
EM_ARM, EM_AARCH64, EM_X86_64 = 40, 183, 62
cli = CliRunner()


def _elf(path) -> tuple[int, int]:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF"
    return head[4], int.from_bytes(head[18:20], "little")


def _invoke(*args: str):
    return cli.invoke(app, [str(a) for a in args])




@pytest.fixture(scope="module")
def local_rpc():
    """One loopback tracker + server for the module (tuning and `run` share it)."""
    host, port, stop = ensure_local_rpc("local")
    yield host, port
    stop()


@pytest.fixture(scope="module")
def cpu_log(tmp_path_factory, local_rpc):
    """A real 2-trial tune of a small conv on `local` (built here, measured over loopback RPC)."""
    log = tmp_path_factory.mktemp("cpu") / "local.jsonl"
    task = make_task(parse_workload(CPU_WL), resolve_board("local"))
    summary = tune(task, make_tuner("random", seed=1), 2, log=log, builder=LocalBuilder(n_parallel=0),
                   measure_options=MeasureOptions(check=True))
    assert summary.valid >= 1, summary.errors
    return log


@pytest.fixture(scope="module")
def vta_log(tmp_path_factory):
    """A real 12-trial tune on the VTA simulator, outputs checked."""
    log = tmp_path_factory.mktemp("vta") / "fsim.jsonl"
    task = make_task(parse_workload(VTA_WL), resolve_board("vta-fsim"))
    summary = tune(task, make_tuner("random", seed=0), 12, log=log, measure_options=MeasureOptions(check=True))
    assert summary.valid >= 1, summary.errors
    return log


@pytest.fixture(scope="module")
def local_export(cpu_log, tmp_path_factory):
    out = tmp_path_factory.mktemp("exports") / "local"
    export(cpu_log, out)
    return out


@pytest.fixture(scope="module")
def vta_export(vta_log, tmp_path_factory):
    out = tmp_path_factory.mktemp("exports") / "vta"
    r = _invoke("export", "--log", vta_log, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    return out


# -- local: real build, real RPC ------------------------------------------------------------------
@pytest.mark.slow
def test_local_export_runs_over_rpc_and_matches_reference(local_export, cpu_log, local_rpc):
    ex = load_export(local_export)
    kernel = ex.kernel()
    best = min((r for r in read_log(cpu_log)[1] if r.valid), key=lambda r: r.seconds)
    assert (kernel.index, kernel.config, kernel.latency_s) == (best.index, best.config, best.seconds)
    assert _elf(local_export / kernel.files["library"]) == (2, EM_X86_64)
    result = ex.run("local")
    assert result.correct is True and result.seconds > 0
    assert result.expected_seconds == best.seconds
    assert result.outputs["conv"].shape == (1, 32, 14, 14)
    # caller-supplied inputs: all-ones data and weights give CI*KH*KW at the centre
    ones = [np.ones((1, 16, 14, 14), np.float32), np.ones((16, 3, 3, 32), np.float32)]
    got = ex.run("local", inputs=ones).outputs["conv"]
    assert got[0, 0, 7, 7] == pytest.approx(16 * 9) and got[0, 0, 0, 0] == pytest.approx(16 * 4)
    with pytest.raises(ExportError, match="must be float32"):
        ex.run("local", inputs=[ones[0].astype(np.float64), ones[1]])


@pytest.mark.slow
def test_run_cli_on_local_prints_both_latencies(local_export, local_rpc):
    r = _invoke("run", local_export, "--board", "local", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)["results"][0]
    assert out["correct"] is True and out["seconds"] > 0 and out["manifest_seconds"] > 0


# -- cross-compiled ARM libraries -----------------------------------------------------------------
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None, reason="no aarch64 cross compiler")
def test_aarch64_export_for_rpi4_is_an_aarch64_library(cpu_log, tmp_path):
    manifest = export(cpu_log, tmp_path / "rpi4", board="rpi4")
    lib = tmp_path / "rpi4" / manifest.kernels[0].files["library"]
    assert _elf(lib) == (2, EM_AARCH64)
    assert (manifest.board_type, manifest.arch, manifest.tuned_on["board_type"]) == ("rpi4", "aarch64", "local")
    assert manifest.target["mtriple"] == "aarch64-linux-gnu"


@pytest.mark.skipif(shutil.which("arm-linux-gnueabihf-g++") is None, reason="no armv7 cross compiler")
def test_armv7_export_with_the_pynq_host_target_is_a_32bit_arm_library(cpu_log, tmp_path):
    # No CPU-family armv7 profile ships; the Pynq's host CPU target (Cortex-A9) stands in. Its profile
    # target lacks mfloat-abi=hard, without which ld refuses the gnueabihf link; it is added here.
    pynq = load_profile("pynq-z1")
    profile = dataclasses.replace(load_profile("rpi4"), name="pynq-z1-host", arch=pynq.arch,
                                  target_spec={**pynq.target, "mfloat-abi": "hard"}, cross_compiler=pynq.cross_compiler)
    manifest = export(cpu_log, tmp_path / "armv7", board=profile)
    assert _elf(tmp_path / "armv7" / manifest.kernels[0].files["library"]) == (1, EM_ARM)
    assert manifest.arch == "armv7l" and manifest.target["mtriple"] == "armv7a-linux-gnueabihf"


# -- VTA: program binaries, bit-exact on the simulator ----------------------------------------------
def test_vta_export_holds_program_and_params_and_runs_bit_exact(vta_export, vta_log):
    ex = load_export(vta_export)
    kernel = ex.kernel(VTA_WL)
    assert set(kernel.files) == {"program", "insns", "uops", "params"}
    program = Program.load(vta_export / kernel.files["program"])
    params = json.loads((vta_export / kernel.files["params"]).read_text())
    hw = get_preset("pynq")
    assert (params["shift"], params["clip"], params["bias"]) == (8, [0, 127], False)
    assert params["regions"]["inp"]["layout"] == "NCHW1n16c" and params["bitstream"] == hw.bitstream
    assert {n: r["offset"] for n, r in params["regions"].items()} == {n: r.offset for n, r in program.regions.items()}
    assert (vta_export / kernel.files["insns"]).stat().st_size == len(program.insns) * hw.insn_bytes
    assert (vta_export / kernel.files["uops"]).read_bytes() == program.uop_words().astype("<u4").tobytes()
    assert ex.manifest.hardware == hw.to_json() and ex.manifest.bitstream == hw.bitstream

    result = ex.run("vta-fsim")
    assert result.correct is True and result.message == "bit-exact"
    assert result.seconds == pytest.approx(kernel.latency_s)   # the timing model is deterministic
    inputs = random_inputs(parse_workload(VTA_WL), hw, np.random.default_rng(7))
    other = ex.run("vta-fsim", inputs=inputs)
    assert other.correct is True and not np.array_equal(other.outputs["out"], result.outputs["out"])


def test_run_cli_on_vta_fsim(vta_export):
    r = _invoke("run", vta_export, "--board", "vta-fsim")
    assert r.exit_code == 0, r.output
    assert "bit-exact" in r.output and "measured on vta-fsim" in r.output


# -- manifest -------------------------------------------------------------------------------------
def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("which", ["local_export", "vta_export"])
def test_manifest_schema(which, request, cpu_log, vta_log):
    folder = request.getfixturevalue(which)
    m = json.loads((folder / "manifest.json").read_text())
    for key, typ in MANIFEST_KEYS.items():
        assert isinstance(m[key], typ), key
    for kern in m["kernels"]:
        for key, typ in KERNEL_KEYS.items():
            assert isinstance(kern[key], typ), key
        assert all((folder / f).is_file() for f in kern["files"].values())
    source = cpu_log if which == "local_export" else vta_log
    assert m["log"]["sha256"] == _sha(source) == _sha(folder / m["log"]["file"])
    assert m["files"] == {str(p.relative_to(folder)): _sha(p) for p in folder.rglob("*")
                          if p.is_file() and p.name != "manifest.json"}
    assert m["edgetune"] and m["tvm"].startswith("0.27")
    assert "README.md" in m["files"] and "edgetune run" in (folder / "README.md").read_text()
    if which == "vta_export":
        assert m["hardware"]["LOG_BLOCK"] == 4 and m["bitstream"] == "1x16_i8w8a32_15_15_18_17"
    else:
        assert m["hardware"] is None and m["target"]["kind"] == "llvm"


def test_tampered_export_is_refused(vta_export, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(vta_export, copy)
    prog = next((copy / "kernels").glob("*.vtaprog"))
    prog.write_bytes(prog.read_bytes()[:-1] + b"\0")
    r = _invoke("run", copy, "--board", "vta-fsim")
    assert "does not match its sha256" in one_line_error(r)
    m = json.loads((copy / "manifest.json").read_text())
    del m["kernels"][0]["config"]
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ExportError, match="missing key 'config'"):
        load_export(copy)


# -- bad logs -------------------------------------------------------------------------------------
def _invalid_log(path):
    """A log of real but failed builds: configs the VTA compiler rejects."""
    task = make_task(parse_workload(VTA_WL), resolve_board("vta-fsim"))
    desc = task.describe()
    with Journal(path, LogHeader(desc)) as journal:
        trial = 0
        for index in range(task.space.size):
            outcome = build_one(task.template, task.space.get(index))
            if isinstance(outcome, MeasureResult):
                journal.append(Record.from_result(outcome, trial=trial, tuner="grid", task=desc))
                trial += 1
            if trial == 3:
                break
    assert trial == 3


def test_bad_logs_give_one_line_errors(vta_log, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    header_only = tmp_path / "header.jsonl"
    header_only.write_text(vta_log.read_text().splitlines()[0] + "\n")
    invalid = tmp_path / "invalid.jsonl"
    _invalid_log(invalid)
    corrupt = tmp_path / "corrupt.jsonl"
    lines = vta_log.read_text().splitlines()
    corrupt.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    expect = {empty: "empty tuning log", header_only: "has no records", invalid: "has no valid record",
              corrupt: "not valid JSON", tmp_path / "missing.jsonl": "does not exist"}
    for log, words in expect.items():
        r = _invoke("export", "--log", log, "--out", tmp_path / f"out-{log.stem}")
        assert words in one_line_error(r), r.output
        assert not (tmp_path / f"out-{log.stem}").exists()
    assert "3 invalid_config" in _invoke("export", "--log", invalid, "--out", tmp_path / "x").output
    r = _invoke("export", "--log", vta_log, "--out", tmp_path / "w", "-w", "resnet18.C2")
    assert "no valid record of workload resnet18.C2" in one_line_error(r)


def test_export_refuses_a_board_of_another_family_or_hardware(vta_log, cpu_log, tmp_path):
    assert "tune on zcu102 first" in one_line_error(
        _invoke("export", "--log", vta_log, "--out", tmp_path / "a", "--board", "zcu102"))
    assert "cannot be exported" in one_line_error(
        _invoke("export", "--log", cpu_log, "--out", tmp_path / "b", "--board", "vta-fsim"))
    assert export(vta_log, tmp_path / "c", board="pynq-z1").board_type == "pynq-z1"   # same VTA config
    with pytest.raises(ExportError, match="not empty"):
        export(vta_log, tmp_path / "c")
    assert export(vta_log, tmp_path / "c", force=True).board_type == "vta-fsim"


# -- wrong board at run ---------------------------------------------------------------------------
def test_wrong_board_type_is_refused_at_run(vta_export, cpu_log, local_export, tmp_path):
    Inventory().add(BoardEntry("zcu", "zcu102", host="127.0.0.1"))
    Inventory().add(BoardEntry("pi", "rpi4", host="127.0.0.1"))
    cases = [
        (vta_export, "local", "holds VTA programs"),
        (vta_export, "zcu", "has VTA 1x16_i8w8a32_16_16_19_18"),
        (vta_export, "pi", "holds VTA programs"),
        (local_export, "vta-fsim", "holds TVM libraries"),
        (local_export, "pi", "is aarch64"),
    ]
    for folder, board, words in cases:
        assert words in one_line_error(_invoke("run", folder, "--board", board)), (folder, board)
    other_cpu = tmp_path / "other-cpu"      # a `local` export made on a machine with another CPU
    shutil.copytree(local_export, other_cpu)
    m = json.loads((other_cpu / "manifest.json").read_text())
    m["target"]["mcpu"] = "cortex-a72" if m["target"]["mcpu"] != "cortex-a72" else "skylake"
    (other_cpu / "manifest.json").write_text(json.dumps(m))
    assert "export the log again" in one_line_error(_invoke("run", other_cpu, "--board", "local"))
    rpi4 = tmp_path / "rpi4"
    export(cpu_log, rpi4, board="rpi4")
    with pytest.raises(EdgetuneError, match="is x86_64"):
        load_export(rpi4).run("local")
    assert "is x86_64" in one_line_error(_invoke("run", rpi4, "--board", "local"))


# -- a VTA board over RPC: a real agent (simulated VTA device) on the loopback tracker ---------------
@pytest.mark.slow
def test_vta_export_runs_bit_exact_on_an_agent_over_rpc(vta_export, local_rpc, tmp_path):
    host, port = local_rpc
    with sim_agent(host, port, "pynq", "pz-sim", tmp_path / "agent.log"):
        Inventory().add(BoardEntry("pz", "pynq-z1", host="127.0.0.1"))
        result = load_export(vta_export).run("pz", tracker=(host, port))
        assert result.correct is True and result.message == "bit-exact" and result.seconds > 0


def test_demo_ends_by_exporting_and_running_on_the_simulator(vta_log, tmp_path, capsys):
    from toolkit.demo import run_export_demo

    run_export_demo(vta_log, tmp_path / "export")
    assert "correct (bit-exact)" in capsys.readouterr().out
    assert load_export(tmp_path / "export").manifest.log["sha256"] == _sha(vta_log)


def test_a_wrong_output_is_reported_and_exits_1(vta_export, tmp_path):
    """A program whose requantisation shift was changed (7 instead of 8) must fail the check."""
    from toolkit.export import sha256_file
    from toolkit.vta.isa import AluInsn, AluOp

    copy = tmp_path / "wrong"
    shutil.copytree(vta_export, copy)
    m = json.loads((copy / "manifest.json").read_text())
    rel = m["kernels"][0]["files"]["program"]
    program = Program.load(copy / rel)
    shifts = [i for i in program.insns if isinstance(i, AluInsn) and i.op == AluOp.SHR]
    assert shifts and all(i.imm == 8 for i in shifts)
    for insn in shifts:
        insn.imm = 7
    program.save(copy / rel)
    m["files"][rel] = sha256_file(copy / rel)
    (copy / "manifest.json").write_text(json.dumps(m))
    assert load_export(copy).run("vta-fsim").correct is False
    r = _invoke("run", copy, "--board", "vta-fsim")
    assert r.exit_code == 1 and "gave a wrong output" in r.output and "outputs differ" in r.output


def test_a_log_tuned_with_vta_config_exports_that_config_and_runs_only_with_it(tmp_path):
    log, out = tmp_path / "zcu.jsonl", tmp_path / "ex"
    res = cli.invoke(app, ["tune", "--board", "vta-fsim", "--vta-config", "zcu102", "-w", "resnet18.C11",
                           "--trials", "8", "--log", str(log)])
    assert res.exit_code == 0, res.output
    assert read_log(log)[0].task["hw"] == get_preset("zcu102").to_json()
    res = cli.invoke(app, ["export", "--log", str(log), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert load_export(out).manifest.hardware == get_preset("zcu102").to_json()
    res = cli.invoke(app, ["run", str(out), "--board", "vta-fsim"])
    assert res.exit_code == 2 and "pass --vta-config zcu102" in res.output
    res = cli.invoke(app, ["run", str(out), "--board", "vta-fsim", "--vta-config", "zcu102", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["results"][0]["correct"] is True
    res = cli.invoke(app, ["tune", "--board", "local", "--vta-config", "zcu102", "-w", "resnet18.C5", "-n", "2"])
    assert res.exit_code == 2 and "applies to VTA boards" in res.output


def test_a_manifest_latency_far_from_the_run_is_called_what_it_is(vta_export, tmp_path):
    copy = tmp_path / "edited"
    shutil.copytree(vta_export, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["kernels"][0]["latency_s"] = 1e-9          # hand-edited: a thousandth of a microsecond
    (copy / "manifest.json").write_text(json.dumps(manifest))
    r = cli.invoke(app, ["run", str(copy), "--board", "vta-fsim"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "over 100x apart: the manifest's latency is from another board or was edited" in r.output
