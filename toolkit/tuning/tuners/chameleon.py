"""Chameleon (Ahn et al., ICLR 2020): RL exploration + adaptive sampling, and its two ablations.

- ``chameleon``: PPO exploration against an XGBoost regression model, then adaptive sampling
  (k-means knee on the cardinal knobs, one measurement per cluster, sample synthesis);
- ``rl``: PPO exploration, AutoTVM-style top-``plan_size`` measurement (no sampling);
- ``sa-as``: AutoTVM's simulated annealing + adaptive sampling;
- ``chameleon+``: edgetune's improved Chameleon, the same tuner with :data:`PLUS_DEFAULTS` (16 random
  configs first, a refit after every measurement, each cluster's best-predicted member measured best
  first, a rank-loss model on the compiler's features where the task compiles ahead (VTA), half the
  PPO episodes started from the best measured configs).

All three run AutoTVM's loop (:class:`ModelBasedTuner`): ``plan_size`` random configs first, then
fit -> search -> measure. With adaptive sampling the model is refit after the k sampled configs are
measured (the reference's ``next_update += len(trials)``), not after ``plan_size``.

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
from typing import Any, Sequence

import numpy as np

from toolkit.tuning.models.cost import XGBCostModel
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.search.ppo import RLOptimizer
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.search.sampling import K_RULES, REDUCTIONS, REPRESENTATIVES, adaptive_sample, spread_sample
from toolkit.tuning.tuners.base import Option, TuningContext, register
from toolkit.tuning.tuners.model_based import FEATURE_OPTION, ModelBasedTuner

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


class _ModelMixin(ModelBasedTuner):
    def _make_model(self) -> Any:
        return XGBCostModel(loss=self.params["loss"], seed=self.seed + self.train_ct,
                            plan_size=self.params["plan_size"], max_rounds=self.params["max_rounds"])


class _RLMixin(_ModelMixin):
    def _make_optimizer(self) -> RLOptimizer:
        p = self.params
        return RLOptimizer(
            n_episodes=p["episodes"], max_steps=p["max_steps"], stay_ratio=p["stay_ratio"], seed=self.seed,
            torch_threads=p["torch_threads"], lr=p["lr"], epochs=p["epochs"], minibatch=p["minibatch"],
            gamma=p["gamma"], lam=p["lam"], clip=p["clip"], c1=p["c1"], c2=p["c2"], hidden=p["hidden"],
            head_hidden=p["head_hidden"], value_hidden=p["value_hidden"], temperature=p["temperature"],
            elite_share=p.get("rl_elite", 0.0),
        )

    def _elite(self) -> list[int]:
        """The best measured configs that ``rl_elite`` of the PPO episodes start from (none when off)."""
        if not self.params.get("rl_elite", 0.0):
            return []
        ys = np.asarray(self.ys)
        return [self.xs[i] for i in np.argsort(-ys, kind="stable")[:self.params["rl_elite_top"]] if ys[i] > 0]

    def _find_candidates(self, num: int) -> list[int]:
        return self.optimizer.find_maximums(self.space, self._score_fn(), num, self.visited, self.rng,
                                            elite=self._elite())

    def stats(self) -> dict[str, float]:
        rewards = self.optimizer.mean_rewards
        return {**super().stats(), "rl_steps": float(self.optimizer.n_steps),
                "rl_mean_reward": rewards[-1] if rewards else float("nan")}


class _SamplingMixin(ModelBasedTuner):
    """Adaptive sampling between the optimizer and measurement; refit after the k samples."""

    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        self._next_update = self.params["plan_size"]
        self.sampled_k: list[int] = []
        self._n_synth = self._n_rand = 0

    def _find_candidates(self, num: int) -> list[int]:
        cands = super()._find_candidates(num)
        p = self.params
        out = adaptive_sample(self.space, cands, self.visited, self.rng, k_min=p["k_min"], k_max=p["k_max"],
                              k_step=p["k_step"], threshold=p["k_threshold"], n_cardinal=p["n_cardinal"],
                              reduction=p["reduction"], rule=p["k_rule"], representative=p["representative"])
        self.sampled_k.append(len(out.indices))
        self._n_synth += out.n_synthesized
        self._n_rand += out.n_random
        return out.indices

    def _replan(self) -> None:
        super()._replan()
        self._next_update = len(self.xs) + max(len(self.trials), 1)

    def update(self, results: Sequence[MeasureResult]) -> None:
        self._record(results)
        if len(self.xs) >= self._next_update and self.flops_max > 1e-6:
            self._replan()

    def stats(self) -> dict[str, float]:
        k = self.sampled_k
        return {**super().stats(), "sample_k_mean": float(np.mean(k)) if k else float("nan"),
                "synthesized": float(self._n_synth), "random_fill": float(self._n_rand)}


@register
class RLTuner(_RLMixin):
    """Chameleon's PPO exploration, measuring AutoTVM's top plan_size candidates (ablation: no sampling)."""

    name = "rl"
    options = {**ModelBasedTuner.options, **MODEL_OPTIONS, **RL_OPTIONS}


@register
class SAASTuner(_SamplingMixin, _ModelMixin):
    """AutoTVM's simulated annealing + Chameleon's adaptive sampling (ablation: no RL)."""

    name = "sa-as"
    options = {**ModelBasedTuner.options, **MODEL_OPTIONS, **SA_OPTIONS, **SAMPLING_OPTIONS}

    def _make_optimizer(self) -> SimulatedAnnealing:
        p = self.params
        return SimulatedAnnealing(n_chains=p["sa_chains"], n_steps=p["sa_steps"], early_stop=p["sa_early_stop"],
                                  persistent=p["sa_persistent"])


@register
class ChameleonTuner(_SamplingMixin, _RLMixin):
    """Chameleon (ICLR 2020): PPO exploration + adaptive sampling, XGBoost regression cost model.

    The :data:`PLUS_OPTIONS` (initial plan, refit interval, elite starts) default to
    the reference's behaviour; ``chameleon+`` sets them.
    """

    name = "chameleon"
    options = {**ModelBasedTuner.options, **MODEL_OPTIONS, **RL_OPTIONS, **SAMPLING_OPTIONS, **PLUS_OPTIONS}

    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        p = self.params
        n_init = p["n_init"] or p["plan_size"]
        self._next_update = n_init
        self._init_plan = spread_sample(self.space, n_init, self.rng) if p["init"] == "spread" else []

    def propose(self, n: int) -> list[int]:
        if self.params["refit_every"] > 0 and len(self.xs) < self._next_update:   # stop at the next refit
            n = min(n, self._next_update - len(self.xs))
        out: list[int] = []
        while self.train_ct == 0 and self._init_plan and len(out) < n:
            index = self._init_plan.pop(0)
            if index not in self.visited:
                out.append(index)
                self.visited.add(index)
        return out + super().propose(n - len(out)) if len(out) < n else out

    def _replan(self) -> None:
        super()._replan()
        if self.params["refit_every"] > 0:
            self._next_update = len(self.xs) + self.params["refit_every"]


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
