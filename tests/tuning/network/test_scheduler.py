"""Task schedulers on synthetic tasks whose best latency follows a known curve."""

import math

import pytest

from toolkit.errors import ConfigError
from toolkit.tuning.scheduler import GradientScheduler, RoundRobinScheduler, make_scheduler


def _curve(start, floor, tau):
    """Best latency after t trials: from ``start`` down to ``floor`` with time constant ``tau``."""
    return lambda t: floor + (start - floor) * math.exp(-t / tau)


# Task 0 (weight 4) keeps improving for hundreds of trials; tasks 1 and 2 are flat after one round.
# Operation counts are such that every task's floor is the same throughput (1e12 op/s).
TASKS = [(4.0, _curve(10e-3, 1e-3, 300)), (1.0, _curve(2e-3, 1.9e-3, 5)), (1.0, _curve(2e-3, 1.9e-3, 5))]


def _run(scheduler, budget=960):
    scheduler.setup([w for w, _ in TASKS], flops=[1e9, 1.9e9, 1.9e9])
    used = 0
    while used < budget:
        i = scheduler.next_task()
        n = min(scheduler.trials_per_round, budget - used)
        scheduler.update(i, n, TASKS[i][1](scheduler.trials[i] + n))
        used += n
    return scheduler


def test_gradient_gives_the_larger_payoff_more_trials():
    grad = _run(GradientScheduler(seed=0, trials_per_round=32))
    rr = _run(RoundRobinScheduler(trials_per_round=32))
    assert list(rr.trials) == [320, 320, 320]
    assert grad.trials[0] > 2 * max(grad.trials[1:])
    assert min(grad.trials[1:]) >= 32                       # warm-up: every task gets a round
    assert grad.objective() < rr.objective()


def test_gradient_prefers_a_task_without_a_valid_config():
    s = GradientScheduler(seed=0, trials_per_round=8, eps=0.0)
    s.setup([1.0, 1.0])
    s.update(0, 8, 1e-3)
    s.update(1, 8, math.inf)      # every trial failed so far
    assert s.next_task() == 1


def test_exhausted_tasks_are_not_scheduled():
    for s in (GradientScheduler(seed=0, trials_per_round=4), RoundRobinScheduler(trials_per_round=4)):
        s.setup([1.0, 1.0])
        s.update(0, 4, 1e-3, exhausted=True)
        assert s.next_task() == 1
        s.update(1, 4, 1e-3, exhausted=True)
        assert s.next_task() is None


def test_restore_replays_trials_in_rounds():
    s = GradientScheduler(seed=0, trials_per_round=4)
    s.setup([2.0, 1.0])
    s.restore([[5e-3, math.inf, 4e-3, 4e-3, 3e-3], []])
    assert list(s.trials) == [5, 0]
    assert s.history[0] == [4e-3, 3e-3] and s.best[0] == 3e-3
    assert s.next_task() == 1                  # task 1 still needs its warm-up round
    assert s.objective() == math.inf


def test_bad_options():
    with pytest.raises(ConfigError, match="unknown scheduler"):
        make_scheduler("fastest")
    with pytest.raises(ConfigError, match="trials_per_round"):
        RoundRobinScheduler(trials_per_round=0)
    with pytest.raises(ConfigError, match="at least one task"):
        GradientScheduler().setup([])
