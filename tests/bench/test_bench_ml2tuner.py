"""bench.bench_ml2tuner's bookkeeping: merged saves from several processes, paired summaries, the report."""

from __future__ import annotations

import math

import pytest

import bench.bench_ml2tuner as bm
import bench.ml2tuner_report as report
from toolkit.harness import trials_to_match


def _run(history: list[float], invalid: int = 0) -> dict:
    return {"history": history, "invalid": invalid, "trials": len(history), "wall_s": 1.0, "cpu_s": 0.5,
            "stats": {"compiled": 10.0}}


RMSE = {"P": 0.10, "P_recipe": 0.11, "A": 0.04, "A_trees": 0.08, "n_train": 20.0, "n_test": 20.0}


@pytest.fixture
def out_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(bm, "OUT", tmp_path)
    return tmp_path


def test_saves_from_different_tuners_and_layers_merge(out_dir):
    meta = {"optimum": 1.0, "size": 10, "n_valid": 4}
    bm.save_runs("pynq-tvm", 4, "cmd a", "C9", meta, {"xgb": {"0": _run([3, 2, 2, 1], invalid=2)}}, {"0": RMSE})
    bm.save_runs("pynq-tvm", 4, "cmd b", "C9", meta, {"ml2tuner": {"0": _run([2, 1])}}, {})
    bm.save_runs("pynq-tvm", 4, "cmd a", "C10", meta, {"xgb": {"0": _run([1, 1, 1, 1])}}, {})
    saved = bm.load_saved("pynq-tvm")
    assert set(saved["layers"]["C9"]["runs"]) == {"xgb", "ml2tuner"}
    assert saved["layers"]["C9"]["rmse"]["0"]["A"] == 0.04
    assert [c["cmd"] for c in saved["commands"]] == ["cmd a", "cmd b"]

    table = report.summarise({"pynq-tvm": saved["layers"]})["pynq-tvm"]
    ml2 = table["ml2tuner"]  # paired with xgb on C9 only: reaches xgb's best (1) at trial 2 of 4
    assert ml2["runs"] == 1 and ml2["reach_over_budget"] == pytest.approx(0.5)
    assert ml2["reach_over_xgb"] == pytest.approx(0.5) and ml2["invalid_reduction"] == pytest.approx(1.0)
    assert report.run_pairs(saved["layers"], ("ml2tuner", "xgb")) == {("C9", "0")}

    text = report.section({"pynq-tvm": saved}, {"pynq-tvm": table})
    assert "pynq-tvm `ml2tuner`: layers C9 only, fewer than 5 seeds on C9" in text  # what was cut is said
    assert "| pynq-tvm | `ml2tuner` | 100.0% **met** | 50.0% **missed** | 0.400 **met** |" in text
    assert "`chameleon-ml2` is compared with its parents on the headline runs" in text  # none of its own here

    bm.save_runs("zcu102-tvm", 4, "cmd a", "C9", meta, {"xgb": {"0": _run([3, 2, 2, 1])}}, {})   # cmd a ran both
    both = {s: bm.load_saved(s) for s in ("pynq-tvm", "zcu102-tvm")}
    text = report.section(both, report.summarise({s: v["layers"] for s, v in both.items()}))
    assert text.count("- `cmd a`") == 1 and text.count("- `cmd b`") == 1                 # each invocation once


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_no_invalid_trials_from_xgb_leaves_the_reduction_undefined_not_a_warning(out_dir):
    meta = {"optimum": 1.0, "size": 10, "n_valid": 4}
    bm.save_runs("zcu102-tvm", 4, "cmd", "C9", meta, {"xgb": {"0": _run([3, 2, 2, 1])},
                                                   "ml2tuner": {"0": _run([2, 1, 1, 1])}}, {"0": RMSE})
    saved = bm.load_saved("zcu102-tvm")
    table = report.summarise({"zcu102-tvm": saved["layers"]})
    assert math.isnan(table["zcu102-tvm"]["ml2tuner"]["invalid_reduction"])
    text = report.section({"zcu102-tvm": saved}, table)
    assert "| zcu102-tvm | `ml2tuner` | - (xgb made none) | 50.0% **missed** |" in text
    assert "nan" not in text


def test_a_rerun_of_the_same_command_is_recorded_with_its_date(out_dir, monkeypatch):
    meta = {"optimum": 1.0, "size": 10, "n_valid": 4}
    monkeypatch.setattr(bm, "STARTED", "2026-11-30 14:47 UTC")
    bm.save_runs("pynq-tvm", 4, "cmd a", "C9", meta, {"xgb": {"0": _run([3, 2, 2, 1])}}, {})
    monkeypatch.setattr(bm, "STARTED", "2026-12-01 03:32 UTC")   # the same command, run again later
    bm.save_runs("pynq-tvm", 4, "cmd a", "C9", meta, {"xgb": {"0": _run([2, 2, 1, 1])}}, {})
    bm.save_runs("pynq-tvm", 4, "cmd a", "C10", meta, {"xgb": {"0": _run([1, 1, 1, 1])}}, {})
    assert [(c["cmd"], c["date"]) for c in bm.load_saved("pynq-tvm")["commands"]] == [
        ("cmd a", "2026-11-30 14:47 UTC"), ("cmd a", "2026-12-01 03:32 UTC")]


def test_trials_to_the_optimum_counts_from_one_and_tolerates_rounding():
    assert trials_to_match([5.0, 2.0, 1.0 + 1e-12], 1.0, tolerance=1e-9) == 3
    assert trials_to_match([5.0, 2.0], 1.0, tolerance=1e-9) is None


def test_reach_difference_pairs_runs_and_counts_never_reached_as_the_budget():
    xgb = [4.0, 3.0, 2.0, 1.0]  # best 1.0, budget 4
    layers = {"C2": {"runs": {"xgb": {"0": _run(xgb), "1": _run(xgb)},
                              "a": {"0": _run([1.0] * 4), "1": _run([2.0] * 4)},     # reach 1/4, never (4/4)
                              "b": {"0": _run([2.0, 1.0, 1.0, 1.0]), "1": _run([3.0, 3.0, 1.0, 1.0])}}}}  # 2/4, 3/4
    mean, se = report.reach_difference(layers, {("C2", "0"), ("C2", "1")}, "a", "b")
    assert mean == pytest.approx(0.0)  # (-1/4 + 1/4) / 2
    assert se == pytest.approx(0.25)   # std of (-0.25, 0.25) with ddof 1 is 0.354; / sqrt(2)
