"""``xgb``: AutoTVM's XGBTuner (knob features, XGBoost cost model, simulated annealing)."""

from __future__ import annotations

from typing import Any

from toolkit.tuning.models.cost import XGBCostModel
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.tuners.base import Option, register
from toolkit.tuning.tuners.model_based import FEATURE_OPTION, ModelBasedTuner


@register
class XGBTuner(ModelBasedTuner):
    """AutoTVM ``XGBTuner(feature_type="knob", optimizer="sa")``.

    >>> from toolkit.tuning.tuners.base import make_tuner
    >>> make_tuner("xgb", seed=1, loss="reg").params["loss"]
    'reg'
    """

    name = "xgb"
    options = {
        **ModelBasedTuner.options,
        "loss": Option("rank", "cost-model loss: rank (rank:pairwise, AutoTVM's default) or reg", str,
                       ("rank", "reg")),
        "max_rounds": Option(400, "upper bound on boosting rounds per fit (early stopping after 20 flat rounds)", int),
        "features": FEATURE_OPTION,
        "sa_chains": Option(128, "parallel simulated-annealing chains", int),
        "sa_steps": Option(500, "simulated-annealing steps per plan", int),
        "sa_early_stop": Option(50, "stop annealing after this many steps without a better candidate", int),
        "sa_persistent": Option(True, "annealing chains continue across plans", bool),
    }

    def make_model(self, fit: int) -> Any:
        return XGBCostModel(loss=self.params["loss"], seed=self.seed + fit, plan_size=self.params["plan_size"],
                            max_rounds=self.params["max_rounds"])

    def make_optimizer(self) -> SimulatedAnnealing:
        return SimulatedAnnealing(n_chains=self.params["sa_chains"], n_steps=self.params["sa_steps"],
                                  early_stop=self.params["sa_early_stop"], persistent=self.params["sa_persistent"])
