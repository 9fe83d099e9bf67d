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
an XGBoost model (:func:`xgb_model`), an optimizer (:func:`rl_optimizer` or :func:`sa_optimizer`) and for
the sampling ones Chameleon's :class:`~toolkit.tuning.search.sampling.AdaptiveSampler`. ``plan_size``
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

from toolkit.tuning.models.cost import XGBCostModel
from toolkit.tuning.search.ppo import RLOptimizer
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.search.sampling import K_RULES, REDUCTIONS, REPRESENTATIVES, AdaptiveSampler
from toolkit.tuning.tuners.base import Option, register
from toolkit.tuning.tuners.model_based import FEATURE_OPTION, ModelBasedTuner, ModelFactory

MODEL_OPTIONS = {
    "loss": Option("reg", "cost-model loss: reg (Chameleon: regression on normalised throughput) or rank", str,
                   ("reg", "rank")),
    "max_rounds": Option(400, "upper bound on boosting rounds per fit (early stopping after 20 flat rounds)", int),
    "features": FEATURE_OPTION,
}

RL_OPTIONS = {
    "episodes": Option(128, "PPO episodes per search round, run as one batch (reference parallel_size)", int),
    "max_steps": Option(500, "step limit of one episode (reference n_iter)", int),
    "stay_ratio": Option(0.75, "an episode ends when this share of knobs stayed or hit a bound", float),
    "hidden": Option(20, "width of the two policy trunk layers", int),
    "head_hidden": Option(3, "width of the two hidden layers of each per-knob head", int),
    "value_hidden": Option(20, "width of the three value-network layers", int),
    "temperature": Option(0.1, "divisor applied inside each per-knob head", float),
    "lr": Option(1e-3, "Adam learning rate (eps 1e-5)", float),
    "epochs": Option(3, "PPO epochs per update", int),
    "minibatch": Option(32, "PPO minibatch size (transitions)", int),
    "gamma": Option(0.9, "discount factor", float),
    "lam": Option(0.99, "GAE lambda", float),
    "clip": Option(0.2, "PPO clip epsilon", float),
    "c1": Option(1.0, "value-loss coefficient", float),
    "c2": Option(0.3, "entropy coefficient (summed over knob heads)", float),
    "torch_threads": Option(1, "torch CPU threads during the search", int),
}

SAMPLING_OPTIONS = {
    "k_min": Option(8, "smallest number of clusters tried", int),
    "k_max": Option(64, "largest number of clusters tried", int),
    "k_step": Option(8, "step between cluster counts tried", int),
    "k_threshold": Option(2.5, "knee: stop when the k-means loss no longer drops by this factor", float),
    "k_rule": Option("knee", "knee: keep the last k that paid off; stop: keep the k where the loop stopped "
                     "(reference code)", str, K_RULES),
    "n_cardinal": Option(2, "cluster on this many knobs with the most options", int),
    "representative": Option("nearest", "per cluster, measure the candidate nearest the centroid, a config "
                             "synthesised at the centroid (reference code), or the best-predicted member (best: "
                             "picks ordered best first)", str, REPRESENTATIVES),
    "reduction": Option("mode", "synthesis of a redundant sample: mode (per-knob mode of its cluster, paper) or "
                        "sample (centroid + random candidate values, reference code)", str, REDUCTIONS),
}

PLUS_OPTIONS = {
    "n_init": Option(0, "configs measured before the first fit; 0 = plan_size (AutoTVM, reference)", int),
    "init": Option("random", "initial configs: random (reference) or spread (nearest pool config to each k-means "
                   "centre of a random pool of 16 x n_init)", str, ("random", "spread")),
    "refit_every": Option(0, "refit and re-plan after this many measurements (a round offers no more); 0 = after "
                          "the k sampled configs (reference)", int),
    "rl_elite": Option(0.0, "share of PPO episodes started from the best measured configs (0: all random "
                       "starts, reference)", float),
    "rl_elite_top": Option(8, "elite starts cycle through this many best measured configs", int),
}
"""Chameleon+ settings; their defaults reproduce the reference (``chameleon``)."""

SA_OPTIONS = {
    "sa_chains": Option(128, "parallel simulated-annealing chains", int),
    "sa_steps": Option(500, "simulated-annealing steps per plan", int),
    "sa_early_stop": Option(50, "stop annealing after this many steps without a better candidate", int),
    "sa_persistent": Option(True, "annealing chains continue across plans", bool),
}


def xgb_model(params: dict[str, Any], seed: int) -> ModelFactory:
    """Chameleon's (and AutoTVM's) XGBoost cost model from a tuner's ``loss``/``max_rounds``/``plan_size``,
    reseeded for each fit."""
    return lambda fit: XGBCostModel(loss=params["loss"], seed=seed + fit, plan_size=params["plan_size"],
                                    max_rounds=params["max_rounds"])


def rl_optimizer(params: dict[str, Any], seed: int) -> RLOptimizer:
    """Chameleon's PPO exploration from a tuner's :data:`RL_OPTIONS` (and ``rl_elite``)."""
    p = params
    return RLOptimizer(
        n_episodes=p["episodes"], max_steps=p["max_steps"], stay_ratio=p["stay_ratio"], seed=seed,
        torch_threads=p["torch_threads"], lr=p["lr"], epochs=p["epochs"], minibatch=p["minibatch"],
        gamma=p["gamma"], lam=p["lam"], clip=p["clip"], c1=p["c1"], c2=p["c2"], hidden=p["hidden"],
        head_hidden=p["head_hidden"], value_hidden=p["value_hidden"], temperature=p["temperature"],
        elite_share=p.get("rl_elite", 0.0),
    )


def sa_optimizer(params: dict[str, Any], **extra: Any) -> SimulatedAnnealing:
    """AutoTVM's simulated annealing from a tuner's :data:`SA_OPTIONS`."""
    return SimulatedAnnealing(n_chains=params["sa_chains"], n_steps=params["sa_steps"],
                              early_stop=params["sa_early_stop"], persistent=params["sa_persistent"], **extra)


def adaptive_sampler(params: dict[str, Any]) -> AdaptiveSampler:
    """Chameleon's adaptive sampling from a tuner's :data:`SAMPLING_OPTIONS`."""
    p = params
    return AdaptiveSampler(k_min=p["k_min"], k_max=p["k_max"], k_step=p["k_step"], threshold=p["k_threshold"],
                           n_cardinal=p["n_cardinal"], reduction=p["reduction"], rule=p["k_rule"],
                           representative=p["representative"])


@register
class RLTuner(ModelBasedTuner):
    """Chameleon's PPO exploration, measuring AutoTVM's top plan_size candidates (ablation: no sampling)."""

    name = "rl"
    options = {**ModelBasedTuner.options, **MODEL_OPTIONS, **RL_OPTIONS}

    def make_model(self, fit: int) -> Any:
        return xgb_model(self.params, self.seed)(fit)

    def make_optimizer(self) -> RLOptimizer:
        return rl_optimizer(self.params, self.seed)


@register
class SAASTuner(ModelBasedTuner):
    """AutoTVM's simulated annealing + Chameleon's adaptive sampling (ablation: no RL)."""

    name = "sa-as"
    options = {**ModelBasedTuner.options, **MODEL_OPTIONS, **SA_OPTIONS, **SAMPLING_OPTIONS}

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
    options = {**ModelBasedTuner.options, **MODEL_OPTIONS, **RL_OPTIONS, **SAMPLING_OPTIONS, **PLUS_OPTIONS}

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
