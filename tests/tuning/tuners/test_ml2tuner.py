"""ml2tuner and chameleon-ml2: the tuner contract, and what the validity/compile levels buy."""

from __future__ import annotations

import copy

import numpy as np

from toolkit.testing.conformance import TunerConformance, with_compiler
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.core.space import CategoricalKnob, ConfigSpace, SplitKnob
from toolkit.tuning.tuners.base import TuningContext, make_tuner
from toolkit.tuning.tuners.ml2tuner import ML2Tuner


FAST = {"sa_chains": 32, "sa_steps": 100, "max_rounds": 100}
"""Smaller annealing and boosting budgets: the suite checks the contract, not search quality."""


class TestML2TunerPaperPipeline(TunerConformance):
    """The paper's pipeline: ModelP on trials only, no post-compile validity model, no carried configs, the old
    round size."""

    tuner_factory = staticmethod(lambda seed: with_compiler(ML2Tuner(
        seed=seed, plan_size=16, alpha=3, p_from_a="no", v_hidden=False, carry=0, **FAST)))


class TestML2TunerWithoutCompiler(TunerConformance):
    """No compile_features (a task that cannot compile ahead): ModelV alone, ModelP ranks."""

    tuner_factory = staticmethod(lambda seed: ML2Tuner(seed=seed, plan_size=16, alpha=1, **FAST))


class TestChameleonML2EliteStarts(TunerConformance):
    """chameleon-ml2 whose PPO episodes partly start at the best measured configs."""

    tuner_factory = staticmethod(lambda seed: with_compiler(make_tuner(
        "chameleon-ml2", seed=seed, plan_size=16, alpha=1, episodes=8, max_steps=30, max_rounds=100, rl_elite=0.5)))


def planted_space() -> ConfigSpace:
    """3 split knobs and a thread knob: 7 * 10 * 9 * 2 = 1260 configs."""
    return ConfigSpace([SplitKnob("a", 64, 2), SplitKnob("b", 48, 2), SplitKnob("c", 36, 2),
                        CategoricalKnob("t", [1, 2])])


def planted_compile(space: ConfigSpace, indices) -> list[dict[str, float] | MeasureResult]:
    """Compile fails when a_inner * b_inner * t > 128 (an SRAM bound the compiler checks)."""
    out: list[dict[str, float] | MeasureResult] = []
    for i in indices:
        c = space.get(int(i))
        if c["a"][1] * c["b"][1] * c["t"] > 128:
            out.append(MeasureResult(int(i), c.values, error=ErrorClass.COMPILE_ERROR, message="sram"))
        else:
            out.append({"uops": float(c["c"][1] * c["t"] * 4), "tile": float(c["a"][1] * c["b"][1])})
    return out


def planted_measure(space: ConfigSpace, index: int) -> MeasureResult:
    """A compile failure fails the build too; compiled configs with uops > 36 fail at run time
    (a micro-op buffer only the board checks); the rest cost less for bigger tiles and fewer uops."""
    c = space.get(index)
    built = planted_compile(space, [index])[0]
    if isinstance(built, MeasureResult):
        return built
    if built["uops"] > 36:
        return MeasureResult(index, c.values, error=ErrorClass.RUNTIME_ERROR, message="uop overflow", features=built)
    cost = 1e-3 * (1 + 64 / built["tile"] + built["uops"] / 16 + 0.1 * c["c"][0] / c["t"])
    return MeasureResult(index, c.values, costs=[cost], features=built)


def run_planted(tuner, n_trials: int = 160) -> list[MeasureResult]:
    space = planted_space()
    tuner.setup(TuningContext(space=space, compile_features=lambda idx: planted_compile(space, idx),
                              flops=1e9))
    out: list[MeasureResult] = []
    while len(out) < n_trials:
        results = [planted_measure(space, i) for i in tuner.propose(8)]
        tuner.update(results)
        out += results
    return out


