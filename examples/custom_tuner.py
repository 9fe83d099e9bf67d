"""Write your own tuner: a greedy neighbourhood walk, passed to ``tune()`` as an object.

A tuner has three methods: ``setup`` (bind to a task's space), ``propose`` (up to n configs never
proposed before) and ``update`` (what was measured). This one starts from random configs and then
always tries the unvisited neighbours of the best config so far.

    python examples/custom_tuner.py [--trials 48]
"""

from __future__ import annotations

import argparse
import math
from typing import Sequence

import toolkit as et
from toolkit.tuning.core.result import MeasureResult


class NeighbourWalk(et.Tuner):
    """Random starts, then the unvisited neighbours of the best config so far."""

    name = "neighbour-walk"
    options = {"n_init": et.Option(8, "random configs measured first", int)}

    def setup(self, ctx: et.TuningContext) -> None:
        super().setup(ctx)
        self.best_index, self.best_seconds = None, math.inf

    def propose(self, n: int) -> list[int]:
        out: list[int] = []
        if self.best_index is not None and len(self.visited) >= self.params["n_init"]:
            for i in self.space.neighbours(self.best_index):
                if len(out) < n and int(i) not in self.visited and int(i) not in out:
                    out.append(int(i))
        out += self.space.sample(n - len(out), self.rng, exclude=self.visited | set(out))
        self.visited.update(out)
        return out

    def update(self, results: Sequence[MeasureResult]) -> None:
        super().update(results)
        for r in results:
            if r.valid and r.seconds < self.best_seconds:
                self.best_index, self.best_seconds = r.index, r.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=48)
    args = parser.parse_args()
    task = et.make_task(et.parse_workload("resnet18.C11"), et.resolve_board("vta-fsim"))
    for tuner in (NeighbourWalk(seed=0), et.make_tuner("random", seed=0)):
        s = et.tune(task, tuner, args.trials)
        print(f"{tuner.name:15s} best {s.best_seconds * 1e3:.4f} ms after {s.trials} trials "
              f"(found at trial {s.best_trial + 1})")


if __name__ == "__main__":
    main()
