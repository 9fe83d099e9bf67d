"""AutoTVM's model-based tuning loop (``autotvm/tuner/model_based_tuner.py``), ask/tell.

The first ``plan_size`` proposals are random. Every ``plan_size`` measurements the cost model
is refitted on everything measured (failed configs count as throughput 0) and the optimizer
proposes a plan of ``plan_size`` candidates; proposals walk the plan, skipping visited
configs, and the last 5% of each plan (``int(0.05 * plan_size)``) are random unvisited
configs (epsilon-greedy).

:class:`CostModelTuner` holds what every cost-model tuner shares (the parts, features, the measured
data, scoring); :class:`ModelBasedTuner` adds AutoTVM's loop. ``ml2tuner`` is a :class:`CostModelTuner`
with a loop of its own (rounds through its validity and compiled-feature models).

A model-based tuner is composed of three parts, passed in or made from its options:

- ``model``: a factory ``fit_number -> cost model`` (scikit-learn style ``fit``/``predict``), a fresh
  model per fit (:meth:`ModelBasedTuner.make_model` by default);
- ``optimizer``: an :class:`~toolkit.tuning.search.Optimizer` (simulated annealing, Chameleon's PPO agent);
- ``sampler``: an optional :class:`~toolkit.tuning.search.Sampler` between the optimizer and measurement
  (Chameleon's adaptive sampling); with one, the model is refit after the sampled configs are measured.

>>> from toolkit.tuning.search.annealing import SimulatedAnnealing
>>> from toolkit.tuning.search.sampling import AdaptiveSampler
>>> t = ModelBasedTuner(seed=0, optimizer=SimulatedAnnealing(n_chains=16), sampler=AdaptiveSampler(k_max=16),
...                     plan_size=16)
>>> t.parts["optimizer"].n_chains, t.parts["sampler"].k_max, t.params["plan_size"]
(16, 16, 16)
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from toolkit.errors import ConfigError
from toolkit.tuning.models.cost import XGBCostModel
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.search import Optimizer, Sampler
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.search.sampling import spread_sample
from toolkit.tuning.tuners.base import Option, Tuner, TuningContext
from toolkit.tuning.tuners.options import COMPILE_TABLE_MAX, LOOP_OPTIONS, MODEL_OPTIONS, PLUS_OPTIONS

FULL_TABLE_MAX = 1 << 17
"""Spaces up to this size are scored in one batch after each fit and the optimizer reads that table
(the same scores as querying the model point by point, far fewer model calls)."""

OPTIONAL_OPTIONS: dict[str, Option] = {"features": MODEL_OPTIONS["features"], **PLUS_OPTIONS}
"""Options the shared code reads where a tuner declares them; a tuner that does not gets their default
(the reference behaviour: knob features, ``plan_size`` random configs first, no elite starts)."""


def feature_matrix(feats: Sequence[dict[str, float]]) -> np.ndarray:
    """One row per config, one column per feature name (sorted); NaN where a config lacks it (an
    empty dict: the build failed).

    >>> feature_matrix([{"b": 2.0, "a": 1.0}, {}]).tolist()
    [[1.0, 2.0], [nan, nan]]
    """
    keys = sorted({k for f in feats for k in f})
    rows = [[f.get(k, np.nan) for k in keys] for f in feats]
    return np.array(rows, dtype=np.float64).reshape(len(feats), len(keys))


ModelFactory = Callable[[int], Any]
"""``fit_number -> cost model``: a fresh, unfitted model for each fit (fit numbers count from 0)."""


class CostModelTuner(Tuner):
    """What every cost-model tuner shares: its parts, features, measured data and the optimizer's objective.

    ``model``, ``optimizer`` and ``sampler`` are the parts (see the module docstring); without them the
    tuner makes its own from its options (:meth:`make_model`, :meth:`make_optimizer`, :meth:`make_sampler`,
    which the named tuners define). :data:`OPTIONAL_OPTIONS` are read through :meth:`option`.

    State after :meth:`setup`: ``xs`` (measured indices), ``ys`` (throughputs, 0 if failed), ``flops_max``,
    ``train_ct`` (fits so far), ``model`` (the fitted cost model or ``None``), ``optimizer``, ``sampler``.
    """

    options = LOOP_OPTIONS

    def __init__(self, seed: int = 0, *, model: ModelFactory | None = None, optimizer: Optimizer | None = None,
                 sampler: Sampler | None = None, **options: Any) -> None:
        super().__init__(seed, **options)
        self.parts = {"model": model, "optimizer": optimizer, "sampler": sampler}

    # -- the parts a named tuner makes from its options ---------------------------------------
    def option(self, name: str) -> Any:
        """The value of one of :data:`OPTIONAL_OPTIONS`: this tuner's where it declares it, else the default."""
        return self.params[name] if name in self.options else OPTIONAL_OPTIONS[name].default

    def make_model(self, fit: int) -> Any:
        """A fresh, unfitted cost model for fit number ``fit`` (sklearn style ``fit``/``predict``)."""
        return XGBCostModel(loss="rank", seed=self.seed, plan_size=self.params["plan_size"])

    def make_optimizer(self) -> Optimizer:
        """The model optimizer (AutoTVM's SA defaults)."""
        return SimulatedAnnealing()

    def make_sampler(self) -> Sampler | None:
        """The sampler between optimizer and measurement (none: measure the plan as it is)."""
        return None

    def model_features(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Cost-model features of configs: the knob values (AutoTVM ``feature_type="knob"``), and with
        ``features="compile"`` (or ``"auto"`` where it resolved to it) the compiler's features of each
        config (NaN where it does not build)."""
        knobs = self.space.features(indices)
        if not self._compiled_features:
            return knobs
        return np.hstack([knobs, self._compile_table()[np.asarray(indices, dtype=np.int64)]])

    def _compile_table(self) -> np.ndarray:
        """Compile features of every config, one column per feature name (built on first use, over
        the builder's workers; its time is ``stats()["compile_s"]``, part of the tuner's time)."""
        if self._ctable is None:
            t0 = time.perf_counter()
            self._ctable = feature_matrix([f if isinstance(f, dict) else {}
                                           for f in self.ctx.compile_features(range(self.space.size))])
            self._compile_s = time.perf_counter() - t0
        return self._ctable

    def _new_model(self) -> Any:
        return (self.parts["model"] or self.make_model)(self.train_ct)

    def _score_fn(self):
        """The optimizer's objective: predicted score of an index array."""
        if self.space.size <= FULL_TABLE_MAX:
            table = self.model.predict(self.model_features(np.arange(self.space.size)))
            return lambda idx: table[idx]
        return lambda idx: self.model.predict(self.model_features(idx))

    def _elite(self) -> list[int]:
        """The best measured configs that ``rl_elite`` of the optimizer's starts use (none when off)."""
        if not self.option("rl_elite"):
            return []
        ys = np.asarray(self.ys)
        return [self.xs[i] for i in np.argsort(-ys, kind="stable")[:self.option("rl_elite_top")] if ys[i] > 0]

    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        self.flops = float(ctx.flops)
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.flops_max = 0.0
        self.train_ct = 0
        self.model: Any = None
        self.optimizer = self.parts["optimizer"] or self.make_optimizer()
        self.sampler = self.parts["sampler"] if self.parts["sampler"] is not None else self.make_sampler()
        self._fit_s = 0.0
        self._search_s = 0.0
        self._ctable: np.ndarray | None = None
        self._compile_s = 0.0
        self._compiled_features = self._use_compile_features(ctx)

    def _use_compile_features(self, ctx: TuningContext) -> bool:
        """Resolve the ``features`` option for this task; ``compile`` where it cannot work is refused
        before any trial is spent, ``auto`` falls back to knob features."""
        choice = self.option("features")
        if choice == "knob":
            return False
        why = ("needs a task that compiles ahead of measuring" if ctx.compile_features is None else
               f"compiles the whole space, {self.space.size} configs here (at most {COMPILE_TABLE_MAX})"
               if self.space.size > COMPILE_TABLE_MAX else None)
        if why is None:
            return True
        if choice == "auto":
            return False
        raise ConfigError(f"{self.name} features=compile {why}; use features=knob")

    def _record(self, results: Sequence[MeasureResult]) -> None:
        for r in results:
            y = self.flops / r.seconds if r.valid and r.seconds > 0 else 0.0
            self.xs.append(int(r.index))
            self.ys.append(y)
            self.flops_max = max(self.flops_max, y)
            self.visited.add(int(r.index))

    def stats(self) -> dict[str, float]:
        out: dict[str, float] = {
            "fits": float(self.train_ct),
            "model_queries": float(self.optimizer.n_queries),
            "fit_s": self._fit_s,
            "search_s": self._search_s,
        }
        if "features" in self.options:   # what features="auto" resolved to, and the table's compile time
            out.update(compile_features=float(self._compiled_features), compile_s=self._compile_s)
        out.update(self.optimizer.stats())
        if self.sampler is not None:
            out.update(self.sampler.stats())
        return out


class ModelBasedTuner(CostModelTuner):
    """Cost model + model optimizer (+ sampler); the AutoTVM plan/refit/epsilon-greedy loop.

    Loop options, where a tuner declares them (:data:`OPTIONAL_OPTIONS`): ``n_init`` (configs before the first
    fit), ``init`` (``spread`` initial configs), ``refit_every`` (refit after this many measurements),
    ``rl_elite``/``rl_elite_top`` (the optimizer starts from the best measured configs).

    State after :meth:`setup`, beyond :class:`CostModelTuner`'s: ``trials`` (current plan), ``trial_pt``.
    """

    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        self.trials: list[int] = []
        self.trial_pt = 0
        n_init = self.option("n_init") or self.params["plan_size"]
        self._next_update = n_init
        self._init_plan = spread_sample(self.space, n_init, self.rng) if self.option("init") == "spread" else []

    def _fit(self) -> None:
        """Refit ``self.model`` on ``self.xs`` / ``self.ys``."""
        self.model = self._new_model().fit(self.model_features(self.xs), np.asarray(self.ys))

    def _find_candidates(self, num: int) -> list[int]:
        """Up to ``num`` unvisited configs the model rates best (the next plan), through the sampler if any."""
        cands = self.optimizer.find_maximums(self.space, self._score_fn(), num, self.visited, self.rng,
                                             elite=self._elite())
        return cands if self.sampler is None else self.sampler.select(self.space, cands, self.visited, self.rng)

    def propose(self, n: int) -> list[int]:
        if self.option("refit_every") > 0 and len(self.xs) < self._next_update:   # stop at the next refit
            n = min(n, self._next_update - len(self.xs))
        out: list[int] = []
        while self.train_ct == 0 and self._init_plan and len(out) < n:
            index = self._init_plan.pop(0)
            if index not in self.visited:
                out.append(index)
                self.visited.add(index)
        return out + self._propose_plan(n - len(out)) if len(out) < n else out

    def _propose_plan(self, n: int) -> list[int]:
        """Walk the plan (random once inside its last ``epsilon`` share or past it)."""
        n_random = int(self.params["epsilon"] * self.params["plan_size"])
        out: list[int] = []
        while len(out) < n and len(self.visited) < self.space.size:
            while self.trial_pt < len(self.trials) and self.trials[self.trial_pt] in self.visited:
                self.trial_pt += 1
            if self.trial_pt >= len(self.trials) - n_random:
                index = self.space.sample(1, self.rng, exclude=self.visited)[0]
            else:
                index = int(self.trials[self.trial_pt])
            out.append(index)
            self.visited.add(index)
        return out

    def _replan(self) -> None:
        t0, c0 = time.perf_counter(), self._compile_s
        self._fit()
        t1 = time.perf_counter()
        self.trials = [int(i) for i in self._find_candidates(self.params["plan_size"])]
        self._fit_s += t1 - t0 - (self._compile_s - c0)   # the first fit may compile the space: compile_s
        self._search_s += time.perf_counter() - t1
        self.trial_pt = 0
        self.train_ct += 1
        if self.sampler is not None:     # refit once the sampled configs are measured (Chameleon's reference)
            self._next_update = len(self.xs) + max(len(self.trials), 1)
        else:
            self._next_update = self.params["plan_size"] * (self.train_ct + 1)
        if self.option("refit_every") > 0:
            self._next_update = len(self.xs) + self.option("refit_every")

    def update(self, results: Sequence[MeasureResult]) -> None:
        self._record(results)
        if len(self.xs) >= self._next_update and self.flops_max > 1e-6:
            self._replan()

    def load_history(self, results: Sequence[MeasureResult]) -> None:
        """Resume: take the records as measured, then fit and plan once, at the plan boundary
        they reached (so the next refit comes ``plan_size`` measurements later, as in an
        uninterrupted run)."""
        self._record(results)
        plan = self.params["plan_size"]
        if len(self.xs) >= plan and self.flops_max > 1e-6:
            self.train_ct = len(self.xs) // plan - 1
            self._replan()
