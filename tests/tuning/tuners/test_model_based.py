"""The XGBoost cost model, simulated annealing and the AutoTVM model-based loop."""

import numpy as np
import pytest

from toolkit.testing.conformance import OPTIMUM, drive, synthetic_measure, synthetic_space
from toolkit.tuning.models.cost import XGBCostModel, average_recall, recall_curve
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.core.space import CategoricalKnob, ConfigSpace
from toolkit.tuning.tuners.base import TuningContext
from toolkit.tuning.tuners.xgb import XGBTuner


def test_recall_curve_is_autotvms():
    rng = np.random.default_rng(0)
    for _ in range(10):
        ranks = rng.permutation(40)
        naive = [np.sum(ranks[:i] <= i) / (i + 1) for i in range(40)]
        assert np.allclose(recall_curve(ranks), naive)
    labels = np.arange(10.0)
    assert average_recall(labels, labels, 10) > average_recall(-labels, labels, 10)


@pytest.mark.parametrize("loss", ["rank", "reg"])
def test_cost_model_learns_the_ranking(loss):
    space = synthetic_space()
    idx = np.arange(space.size)
    y = np.array([1.0 / synthetic_measure(space, i).seconds if synthetic_measure(space, i).valid else 0.0
                  for i in idx])
    train = np.random.default_rng(1).permutation(space.size)[:200]
    model = XGBCostModel(loss=loss, seed=0).fit(space.features(train), y[train])
    assert 1 <= model.n_rounds_ <= model.max_rounds
    pred = model.predict(space.features(idx))
    top_true = set(np.argsort(-y)[:20])
    top_pred = set(np.argsort(-pred)[:20])
    assert len(top_true & top_pred) >= 5
    ok = y > 0
    rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    assert np.corrcoef(rank(pred[ok]), rank(y[ok]))[0, 1] > 0.6


def test_cost_model_rejects_bad_loss():
    with pytest.raises(Exception, match="'rank' or 'reg'"):
        XGBCostModel(loss="huber").fit(np.zeros((3, 1)), np.ones(3))


def test_simulated_annealing_finds_maxima_and_honours_exclude():
    space = ConfigSpace([CategoricalKnob(f"k{i}", list(range(8))) for i in range(4)])  # 4096 configs
    target = np.array([5, 2, 7, 1])

    def score(indices):
        return 10.0 - np.abs(space.knob_indices_array(indices) - target).sum(axis=1)

    best = space.from_knob_indices(list(target))
    sa = SimulatedAnnealing(n_chains=32, n_steps=300)
    found = sa.find_maximums(space, score, 5, set(), np.random.default_rng(0))
    assert found[0] == best and len(set(found)) == 5
    assert sa.n_queries >= 32 and sa.points is not None
    again = sa.find_maximums(space, score, 5, {best}, np.random.default_rng(1))
    assert best not in again and score(np.array(again)).min() >= 8.0


def test_sa_drops_negative_scores_like_autotvm():
    space = ConfigSpace([CategoricalKnob("a", list(range(10)))])
    got = SimulatedAnnealing(n_chains=4, n_steps=50).find_maximums(
        space, lambda i: i.astype(float) - 7.0, 5, set(), np.random.default_rng(0))
    assert got == [9, 8, 7]
    keep = SimulatedAnnealing(n_chains=4, n_steps=50, min_score=None).find_maximums(
        space, lambda i: i.astype(float) - 7.0, 5, set(), np.random.default_rng(0))
    assert keep == [9, 8, 7, 6, 5]


def test_plan_refit_and_epsilon_greedy_schedule():
    tuner = XGBTuner(seed=0, plan_size=32)
    tuner.setup(TuningContext(space=synthetic_space(), flops=1e9))
    space = tuner.space
    first = tuner.propose(32)
    assert tuner.train_ct == 0 and tuner.model is None
    tuner.update([synthetic_measure(space, i) for i in first])
    assert tuner.train_ct == 1 and len(tuner.trials) > 0
    plan = list(tuner.trials)
    nxt = tuner.propose(32)
    n_random = int(0.05 * 32)
    planned = [i for i in plan if i not in first]
    assert nxt[: 32 - n_random] == planned[: 32 - n_random]     # the plan, in order
    assert tuner.stats()["fits"] == 1 and tuner.stats()["model_queries"] > 0


def test_failures_are_zero_throughput_training_points():
    tuner = XGBTuner(seed=0, plan_size=16)
    tuner.setup(TuningContext(space=synthetic_space(), flops=1e9))
    results = drive(tuner, 48, batch=16)
    invalid = [i for i, r in enumerate(results) if not r.valid]
    assert invalid and all(tuner.ys[i] == 0.0 for i in invalid)
    assert all(tuner.ys[i] > 0 for i, r in enumerate(results) if r.valid)


def test_load_history_resumes_at_the_plan_boundary():
    first = drive(XGBTuner(seed=0, plan_size=16), 40, batch=8)
    tuner = XGBTuner(seed=0, plan_size=16)
    tuner.setup(TuningContext(space=synthetic_space(), flops=1e9))
    tuner.load_history(first)
    assert tuner.train_ct == 2 and tuner.trials     # fitted once, next refit at 48 like an unbroken run
    tuner.update([synthetic_measure(tuner.space, i) for i in tuner.propose(4)])
    assert tuner.train_ct == 2
    tuner.update([synthetic_measure(tuner.space, i) for i in tuner.propose(4)])
    assert tuner.train_ct == 3


def test_xgb_finds_the_planted_optimum_sooner_than_exhaustion():
    space = synthetic_space()
    opt = space.index_of(OPTIMUM)
    for seed in range(3):
        trials = [r.index for r in drive(XGBTuner(seed=seed, plan_size=32), 120)]
        assert opt in trials, f"seed {seed}: xgb did not reach the optimum in 120 of 560 trials"


def test_a_model_based_tuner_is_composed_of_the_parts_passed_in():
    """Your own model, optimizer and sampler, no subclass: the loop fits the model, the optimizer searches
    with it and the sampler picks what is measured."""
    from toolkit.tuning.search.sampling import AdaptiveSampler
    from toolkit.tuning.tuners.model_based import ModelBasedTuner

    fits = []

    def model(fit):
        fits.append(fit)
        return XGBCostModel(loss="rank", seed=fit, plan_size=16, max_rounds=50)

    annealer, sampler = SimulatedAnnealing(n_chains=16, n_steps=60), AdaptiveSampler(k_min=2, k_max=8, k_step=2)
    tuner = ModelBasedTuner(seed=0, model=model, optimizer=annealer, sampler=sampler, plan_size=16)
    results = drive(tuner, 64, batch=4)
    assert len({r.index for r in results}) == 64
    assert tuner.optimizer is annealer and tuner.sampler is sampler and annealer.n_queries > 0
    assert fits == list(range(len(fits))) and len(fits) == tuner.stats()["fits"] >= 2
    assert sampler.sampled_k and all(1 <= k <= 8 for k in sampler.sampled_k)
    assert tuner.stats()["sample_k_mean"] == np.mean(sampler.sampled_k)
