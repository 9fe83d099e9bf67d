"""Every registered tuner passes the tuner conformance suite: a tuner is tested by being registered.

One test class per name of the registry (:func:`~toolkit.tuning.tuners.base.tuner_names`), made from
:data:`FACTORIES` where a tuner needs smaller search budgets to keep the suite fast (its algorithm
unchanged) or a compiler to read features from; a name without an entry runs with its defaults.
Drivers (:class:`~toolkit.tuning.tuners.base.Driver`: they run their own search loop through ``tune``) are
checked in their backend's tests instead.
"""

from __future__ import annotations

from typing import Callable

import pytest

from toolkit.testing.conformance import TunerConformance, beats_random_search, with_compiler
from toolkit.tuning.tuners.model_based import CostModelTuner
from toolkit.tuning.tuners.base import Driver, Tuner, make_tuner, tuner_class, tuner_names

FAST_RL = {"episodes": 32, "max_steps": 60, "max_rounds": 60}
FAST_ML2 = {"sa_chains": 32, "sa_steps": 100, "max_rounds": 100}

FACTORIES: dict[str, Callable[[int], Tuner]] = {
    "chameleon": lambda seed: make_tuner("chameleon", seed=seed, **FAST_RL),
    "rl": lambda seed: make_tuner("rl", seed=seed, plan_size=32, **FAST_RL),
    "chameleon+": lambda seed: make_tuner("chameleon+", seed=seed, episodes=16, max_steps=30, max_rounds=30,
                                          refit_every=24),
    "ml2tuner": lambda seed: with_compiler(make_tuner("ml2tuner", seed=seed, **FAST_ML2)),
    "ml2tuner+": lambda seed: with_compiler(make_tuner("ml2tuner+", seed=seed, prior_pool=64, **FAST_ML2)),
    "chameleon-ml2": lambda seed: with_compiler(make_tuner("chameleon-ml2", seed=seed, plan_size=16, alpha=3,
                                                           episodes=8, max_steps=30, max_rounds=100)),
}
"""Registry name -> ``seed -> tuner`` for the tuners whose defaults would make the suite slow."""

DRIVERS = sorted(n for n in tuner_names() if issubclass(tuner_class(n), Driver))
TUNERS = [n for n in tuner_names() if n not in DRIVERS]


def _factory(name: str) -> Callable[[int], Tuner]:
    return FACTORIES.get(name, lambda seed: make_tuner(name, seed=seed))


for _name in TUNERS:
    _cls = type(f"TestConformance_{_name.replace('-', '_').replace('+', '_plus')}", (TunerConformance,),
                {"tuner_factory": staticmethod(_factory(_name))})
    globals()[_cls.__name__] = _cls


def test_every_registered_tuner_has_a_conformance_class_or_is_a_driver():
    classes = {n for n in globals() if n.startswith("TestConformance_")}
    assert len(classes) == len(TUNERS) and set(DRIVERS) <= {"metaschedule"}
    assert set(FACTORIES) <= set(TUNERS)


@pytest.mark.parametrize("name", [n for n in TUNERS if issubclass(tuner_class(n), CostModelTuner)])
def test_every_cost_model_tuner_beats_random_search_on_a_planted_optimum(name):
    """Best latency after 160 trials on a 7560-config space with a planted optimum, summed over seeds 0-2, below
    random search's with the same seeds (a mutant `xgb` whose scores are negated fails this)."""
    ours, random = beats_random_search(_factory(name))
    assert sum(ours) < sum(random), f"best s per seed {ours} vs random search's {random}"


@pytest.mark.parametrize("name", tuner_names())
def test_every_registered_name_is_an_ask_tell_tuner_or_a_driver_not_both(name):
    cls = tuner_class(name)
    assert issubclass(cls, Tuner) != issubclass(cls, Driver)
    assert not issubclass(cls, Driver) or not hasattr(cls, "propose")     # a driver offers no ask/tell half


class TestGASmallPopulation(TunerConformance):
    tuner_factory = staticmethod(lambda seed: make_tuner("ga", seed=seed, pop_size=10))


class TestXGBReg(TunerConformance):
    tuner_factory = staticmethod(lambda seed: make_tuner("xgb", seed=seed, loss="reg", plan_size=32))
