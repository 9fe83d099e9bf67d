"""``edgetune vta compile|run`` and ``edgetune space`` through typer's CliRunner."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from toolkit.cli.app import app
from toolkit.vta.program import Program

runner = CliRunner()
C2 = '{"tile_h": [7, 8], "tile_w": [1, 56], "tile_ci": [4, 1], "tile_co": [2, 2], "oc_nthread": 2, "h_nthread": 1}'
TINY = "conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1"


def test_compile_writes_a_loadable_program(tmp_path):
    out = tmp_path / "c2.vta"
    r = runner.invoke(app, ["vta", "compile", "--workload", "resnet18.C2", "--config", C2, "--out", str(out),
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["instructions"]["total"] == 270 and d["uops"] == 118
    program = Program.load(out)
    assert len(program.insns) == 270 and program.meta["config"]["tile_h"] == [7, 8]


def test_compile_dump_lists_instructions(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(C2)
    r = runner.invoke(app, ["vta", "compile", "-w", "resnet18.C2", "-c", f"@{cfg}", "--dump"])
    assert r.exit_code == 0, r.output
    assert "INSTRUCTION 269: FINISH" in r.stdout


def test_run_check_json_reports_counters_and_correctness():
    r = runner.invoke(app, ["vta", "run", "-w", TINY, "-c",
                            '{"tile_h": [2, 4], "tile_w": [1, 8], "tile_ci": [2, 1], "tile_co": [2, 1], '
                            '"oc_nthread": 2, "h_nthread": 1}', "--check", "--bias", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["correct"] is True and d["cycles"] > 0 and d["seconds"] > 0
    assert d["counters"]["gemm_counter"] == 8 * 8 * 2 * 2 * 9 and d["counters"]["acc_load_nbytes"] > 0


def test_run_without_check_is_timing_only():
    r = runner.invoke(app, ["vta", "run", "-w", "resnet18.C2", "-c", C2, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["correct"] is None and d["counters"]["inp_load_nbytes"] == 487424


def test_bad_configs_are_one_line_errors():
    for cfg, text in [('{"tile_h": [7, 8]', "not valid JSON"), ('{"tile_q": [1, 1]}', "unknown knob"),
                      ("[1, 2]", "JSON object"), ("@/nonexistent/cfg.json", "cannot read config file")]:
        r = runner.invoke(app, ["vta", "compile", "-w", "resnet18.C2", "-c", cfg])
        assert r.exit_code == 2, r.output
        assert text in r.stderr and "Traceback" not in r.output
        assert len(r.stderr.strip().splitlines()) == 1


def test_hardware_limit_is_a_one_line_error():
    cfg = C2.replace('"tile_h": [7, 8]', '"tile_h": [1, 56]')
    r = runner.invoke(app, ["vta", "compile", "-w", "resnet18.C2", "-c", cfg])
    assert r.exit_code == 2 and "local.inp_buffer" in r.stderr


def test_tvm_compat_flag():
    cfg = C2.replace('"tile_ci": [4, 1]', '"tile_ci": [2, 2]').replace('[7, 8]', '[14, 4]')
    assert runner.invoke(app, ["vta", "compile", "-w", "resnet18.C2", "-c", cfg]).exit_code == 0
    r = runner.invoke(app, ["vta", "compile", "-w", "resnet18.C2", "-c", cfg, "--tvm-compat"])
    assert r.exit_code == 2 and "innermost block" in r.stderr


def test_space_json_size_and_valid():
    r = runner.invoke(app, ["space", "--board", "vta-fsim", "--workload", "resnet18.C2", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["size"] == 2304 and 0 < d["valid"] < 2304
    r = runner.invoke(app, ["space", "--workload", "resnet18.C2", "--json", "--tvm-compat"])
    assert json.loads(r.stdout)["valid"] < d["valid"]


def test_space_exhaustive_reports_both_spaces():
    r = runner.invoke(app, ["space", "--workload", TINY, "--exhaustive", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    ours, tvm = d["spaces"]["edgetune"], d["spaces"]["tvm"]
    assert ours["size"] == tvm["size"] == d["size"] and ours["valid"] >= tvm["valid"] > 0
    assert ours["optimum"]["seconds"] <= tvm["optimum"]["seconds"]
    assert d["optimum"] == ours["optimum"] and set(ours["optimum"]["config"]) >= {"tile_h", "oc_nthread"}


def test_space_on_a_cpu_board_gives_its_size_and_refuses_exhaustive_clearly():
    r = runner.invoke(app, ["space", "--board", "local", "--workload", "resnet18.C2", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["size"] == 3612672
    r = runner.invoke(app, ["space", "--board", "local", "--workload", "resnet18.C2", "--exhaustive"])
    assert r.exit_code == 2 and "3,612,672 builds" in r.stderr
    r = runner.invoke(app, ["space", "--board", "local", "--workload", "resnet18.C2", "--tvm-compat"])
    assert r.exit_code == 2 and "tvm_compat" in r.stderr
