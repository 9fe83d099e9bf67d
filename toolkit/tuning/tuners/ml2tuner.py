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

``chameleon-ml2`` replaces the explorer by Chameleon's reinforcement-learning search and keeps its
adaptive sampling: the RL candidates pass ModelV and the compiler, are clustered on the cardinal
knobs with Chameleon's knee rule for k, and from each cluster the member ModelA rates best is
measured; ModelA's best other survivors fill the round up to N (``fill_to_n``).

The choices the paper leaves open are listed in ``docs/tuners.md`` (section ``ml2tuner``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from toolkit.tuning.models.advanced import TIME_PREFIX, AdvancedCostModel, time_columns
from toolkit.errors import ConfigError
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.search.sampling import cardinal_knobs, select_k
from toolkit.tuning.tuners.base import Option, TuningContext, register
from toolkit.tuning.tuners.chameleon import MODEL_OPTIONS, PLUS_OPTIONS, RL_OPTIONS, SAMPLING_OPTIONS, rl_optimizer
from toolkit.tuning.tuners.xgb import XGBTuner
from toolkit.tuning.models.validity import ValidityModel

MAX_EMPTY_ROUNDS = 8
"""Rounds in a row whose every candidate failed to compile before ``propose`` gives up (returns nothing):
on a space where nothing builds the tuner ends instead of compiling forever."""

PRIOR_KEY = "time.prior"
"""The compile feature holding the transfer model's estimate (seconds) of a config."""

MIN_VALID_FOR_A = 4
"""ModelA is fitted once this many valid measurements have compile features; before that ModelP ranks."""


@register
class ML2Tuner(XGBTuner):
    """ML2Tuner: ModelP-guided simulated annealing, ModelV filter, ModelA re-ranking.

    >>> from toolkit.tuning.tuners.base import make_tuner
    >>> t = make_tuner("ml2tuner", seed=0, plan_size=8, alpha=1)
    >>> t.params["plan_size"], t.params["alpha"], t.params["precision"]
    (8, 1, 0.9)
    """

    name = "ml2tuner"
    options = {
        **{k: v for k, v in XGBTuner.options.items() if k != "features"},   # ModelP: knob features
        "plan_size": Option(8, "N: configs measured per round; all three models are refitted every round", int),
        "alpha": Option(7, "the explorer proposes (alpha + 1) * N candidates per round", int),
        "epsilon": Option(0.0, "fraction of each round drawn at random (still filtered by ModelV and the compiler)",
                          float),
        "precision": Option(0.9, "ModelV threshold: smallest with cross-validated precision of 'valid' >= this",
                            float),
        "top_up": Option(3, "when fewer than N candidates survive the filters, the explorer proposes up to this many "
                         "more batches, then random configs (through the same filters) fill the round", int),
        "a_pool": Option(0, "random unmeasured configs added to each round's candidates once ModelA exists (filtered "
                         "by ModelV, compiled and ranked by ModelA with the explorer's)", int),
        "carry": Option(16, "ModelA's best compiled, unmeasured configs of earlier rounds rejoining each round's "
                        "candidates (no new compile; filtered again by the refitted ModelV); 0 = the paper's round",
                        int),
        "v_explore": Option(0.25, "share of each round given to candidates ModelV rejects that compile, ModelA's best "
                            "(exploration)", float),
        "v_pool": Option(64, "ModelV's rejects compiled per exploration slot (the explorer's best first; 64: all of "
                         "a round's); ModelA picks among those and the rejects compiled before", int),
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
        "prior_pool": Option(512, "with transfer: random configs compiled and ranked by the transfer model for the "
                             "first round", int),
    }

    def check_params(self) -> None:
        super().check_params()
        prior = self.params["transfer"]
        if prior not in (None, "pretrained") and not callable(getattr(prior, "predict_seconds", None)):
            raise ConfigError(f"option transfer={prior!r} is not a transfer model; pass a TransferModel (on the "
                              "command line: --transfer LOG_DIR_OR_MODEL)")

    # -- setup / hooks -----------------------------------------------------------------------
    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        prior = self.params["transfer"]
        if prior == "pretrained":   # the model edgetune ships for the task's board, if any
            prior = ctx.extra["pretrained"]() if "pretrained" in ctx.extra else None
        self.prior = prior if ctx.compile_features is not None else None
        self.failed: set[int] = set()            # compile failures found for features: invalid, never trials
        self.hidden: dict[int, dict[str, float]] = {}
        self.hidden_keys: list[str] = []         # ModelA's compile-feature columns, in first-seen order
        self._hidden_key_set: set[str] = set()
        self.v_index: list[int] = []             # ModelV data: every trial and every free negative
        self.v_valid: list[bool] = []
        self.queue: list[int] = []
        self.model_v: ValidityModel | None = None
        self.model_vh: ValidityModel | None = None
        self.model_a: AdvancedCostModel | None = None
        self._n = {"rounds": 0, "candidates": 0, "v_rejected": 0, "v_explored": 0, "compiled": 0,
                   "compile_failed": 0, "a_fits": 0, "fallback": 0, "vh_rejected": 0, "v_filled": 0}
        self._compile_s = 0.0
        self._v_s = 0.0

    def make_optimizer(self) -> SimulatedAnnealing:
        # Keep every candidate whatever its score sign: rank-loss scores are not throughputs.
        return SimulatedAnnealing(n_chains=self.params["sa_chains"], n_steps=self.params["sa_steps"],
                                  early_stop=self.params["sa_early_stop"], persistent=self.params["sa_persistent"],
                                  min_score=None)

    def _fit(self) -> None:
        """ModelP on the trials (failed = 0), optionally the free negatives (0) and ModelA's predictions."""
        xs, ys = list(self.xs), list(self.ys)
        if self.params["negatives_in_p"]:
            xs += sorted(self.failed)
            ys += [0.0] * len(self.failed)
        if self._p_from_a() and self.model_a is not None:
            done = set(self.xs)
            extra = [i for i in self.hidden if i not in done]
            if extra:
                xs += extra
                pred = self.model_a.predict(self._features_a(extra)) * self.model_a.y_max_  # back to throughput
                ys += [float(v) for v in np.maximum(pred, 0.0)]
        elif self.prior is not None:   # before ModelA: the explorer searches with the transfer model's estimates
            done = set(self.xs)
            extra = [i for i in self.hidden if i not in done and PRIOR_KEY in self.hidden[i]]
            scale = self._prior_scale()
            xs += extra
            ys += [self.flops / (self.hidden[i][PRIOR_KEY] * scale) for i in extra]
        self.model = self._new_model().fit(self._features(xs), np.asarray(ys))

    def _p_from_a(self) -> bool:
        """Whether ModelP learns ModelA's predictions: ``auto`` when the compiler reports time terms
        (ModelA's time model; plain boosted trees on a CPU template's TIR features taught ModelP their
        own mistakes: a local run stuck at 0.73x MetaSchedule's speed, docs/tuners.md)."""
        choice = self.params["p_from_a"]
        if choice == "auto":
            return any(k.startswith(TIME_PREFIX) for k in self.hidden_keys)
        return choice == "yes"

    def _explore(self, num: int, exclude: set[int]) -> list[int]:
        """Up to ``num`` candidates outside ``exclude``, best first (random while ModelP is unfitted)."""
        if self.model is None:
            return self.space.sample(num, self.rng, exclude=exclude)
        found = self._search(num, exclude)
        if len(found) < num:  # the annealer saw too few distinct points: top up at random
            found += self.space.sample(num - len(found), self.rng, exclude=exclude | set(found))
        return [int(i) for i in found]

    def _search(self, num: int, exclude: set[int]) -> list[int]:
        """The explorer's best ``num`` candidates by ModelP outside ``exclude``."""
        return self.optimizer.find_maximums(self.space, self._score_fn(), num, exclude, self.rng)

    # -- compile-time features ------------------------------------------------------------------
    def _compile(self, indices: Sequence[int]) -> list[int]:
        """Compile the configs without features yet; returns those that compiled (in input order).

        Compile failures join ``failed`` and ModelV's data as invalid; they are not trials."""
        todo = [i for i in indices if i not in self.hidden and i not in self.failed]
        if todo and self.ctx.compile_features is not None:
            t0 = time.perf_counter()
            out = self.ctx.compile_features(todo)
            self._compile_s += time.perf_counter() - t0
            self._n["compiled"] += len(todo)
            for i, feat in zip(todo, out):
                if isinstance(feat, MeasureResult):
                    self.failed.add(i)
                    self.v_index.append(i)
                    self.v_valid.append(False)
                    self._n["compile_failed"] += 1
                else:
                    self._store_hidden(i, feat)
            self._add_prior([i for i in todo if i in self.hidden])
        elif todo:
            for i in todo:
                self.hidden[i] = {}
        return [i for i in indices if i not in self.failed]

    def use_transfer(self, model: Any) -> None:
        """Start using ``model`` (a fitted TransferModel) from the next round on: whole-network tuning hands
        each task's tuner a model of the network's other records as they grow."""
        self.params["transfer"] = model
        if not hasattr(self, "ctx") or self.ctx.compile_features is None:
            return
        self.prior = model
        for i in self.hidden:
            self.hidden[i].pop(PRIOR_KEY, None)
        self._add_prior(list(self.hidden))

    def resolved_transfer(self) -> Any:
        """The transfer model this tuner uses (``'pretrained'`` resolved once set up), or ``None``."""
        return getattr(self, "prior", None)

    def _add_prior(self, indices: Sequence[int]) -> None:
        """The transfer model's seconds of freshly compiled configs, as the compile feature ``PRIOR_KEY``."""
        if self.prior is None or not indices:
            return
        pred = self.prior.predict_seconds([self.hidden[i] for i in indices])
        for i, v in zip(indices, pred):
            self.hidden[i][PRIOR_KEY] = float(v)
        if PRIOR_KEY not in self._hidden_key_set:
            self._hidden_key_set.add(PRIOR_KEY)
            self.hidden_keys.append(PRIOR_KEY)

    def _prior_scale(self) -> float:
        """Measured / predicted seconds (geometric mean over the valid trials; 1 before any)."""
        ratios = [self.flops / y / self.hidden[x][PRIOR_KEY] for x, y in zip(self.xs, self.ys)
                  if y > 0 and PRIOR_KEY in self.hidden.get(x, {})]
        return float(np.exp(np.mean(np.log(ratios)))) if ratios else 1.0

    def _store_hidden(self, index: int, feat: dict[str, float]) -> None:
        self.hidden[index] = {k: float(v) for k, v in feat.items()}
        for k in feat:
            if k not in self._hidden_key_set:
                self._hidden_key_set.add(k)
                self.hidden_keys.append(k)

    def _features_a(self, indices: Sequence[int]) -> np.ndarray:
        """ModelA's features: knob features + compile features (NaN where a config lacks one)."""
        hid = np.array([[self.hidden.get(i, {}).get(k, np.nan) for k in self.hidden_keys] for i in indices],
                       dtype=np.float64).reshape(len(indices), len(self.hidden_keys))
        return np.hstack([self.space.features(indices), hid])

    # -- the three models ----------------------------------------------------------------------
    def _fit_v(self) -> None:
        """ModelV on every attempt; with ``v_hidden`` also the post-compile model on compiled trials."""
        if not self.v_index:
            return
        t0 = time.perf_counter()
        seed = self.seed + self._n["rounds"]
        self.model_v = ValidityModel(precision=self.params["precision"], seed=seed)
        self.model_v.fit(self._features(self.v_index), np.asarray(self.v_valid))
        self.model_vh = None
        if self.params["v_hidden"] and self.ctx.compile_features is not None:
            rows = [(i, ok) for i, ok in zip(self.v_index, self.v_valid) if i in self.hidden]
            if rows:
                self.model_vh = ValidityModel(precision=self.params["precision"], seed=seed)
                self.model_vh.fit(self._features_a([i for i, _ in rows]), np.asarray([ok for _, ok in rows]))
        self._v_s += time.perf_counter() - t0

    def _fit_a(self) -> None:
        """ModelA on measured configs with compile features (compiling resumed records lazily)."""
        self.model_a = None
        if not self.params["use_a"] or self.ctx.compile_features is None:
            return
        missing = [i for i in self.xs if i not in self.hidden and i not in self.failed]
        if missing:
            self._compile(missing)
        keep = [(x, y) for x, y in zip(self.xs, self.ys)
                if x in self.hidden and (y > 0 or self.params["a_invalid"] == "zero")]
        if sum(1 for _, y in keep if y > 0) < MIN_VALID_FOR_A:
            return
        xs = [x for x, _ in keep]
        offset = self.space.features([xs[0]]).shape[1]
        columns = time_columns(self.hidden_keys, offset)
        if self.prior is not None:   # the time model is a + b * (transfer estimate); the trees learn the rest
            columns = {"term_cols": [offset + self.hidden_keys.index(PRIOR_KEY)], "group_col": None}
        self.model_a = AdvancedCostModel(**columns,
                                         seed=self.seed + self.train_ct, max_rounds=self.params["max_rounds"])
        self.model_a.fit(self._features_a(xs), np.asarray([y for _, y in keep]))
        self._n["a_fits"] += 1

    def _rank(self, indices: list[int]) -> list[int]:
        """Best first by ModelA (ModelP before ModelA exists; input order before either)."""
        if not indices:
            return []
        if self.model_a is not None:
            scores = self.model_a.predict(self._features_a(indices))
        elif self.prior is not None and all(PRIOR_KEY in self.hidden.get(i, {}) for i in indices):
            scores = -np.array([self.hidden[i][PRIOR_KEY] for i in indices])
        elif self.model is not None:
            scores = self.model.predict(self._features(indices))
        else:
            return list(indices)
        return [indices[j] for j in np.argsort(-scores, kind="stable")]

    def _filter_v(self, cands: list[int]) -> tuple[list[int], list[int]]:
        """(kept, rejected) by ModelV, both in input order."""
        if not cands or self.model_v is None:
            return list(cands), []
        ok = self.model_v.predict(self._features(cands))
        self._n["v_rejected"] += int((~ok).sum())
        return [c for c, o in zip(cands, ok) if o], [c for c, o in zip(cands, ok) if not o]

    # -- one round -------------------------------------------------------------------------------
    def _survivors(self, cands: list[int]) -> tuple[list[int], list[int]]:
        """(compiled candidates that ModelV — and the post-compile model — let through, the rejects)."""
        kept, rejected = self._filter_v(cands)
        alive = self._compile(kept)
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
        p = self.model_v.predict_proba(self._features(rejected))
        order = [rejected[j] for j in np.argsort(-p, kind="stable")]
        fill: list[int] = []
        for start in range(0, len(order), 4 * need):
            fill += self._compile(order[start:start + 4 * need])[: need - len(fill)]
            if len(fill) >= need:
                break
        self._n["v_filled"] += len(fill)
        return alive + fill, [c for c in rejected if c not in set(fill)]

    def _choose(self, alive: list[int]) -> list[int]:
        """The configs to measure this round, best first: ModelA's top N."""
        return self._rank(alive)[: self.params["plan_size"]]

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
        ready = [c for c in rejected[len(head):] if c in self.hidden]   # compiled already: free to consider
        pool = [c for c in self._compile(head) + ready if c not in plan]
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
        left = [i for i in self.hidden if i not in self.visited and i not in taken]
        return self._rank(left)[: self.params["carry"]]

    def _plan(self) -> list[int]:
        """Refit the models on everything so far and build the next round's measurement list."""
        n = self.params["plan_size"]
        t0 = time.perf_counter()
        a_first = self._p_from_a()
        if a_first:
            self._fit_a()  # ModelP learns from it
        if self.flops_max > 1e-6:
            self._fit()
            self.train_ct += 1
        self._fit_v()
        if not a_first:
            self._fit_a()
        t1 = time.perf_counter()
        exclude = self.visited | self.failed
        if self.model is None and self.prior is not None:   # nothing measured: the transfer model picks
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
            rand = self._compile(self._filter_v(self.space.sample(
                4 * n_random, self.rng, exclude=exclude | set(plan)))[0])[:n_random]
            plan = plan[: len(plan) - len(rand)] + rand
        return plan

    # -- ask/tell ----------------------------------------------------------------------------------
    def propose(self, n: int) -> list[int]:
        """Up to ``n`` configs of the current round; a new round (and refit) starts only when nothing
        is offered yet, so a ``plan_size`` below the loop's batch still refits every N trials."""
        out: list[int] = []
        empty = 0
        while len(out) < n and len(self.visited) + len(self.failed) < self.space.size:
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
            if index in self.visited or index in self.failed:
                continue
            out.append(index)
            self.visited.add(index)
        return out

    def _record(self, results: Sequence[MeasureResult]) -> None:
        # A result's own features may include what the measurement added (e.g. simulator counters),
        # so ModelA's compile features always come from compile_features (lazily for resumed records).
        super()._record(results)
        for r in results:
            self.v_index.append(int(r.index))
            self.v_valid.append(bool(r.valid))

    def update(self, results: Sequence[MeasureResult]) -> None:
        self._record(results)  # models are refitted when the next round is planned

    def load_history(self, results: Sequence[MeasureResult]) -> None:
        self._record(results)

    def stats(self) -> dict[str, float]:
        v = self.model_v
        return {
            **super().stats(),
            **{k: float(x) for k, x in self._n.items()},
            "compile_s": self._compile_s,
            "v_fit_s": self._v_s,
            "v_threshold": float(v.threshold_) if v is not None else 0.0,
            "v_cv_precision": float(v.cv_precision_) if v is not None else 0.0,
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
    options = {**ML2Tuner.options, "transfer": replace(ML2Tuner.options["transfer"], default="pretrained")}


@register
class ChameleonML2Tuner(ML2Tuner):
    """``chameleon-ml2``: Chameleon's PPO exploration and adaptive sampling, with ModelV and ModelA.

    Per round the RL agent (reward: ModelP, on the rank loss like ``ml2tuner``'s) proposes
    ``(alpha + 1) * N`` candidates; ModelV and the compiler filter them as in ``ml2tuner``; the
    survivors are clustered on the cardinal knobs (k-means, k by Chameleon's knee rule) and from each
    cluster the member ModelA rates best is measured; ModelA's best other survivors fill the round up
    to N (``fill_to_n``; without it a round measures k, Chameleon's adaptive sample count, and takes
    2-4x more rounds). Every measured config is a real, unmeasured candidate, so Chameleon's sample
    synthesis (for redundant centroids) is not needed.

    >>> from toolkit.tuning.tuners.base import make_tuner
    >>> t = make_tuner("chameleon-ml2", seed=0, episodes=32)
    >>> t.params["loss"], t.params["plan_size"], t.params["plan_size"] * (t.params["alpha"] + 1), t.params["k_max"]
    ('rank', 4, 64, 8)
    """

    name = "chameleon-ml2"
    options = {
        **{k: v for k, v in ML2Tuner.options.items() if not k.startswith("sa_")},
        **{k: v for k, v in MODEL_OPTIONS.items() if k not in ("features", "loss")},
        "loss": Option("rank", "ModelP's loss, which the RL agent's reward reads: rank (rank:pairwise, as ml2tuner's "
                       "ModelP) or reg (Chameleon's regression on normalised throughput)", str, ("rank", "reg")),
        **RL_OPTIONS,
        **{k: v for k, v in SAMPLING_OPTIONS.items() if k != "reduction"},
        **{k: replace(SAMPLING_OPTIONS[k], default=v) for k, v in (("k_min", 2), ("k_max", 8), ("k_step", 2))},
        **{k: PLUS_OPTIONS[k] for k in ("rl_elite", "rl_elite_top")},
        "plan_size": Option(4, "N: the RL agent proposes (alpha + 1) * N candidates per round", int),
        "alpha": replace(ML2Tuner.options["alpha"], default=15),
        "fill_to_n": Option(True, "after one config per cluster, ModelA's best other survivors fill the round up "
                            "to N (False: k configs per round, Chameleon's adaptive count; more rounds)", bool),
    }

    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        self.sampled_k: list[int] = []

    def make_optimizer(self) -> Any:
        return rl_optimizer(self.params, self.seed)

    def _search(self, num: int, exclude: set[int]) -> list[int]:
        """The RL agent's candidates; with ``rl_elite`` a share of its episodes start at the best measured configs."""
        return self.optimizer.find_maximums(self.space, self._score_fn(), num, exclude, self.rng,
                                            elite=self._elite())

    def _choose(self, alive: list[int]) -> list[int]:
        """One config per k-means cluster of the survivors: the cluster member ModelA rates best."""
        if len(alive) <= 1:
            return list(alive)
        p = self.params
        ranked = self._rank(alive)
        knobs = self.space.knob_indices_array(alive)
        points = knobs[:, cardinal_knobs(self.space.dims, p["n_cardinal"])].astype(np.float64)
        clus = select_k(points, self.rng, p["k_min"], p["k_max"], p["k_step"], p["k_threshold"], p["k_rule"])
        rank = {i: j for j, i in enumerate(ranked)}
        best: dict[int, int] = {}
        for i, label in zip(alive, clus.labels):
            if int(label) not in best or rank[i] < rank[best[int(label)]]:
                best[int(label)] = i
        self.sampled_k.append(len(best))
        chosen = sorted(best.values(), key=rank.__getitem__)
        if p["fill_to_n"]:  # ModelA's best other survivors fill the round up to N
            picked = set(chosen)
            chosen += [i for i in ranked if i not in picked][: max(0, p["plan_size"] - len(chosen))]
        return chosen

    def stats(self) -> dict[str, float]:
        k = self.sampled_k
        return {**super().stats(), "sample_k_mean": float(np.mean(k)) if k else float("nan")}
