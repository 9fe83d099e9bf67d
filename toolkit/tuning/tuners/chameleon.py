"""Chameleon (Ahn et al., ICLR 2020): RL exploration + adaptive sampling, and its two ablations.

- ``chameleon``: PPO exploration against an XGBoost regression model, then adaptive sampling
  (k-means knee on the cardinal knobs, one measurement per cluster, sample synthesis);
- ``rl``: PPO exploration, AutoTVM-style top-``plan_size`` measurement (no sampling);
- ``sa-as``: AutoTVM's simulated annealing + adaptive sampling;
- ``chameleon+``: edgetune's improved Chameleon, the same tuner with :data:`PLUS_DEFAULTS` (16 random
  configs first, a refit after every measurement, each cluster's best-predicted member measured best
  first, a rank-loss model on the compiler's features where the task compiles ahead (VTA), half the
  PPO episodes started from the best measured configs).

All of them are AutoTVM's loop (:class:`ModelBasedTuner`) composed of parts made from their options:
an XGBoost model, an optimizer (PPO or simulated annealing) and for the sampling ones Chameleon's
:class:`~toolkit.tuning.search.sampling.AdaptiveSampler`, made by the factories of
:mod:`toolkit.tuning.tuners.options` from the option groups declared there. ``plan_size``
random configs first, then fit -> search -> measure; with adaptive sampling the model is refit after
the k sampled configs are measured (the reference's ``next_update += len(trials)``).

>>> from toolkit.tuning.tuners.base import make_tuner
>>> t = make_tuner("chameleon", seed=0, episodes=64)
>>> t.params["episodes"], t.params["reduction"], t.params["k_threshold"]
(64, 'mode', 2.5)
>>> p = make_tuner("chameleon+", seed=0)
>>> p.params["n_init"], p.params["refit_every"], p.params["representative"], p.params["episodes"]
(16, 1, 'best', 128)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from toolkit.tuning.search.ppo import RLOptimizer
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.search.sampling import AdaptiveSampler
from toolkit.tuning.tuners.base import register
from toolkit.tuning.tuners.model_based import ModelBasedTuner
from toolkit.tuning.tuners.options import (LOOP_OPTIONS, MODEL_OPTIONS, PLUS_OPTIONS, RL_OPTIONS, SA_OPTIONS,
                                           SAMPLING_OPTIONS, adaptive_sampler, rl_optimizer, sa_optimizer, xgb_model)

CHAMELEON_MODEL_OPTIONS = {**MODEL_OPTIONS, "loss": replace(MODEL_OPTIONS["loss"], default="reg")}
"""Chameleon's cost model: XGBoost regression on normalised throughput."""


@register
class RLTuner(ModelBasedTuner):
    """Chameleon's PPO exploration, measuring AutoTVM's top plan_size candidates (ablation: no sampling)."""

    name = "rl"
    options = {**LOOP_OPTIONS, **CHAMELEON_MODEL_OPTIONS, **RL_OPTIONS}

    def make_model(self, fit: int) -> Any:
        return xgb_model(self.params, self.seed)(fit)

    def make_optimizer(self) -> RLOptimizer:
        return rl_optimizer(self.params, self.seed)


@register
class SAASTuner(ModelBasedTuner):
    """AutoTVM's simulated annealing + Chameleon's adaptive sampling (ablation: no RL)."""

    name = "sa-as"
    options = {**LOOP_OPTIONS, **CHAMELEON_MODEL_OPTIONS, **SA_OPTIONS, **SAMPLING_OPTIONS}

    def make_model(self, fit: int) -> Any:
        return xgb_model(self.params, self.seed)(fit)

    def make_optimizer(self) -> SimulatedAnnealing:
        return sa_optimizer(self.params)

    def make_sampler(self) -> AdaptiveSampler:
        return adaptive_sampler(self.params)


@register
class ChameleonTuner(RLTuner):
    """Chameleon (ICLR 2020): PPO exploration + adaptive sampling, XGBoost regression cost model.

    The :data:`PLUS_OPTIONS` (initial plan, refit interval, elite starts) default to
    the reference's behaviour; ``chameleon+`` sets them.
    """

    name = "chameleon"
    options = {**LOOP_OPTIONS, **CHAMELEON_MODEL_OPTIONS, **RL_OPTIONS, **SAMPLING_OPTIONS, **PLUS_OPTIONS}

    def make_sampler(self) -> AdaptiveSampler:
        return adaptive_sampler(self.params)


PLUS_DEFAULTS: dict[str, Any] = {
    "n_init": 16, "refit_every": 1, "loss": "rank", "rl_elite": 0.5, "representative": "best", "features": "auto",
}
"""What ``chameleon+`` changes against ``chameleon`` (every other option keeps the reference value)."""


@register
class ChameleonPlusTuner(ChameleonTuner):
    """Chameleon made better: a small random start, greedy per-cluster picks, a refit after every
    measurement, a rank-loss cost model on compile features where available and PPO episodes started
    from the best measured configs."""

    name = "chameleon+"
    options = {k: replace(o, default=PLUS_DEFAULTS[k]) if k in PLUS_DEFAULTS else o
               for k, o in ChameleonTuner.options.items()}
