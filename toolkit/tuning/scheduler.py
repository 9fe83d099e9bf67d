"""Whole-network trial allocation: which task gets the next round of trials.

A network's objective is its total latency ``f = sum_i w_i * g_i``, with ``g_i`` task i's best
latency and ``w_i`` its multiplicity. A scheduler is driven round by round::

    sched = GradientScheduler(seed=0)
    sched.setup(weights=[4, 1, 3], flops=[...])
    while budget and (i := sched.next_task()) is not None:
        best = tune task i for one round          # trials_per_round trials
        sched.update(i, n_trials, best)

:class:`RoundRobinScheduler` visits tasks in turn. :class:`GradientScheduler` is Ansor's
(Zheng et al., OSDI'20, §6; ``tvm.auto_scheduler.TaskScheduler``): after ``warmup_rounds``
rounds on every task it picks, with probability ``1 - eps``, the task with the most negative
``w_i * (alpha * backward + (1 - alpha) * forward)``, where ``backward`` is the change of g_i
over the last ``window`` rounds per round and ``forward = min(g_i - g_i / r_i, beta * flops_i /
best_group_throughput) - g_i`` (r_i rounds so far; the second term assumes a task can reach
1/beta of the best throughput of the similar tasks), and otherwise a random task.

>>> s = RoundRobinScheduler()
>>> s.setup([1.0, 2.0])
>>> s.next_task()
0
>>> s.update(0, 8, 1e-3)
>>> s.next_task()
1
"""

from __future__ import annotations

import abc
import math
from typing import ClassVar, Sequence

import numpy as np

from toolkit.errors import ConfigError


class TaskScheduler(abc.ABC):
    """Base class: per-task trial counts, best latency and its history (one entry per round)."""

    name: ClassVar[str] = ""

    def __init__(self, seed: int = 0, trials_per_round: int = 32) -> None:
        if trials_per_round < 1:
            raise ConfigError(f"trials_per_round must be >= 1, got {trials_per_round}")
        self.seed = seed
        self.trials_per_round = trials_per_round

    def setup(self, weights: Sequence[float], flops: Sequence[float] | None = None) -> None:
        """Bind to tasks with these multiplicities (and operation counts, for similarity)."""
        if not weights:
            raise ConfigError("a network needs at least one task to schedule")
        self.weights = np.asarray(weights, dtype=float)
        self.flops = np.asarray(flops if flops is not None else np.ones(len(weights)), dtype=float)
        n = len(weights)
        self.rng = np.random.default_rng(self.seed)
        self.trials = np.zeros(n, dtype=int)
        self.best = np.full(n, math.inf)
        self.history: list[list[float]] = [[] for _ in range(n)]
        self.exhausted: set[int] = set()
        self.busy: set[int] = set()

    @property
    def live(self) -> list[int]:
        """Tasks that still have configurations to try and are not being tuned (``busy``: on another board)."""
        return [i for i in range(len(self.weights)) if i not in self.exhausted and i not in self.busy]

    @abc.abstractmethod
    def next_task(self) -> int | None:
        """The task for the next round; ``None`` when every task is exhausted or busy."""

    def update(self, task: int, n_trials: int, best_seconds: float, exhausted: bool = False) -> None:
        """Record one round of ``task``: trials spent, its best latency so far, whether its space is used up."""
        self.trials[task] += n_trials
        self.best[task] = min(self.best[task], best_seconds)
        self.history[task].append(float(self.best[task]))
        if exhausted:
            self.exhausted.add(task)

    def restore(self, costs: Sequence[Sequence[float]]) -> None:
        """Replay earlier trials (resume): per task, the seconds of each trial in order (``inf`` if failed)."""
        for task, seq in enumerate(costs):
            for start in range(0, len(seq), self.trials_per_round):
                chunk = seq[start:start + self.trials_per_round]
                self.update(task, len(chunk), min(chunk))

    def objective(self) -> float:
        """Total latency ``sum w_i * g_i`` (``inf`` while a task has no valid measurement)."""
        return float(np.sum(self.weights * self.best))


class RoundRobinScheduler(TaskScheduler):
    """Every live task in turn (the fewest rounds first, ties by task order)."""

    name = "round-robin"

    def next_task(self) -> int | None:
        live = self.live
        if not live:
            return None
        return min(live, key=lambda i: (len(self.history[i]), i))


class GradientScheduler(TaskScheduler):
    """Ansor's gradient-based task scheduler (see the module docstring)."""

    name = "gradient"

    def __init__(self, seed: int = 0, trials_per_round: int = 32, *, warmup_rounds: int = 1,
                 alpha: float = 0.2, beta: float = 2.0, window: int = 3, eps: float = 0.05) -> None:
        super().__init__(seed, trials_per_round)
        if warmup_rounds < 1 or window < 1 or not 0 <= alpha <= 1 or beta <= 0 or not 0 <= eps <= 1:
            raise ConfigError("gradient scheduler needs warmup_rounds >= 1, window >= 1, 0 <= alpha <= 1, "
                              f"beta > 0, 0 <= eps <= 1; got {warmup_rounds}, {window}, {alpha}, {beta}, {eps}")
        self.warmup_rounds = warmup_rounds
        self.alpha = alpha
        self.beta = beta
        self.window = window
        self.eps = eps

    def gradients(self) -> dict[int, float]:
        """d(objective)/d(trials) estimate of each live task (more negative = more payoff)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            throughput = np.where(np.isfinite(self.best), self.flops / self.best, 0.0)
        best_throughput = float(throughput.max()) if len(throughput) > 1 else 0.0
        out: dict[int, float] = {}
        for i in self.live:
            g, rounds, hist = self.best[i], len(self.history[i]), self.history[i]
            if not math.isfinite(g):          # no valid config yet: any valid one is infinite progress
                out[i] = -math.inf
                continue
            backward = (hist[-1] - hist[-1 - self.window]) / self.window if rounds > self.window else 0.0
            g_next = g - g / max(rounds, 1)
            if best_throughput > 0:
                g_next = min(g_next, self.beta * self.flops[i] / best_throughput)
            forward = g_next - g
            out[i] = float(self.weights[i] * (self.alpha * backward + (1 - self.alpha) * forward))
        return out

    def next_task(self) -> int | None:
        live = self.live
        if not live:
            return None
        warm = [i for i in live if len(self.history[i]) < self.warmup_rounds]
        if warm:
            return warm[0]
        if self.rng.random() < self.eps:
            return int(self.rng.choice(live))
        grads = self.gradients()
        values = list(grads.values())
        if max(values) == min(values):
            return int(self.rng.choice(live))
        return min(grads, key=lambda i: (grads[i], i))


SCHEDULERS: dict[str, type[TaskScheduler]] = {
    RoundRobinScheduler.name: RoundRobinScheduler,
    GradientScheduler.name: GradientScheduler,
}


def make_scheduler(name: str, seed: int = 0, trials_per_round: int = 32) -> TaskScheduler:
    """A scheduler by name (``gradient`` or ``round-robin``)."""
    if name not in SCHEDULERS:
        raise ConfigError(f"unknown scheduler {name!r}: use one of {', '.join(SCHEDULERS)}")
    return SCHEDULERS[name](seed=seed, trials_per_round=trials_per_round)
