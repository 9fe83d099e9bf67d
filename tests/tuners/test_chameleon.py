"""The chameleon, rl and sa-as tuners: conformance, adaptive refits and their counters."""

import numpy as np
import pytest

from toolkit.errors import ConfigError
from toolkit.testing.conformance import TunerConformance, drive
from toolkit.tuning.tuners.base import TUNERS, make_tuner
from toolkit.tuning.tuners.chameleon import ChameleonTuner, RLTuner, SAASTuner

# A smaller search than the default keeps the suite fast; the contract does not depend on it.
FAST_RL = {"episodes": 32, "max_steps": 60, "max_rounds": 60}


class TestChameleon(TunerConformance):
    tuner_factory = staticmethod(lambda seed: ChameleonTuner(seed=seed, **FAST_RL))


class TestRL(TunerConformance):
    tuner_factory = staticmethod(lambda seed: RLTuner(seed=seed, plan_size=32, **FAST_RL))


class TestSAAS(TunerConformance):
    tuner_factory = SAASTuner


def test_registered_under_their_names() -> None:
    make_tuner("xgb")
    assert {"chameleon", "rl", "sa-as"} <= set(TUNERS)


@pytest.mark.parametrize("variant", [{}, {"reduction": "sample", "k_rule": "stop"}])
def test_chameleon_refits_after_each_sampled_batch_and_counts_queries(variant: dict) -> None:
    tuner = ChameleonTuner(seed=0, plan_size=32, **variant, **FAST_RL)
    results = drive(tuner, 120, batch=4)
    assert len({r.index for r in results}) == 120
    s = tuner.stats()
    assert len(tuner.sampled_k) == s["fits"] >= 2
    assert all(1 <= k <= 32 for k in tuner.sampled_k)
    # one fit after the random plan, then one per sampled batch (measured in batches of 4)
    assert 32 + sum(tuner.sampled_k[:-1]) <= 120
    assert s["model_queries"] == s["rl_steps"] > 0
    assert np.isfinite(s["rl_mean_reward"])


def test_reduction_option_is_validated() -> None:
    with pytest.raises(ConfigError):
        ChameleonTuner(reduction="median")
