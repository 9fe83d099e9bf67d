"""AutoTVM's model-based tuning loop (``autotvm/tuner/model_based_tuner.py``), ask/tell.

The first ``plan_size`` proposals are random. Every ``plan_size`` measurements the cost model
is refitted on everything measured (failed configs count as throughput 0) and the optimizer
proposes a plan of ``plan_size`` candidates; proposals walk the plan, skipping visited
configs, and the last 5% of each plan (``int(0.05 * plan_size)``) are random unvisited
configs (epsilon-greedy). Subclasses (Chameleon, ML2Tuner) override the hooks
:meth:`~ModelBasedTuner._make_model`, :meth:`~ModelBasedTuner._features`,
:meth:`~ModelBasedTuner._fit` and :meth:`~ModelBasedTuner._find_candidates`.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from toolkit.errors import ConfigError
from toolkit.tuning.models.cost import XGBCostModel
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.tuners.base import Option, Tuner, TuningContext

FULL_TABLE_MAX = 1 << 17
"""Spaces up to this size are scored in one batch after each fit and the optimizer reads that table
(the same scores as querying the model point by point, far fewer model calls)."""

COMPILE_TABLE_MAX = 1 << 13
"""``features="compile"`` compiles every config of the space once; larger spaces are refused."""

FEATURE_OPTION = Option("knob", "cost-model features: knob (the knob values, AutoTVM feature_type=knob), compile "
                        "(knob values + what the compiler reports for each config, the analogue of AutoTVM's "
                        "itervar features; compiles the whole space once, at most 8192 configs) or auto (compile "
                        "where the task compiles ahead and the space allows, else knob)", str,
                        ("knob", "compile", "auto"))


def feature_matrix(feats: Sequence[dict[str, float]]) -> np.ndarray:
    """One row per config, one column per feature name (sorted); NaN where a config lacks it (an
    empty dict: the build failed).

    >>> feature_matrix([{"b": 2.0, "a": 1.0}, {}]).tolist()
    [[1.0, 2.0], [nan, nan]]
    """
    keys = sorted({k for f in feats for k in f})
    rows = [[f.get(k, np.nan) for k in keys] for f in feats]
    return np.array(rows, dtype=np.float64).reshape(len(feats), len(keys))


class ModelBasedTuner(Tuner):
    """Cost model + model optimizer; the AutoTVM plan/refit/epsilon-greedy loop.

    State after :meth:`setup`: ``xs`` (measured indices), ``ys`` (throughputs, 0 if failed),
    ``trials`` (current plan), ``trial_pt``, ``train_ct`` (fits so far), ``model`` (the
    fitted cost model or ``None``), ``optimizer``.
    """

    options = {
        "plan_size": Option(64, "refit the cost model and plan this many candidates every plan_size measurements", int),
        "epsilon": Option(0.05, "fraction of each plan drawn at random (AutoTVM: 0.05)", float),
    }

    # -- hooks ---------------------------------------------------------------------------
    def _make_model(self) -> Any:
        """A fresh, unfitted cost model (sklearn style ``fit``/``predict``)."""
        return XGBCostModel(loss="rank", seed=self.seed, plan_size=self.params["plan_size"])

    def _make_optimizer(self) -> SimulatedAnnealing:
        """The model optimizer (AutoTVM's SA defaults)."""
        return SimulatedAnnealing()

    def _features(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
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

    def _fit(self) -> None:
        """Refit ``self.model`` on ``self.xs`` / ``self.ys``."""
        self.model = self._make_model().fit(self._features(self.xs), np.asarray(self.ys))

    def _score_fn(self):
        """The optimizer's objective: predicted score of an index array."""
        if self.space.size <= FULL_TABLE_MAX:
            table = self.model.predict(self._features(np.arange(self.space.size)))
            return lambda idx: table[idx]
        return lambda idx: self.model.predict(self._features(idx))

    def _find_candidates(self, num: int) -> list[int]:
        """Up to ``num`` unvisited configs the model rates best (the next plan)."""
        return self.optimizer.find_maximums(self.space, self._score_fn(), num, self.visited, self.rng)

    # -- ask/tell --------------------------------------------------------------------------
    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        self.flops = float(ctx.extra.get("flops", 1.0))
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.flops_max = 0.0
        self.trials: list[int] = []
        self.trial_pt = 0
        self.train_ct = 0
        self.model: Any = None
        self.optimizer = self._make_optimizer()
        self._fit_s = 0.0
        self._search_s = 0.0
        self._ctable: np.ndarray | None = None
        self._compile_s = 0.0
        self._compiled_features = self._use_compile_features(ctx)

    def _use_compile_features(self, ctx: TuningContext) -> bool:
        """Resolve the ``features`` option for this task; ``compile`` where it cannot work is refused
        before any trial is spent, ``auto`` falls back to knob features."""
        choice = self.params.get("features", "knob")
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

    def propose(self, n: int) -> list[int]:
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

    def _record(self, results: Sequence[MeasureResult]) -> None:
        for r in results:
            y = self.flops / r.seconds if r.valid and r.seconds > 0 else 0.0
            self.xs.append(int(r.index))
            self.ys.append(y)
            self.flops_max = max(self.flops_max, y)
            self.visited.add(int(r.index))

    def _replan(self) -> None:
        t0, c0 = time.perf_counter(), self._compile_s
        self._fit()
        t1 = time.perf_counter()
        self.trials = [int(i) for i in self._find_candidates(self.params["plan_size"])]
        self._fit_s += t1 - t0 - (self._compile_s - c0)   # the first fit may compile the space: compile_s
        self._search_s += time.perf_counter() - t1
        self.trial_pt = 0
        self.train_ct += 1

    def update(self, results: Sequence[MeasureResult]) -> None:
        self._record(results)
        if len(self.xs) >= self.params["plan_size"] * (self.train_ct + 1) and self.flops_max > 1e-6:
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

    def stats(self) -> dict[str, float]:
        out: dict[str, float] = {
            "fits": float(self.train_ct),
            "model_queries": float(self.optimizer.n_queries),
            "fit_s": self._fit_s,
            "search_s": self._search_s,
        }
        if "features" in self.options:   # what features="auto" resolved to, and the table's compile time
            out.update(compile_features=float(self._compiled_features), compile_s=self._compile_s)
        return out