def test_planted_invalid_region_is_avoided_after_a_few_rounds():
    space = planted_space()
    truth = [planted_measure(space, i) for i in range(space.size)]
    assert 0.3 < np.mean([not r.valid for r in truth]) < 0.8          # an invalid-heavy space
    ml2 = make_tuner("ml2tuner", seed=0, plan_size=16, alpha=3)
    res = run_planted(ml2)
    xgb = run_planted(make_tuner("xgb", seed=0, plan_size=16))
    late = [r for r in res[64:] if not r.valid]
    # compile failures never reach a trial: the compiler screened them for free
    assert not any(r.error == ErrorClass.COMPILE_ERROR for r in res[16:])
    assert ml2.stats()["compile_failed"] > 0
    # rounds are topped up to N survivors, so the models are refitted once per N trials, not per one or two
    assert ml2.stats()["rounds"] <= 160 / 16 + 1
    # after four rounds the runtime-invalid region is learnt too (ModelV / ModelA on the uop feature)
    assert len(late) <= 6, [r.config for r in late]
    assert sum(not r.valid for r in xgb) >= 3 * sum(not r.valid for r in res)
    best = min(r.seconds for r in truth)
    assert min(r.seconds for r in res) <= 1.05 * best


def _features_a(tuner: ML2Tuner, indices: list[int]) -> np.ndarray:
    """ModelA's inputs: knob features and the compiled-features part's columns."""
    return np.hstack([tuner.space.features(indices), tuner.compiled.matrix(indices)])


def _agreement(tuner: ML2Tuner) -> float:
    """Spearman correlation of ModelP's and ModelA's scores on the compiled configs not measured, both
    refitted on everything so far (the next round's ask refits them first)."""
    from scipy.stats import spearmanr

    tuner.propose(8)
    extra = [i for i in tuner.compiled.features if i not in set(tuner.xs)]
    assert len(extra) > 50
    return float(spearmanr(tuner.model.predict(tuner.space.features(extra)),
                           tuner.model_a.predict(_features_a(tuner, extra))).statistic)


def test_model_p_learns_model_a_predictions():
    """With ``p_from_a`` ModelP is also fitted on ModelA's predictions (rescaled to throughput) for the
    compiled, unmeasured candidates, so it ranks them as ModelA does; without it ModelP knows only the
    trials. (Regression loss: the pairwise-rank loss with AutoTVM's early stopping fits only the top.)"""
    taught = make_tuner("ml2tuner", seed=0, loss="reg", p_from_a="yes", carry=0, **FAST)
    alone = make_tuner("ml2tuner", seed=0, loss="reg", p_from_a="no", carry=0, **FAST)
    run_planted(taught, 64)
    run_planted(alone, 64)
    assert _agreement(taught) > 0.7
    assert _agreement(alone) < _agreement(taught) - 0.3


def test_model_p_learns_from_model_a_by_default_only_with_a_time_model():
    """``p_from_a="auto"``: only when the compiler reports ``time.*`` terms (VTA), which give ModelA its
    time model; plain boosted trees on other compile features are not taught to ModelP."""
    plain = make_tuner("ml2tuner", seed=0, **FAST)
    run_planted(plain, 16)
    assert not plain.p_learns_from_a
    timed = make_tuner("ml2tuner", seed=0, **FAST)
    space = planted_space()

    def with_time(idx):
        return [f if isinstance(f, MeasureResult) else {**f, "time.compute": f["uops"] * 2.0}
                for f in planted_compile(space, idx)]

    timed.setup(TuningContext(space=space, compile_features=with_time, flops=1e9))
    timed.update([planted_measure(space, i) for i in timed.propose(8)])
    timed.propose(8)  # the second round compiles and reads the time terms
    assert timed.p_learns_from_a


def test_a_round_smaller_than_the_loop_batch_still_refits_every_n_trials():
    """``plan_size`` 4 with a loop asking for 8: each ask gets one round of 4, so the models are
    refitted on every 4 new trials instead of twice on the same data."""
    tuner = make_tuner("ml2tuner", seed=0, plan_size=4, alpha=3, **FAST)
    space = planted_space()
    tuner.setup(TuningContext(space=space, compile_features=lambda idx: planted_compile(space, idx),
                              flops=1e9))
    sizes = []
    for _ in range(6):
        ask = tuner.propose(8)
        sizes.append(len(ask))
        tuner.update([planted_measure(space, i) for i in ask])
    assert sizes == [4] * 6 and tuner.stats()["rounds"] == 6


