"""``grid``: every config in index order (AutoTVM GridSearchTuner)."""

from __future__ import annotations

from toolkit.tuning.tuners.base import TuningContext, Tuner, register


@register
class GridTuner(Tuner):
    """Proposes configs 0, 1, 2, ... skipping those already measured."""

    name = "grid"
    options = {}

    def setup(self, ctx: TuningContext) -> None:
        super().setup(ctx)
        self.counter = 0

    def propose(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n and self.counter < self.space.size:
            if self.counter not in self.visited:
                out.append(self.counter)
                self.visited.add(self.counter)
            self.counter += 1
        return out
