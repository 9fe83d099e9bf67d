"""Luck-free measures of a search: trials to the exact optimum, regret curves, paired differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toolkit.tuning.metrics import (NO_VALID_REGRET, mean_regret, paired_difference, regret, regret_at,
                                    trials_to_optimum)


def test_trials_to_the_optimum_count_from_one_and_tolerate_only_rounding():
    h = [None, 5.0, 1.0 + 1e-12, 1.0]
    assert trials_to_optimum(h, 1.0) == 3
    assert trials_to_optimum([5.0, 1.004], 1.0) is None and trials_to_optimum([5.0, 1.004], 1.0, 0.005) == 2
    assert trials_to_optimum([], 1.0) is None


def test_regret_is_zero_at_the_optimum_and_capped_before_any_valid_config():
    r = regret([None, math.inf, 3.0, 1.5, 1.0], 1.5)
    assert r.tolist() == [NO_VALID_REGRET, NO_VALID_REGRET, 1.0, 0.0, 0.0]   # a later, better-than-recorded
    assert regret_at([None, 2.0], 1.0, 1) == NO_VALID_REGRET                 # optimum never goes negative
    assert regret_at([2.0, 1.5], 1.0, 10) == 0.5                              # a short run keeps its last value


def test_mean_regret_rewards_early_finds_not_one_lucky_trial():
    early = [2.0, 1.0, 1.0, 1.0]
    late = [2.0, 2.0, 2.0, 1.0]
    assert mean_regret(early, 1.0) == pytest.approx(0.25) and mean_regret(late, 1.0) == pytest.approx(0.75)
    assert mean_regret(late, 1.0, upto=2) == pytest.approx(1.0)


def test_paired_differences_have_a_standard_error():
    rng = np.random.default_rng(0)
    a = rng.normal(10, 1, 40)
    b = a - 2 + rng.normal(0, 0.1, 40)
    d = paired_difference(a, b)
    assert d.n == 40 and d.mean == pytest.approx(2, abs=0.1) and 0 < d.se < 0.05
    assert math.isnan(paired_difference([1.0], [0.0]).se)
    with pytest.raises(ValueError):
        paired_difference([1.0], [])