def _after_rounds(tuner: ML2Tuner, rounds: int) -> ConfigSpace:
    space = planted_space()
    tuner.setup(TuningContext(space=space, compile_features=lambda idx: planted_compile(space, idx),
                              flops=1e9))
    for _ in range(rounds):
        tuner.update([planted_measure(space, i) for i in tuner.propose(8)])
    return space


def test_model_a_best_leftovers_of_earlier_rounds_rejoin_the_candidates():
    """``carry``: the compiled, unmeasured configs ModelA now rates best are candidates again next
    round (no new compile), so a config compiled once is not lost when its round measured others."""
    tuner = make_tuner("ml2tuner", seed=0, carry=6, **FAST)
    _after_rounds(tuner, 4)
    left = [i for i in tuner.compiled.features if i not in tuner.visited]
    seen: list[list[int]] = []
    compile = tuner.compiled.compile
    tuner.compiled.compile = lambda cands: (seen.append(list(cands)), compile(cands))[1]
    compiled = tuner.stats()["compiled"]
    tuner.propose(8)                             # a new round: the models are refitted first
    scores = tuner.model_a.predict(_features_a(tuner, left))
    best = [left[j] for j in np.argsort(-scores, kind="stable")[:6]]
    kept = [i for i, ok in zip(best, tuner.model_v.predict(tuner.space.features(best))) if ok]
    assert kept and set(kept) <= set(seen[0])   # those ModelV lets through reach the round's compile step
    assert tuner.stats()["compiled"] - compiled <= len(seen[0]) - len(kept)   # ... and are not compiled again


def test_v_pool_bounds_the_rejects_compiled_for_exploration():
    """Each exploration slot compiles the explorer's best ``v_pool`` ModelV rejects (``v_explore=0.5`` with N 4:
    two slots, the round's last compile step), and two rejects that compile are measured in the round."""
    explored = {}
    for v_pool in (1, 50):
        tuner = make_tuner("ml2tuner", seed=0, plan_size=4, v_explore=0.5, v_pool=v_pool, **FAST)
        _after_rounds(tuner, 3)
        calls: list[list[int]] = []
        compile = tuner.compiled.compile
        tuner.compiled.compile = lambda cands: (calls.append(list(cands)), compile(cands))[1]
        before = tuner.stats()["v_explored"]
        plan = tuner.propose(4)                       # one new round (the models are refitted first)
        explored[v_pool] = calls[-1]
        assert not tuner.model_v.predict(tuner.space.features(calls[-1])).any()   # ModelV's rejects only
        assert tuner.stats()["v_explored"] - before == 2
        measured = [i for i, ok in zip(plan, tuner.model_v.predict(tuner.space.features(plan))) if not ok]
        assert len(measured) == 2 and all(i in tuner.compiled.features for i in measured)
    assert len(explored[1]) == 2                      # v_pool 1: one reject per slot
    assert 2 < len(explored[50]) <= 100               # v_pool 50: up to 50 per slot, as many as the round rejected


def test_round_order_model_measures_the_same_round_best_first_by_model_a():
    """``round_order="model"`` (the default): the round holds the same configs as with ``explore_last`` (ModelA's
    choices and the exploration picks among ModelV's rejects, which come last there), all in ModelA's order."""
    tuner = make_tuner("ml2tuner", seed=1, plan_size=8, round_order="explore_last", **FAST)
    _after_rounds(tuner, 4)
    ranked = copy.deepcopy(tuner)
    ranked.params["round_order"] = "model"
    plan, plan_ranked = tuner.propose(8), ranked.propose(8)
    assert set(plan) == set(plan_ranked) and plan != plan_ranked
    scores = ranked.model_a.predict(_features_a(ranked, plan_ranked))
    assert list(scores) == sorted(scores, reverse=True)
