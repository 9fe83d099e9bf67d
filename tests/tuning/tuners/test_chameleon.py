"""The chameleon, rl and sa-as tuners: conformance, adaptive refits and their counters."""

import numpy as np
import pytest

from toolkit.errors import ConfigError
from toolkit.testing.conformance import TunerConformance, drive, synthetic_compile, synthetic_space, with_compiler
from toolkit.tuning.core.space import CategoricalKnob, ConfigSpace
from toolkit.tuning.tuners.base import TUNERS, TuningContext, make_tuner, tuner_class, tuner_names
from toolkit.tuning.tuners.chameleon import PLUS_DEFAULTS, ChameleonPlusTuner, ChameleonTuner
from toolkit.tuning.tuners.options import PLUS_OPTIONS

# A smaller search than the default keeps the suite fast; the contract does not depend on it.
FAST_RL = {"episodes": 32, "max_steps": 60, "max_rounds": 60}


# The registry suite (tests/tuning/test_tuner_conformance.py) runs every tuner's defaults; below are variants.


def test_registered_under_their_names() -> None:
    assert {"chameleon", "chameleon+", "rl", "sa-as"} <= set(tuner_names())
    assert all(tuner_class(n).name == n and TUNERS[n] is tuner_class(n)
               for n in ("chameleon", "chameleon+", "rl", "sa-as"))


@pytest.mark.parametrize("variant", [{}, {"reduction": "sample", "k_rule": "stop"}])
def test_chameleon_refits_after_each_sampled_batch_and_counts_queries(variant: dict) -> None:
    tuner = ChameleonTuner(seed=0, plan_size=32, **variant, **FAST_RL)
    results = drive(tuner, 120, batch=4)
    assert len({r.index for r in results}) == 120
    s = tuner.stats()
    assert len(tuner.sampler.sampled_k) == s["fits"] >= 2
    assert all(1 <= k <= 32 for k in tuner.sampler.sampled_k)
    # one fit after the random plan, then one per sampled batch (measured in batches of 4)
    assert 32 + sum(tuner.sampler.sampled_k[:-1]) <= 120
    assert s["model_queries"] == s["rl_steps"] > 0
    assert np.isfinite(s["rl_mean_reward"])


def test_reduction_option_is_validated() -> None:
    with pytest.raises(ConfigError):
        ChameleonTuner(reduction="median")


def test_chameleon_defaults_are_the_reference_and_plus_changes_only_its_table() -> None:
    ref, plus = ChameleonTuner(), ChameleonPlusTuner()
    assert {k: ref.params[k] for k in PLUS_OPTIONS} == {k: o.default for k, o in PLUS_OPTIONS.items()}
    assert ref.params["representative"] == "nearest" and ref.params["refit_every"] == 0
    changed = {k for k in ref.params if ref.params[k] != plus.params[k]}
    assert changed == set(PLUS_DEFAULTS)


def test_plus_starts_small_and_refits_after_every_measurement() -> None:
    tuner = ChameleonPlusTuner(seed=0, **FAST_RL)
    results = drive(tuner, 40, batch=8)
    assert len({r.index for r in results}) == 40
    # n_init=16 random configs, then a fit after every trial (the loop asks 8, a round offers 1)
    assert tuner.stats()["fits"] == 1 + (40 - 16)
    assert tuner.model.loss == "rank"
    assert tuner.stats()["compile_features"] == 0.0        # no compiler here: auto falls back to knob values


def test_plus_never_proposes_past_its_next_refit() -> None:
    tuner = ChameleonPlusTuner(seed=0, refit_every=3, **FAST_RL)
    drive(tuner, 40, batch=8)
    # the loop asks for 8; after the 16 initial configs the tuner gives 3 and refits: 16 + 8 x 3 = 40
    assert tuner.stats()["fits"] == 1 + (40 - 16) // 3
    assert len(tuner.propose(8)) == 3


def test_spread_init_measures_the_spread_plan_first() -> None:
    from toolkit.tuning.search.sampling import spread_sample

    tuner = ChameleonPlusTuner(seed=3, init="spread", **FAST_RL)
    drive(tuner, 0, batch=8)
    expected = spread_sample(synthetic_space(), 16, np.random.default_rng(3))
    assert tuner.propose(8) + tuner.propose(8) == expected


class TestChameleonPlusCompileFeatures(TunerConformance):
    tuner_factory = staticmethod(lambda seed: with_compiler(ChameleonPlusTuner(
        seed=seed, episodes=16, max_steps=30, max_rounds=30, refit_every=24, features="compile")))


class TestChameleonPlusDefaults(TunerConformance):
    # its own defaults on a task that compiles ahead: features=auto -> compile, a refit after every trial
    tuner_factory = staticmethod(lambda seed: with_compiler(ChameleonPlusTuner(
        seed=seed, episodes=16, max_steps=30, max_rounds=30)))


def test_compile_features_join_the_knob_features_once_per_task() -> None:
    space = synthetic_space()
    calls = []

    def compile_features(idx):
        calls.append(len(idx))
        return synthetic_compile(space, idx)

    tuner = make_tuner("xgb", seed=0, features="compile")
    tuner.setup(TuningContext(space=space, compile_features=compile_features, flops=1e9))
    feats = tuner.model_features(np.arange(space.size))
    tuner.model_features([0, 1])
    assert calls == [space.size]                       # the whole space, compiled once
    n_knob = space.features([0]).shape[1]
    built = [not isinstance(f, dict) for f in synthetic_compile(space, range(space.size))]
    assert feats.shape[1] > n_knob
    assert np.isnan(feats[built, n_knob:]).all() and not np.isnan(feats[~np.array(built), n_knob:]).any()


def test_compile_features_need_a_compiler_and_a_small_space() -> None:
    tuner = make_tuner("chameleon+", seed=0, features="compile")
    with pytest.raises(ConfigError, match="use features=knob"):   # at setup, before any trial
        tuner.setup(TuningContext(space=synthetic_space()))
    big = ConfigSpace([CategoricalKnob("a", list(range(100))), CategoricalKnob("b", list(range(100)))])
    with pytest.raises(ConfigError, match="at most"):
        tuner.setup(TuningContext(space=big, compile_features=lambda idx: [{} for _ in idx]))


def test_auto_features_use_the_compiler_where_they_can_and_knob_values_elsewhere() -> None:
    space = synthetic_space()
    n_knob = space.features([0]).shape[1]
    big = ConfigSpace([CategoricalKnob("a", list(range(100))), CategoricalKnob("b", list(range(100)))])
    cases = [(space, lambda idx: synthetic_compile(space, idx), True),    # VTA-like: compiles, small space
             (space, None, False),                                         # cannot compile ahead
             (big, lambda idx: [{} for _ in idx], False)]                  # too many configs to compile
    for sp, compiler, compiled in cases:
        tuner = make_tuner("chameleon+", seed=0)                           # features="auto" is its default
        tuner.setup(TuningContext(space=sp, compile_features=compiler, flops=1e9))
        assert tuner.stats()["compile_features"] == float(compiled)
        assert (tuner.model_features([0]).shape[1] > n_knob) == compiled
        assert (tuner.stats()["compile_s"] > 0) == compiled            # the table's one-time compilation
