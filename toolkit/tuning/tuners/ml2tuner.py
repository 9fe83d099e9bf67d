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

import time
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from toolkit.errors import ConfigError
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.models.advanced import AdvancedCostModel, time_columns
from toolkit.tuning.models.validity import ValidityModel
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.tuners.base import PRETRAINED, Option, TransferLearner, TuningContext, register, resolve_transfer
from toolkit.tuning.tuners.compiled import PRIOR_KEY, CompiledFeatures
from toolkit.tuning.tuners.model_based import CostModelTuner
from toolkit.tuning.tuners.options import LOOP_OPTIONS, MODEL_OPTIONS, SA_OPTIONS, sa_optimizer, xgb_model

MAX_EMPTY_ROUNDS = 8
"""Rounds in a row whose every candidate failed to compile before ``propose`` gives up (returns nothing):
on a space where nothing builds the tuner ends instead of compiling forever."""

MIN_VALID_FOR_A = 4
"""ModelA is fitted once this many valid measurements have compile features; before that ModelP ranks."""


class PriorCheck:
    """Which ModelA ranks under transfer: the one on the transferred estimate until the one on the task's
    own features has ordered more of the measured pairs right, significantly.

    Both models rank each round before it is measured (out of sample); :meth:`score` counts, over the
    round's pairs of configs whose throughputs differ, those only one of the two orders right. The task's
    own model takes over once its wins exceed the prior's by ``z`` standard deviations of a fair coin
    (and at least ``min_pairs`` pairs split them); the counts are cumulative, so the choice settles.

    >>> check = PriorCheck()
    >>> check.score([3.0, 2.0, 1.0], prior=np.array([1.0, 2.0, 3.0]), own=np.array([3.0, 2.0, 1.0]))
    >>> check.own_right, check.prior_right, check.prefers_own()
    (3, 0, False)
    >>> for _ in range(4):
    ...     check.score([3.0, 2.0, 1.0], prior=np.array([1.0, 2.0, 3.0]), own=np.array([3.0, 2.0, 1.0]))
    >>> check.prefers_own()
    True
    """

    def __init__(self, z: float = 2.0, min_pairs: int = 10) -> None:
        self.z, self.min_pairs = z, min_pairs
        self.own_right = self.prior_right = 0
        self.seen = 0                        # trials already scored

    def score(self, measured: Sequence[float], prior: np.ndarray, own: np.ndarray) -> None:
        """Count the pairs of ``measured`` throughputs that one model's scores order right and the other's not."""
        y = np.asarray(measured, dtype=np.float64)
        i, j = np.triu_indices(len(y), k=1)
        differ = y[i] != y[j]
        i, j = i[differ], j[differ]
        sign = np.sign(y[i] - y[j])
        ok_prior = np.sign(prior[i] - prior[j]) == sign
        ok_own = np.sign(own[i] - own[j]) == sign
        self.own_right += int(np.sum(ok_own & ~ok_prior))
        self.prior_right += int(np.sum(ok_prior & ~ok_own))

    def prefers_own(self) -> bool:
        """Whether the task's own model has won significantly so far."""
        n = self.own_right + self.prior_right
        return n >= self.min_pairs and self.own_right - self.prior_right > self.z * n ** 0.5


