"""AutoTVM/TopHub logs of TVM's VTA template imported as edgetune logs: written in AutoTVM's formats from a
real edgetune tune, imported back config for config, resumed, exported and run; hostile lines refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from toolkit.cli.app import app
from toolkit.tuning.journal import read_log
from toolkit.workloads import parse_workload

runner = CliRunner()
LAYER = "resnet18.C4"
MODEL = "pynq_1x16_i8w8a32_15_15_18_17"
TARGET = f"ext_dev -device=vta -keys=cpu -model={MODEL}"


def _ok(*args):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def _args(spec: str) -> list:
    w = parse_workload(spec)
    return [["TENSOR", [w.n, w.ci // 16, w.h, w.w, 1, 16], "int8"],
            ["TENSOR", [w.co // 16, w.ci // 16, w.kh, w.kw, 16, 16], "int8"],
            [w.sh, w.sw], [w.ph, w.pw, w.ph, w.pw], [1, 1], "NCHW1n16c", "int32"]


def _entity(config: dict) -> list:
    return [[k, "sp" if isinstance(v, list) else "ot", v] for k, v in config.items()]


def _v02(spec: str, config: dict, costs: list, error_no: int = 0, target: str = TARGET,
         template: str = "conv2d_packed.vta") -> str:
    return json.dumps({"input": [target, template, _args(spec), {}],
                       "config": {"index": 0, "code_hash": None, "entity": _entity(config)},
                       "result": [costs if error_no == 0 else [1e9], error_no, 1.0, 1.6e9], "version": 0.2,
                       "tvm_version": "0.7.dev0"})


def _v01(spec: str, config: dict, costs: list) -> str:
    return json.dumps({"i": [TARGET, "topi_nn_conv2d", _args(spec), {}, ["conv2d"],
                             {"i": 0, "t": "direct", "c": None, "e": _entity(config)}],
                       "r": [costs, 0, 1.0, 1.6e9], "v": 0.1})


@pytest.fixture
def tuned(tmp_path):
    log = tmp_path / "edgetune.jsonl"
    _ok("tune", "-b", "vta-fsim", "-w", LAYER, "--tvm-compat", "-t", "random", "-n", "24", "--log", log)
    return read_log(log)[1]


def test_records_in_both_formats_import_config_for_config_then_resume_export_and_run(tuned, tmp_path):
    valid = [r for r in tuned if r.valid]
    assert len(valid) >= 3
    lines = ["# Resnet-18 - " + MODEL]
    lines += [_v02(LAYER, r.config, r.costs) for r in valid[:-1]]
    lines.append(_v01(LAYER, valid[-1].config, valid[-1].costs))
    lines.append(_v02(LAYER, tuned[0].config, [], error_no=4))                              # a failed build
    lines.append(_v02(LAYER, valid[0].config, valid[0].costs))                             # a duplicate
    lines.append(_v02(LAYER, valid[0].config, [0.001], target=TARGET.replace("pynq_", "zcu102_")))  # other model
    lines.append(_v02("conv2d:H=14,W=14,CI=3,CO=16,K=3,S=1,P=1", {"tile_co": [8, 8]}, [0.1],
                      target="llvm -device=arm_cpu", template="conv2d_nchw_spatial_pack.arm_cpu"))
    src = tmp_path / "tophub.log"
    src.write_text("\n".join(lines) + "\n")
    out = json.loads(_ok("import-autotvm", src, "--out", tmp_path / "imported", "--json").stdout)
    (spec, path), = out["logs"].items()
    assert spec == parse_workload(LAYER).spec() and out["records"][spec] == len(valid) + 1
    assert sum(out["skipped"].values()) == 3 and any("zcu102" in k for k in out["skipped"])
    header, recs = read_log(path)
    assert header.task["template"]["tvm_compat"] is True
    assert [(r.index, r.costs) for r in recs if r.valid] == [(r.index, r.costs) for r in valid]
    assert all(r.tuner == "autotvm-import" for r in recs) and all(r.features for r in recs if r.valid)
    assert not recs[-1].valid and recs[-1].index == tuned[0].index and recs[-1].error == tuned[0].error
    # resume: the imported configs are never measured again
    _ok("tune", "-b", "vta-fsim", "-w", LAYER, "--tvm-compat", "-t", "xgb", "--more", "6", "--log", path)
    _, after = read_log(path)
    assert len(after) == len(recs) + 6 and len({r.index for r in after}) == len(after)
    # export and run the best of the imported log
    _ok("export", "--log", path, "--out", tmp_path / "export")
    r = json.loads(_ok("run", tmp_path / "export", "--board", "vta-fsim", "--json").stdout)
    assert r["results"][0]["correct"] is True
    # a second import of the same file adds nothing
    again = json.loads(_ok("import-autotvm", src, "--out", tmp_path / "imported", "--json").stdout)
    assert again["records"] == {} and len(read_log(path)[1]) == len(after)


@pytest.mark.parametrize("line, words", [
    ("not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"x": 1}', "neither an AutoTVM 0.2 record"),
    ('{"input": ["t", "conv2d_packed.vta", [["TENSOR", [1, 2], "int8"]]], "config": {}, "result": []}',
     "needs data, kernel"),
    ('{"input": ["' + TARGET + '", "conv2d_packed.vta", [["TENSOR", [1, -1, 14, 14, 1, 16], "int8"], '
     '["TENSOR", [1, 1, 3, 3, 16, 16], "int8"], [1, 1], [1, 1], [1, 1]]], "config": {"entity": []}, '
     '"result": [[0.1], 0]}', "non-negative integers"),
    ('{"input": ["' + TARGET + '", "conv2d_packed.vta", [["TENSOR", [1, 1, 14, 14, 1, 16], "int8"], '
     '["TENSOR", [1, 1, 3, 3, 16, 16], "int8"], [1, 1], [1, 1], [1, 1]]], "config": {"entity": []}, '
     '"result": [[-5], 0]}', "positive, finite costs"),
    ('{"input": ["' + TARGET + '", "conv2d_packed.vta", [["TENSOR", [1, 1, 14, 14, 1, 16], "int8"], '
     '["TENSOR", [1, 1, 3, 3, 16, 16], "int8"], [1, 1], [1, 1], [2, 2]]], "config": {"entity": []}, '
     '"result": [[0.1], 0]}', "dilation"),
])
def test_a_hostile_line_is_one_error_with_its_line_number_and_nothing_is_written(tmp_path, line, words):
    src = tmp_path / "bad.log"
    src.write_text(_v02(LAYER, {"tile_b": [1, 1]}, [0.1]) + "\n" + line + "\n")
    r = runner.invoke(app, ["import-autotvm", str(src), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and words in r.output and f"{src}:2" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


def test_boards_without_autotvm_knobs_and_bad_paths_are_refused(tmp_path):
    src = tmp_path / "x.log"
    src.write_text("")
    r = runner.invoke(app, ["import-autotvm", str(src), "--board", "local", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "imported for VTA boards" in r.output
    r = runner.invoke(app, ["import-autotvm", str(tmp_path), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    r = runner.invoke(app, ["import-autotvm", str(tmp_path / "missing.log"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "missing.log" in r.output
