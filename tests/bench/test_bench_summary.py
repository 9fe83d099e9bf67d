"""trials_to_match, geometric means and the summary on hand-made histories."""

from __future__ import annotations

import math

import pytest

from toolkit.errors import ConfigError, WorkloadError
from toolkit.backends import make_task
from toolkit.harness import (BenchResult, BenchRun, assign_trials_to_match, expand_workloads, geomean,
                           run_bench, summarize, trials_to_match)


def _run(tuner: str, seed: int, history: list[float | None], invalid: int = 0, workload: str = "w") -> BenchRun:
    best = min((h for h in history if h is not None), default=None)
    return BenchRun(workload=workload, tuner=tuner, seed=seed, trials=len(history), invalid=invalid,
                    best_seconds=best, wall_s=1.0, tuner_s=0.5, history=history)


def test_trials_to_match_is_the_first_trial_within_one_percent():
    assert trials_to_match([None, 5.0, 1.011, 1.0099, 1.0], 1.0) == 4
    assert trials_to_match([None, 5.0, 1.02], 1.0) is None
    assert trials_to_match([2.0], None) is None
    assert trials_to_match([2.0], math.inf) is None


def test_geomean_skips_missing_values():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([None, 3.0, math.inf]) == pytest.approx(3.0)
    assert geomean([]) is None


def test_summary_on_hand_made_histories():
    runs = [
        _run("xgb", 0, [4.0, 2.0, 1.0, 1.0], invalid=1),            # matches itself at trial 3
        _run("xgb", 1, [3.0, 2.0, 2.0, 2.0], invalid=0),            # final 2.0 -> matches at trial 2
        _run("random", 0, [4.0, 4.0, 4.0, 1.005], invalid=3),      # within 1% of 1.0 at trial 4
        _run("random", 1, [3.0, 3.0, 3.0, 3.0], invalid=0),        # never within 1% of 2.0
    ]
    assign_trials_to_match(runs, "xgb")
    assert [r.trials_to_match for r in runs] == [3, 2, 4, None]
    s = summarize(runs, {"w": 1.0}, "xgb")
    assert s["xgb"]["best_vs_optimum"] == pytest.approx(math.sqrt(1.0 * 2.0))
    assert s["random"]["best_vs_optimum"] == pytest.approx(math.sqrt(1.005 * 3.0))
    assert s["xgb"]["trials_to_match_vs_reference"] == pytest.approx(1.0)
    # the unmatched run counts with its whole budget (4 trials) against the reference's 2
    assert s["random"]["trials_to_match_vs_reference"] == pytest.approx(math.sqrt(4 / 3 * 4 / 2))
    assert s["random"]["unmatched"] == 1
    assert s["random"]["invalid_vs_reference"] == pytest.approx(math.sqrt(4 / 2 * 1 / 1))
    assert s["xgb"]["found_optimum"] == 1 and s["random"]["found_optimum"] == 0
    assert s["random"]["invalid_share"] == pytest.approx(3 / 8)


def test_summary_without_an_optimum_leaves_the_ratio_empty():
    runs = [_run("xgb", 0, [2.0, 1.0])]
    assign_trials_to_match(runs, "xgb")
    assert summarize(runs, {"w": None}, "xgb")["xgb"]["best_vs_optimum"] is None


def test_resnet18_on_vta_means_c2_to_c11_and_specs_pass_through():
    names = [w.name for w in expand_workloads(["resnet18"], first_conv_on_cpu=True)]
    assert names == [f"resnet18.C{i}" for i in range(2, 12)]
    assert [w.name for w in expand_workloads(["resnet18"])][0] == "resnet18.C1"
    wls = expand_workloads(["resnet18.C2,resnet18.C5", "conv2d:H=4,W=4,CI=16,CO=16,K=3,S=1,P=1"],
                           first_conv_on_cpu=True)
    assert [w.label for w in wls][:2] == ["resnet18.C2", "resnet18.C5"] and wls[2].ci == 16
    with pytest.raises(WorkloadError):
        expand_workloads(["nonet"], first_conv_on_cpu=True)


def test_reference_must_be_benched(tmp_path):
    from toolkit.boards import resolve_board

    with pytest.raises(ConfigError, match="reference"):
        run_bench(resolve_board("vta-fsim"), expand_workloads(["resnet18.C11"], first_conv_on_cpu=True), ["random"],
                  4, 1, reference="xgb", cache_dirs=[tmp_path])


def test_result_round_trips_through_json():
    runs = [_run("xgb", 0, [None, 1.0])]
    r = BenchResult({"machine": "m"}, {"board": "b"}, {"w": {"optimum": 1.0}}, runs, {"xgb": {}})
    assert BenchResult.from_json(r.to_json()).runs[0].history == [None, 1.0]


def test_vta_config_selects_the_simulated_preset():
    import dataclasses

    from toolkit.backends.vta.backend import with_vta_preset
    from toolkit.boards import Board, resolve_board
    from toolkit.workloads import parse_workload

    sim = resolve_board("vta-fsim")
    assert with_vta_preset(sim, None) is sim and with_vta_preset(sim, "pynq") is sim
    zcu = with_vta_preset(sim, "zcu102")
    assert zcu.name == "vta-fsim-zcu102" and zcu.profile.is_simulator
    assert make_task(parse_workload("resnet18.C11"), zcu).describe()["hw"]["TARGET"] == "zcu102"
    with pytest.raises(ConfigError, match="preset"):
        with_vta_preset(sim, "nosuch")
    cpu = Board("cpu-box", dataclasses.replace(sim.profile, family="cpu", vta=None))
    with pytest.raises(ConfigError, match="VTA boards"):
        with_vta_preset(cpu, "zcu102")


def test_a_resumed_bench_checkpoints_the_earlier_runs_it_has_not_reached_yet(tmp_path):
    from toolkit.boards import resolve_board
    from toolkit.harness import expand_workloads, run_bench

    # a 144-config space: the exhaustive cache the bench builds first takes seconds
    board, wls = resolve_board("vta-fsim"), expand_workloads(["conv2d:H=7,W=7,CI=64,CO=64,K=1,S=1,P=0"],
                                                              first_conv_on_cpu=True)
    first = run_bench(board, wls, ["random"], 4, 2, reference="random", cache_dirs=[tmp_path])
    seen = []
    run_bench(board, wls, ["random", "grid"], 4, 2, reference="random", cache_dirs=[tmp_path], previous=first,
              checkpoint=lambda partial: seen.append({(r.tuner, r.seed) for r in partial.runs}))
    assert seen and all({("random", 0), ("random", 1)} <= s for s in seen)   # an interruption would keep them
    assert seen[-1] == {(t, s) for t in ("random", "grid") for s in (0, 1)}
