"""``ml2tuner`` and ``chameleon-ml2``: multi-level models around a model-based search.

ML2Tuner (Cha et al., arXiv 2411.10764 / LCTES 2025) adds two models to AutoTVM's loop:

- **ModelP** — the ``xgb`` baseline's cost model on knob features; it guides the explorer;
- **ModelV** — a validity classifier on the same knob features (:class:`~toolkit.tuning.models.validity.ValidityModel`),
  trained on every attempt so far, valid or not;
- **ModelA** — a cost model on knob features **plus the compiler's features** of each config
  (``TuningContext.compile_features``: compile without measuring, no board time):
  :class:`~toolkit.tuning.models.advanced.AdvancedCostModel`, a least-squares time model on the
  compiler's additive ``time.*`` terms whose residual boosted trees learn (plain boosted trees
  when the compiler reports no time terms).

One round: the explorer (simulated annealing guided by ModelP) proposes ``(alpha + 1) * N``
unmeasured candidates; ModelV drops the predicted-invalid ones; the rest are compiled to read
their features (a compile failure is recorded as an invalid config **without a trial** and kept as
a free negative label for ModelV); ModelA ranks the survivors and the top ``N`` are measured
(fewer than ``N`` survivors: more explorer batches, then random configs, then ModelV's likeliest
rejects top the round up); all three models are refitted before the next round, ModelA first so
that ModelP can also learn ModelA's predictions for the compiled, unmeasured configs (``p_from_a``,
an edgetune addition, by default where the compiler reports time terms: the explorer then searches
with what the compiler revealed). ``N`` is the ``plan_size`` option. Two more edgetune additions
keep what the compiler revealed in play: ModelA's best compiled, unmeasured configs of earlier
rounds rejoin each round's candidates (``carry``), and every reject of ModelV in a round is compiled
for the exploration share (``v_pool``), so a fast config ModelV wrongly rejects is found by ModelA.

The tuner is composed of parts: ModelP's factory and the explorer (an optimizer) as every cost-model
tuner's (:class:`~toolkit.tuning.tuners.model_based.CostModelTuner`), the compiled-features part
(:class:`~toolkit.tuning.tuners.compiled.CompiledFeatures`: compile, store, the transfer model's estimates)
and an optional sampler choosing the round's configs from ModelA's ranking (``chameleon-ml2``,
:mod:`toolkit.tuning.tuners.chameleon_ml2`, passes Chameleon's PPO agent and cluster sampling).

The choices the paper leaves open are listed in ``docs/tuners.md`` (section ``ml2tuner``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from toolkit.errors import ConfigError
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.tuners.base import PRETRAINED, TransferLearner, TuningContext, register, resolve_transfer
from toolkit.tuning.tuners.compiled import CompiledFeatures
from toolkit.tuning.tuners.ml2_advanced import AdvancedRanker
from toolkit.tuning.tuners.ml2_round import RoundPlanner
from toolkit.tuning.tuners.ml2_validity import ValidityFilter
from toolkit.tuning.tuners.model_based import CostModelTuner
from toolkit.tuning.tuners.options import ML2_OPTIONS, sa_optimizer, xgb_model

MAX_EMPTY_ROUNDS = 8
"""Rounds in a row whose every candidate failed to compile before ``propose`` gives up (returns nothing):
on a space where nothing builds the tuner ends instead of compiling forever."""


@register
class ML2Tuner(RoundPlanner, CostModelTuner, TransferLearner):
    """ML2Tuner: ModelP-guided simulated annealing, ModelV filter, ModelA re-ranking.

    >>> from toolkit.tuning.tuners.base import make_tuner
    >>> t = make_tuner("ml2tuner", seed=0, plan_size=8, alpha=1)
    >>> t.params["plan_size"], t.params["alpha"], t.params["precision"]
    (8, 1, 0.9)
    """

    name = "ml2tuner"
    options = ML2_OPTIONS

    def check_params(self) -> None:
        super().check_params()
        prior = self.params["transfer"]
        if prior not in (None, PRETRAINED) and not callable(getattr(prior, "predict_seconds", None)):
            raise ConfigError(f"option transfer={prior!r} is not a transfer model; pass a TransferModel (on the "
                              "command line: --transfer LOG_DIR_OR_MODEL)")

    # -- parts --------------------------------------------------------------------------------
    def make_model(self, fit: int) -> Any:
        return xgb_model(self.params, self.seed)(fit)

    def make_optimizer(self) -> SimulatedAnnealing:
        # Keep every candidate whatever its score sign: rank-loss scores are not throughputs.
        return sa_optimizer(self.params, min_score=None)

    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        p = self.params
        self.validity = ValidityFilter(p["precision"], p["v_hidden"])
        # a compile failure is an invalid config for ModelV, not a trial
        self.compiled = CompiledFeatures(ctx.compile_features, prior=resolve_transfer(p["transfer"], ctx.pretrained),
                                         on_failure=lambda index: self.validity.record(index, False))
        self.ranker = AdvancedRanker(self.compiled, self._features_a, self.space.features([0]).shape[1],
                                     max_rounds=p["max_rounds"], drop_invalid=p["a_invalid"] == "drop",
                                     prior_check=p["prior_check"])
        self.queue: list[int] = []
        self._n = {"rounds": 0, "candidates": 0, "v_explored": 0, "fallback": 0, "v_filled": 0}

    @property
    def model_a(self) -> Any:
        """ModelA as last fitted (``None`` before it is, or without compile features or ``use_a``)."""
        return self.ranker.model

    @property
    def model_v(self) -> Any:
        """ModelV as last fitted (``None`` before the first attempt)."""
        return self.validity.model

    def use_transfer(self, model: Any) -> None:
        """Start using ``model`` (a fitted TransferModel) from the next round on: whole-network tuning hands
        each task's tuner a model of the network's other records as they grow."""
        self.params["transfer"] = model
        if hasattr(self, "compiled"):
            self.compiled.use_prior(model)

    def resolved_transfer(self) -> Any:
        """The transfer model this tuner uses (``'pretrained'`` resolved once set up), or ``None``."""
        return self.compiled.prior if hasattr(self, "compiled") else None

    # -- features -------------------------------------------------------------------------------
    def _features_a(self, indices: Sequence[int]) -> np.ndarray:
        """ModelA's features: knob features + compile features (NaN where a config lacks one)."""
        return np.hstack([self.space.features(indices), self.compiled.matrix(indices)])

    @property
    def p_learns_from_a(self) -> bool:
        """Whether ModelP learns ModelA's predictions: ``auto`` when the compiler reports time terms
        (ModelA's time model; plain boosted trees on a CPU template's TIR features taught ModelP their
        own mistakes: a local run stuck at 0.73x MetaSchedule's speed, docs/tuners.md)."""
        choice = self.params["p_from_a"]
        return self.compiled.has_time_terms() if choice == "auto" else choice == "yes"

    # -- the three models ----------------------------------------------------------------------
    def _fit_p(self) -> None:
        """ModelP on the trials (failed = 0), optionally the free negatives (0) and ModelA's predictions."""
        xs, ys = list(self.xs), list(self.ys)
        comp = self.compiled
        if self.params["negatives_in_p"]:
            xs += sorted(comp.failed)
            ys += [0.0] * len(comp.failed)
        if self.p_learns_from_a and self.model_a is not None:
            done = set(self.xs)
            extra = [i for i in comp.features if i not in done]
            if extra:
                xs += extra
                pred = self.model_a.predict(self._features_a(extra)) * self.model_a.y_max_  # back to throughput
                ys += [float(v) for v in np.maximum(pred, 0.0)]
        elif comp.prior is not None:   # before ModelA: the explorer searches with the transfer model's estimates
            done = set(self.xs)
            extra = [i for i in comp.features if i not in done and comp.has_prior(i)]
            scale = comp.prior_scale(self.xs, self.ys, self.flops)
            xs += extra
            ys += [self.flops / (comp.prior_seconds(i) * scale) for i in extra]
        self.model = self._new_model().fit(self.model_features(xs), np.asarray(ys))

    def _fit_v(self) -> None:
        """ModelV on every attempt; with ``v_hidden`` also the post-compile model on compiled trials."""
        self.validity.fit(self.model_features, self._features_a if self.compiled.available else None, self.compiled,
                          self.seed + self._n["rounds"])

    def _fit_a(self) -> None:
        """ModelA on the measured configs with compile features (:class:`AdvancedRanker`)."""
        if self.params["use_a"] and self.compiled.available:
            self.ranker.fit(self.xs, self.ys, self.seed + self.train_ct)
        else:
            self.ranker.model = None

    def _rank(self, indices: list[int]) -> list[int]:
        """Best first by ModelA (ModelP before ModelA exists; input order before either)."""
        if not indices:
            return []
        comp = self.compiled
        if self.model_a is not None:
            scores = self.ranker.predict(indices)
        elif comp.prior is not None and all(comp.has_prior(i) for i in indices):
            scores = -np.array([comp.prior_seconds(i) for i in indices])
        elif self.model is not None:
            scores = self.model.predict(self.model_features(indices))
        else:
            return list(indices)
        return [indices[j] for j in np.argsort(-scores, kind="stable")]

    # -- ask/tell ----------------------------------------------------------------------------------
    def propose(self, n: int) -> list[int]:
        """Up to ``n`` configs of the current round; a new round (and refit) starts only when nothing
        is offered yet, so a ``plan_size`` below the loop's batch still refits every N trials."""
        out: list[int] = []
        empty = 0
        while len(out) < n and len(self.visited) + len(self.compiled.failed) < self.space.size:
            if not self.queue:
                if out:
                    break
                self.queue = [i for i in self._plan() if i not in self.visited]
                if not self.queue:   # the round only found compile failures: they are excluded now
                    empty += 1
                    if empty >= MAX_EMPTY_ROUNDS:
                        break        # nothing builds: the loop reports the space as exhausted
                    continue
            index = self.queue.pop(0)
            if index in self.visited or index in self.compiled.failed:
                continue
            out.append(index)
            self.visited.add(index)
        return out

    def update(self, results: Sequence[MeasureResult]) -> None:
        """Record the results; the models are refitted when the next round is planned. A result's own
        features may include what the measurement added (e.g. simulator counters), so ModelA's compile
        features always come from the compiler (lazily for resumed records)."""
        self._record(results)
        for r in results:
            self.validity.record(int(r.index), bool(r.valid))

    def load_history(self, results: Sequence[MeasureResult]) -> None:
        self.update(results)

    def stats(self) -> dict[str, float]:
        return {
            **super().stats(),
            **{k: float(x) for k, x in self._n.items()},
            "v_rejected": float(self.validity.rejected), "vh_rejected": float(self.validity.hidden_rejected),
            "compiled": float(self.compiled.compiled),
            "compile_failed": float(self.compiled.compile_failed),
            "compile_s": self.compiled.compile_s,
            **self.validity.stats(),
            **self.ranker.stats(),
        }


@register
class ML2TunerPlus(ML2Tuner):
    """``ml2tuner+``: ``ml2tuner`` starting from the transfer model edgetune ships for the task's board
    (``transfer="pretrained"``; cold where none is shipped): edgetune's default tuner, the best measured on the
    test set (docs/benchmarks.md, "Headline: the test set").

    >>> from toolkit.tuning.tuners.base import make_tuner
    >>> make_tuner("ml2tuner+").params["transfer"], make_tuner("ml2tuner").params["transfer"]
    ('pretrained', None)
    """

    name = "ml2tuner+"
    options = {**ML2Tuner.options, "transfer": replace(ML2Tuner.options["transfer"], default=PRETRAINED)}