class OwnModel:
    """ModelA on the task's own features: a cost model that never sees the transferred estimate's column."""

    def __init__(self, model: AdvancedCostModel, prior_col: int) -> None:
        self.model, self.prior_col = model, prior_col

    def _drop(self, X: np.ndarray) -> np.ndarray:
        return np.delete(np.asarray(X, dtype=np.float64), self.prior_col, axis=1)

    def fit(self, X: np.ndarray, y: np.ndarray) -> OwnModel:
        self.model.fit(self._drop(X), y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict(self._drop(X))

    @property
    def y_max_(self) -> float:
        return self.model.y_max_


@register
class ML2Tuner(CostModelTuner, TransferLearner):
    """ML2Tuner: ModelP-guided simulated annealing, ModelV filter, ModelA re-ranking.

    >>> from toolkit.tuning.tuners.base import make_tuner
    >>> t = make_tuner("ml2tuner", seed=0, plan_size=8, alpha=1)
    >>> t.params["plan_size"], t.params["alpha"], t.params["precision"]
    (8, 1, 0.9)
    """

    name = "ml2tuner"
    options = {
        "plan_size": replace(LOOP_OPTIONS["plan_size"], default=8,
                             doc="N: configs measured per round; all three models are refitted every round"),
        "alpha": Option(7, "the explorer proposes (alpha + 1) * N candidates per round", int),
        "epsilon": replace(LOOP_OPTIONS["epsilon"], default=0.0,
                           doc="fraction of each round drawn at random (still filtered by ModelV and the compiler)"),
        **{k: MODEL_OPTIONS[k] for k in ("loss", "max_rounds")},      # ModelP: knob features
        **SA_OPTIONS,
        "precision": Option(0.9, "ModelV threshold: smallest with cross-validated precision of 'valid' >= this",
                            float, low=0, high=1, low_open=True),
        "top_up": Option(3, "when fewer than N candidates survive the filters, the explorer proposes up to this many "
                         "more batches, then random configs (through the same filters) fill the round", int),
        "a_pool": Option(0, "random unmeasured configs added to each round's candidates once ModelA exists (filtered "
                         "by ModelV, compiled and ranked by ModelA with the explorer's)", int),
        "carry": Option(16, "ModelA's best compiled, unmeasured configs of earlier rounds rejoining each round's "
                        "candidates (no new compile; filtered again by the refitted ModelV); 0 = the paper's round",
                        int),
        "v_explore": Option(0.25, "share of each round given to candidates ModelV rejects that compile, ModelA's best "
                            "(exploration)", float, low=0, high=1),
        "v_pool": Option(64, "ModelV's rejects compiled per exploration slot (the explorer's best first; 64: all of "
                         "a round's); ModelA picks among those and the rejects compiled before", int, low=1),
        "round_order": Option("model", "the order a round is measured in: model (all of its configs best first by "
                              "ModelA, the exploration picks among ModelV's rejects included) or explore_last "
                              "(ModelA's choices best first, then the exploration picks)", str,
                              ("model", "explore_last")),
        "v_hidden": Option(True, "after compiling, a second validity model on knob + compile features filters again "
                           "(an edgetune addition; False = the paper's pipeline)", bool),
        "negatives_in_p": Option(True, "compile failures found while reading features enter ModelP as throughput 0",
                                 bool),
        "a_invalid": Option("zero", "invalid trials in ModelA's training set: zero (throughput 0) or drop", str,
                            ("zero", "drop")),
        "p_from_a": Option("auto", "ModelP also learns ModelA's predictions for the compiled, unmeasured configs, so "
                           "the explorer searches with what the compiler revealed: yes, no, or auto (only when ModelA "
                           "has a time model on the compiler's time terms, as on VTA)", str, ("auto", "yes", "no")),
        "use_a": Option(True, "rank survivors with ModelA (False: with ModelP, the ablation without hidden features)",
                        bool),
        "transfer": Option(None, "a TransferModel trained on other tasks' records, 'pretrained' (the model edgetune "
                           "ships for the board, if any) or None (start from nothing): it ranks the first round's "
                           "compiled configs, and ModelA learns this task's correction to its estimate (an edgetune "
                           "addition; docs/tuners.md, section transfer)", object),
        "prior_pool": Option(1024, "with transfer: random configs compiled and ranked by the transfer model for the "
                             "first round", int),
        "prior_check": Option(True, "with transfer: ModelA is also fitted without the transferred estimate, and both "
                              "rank each round before it is measured; once the task's own model has ordered the "
                              "measured pairs significantly better, it ranks instead (transfer that cannot hurt for "
                              "long; docs/tuners.md, section transfer)", bool),
    }

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
        self.compiled = CompiledFeatures(ctx.compile_features, prior=resolve_transfer(self.params["transfer"],
                                                                                     ctx.pretrained),
                                         on_failure=self._compile_failed)
        self.v_index: list[int] = []             # ModelV data: every trial and every free negative
        self.v_valid: list[bool] = []
        self.queue: list[int] = []
        self.model_v: ValidityModel | None = None
        self.model_vh: ValidityModel | None = None
        self.model_a: AdvancedCostModel | OwnModel | None = None
        self.prior_check = PriorCheck()
        self._a_pair: dict[str, Any] = {}        # with transfer: ModelA with and without the prior, as last fitted
        self._n = {"rounds": 0, "candidates": 0, "v_rejected": 0, "v_explored": 0,
                   "a_fits": 0, "fallback": 0, "vh_rejected": 0, "v_filled": 0}
        self._v_s = 0.0

    def _compile_failed(self, index: int) -> None:
        """A compile failure is an invalid config for ModelV, not a trial."""
        self.v_index.append(index)
        self.v_valid.append(False)

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
        if not self.v_index:
            return
        t0 = time.perf_counter()
        seed = self.seed + self._n["rounds"]
        self.model_v = ValidityModel(precision=self.params["precision"], seed=seed)
        self.model_v.fit(self.model_features(self.v_index), np.asarray(self.v_valid))
        self.model_vh = None
        if self.params["v_hidden"] and self.compiled.available:
            rows = [(i, ok) for i, ok in zip(self.v_index, self.v_valid) if i in self.compiled]
            if rows:
                self.model_vh = ValidityModel(precision=self.params["precision"], seed=seed)
                self.model_vh.fit(self._features_a([i for i, _ in rows]), np.asarray([ok for _, ok in rows]))
        self._v_s += time.perf_counter() - t0

    def _fit_a(self) -> None:
        """ModelA on measured configs with compile features (compiling resumed records lazily). With a
        transfer model and ``prior_check``, two: one on the transferred estimate, one on the task's own
        features alone; :class:`PriorCheck` picks which ranks."""
        self.model_a = None
        comp = self.compiled
        if not self.params["use_a"] or not comp.available:
            return
        missing = [i for i in self.xs if i not in comp and i not in comp.failed]
        if missing:
            comp.compile(missing)
        keep = [(x, y) for x, y in zip(self.xs, self.ys)
                if x in comp and (y > 0 or self.params["a_invalid"] == "zero")]
        if sum(1 for _, y in keep if y > 0) < MIN_VALID_FOR_A:
            return
        xs = [x for x, _ in keep]
        X, y = self._features_a(xs), np.asarray([v for _, v in keep])
        offset = self.space.features([xs[0]]).shape[1]
        seed = self.seed + self.train_ct
        self._n["a_fits"] += 1
        if comp.prior is None:
            self.model_a = AdvancedCostModel(**time_columns(comp.keys, offset), seed=seed,
                                             max_rounds=self.params["max_rounds"]).fit(X, y)
            return
        prior_col = offset + comp.keys.index(PRIOR_KEY)  # the time model is a + b * (transfer estimate)
        with_prior = AdvancedCostModel(term_cols=[prior_col], group_col=None, seed=seed,
                                       max_rounds=self.params["max_rounds"]).fit(X, y)
        self._a_pair = {"prior": with_prior}
        if self.params["prior_check"]:
            own_keys = [k for k in comp.keys if k != PRIOR_KEY]
            own = AdvancedCostModel(**time_columns(own_keys, offset), seed=seed, max_rounds=self.params["max_rounds"])
            self._a_pair["own"] = OwnModel(own, prior_col).fit(X, y)
            self._n["a_fits"] += 1
        self.model_a = self._a_pair["own"] if self.prior_check.prefers_own() else with_prior

    def _score_pair(self) -> None:
        """Score last round's two ModelAs on the configs measured since (before refitting them)."""
        start, self.prior_check.seen = self.prior_check.seen, len(self.xs)
        if len(self._a_pair) < 2:
            return
        new = [(x, y) for x, y in zip(self.xs[start:], self.ys[start:]) if x in self.compiled]
        if len(new) > 1:
            X = self._features_a([x for x, _ in new])
            self.prior_check.score([y for _, y in new], self._a_pair["prior"].predict(X),
                                   self._a_pair["own"].predict(X))

    def _rank(self, indices: list[int]) -> list[int]:
        """Best first by ModelA (ModelP before ModelA exists; input order before either)."""
        if not indices:
            return []
        comp = self.compiled
        if self.model_a is not None:
            scores = self.model_a.predict(self._features_a(indices))
        elif comp.prior is not None and all(comp.has_prior(i) for i in indices):
            scores = -np.array([comp.prior_seconds(i) for i in indices])
        elif self.model is not None:
            scores = self.model.predict(self.model_features(indices))
        else:
            return list(indices)
        return [indices[j] for j in np.argsort(-scores, kind="stable")]

    def _filter_v(self, cands: list[int]) -> tuple[list[int], list[int]]:
        """(kept, rejected) by ModelV, both in input order."""
        if not cands or self.model_v is None:
            return list(cands), []
        ok = self.model_v.predict(self.model_features(cands))
        self._n["v_rejected"] += int((~ok).sum())
        return [c for c, o in zip(cands, ok) if o], [c for c, o in zip(cands, ok) if not o]

    # -- one round -------------------------------------------------------------------------------
    def _explore(self, num: int, exclude: set[int]) -> list[int]:
        """Up to ``num`` candidates outside ``exclude``, best first (random while ModelP is unfitted)."""
        if self.model is None:
            return self.space.sample(num, self.rng, exclude=exclude)
        found = self.optimizer.find_maximums(self.space, self._score_fn(), num, exclude, self.rng,
                                             elite=self._elite())
        if len(found) < num:  # the optimizer saw too few distinct points: top up at random
            found += self.space.sample(num - len(found), self.rng, exclude=exclude | set(found))
        return [int(i) for i in found]

    def _survivors(self, cands: list[int]) -> tuple[list[int], list[int]]:
        """(compiled candidates that ModelV — and the post-compile model — let through, the rejects)."""
        kept, rejected = self._filter_v(cands)
        alive = self.compiled.compile(kept)
        if alive and self.model_vh is not None:
            ok = self.model_vh.predict(self._features_a(alive))
            self._n["vh_rejected"] += int((~ok).sum())
            rejected = [c for c, o in zip(alive, ok) if not o] + rejected
            alive = [c for c, o in zip(alive, ok) if o]
        return alive, rejected

    def _top_up(self, alive: list[int], rejected: list[int], exclude: set[int]) -> tuple[list[int], list[int]]:
        """Fewer than N survivors: up to ``top_up`` more explorer batches (the next best by ModelP),
        then random unmeasured configs, all through the same filters; when still fewer than N, ModelV's
        most-likely-valid rejects that compile fill the round (so a too-strict ModelV cannot stall the
        search, and a round is not spent measuring one or two configs)."""
        n, k = self.params["plan_size"], (self.params["alpha"] + 1) * self.params["plan_size"]
        seen = set(exclude) | set(alive) | set(rejected)
        for _ in range(self.params["top_up"]):
            if len(alive) >= n:
                return alive, rejected
            more = self._explore(k, seen)
            if not more:
                break
            seen |= set(more)
            self._n["candidates"] += len(more)
            a, r = self._survivors(more)
            alive, rejected = alive + a, rejected + r
        if len(alive) >= n:
            return alive, rejected
        self._n["fallback"] += 1
        a, r = self._survivors(self.space.sample(4 * k, self.rng, exclude=seen))
        alive, rejected = alive + a, rejected + r
        need = n - len(alive)
        if need <= 0 or not rejected or self.model_v is None:
            return alive, rejected
        # the filtered supply is spent: ModelV's most-likely-valid rejects that compile fill the round
        p = self.model_v.predict_proba(self.model_features(rejected))
        order = [rejected[j] for j in np.argsort(-p, kind="stable")]
        fill: list[int] = []
        for start in range(0, len(order), 4 * need):
            fill += self.compiled.compile(order[start:start + 4 * need])[: need - len(fill)]
            if len(fill) >= need:
                break
        self._n["v_filled"] += len(fill)
        return alive + fill, [c for c in rejected if c not in set(fill)]

    def _choose(self, alive: list[int]) -> list[int]:
        """The configs to measure this round, best first: ModelA's top N, or what the sampler picks from
        ModelA's ranking."""
        if self.sampler is None:
            return self._rank(alive)[: self.params["plan_size"]]
        if len(alive) <= 1:
            return list(alive)
        return self.sampler.select(self.space, alive, self.visited, self.rng, ranking=self._rank(alive))

    def _explore_rejects(self, plan: list[int], rejected: list[int]) -> list[int]:
        """Give ``v_explore * N`` slots (stochastically rounded) to ModelV's rejects: the explorer's
        best ``v_pool * k`` rejects are compiled (failures are free negatives) and ModelA's best of
        those and of the rejects compiled before (carried ones) that pass the post-compile validity
        model, if any, are measured, so ModelV's mistakes can be found and unlearnt."""
        n = self.params["plan_size"]
        k = int(self.params["v_explore"] * n + self.rng.random())
        if not k or not rejected:
            return plan
        head = rejected[: self.params["v_pool"] * k]
        ready = [c for c in rejected[len(head):] if c in self.compiled]   # compiled already: free to consider
        pool = [c for c in self.compiled.compile(head) + ready if c not in plan]
        if pool and self.model_vh is not None:  # the post-compile check still applies
            pool = [c for c, ok in zip(pool, self.model_vh.predict(self._features_a(pool))) if ok]
        pool = self._rank(pool)
        extra = pool[:k]
        self._n["v_explored"] += len(extra)
        return plan[: max(0, n - len(extra))] + extra

    def _carried(self, taken: set[int]) -> list[int]:
        """ModelA's best ``carry`` compiled, unmeasured configs outside ``taken`` (earlier rounds' leftovers)."""
        if not self.params["carry"] or self.model_a is None:
            return []
        left = [i for i in self.compiled.features if i not in self.visited and i not in taken]
        return self._rank(left)[: self.params["carry"]]

    def _plan(self) -> list[int]:
        """Refit the models on everything so far and build the next round's measurement list."""
        n = self.params["plan_size"]
        t0 = time.perf_counter()
        self._score_pair()
        a_first = self.p_learns_from_a
        if a_first:
            self._fit_a()  # ModelP learns from it
        if self.flops_max > 1e-6:
            self._fit_p()
            self.train_ct += 1
        self._fit_v()
        if not a_first:
            self._fit_a()
        t1 = time.perf_counter()
        exclude = self.visited | self.compiled.failed
        if self.model is None and self.compiled.prior is not None:   # nothing measured: the transfer model picks
            cands = self.space.sample(max(self.params["prior_pool"], (self.params["alpha"] + 1) * n), self.rng,
                                      exclude=exclude)
        else:
            cands = self._explore((self.params["alpha"] + 1) * n, exclude)
        if self.params["a_pool"] and self.model_a is not None:
            cands += self.space.sample(self.params["a_pool"], self.rng, exclude=exclude | set(cands))
        carried = self._carried(set(cands))   # ranking the leftovers is search time too
        self._search_s += time.perf_counter() - t1
        self._fit_s += t1 - t0
        self._n["rounds"] += 1
        self._n["candidates"] += len(cands)
        cands += carried
        alive, rejected = self._survivors(cands)
        alive, rejected = self._top_up(alive, rejected, exclude)
        plan = self._explore_rejects(self._choose(alive), rejected)
        n_random = min(int(self.params["epsilon"] * n), len(plan))
        if n_random:
            rand = self.compiled.compile(self._filter_v(self.space.sample(
                4 * n_random, self.rng, exclude=exclude | set(plan)))[0])[:n_random]
            plan = plan[: len(plan) - len(rand)] + rand
        return self._rank(plan) if self.params["round_order"] == "model" else plan

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
            self.v_index.append(int(r.index))
            self.v_valid.append(bool(r.valid))

    def load_history(self, results: Sequence[MeasureResult]) -> None:
        self.update(results)

    def stats(self) -> dict[str, float]:
        v = self.model_v
        return {
            **super().stats(),
            **{k: float(x) for k, x in self._n.items()},
            "compiled": float(self.compiled.compiled),
            "compile_failed": float(self.compiled.compile_failed),
            "compile_s": self.compiled.compile_s,
            "v_fit_s": self._v_s,
            "v_threshold": float(v.threshold_) if v is not None else 0.0,
            "v_cv_precision": float(v.cv_precision_) if v is not None else 0.0,
            "prior_dropped": float(self.model_a is not None and self.model_a is self._a_pair.get("own")),
            "pairs_own_right": float(self.prior_check.own_right),
            "pairs_prior_right": float(self.prior_check.prior_right),
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
