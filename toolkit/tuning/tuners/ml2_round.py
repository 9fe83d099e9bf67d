"""The round logic of the ML2 family: which configs one round of ``ml2tuner`` (or ``chameleon-ml2``) measures.

:class:`RoundPlanner` is the part of :class:`~toolkit.tuning.tuners.ml2tuner.ML2Tuner` that plans a round from the
parts the tuner holds: the explorer (``optimizer``, guided by ModelP, ``model``), ``validity``
(:class:`~toolkit.tuning.tuners.ml2_validity.ValidityFilter`), ``compiled``
(:class:`~toolkit.tuning.tuners.compiled.CompiledFeatures`), the ranking (``_rank``: ModelA, else the transfer
model, else ModelP), the optional ``sampler`` and the refits (``_fit_p``, ``_fit_v``, ``_fit_a``). One round
(:meth:`RoundPlanner._plan`): refit; the explorer's ``(alpha + 1) * N`` candidates, ModelA's best leftovers of
earlier rounds (``carry``); ModelV and the compiler filter them (:meth:`~RoundPlanner._survivors`); too few
survivors are topped up (:meth:`~RoundPlanner._top_up`); ModelA (or the sampler) chooses N; a share goes to
ModelV's rejects (:meth:`~RoundPlanner._explore_rejects`); ``epsilon`` of it is random.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


class RoundPlanner:
    """One round's measurement list, planned from the tuner's parts (a base class of the ML2 tuners, which
    provide the attributes below and ``_rank``, ``_fit_p``/``_fit_v``/``_fit_a``, ``_features_a``,
    ``p_learns_from_a``, and the cost-model tuner's ``model_features``, ``_score_fn`` and ``_elite``)."""

    params: dict[str, Any]
    model: Any
    optimizer: Any
    sampler: Any
    validity: Any
    compiled: Any
    space: Any
    rng: np.random.Generator
    visited: set[int]
    flops_max: float
    train_ct: int
    _n: dict[str, int]
    _search_s: float
    _fit_s: float

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
        kept, rejected = self.validity.split(cands, self.model_features)
        alive, late = self.validity.split_compiled(self.compiled.compile(kept), self._features_a)
        return alive, late + rejected

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
        order = self.validity.likeliest(rejected, self.model_features)
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
        pool = self.validity.split_compiled(pool, self._features_a, count=False)[0]  # the post-compile check applies
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
        self.ranker.score_round(self.xs, self.ys)
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
            rand = self.compiled.compile(self.validity.split(self.space.sample(
                4 * n_random, self.rng, exclude=exclude | set(plan)), self.model_features)[0])[:n_random]
            plan = plan[: len(plan) - len(rand)] + rand
        return self._rank(plan) if self.params["round_order"] == "model" else plan
