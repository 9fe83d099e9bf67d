"""``ga``: AutoTVM's GATuner (population 100, 3 elites, mutation probability 0.1).

A generation is proposed in order; once every gene of it is measured, the next one is bred:
the ``elite_num`` best of (generation + previous elites) survive as elites, parents are drawn
in proportion to normalised throughput, one-point crossover on the knob vector, each knob
mutates with ``mutation_prob``, and a child already visited is re-mutated until it is new.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.tuners.base import Option, Tuner, TuningContext, register


@register
class GATuner(Tuner):
    """Genetic algorithm over knob-index vectors."""

    name = "ga"
    options = {
        "pop_size": Option(100, "genes per generation", int, low=2),
        "elite_num": Option(3, "best genes carried into the next generation's parents", int),
        "mutation_prob": Option(0.1, "probability that a knob of a child mutates", float, low=0, high=1),
    }

    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        self.flops = float(ctx.flops)
        self.pop_size = max(1, min(self.params["pop_size"], self.space.size))
        self.elite_num = min(self.pop_size, self.params["elite_num"])
        self.dims = np.asarray(self.space.dims, dtype=np.int64)
        self.genes: list[list[int]] | None = None     # created on first propose (after load_history)
        self.trial_pt = 0
        self.score_of: dict[int, float] = {}
        self.elites: list[tuple[list[int], float]] = []
        self.generation = 0

    def _index(self, gene: list[int]) -> int:
        return self.space.from_knob_indices(gene)

    def _gene(self, index: int) -> list[int]:
        return self.space.knob_indices(index)

    def _new_random(self, n: int) -> list[list[int]]:
        picked = self.space.sample(n, self.rng, exclude=self.visited)
        self.visited.update(picked)
        return [self._gene(i) for i in picked]

    def _make_new(self, gene: list[int]) -> list[int] | None:
        """Re-mutate ``gene`` until it is unvisited (AutoTVM); random fallback in crowded spaces."""
        for _ in range(1000):
            if self._index(gene) not in self.visited:
                return gene
            j = int(self.rng.integers(len(gene)))
            gene[j] = int(self.rng.integers(self.dims[j]))
        fresh = self._new_random(1)
        if not fresh:
            return None
        self.visited.discard(self._index(fresh[0]))
        return fresh[0]

    def _breed(self) -> list[list[int]]:
        genes = list(self.genes or []) + [g for g, _ in self.elites]
        scores = np.array([self.score_of.get(self._index(g), 0.0) for g in self.genes or []]
                          + [s for _, s in self.elites], dtype=np.float64)
        if len(genes) == 0:
            return self._new_random(self.pop_size)
        elite_idx = np.argsort(-scores, kind="stable")[: self.elite_num]
        self.elites = [(list(genes[i]), float(scores[i])) for i in elite_idx]
        scores = scores + 1e-8
        scores /= scores.max()
        probs = scores / scores.sum()
        children: list[list[int]] = []
        for _ in range(self.pop_size):
            if len(self.visited) >= self.space.size:
                break
            if len(genes) >= 2:
                a, b = self.rng.choice(len(genes), size=2, replace=False, p=probs)
            else:
                a = b = 0
            point = int(self.rng.integers(len(self.dims)))
            child = list(genes[a][:point]) + list(genes[b][point:])
            for j, dim in enumerate(self.dims):
                if self.rng.random() < self.params["mutation_prob"]:
                    child[j] = int(self.rng.integers(dim))
            child = self._make_new(child)
            if child is None:
                break
            children.append(child)
            self.visited.add(self._index(child))
        return children

    def propose(self, n: int) -> list[int]:
        if self.genes is None:
            self.genes = self._new_random(self.pop_size)
        out: list[int] = []
        while len(out) < n and (self.trial_pt < len(self.genes) or len(self.visited) < self.space.size):
            if self.trial_pt < len(self.genes):
                out.append(self._index(self.genes[self.trial_pt]))
                self.trial_pt += 1
            elif all(self._index(g) in self.score_of for g in self.genes):
                self.genes = self._breed()
                self.trial_pt = 0
                self.generation += 1
            else:   # the caller asked again before measuring this generation: random filler
                filler = self.space.sample(n - len(out), self.rng, exclude=self.visited)
                self.visited.update(filler)
                out.extend(filler)
        return out

    def update(self, results: Sequence[MeasureResult]) -> None:
        super().update(results)
        for r in results:
            self.score_of[int(r.index)] = self.flops / r.seconds if r.valid and r.seconds > 0 else 0.0

    def load_history(self, results: Sequence[MeasureResult]) -> None:
        """Resume: remember the scores and seed the elites with the best earlier configs."""
        self.update(results)
        best = sorted(self.score_of.items(), key=lambda kv: -kv[1])[: self.elite_num]
        self.elites = [(self._gene(i), s) for i, s in best]

    def stats(self) -> dict[str, float]:
        return {"generations": float(self.generation)}
