"""AutoTVM's simulated-annealing model optimizer (``autotvm/tuner/sa_model_optimizer.py``).

``n_chains`` Markov chains walk the space in parallel (one vectorised score query per step);
a move changes one random knob to a different random value; a move from score ``s`` to
``s'`` is accepted with probability ``exp(min((s' - s) / (t + 1e-5), 1))``; the temperature
cools linearly from ``temp[0]`` to ``temp[1]``; the best ``num`` distinct points seen (not in
``exclude``) are kept in a heap, and the walk stops after ``n_steps`` steps or ``early_stop``
steps without a heap change. With ``persistent`` the chains continue from where the last call
left them. As upstream, points scoring below ``min_score`` (0) are dropped from the answer.

>>> import numpy as np
>>> from toolkit.tuning.core.space import ConfigSpace, CategoricalKnob
>>> space = ConfigSpace([CategoricalKnob("a", list(range(10))), CategoricalKnob("b", list(range(10)))])
>>> sa = SimulatedAnnealing(n_chains=8, n_steps=100)
>>> sa.find_maximums(space, lambda idx: idx.astype(float), 3, {99}, np.random.default_rng(0))
[98, 97, 96]
"""

from __future__ import annotations

import heapq
from typing import Callable, Iterable, Sequence

import numpy as np

from toolkit.tuning.core.space import ConfigSpace

ScoreFn = Callable[[np.ndarray], np.ndarray]
"""Maps an int64 array of config indices to an array of scores (higher is better)."""


class SimulatedAnnealing:
    """Parallel simulated annealing over a :class:`ConfigSpace` (AutoTVM defaults)."""

    def __init__(self, n_chains: int = 128, n_steps: int = 500, early_stop: int = 50,
                 temp: tuple[float, float] = (1.0, 0.0), persistent: bool = True,
                 min_score: float | None = 0.0) -> None:
        self.n_chains = n_chains
        self.n_steps = n_steps
        self.early_stop = early_stop
        self.temp = temp
        self.persistent = persistent
        self.min_score = min_score
        self.points: np.ndarray | None = None
        self.n_queries = 0
        """Number of points scored so far (cost-model queries)."""

    def stats(self) -> dict[str, float]:
        """Nothing beyond ``n_queries``."""
        return {}

    def _score(self, score_fn: ScoreFn, points: np.ndarray) -> np.ndarray:
        self.n_queries += len(points)
        return np.asarray(score_fn(points), dtype=np.float64)

    def _initial(self, space: ConfigSpace, rng: np.random.Generator) -> np.ndarray:
        if self.persistent and self.points is not None and int(self.points.max()) < space.size:
            return self.points.copy()
        n = self.n_chains
        if space.size <= n:
            return rng.integers(0, space.size, size=n, dtype=np.int64)
        return np.asarray(space.sample(n, rng), dtype=np.int64)

    @staticmethod
    def random_walk(space: ConfigSpace, points: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Move every point by changing one knob to another value (AutoTVM ``random_walk``).

        Upstream redraws (knob, value) until the value changes, so a knob is picked with
        probability proportional to ``(d - 1) / d``; the same distribution is drawn here directly.
        """
        dims = np.asarray(space.dims, dtype=np.int64)
        weights = (dims - 1) / dims
        if weights.sum() == 0:
            return points.copy()
        knob_idx = space.knob_indices_array(points)
        which = rng.choice(len(dims), size=len(points), p=weights / weights.sum())
        d = dims[which]
        old = knob_idx[np.arange(len(points)), which]
        new = (old + rng.integers(1, np.maximum(d, 2))) % d
        knob_idx[np.arange(len(points)), which] = new
        return space.from_knob_indices_array(knob_idx)

    def find_maximums(self, space: ConfigSpace, score_fn: ScoreFn, num: int,
                      exclude: Iterable[int], rng: np.random.Generator, elite: Sequence[int] = ()) -> list[int]:
        """Up to ``num`` distinct indices (best first) with the highest scores, none in ``exclude``
        (``elite`` is not used: the chains start where they are)."""
        points = self._initial(space, rng)
        scores = self._score(score_fn, points)

        heap: list[tuple[float, int]] = [(-np.inf, -1 - i) for i in range(num)]
        in_heap = set(int(i) for i in exclude)
        in_heap.update(p for _, p in heap)

        def push(new_scores: np.ndarray, new_points: np.ndarray) -> bool:
            changed = False
            for j in np.flatnonzero(new_scores > heap[0][0]):
                s, p = float(new_scores[j]), int(new_points[j])
                if s > heap[0][0] and p not in in_heap:
                    _, gone = heapq.heapreplace(heap, (s, p))
                    in_heap.discard(gone)
                    in_heap.add(p)
                    changed = True
            return changed

        push(scores, points)
        t0, t1 = self.temp
        t, cool = float(t0), (t0 - t1) / (self.n_steps + 1)
        k = last_modify = 0
        while k < self.n_steps and k < last_modify + self.early_stop:
            new_points = self.random_walk(space, points, rng)
            new_scores = self._score(score_fn, new_points)
            accept_p = np.exp(np.minimum((new_scores - scores) / (t + 1e-5), 1.0))
            accept = rng.random(len(points)) < accept_p
            points[accept] = new_points[accept]
            scores[accept] = new_scores[accept]
            if push(new_scores, new_points):
                last_modify = k
            k += 1
            t -= cool
        if self.persistent:
            self.points = points
        best = sorted(heap, key=lambda item: -item[0])
        floor = -np.inf if self.min_score is None else self.min_score
        return [p for s, p in best if p >= 0 and s >= floor]
