"""``random``: uniform sampling without replacement (AutoTVM RandomTuner)."""

from __future__ import annotations

from toolkit.tuning.tuners.base import Tuner, register


@register
class RandomTuner(Tuner):
    """Proposes unvisited configs uniformly at random."""

    name = "random"
    options = {}

    def propose(self, n: int) -> list[int]:
        out = self.space.sample(n, self.rng, exclude=self.visited)
        self.visited.update(out)
        return out
