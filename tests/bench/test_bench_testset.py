"""bench.bench_testset: runs stop at the optimum and are padded to the budget; figures come from histories; the
report writes its section and a plot."""

from __future__ import annotations

import json
import math

import pytest

import bench.bench_testset as testset
import bench.testset_figures as figs
from toolkit.harness import BenchResult, BenchRun, run_bench
from toolkit.boards import resolve_board
from toolkit.workloads import parse_workload

TINY = "conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1"


def _run(history, stopped="budget", tuner="xgb", seed=0, tuner_s=1.0, build_s=0.5, compiled=0) -> BenchRun:
    return BenchRun(workload="w", tuner=tuner, seed=seed, trials=len(history), invalid=0,
                    best_seconds=min(h for h in history if h is not None), wall_s=1.0, tuner_s=tuner_s,
                    history=history, stopped=stopped, build_s=build_s, compiled=compiled)


def test_a_run_stopped_at_the_optimum_counts_as_holding_it():
    stopped = _run([3.0, 2.0, 1.0], stopped="target")
    assert figs.padded(stopped, 6) == [3.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    f = figs.run_figures(stopped, 1.0, 6, board_s=1.0)
    assert f["t_opt"] == 3 and f["reached"] and f["mean_regret"] == pytest.approx((2 + 1) / 6)
    assert f["r10"] == 0.0 and f["t_1"] == 3
    never = figs.run_figures(_run([None, 4.0, 2.0]), 1.0, 3, board_s=1.0)
    assert never["t_opt"] == 3 and not never["reached"]           # counted with the whole budget
    assert never["mean_regret"] == pytest.approx((10 + 3 + 1) / 3)


def test_board_time_counts_compiles_trials_and_the_tuner():
    run = _run([2.0, 1.0, 1.0, 1.0], tuner_s=4.0, build_s=2.0, compiled=12)   # 0.5 s a build
    f = figs.run_figures(run, 1.0, 4, board_s=1.0)
    # 2 trials x (0.5 + 1) + half of (8 unmeasured compiles x 0.5 + 4 s of tuner time)
    assert f["board_s_to_opt"] == pytest.approx(2 * 1.5 + 0.5 * (8 * 0.5 + 4.0))
    stopped = _run([2.0, 1.0, 1.0, 1.0], stopped="target", tuner_s=4.0, build_s=2.0, compiled=12)
    f = figs.run_figures(stopped, 1.0, 4, board_s=1.0)
    # stopped after the round holding the optimum: every compile and all the tuner's time came before it
    assert f["board_s_to_opt"] == pytest.approx(2 * 1.5 + (8 * 0.5 + 4.0))


def test_paired_figures_against_the_reference():
    res = BenchResult({"machine": "m", "date": "d", "command": "c"}, {"trials": 4, "seeds": 2},
                      {"w": {"optimum": 1.0}})
    res.runs = [_run([2.0, 2.0, 2.0, 1.0], seed=0), _run([2.0, 2.0, 1.0, 1.0], seed=1),
                _run([1.0], stopped="target", tuner="t", seed=0), _run([2.0, 1.0], stopped="target", tuner="t", seed=1)]
    fig = figs.figures(res, board_s=1.0)
    assert fig["t"]["t_opt_vs_ref"] == pytest.approx(math.sqrt(1 * 2) / math.sqrt(4 * 3))
    d = fig["t"]["log2_diff"]
    assert d.n == 2 and d.mean == pytest.approx(((0 - 2) + (1 - math.log2(3))) / 2)
    assert fig["xgb"]["reached"] == 2 and fig["t"]["t_1_median"] == 1.5
    assert fig["t"]["tuner_s_per_trial_worst_layer"] == pytest.approx((1.0 / 1 + 1.0 / 2) / 2)   # one layer here


def test_cold_start_lines_set_the_cold_tuners_against_a_random_first_round():
    """The floor is 9 trials over xgb's (a random round of 8, then the optimum); transferred tuners are left out."""
    res = BenchResult({"machine": "m", "date": "d", "command": "c"}, {"trials": 40, "seeds": 2},
                      {"w": {"optimum": 1.0}})
    xgb = [[2.0] * 35 + [1.0], [2.0] * 17 + [1.0]]                  # the optimum at trial 36 and 18
    cold = [[2.0] * 11 + [1.0], [2.0] * 40]                          # at trial 12; never (counted as 40)
    res.runs = [_run(h, seed=s) for s, h in enumerate(xgb)] + [_run(h, tuner="ml2tuner", seed=s)
                                                               for s, h in enumerate(cold)]
    res.runs.append(_run([1.0], stopped="target", tuner="ml2tuner:transfer=pretrained"))
    text = "\n".join(figs.cold_start(res))
    assert f"9 trials: {math.sqrt(9 / 36 * 9 / 18):.3f}x of xgb's" in text
    assert f"| ml2tuner | 2 | {math.sqrt(12 * 40):.1f} | 26 | 50% / 50% / 100% | " \
           f"{math.sqrt(12 * 40) / math.sqrt(36 * 18):.3f} |" in text
    assert "transfer=pretrained" not in text


def test_transfer_is_set_against_its_cold_self_layer_by_layer():
    """Per layer, paired by seed: a layer counts as worse only when the mean difference is beyond 2 s.e."""
    res = BenchResult({"machine": "m", "date": "d", "command": "c"}, {"trials": 40, "seeds": 3},
                      {"a": {"optimum": 1.0}, "b": {"optimum": 1.0}})
    warm, cold = "ml2tuner:prior_check=False:transfer=pretrained", "ml2tuner"
    for s, (n_warm, n_cold) in enumerate([(2, 16), (3, 17), (2, 18)]):    # layer a: transfer far better
        res.runs += [BenchRun("a", warm, s, n_warm, 0, 1.0, 1.0, 1.0, [2.0] * (n_warm - 1) + [1.0], stopped="target"),
                     BenchRun("a", cold, s, n_cold, 0, 1.0, 1.0, 1.0, [2.0] * (n_cold - 1) + [1.0], stopped="target")]
    for s, (n_warm, n_cold) in enumerate([(20, 4), (21, 4), (19, 5)]):    # layer b: transfer worse
        res.runs += [BenchRun("b", warm, s, n_warm, 0, 1.0, 1.0, 1.0, [2.0] * (n_warm - 1) + [1.0], stopped="target"),
                     BenchRun("b", cold, s, n_cold, 0, 1.0, 1.0, 1.0, [2.0] * (n_cold - 1) + [1.0], stopped="target")]
    lines = figs.transfer_check(res)
    row = next(x for x in lines if x.startswith(f"| {warm} | {cold} | 2 |"))
    assert "| 1 / 1 |" in row and "(b)" in row, row
    assert figs.cold_label(warm) == cold and figs.parse_label(warm)[1]["prior_check"] == "False"


def test_report_from_a_real_replayed_bench(tmp_path, monkeypatch):
    """A tiny bench through run_bench (replayed, stopping at the optimum) rendered into the docs section."""
    for name in ("OUT", "IMG"):
        monkeypatch.setattr(testset, name, tmp_path / name.lower())
        (tmp_path / name.lower()).mkdir()
    monkeypatch.setattr(testset, "DOC", tmp_path / "benchmarks.md")
    res = run_bench(resolve_board("vta-fsim"), [parse_workload(TINY)], ["xgb", "random"], 24, 2,
                    cache_dirs=[tmp_path / "cache"], stop_at_optimum=True)
    assert res.settings["stop_at_optimum"] is True
    stopped = [r for r in res.runs if r.stopped == "target"]
    assert all(r.best_seconds == res.workloads[r.workload]["optimum"] for r in stopped)
    (tmp_path / "out" / "test-pynq.json").write_text(json.dumps(res.to_json()))
    testset.report()
    text = (tmp_path / "benchmarks.md").read_text()
    assert testset.SECTION in text and "| random |" in text and "| xgb |" in text
    assert (tmp_path / "img" / "testset_test-pynq.png").stat().st_size > 0


SAMPLE = [("test-pynq-a.json", "resnet50.L2", "xgb"),
          ("test-pynq-a.json", "resnet50.L2", "ml2tuner:round_order=explore_last"),
          ("test-pynq-a.json", "resnet50.L2",
           "ml2tuner:prior_check=False:prior_pool=512:round_order=explore_last:transfer=pretrained"),
          ("test-pynq-check.json", "resnet50.L2",
           "ml2tuner:prior_pool=512:round_order=explore_last:transfer=pretrained"),
          ("test-zcu102-check.json", "resnet50.L2",
           "ml2tuner:prior_pool=1024:round_order=explore_last:transfer=pretrained"),
          ("test-zcu102-order.json", "resnet50.L2", "ml2tuner:prior_pool=512:round_order=model:transfer=pretrained"),
          ("test-zcu102-default-a.json", "resnet50.L2", "ml2tuner:transfer=pretrained")]
TRIALS = 40


@pytest.mark.parametrize("file,workload,label", SAMPLE)
def test_a_committed_test_set_run_replays_trial_for_trial(file, workload, label):
    """A sample of the committed test-set runs (bench/out/testset) tuned live on the simulator with the run's seed,
    tuner options and the bench's settings: the first trials' best-so-far history is the committed one."""
    from toolkit.backends import make_task
    from toolkit.tuning.session import tune
    from toolkit.tuning.tuners.base import make_tuner

    bench = json.loads((testset.OUT / file).read_text())
    st = bench["settings"]
    run = next(r for r in bench["runs"] if (r["workload"], r["tuner"], r["seed"]) == (workload, label, 0))
    name, options = testset.variants([label], st["vta_config"]).get(label, (label, {}))
    task = make_task(parse_workload(workload), testset.board_for(st["vta_config"]), **st["template_options"])
    optimum = bench["workloads"][workload]["optimum"]
    s = tune(task, make_tuner(name, seed=run["seed"], **options), TRIALS,
             target_seconds=optimum if st.get("stop_at_optimum") else None)
    got = [h if math.isfinite(h) else None for h in s.history]
    assert got == run["history"][:len(got)] and len(got) == min(TRIALS, len(run["history"]))
