"""``xgb``: AutoTVM's XGBTuner (knob features, XGBoost cost model, simulated annealing)."""

from __future__ import annotations

from typing import Any

from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.tuners.base import register
from toolkit.tuning.tuners.model_based import ModelBasedTuner
from toolkit.tuning.tuners.options import LOOP_OPTIONS, MODEL_OPTIONS, SA_OPTIONS, sa_optimizer, xgb_model


@register
class XGBTuner(ModelBasedTuner):
    """AutoTVM ``XGBTuner(feature_type="knob", optimizer="sa")``.

    >>> from toolkit.tuning.tuners.base import make_tuner
    >>> make_tuner("xgb", seed=1, loss="reg").params["loss"]
    'reg'
    """

    name = "xgb"
    options = {**LOOP_OPTIONS, **MODEL_OPTIONS, **SA_OPTIONS}

    def make_model(self, fit: int) -> Any:
        return xgb_model(self.params, self.seed)(fit)

    def make_optimizer(self) -> SimulatedAnnealing:
        return sa_optimizer(self.params)
