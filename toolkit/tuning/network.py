"""Tune a whole network: all its conv tasks share one trial budget, one log, one task scheduler.

Each round, the scheduler (:mod:`toolkit.tuning.scheduler`) picks a task and the tuning loop
(:func:`toolkit.tuning.session.tune`) runs ``trials_per_round`` trials of it with that task's own
tuner, which lives across rounds. Every trial goes to one JSONL log whose header describes the
network; records carry their workload, so the log holds all tasks. ``resume`` restores each
task from its records (its tuner's history, its trial count, the scheduler's view) and the
budget counts the restored trials, as :func:`~toolkit.tuning.session.tune` does.

>>> from toolkit.backends import network_tasks
>>> from toolkit.boards import resolve_board
>>> from toolkit.workloads.networks import get_network
>>> from toolkit.tuning.scheduler import GradientScheduler
>>> plan, tasks = network_tasks(get_network("resnet18"), resolve_board("vta-fsim"))
>>> s = tune_network(plan, tasks, "random", 64,
...                  scheduler=GradientScheduler(trials_per_round=8))  # doctest: +SKIP
>>> s.total_seconds  # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from toolkit.errors import LogError
from toolkit.workloads.networks import TaskPlan
from toolkit.tuning.session import Session, TuneSummary
from toolkit.tuning.core.builder import Builder
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.journal import Record, open_journal
from toolkit.tuning.models.transfer import GrowingTransfer
from toolkit.tuning.core.runner import MeasureOptions, Runner
from toolkit.tuning.scheduler import TaskScheduler
from toolkit.tuning.core.task import Task
from toolkit.tuning.tuners.base import TransferLearner, Tuner, make_tuner, resolve_transfer
from toolkit.workloads import Conv2dWorkload


@dataclass
class TaskOutcome:
    """One task of a network tune: how often the network runs it (``count``) and its tuning so far, the one
    :class:`~toolkit.tuning.session.TuneSummary` its Session fills round after round (resumed trials included)."""

    spec: str
    count: int
    summary: TuneSummary
    exhausted: bool = False

    name = property(lambda self: self.summary.workload, doc="The task's workload label.")
    flops = property(lambda self: self.summary.flops)
    trials = property(lambda self: self.summary.trials)
    resumed = property(lambda self: self.summary.resumed)
    best_seconds = property(lambda self: self.summary.best_seconds)
    best_index = property(lambda self: self.summary.best_index)
    best_config = property(lambda self: self.summary.best_config)

    @property
    def weighted_seconds(self) -> float:
        """Best latency times multiplicity (``inf`` without a valid config)."""
        return self.best_seconds * self.count

    def to_json(self) -> dict[str, Any]:
        def fin(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"name": self.name, "spec": self.spec, "count": self.count, "flops": self.flops, "trials": self.trials,
                "resumed": self.resumed, "best_seconds": fin(self.best_seconds), "best_index": self.best_index,
                "best_config": self.best_config, "exhausted": self.exhausted,
                "weighted_seconds": fin(self.weighted_seconds)}


@dataclass
class NetworkSummary:
    """Outcome of :func:`tune_network`. ``curve`` is (trials so far, total conv latency) after each round."""

    network: str
    board: str
    tuner: str
    scheduler: str
    tasks: list[TaskOutcome]
    skipped: list[tuple[str, str]]
    log: str | None = None
    wall_s: float = 0.0
    curve: list[tuple[int, float]] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def resumed(self) -> int:
        return sum(t.resumed for t in self.tasks)

    @property
    def total_seconds(self) -> float:
        """The network's conv latency on the board: sum of best x multiplicity (``inf`` if a task has none)."""
        return sum(t.weighted_seconds for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        def fin(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"network": self.network, "board": self.board, "tuner": self.tuner, "scheduler": self.scheduler,
                "tasks": [t.to_json() for t in self.tasks],
                "skipped": [{"layer": n, "reason": r} for n, r in self.skipped], "log": self.log,
                "wall_s": self.wall_s, "curve": [[n, fin(s)] for n, s in self.curve],
                "trials": self.trials, "resumed": self.resumed, "total_seconds": fin(self.total_seconds)}


def _network_transfer(tuners: Sequence[Tuner], task: Task, seed: int) -> GrowingTransfer | None:
    """The network's own transfer model when its tuners learn from other tasks (:class:`TransferLearner`): it
    fine-tunes the model they were given (``'pretrained'``: the board's shipped one), else starts from none."""
    if not tuners or not all(isinstance(t, TransferLearner) for t in tuners):
        return None
    given = resolve_transfer(tuners[0].params["transfer"],
                             lambda: task.backend.pretrained_transfer(task.board.profile))
    return GrowingTransfer(base=given, seed=seed)


MeasureWith = Callable[[Task], tuple[Builder, Runner]]
"""Builder and runner for a task (e.g. replaying a cache); default: the board's, shared by all tasks."""


def network_description(plan: TaskPlan, tasks: Sequence[Task]) -> dict[str, Any]:
    """The network log's header task: the network and every task's description."""
    return {"network": plan.network.name, "board": tasks[0].board.name if tasks else None,
            "tasks": [t.describe() for t in tasks]}


def tune_network(plan: TaskPlan, tasks: Sequence[Task], tuner: str | Callable[[int], Tuner], n_trials: int, *,
                 scheduler: TaskScheduler, log: str | Path | None = None, resume: bool = False,
                 measure_with: MeasureWith | None = None,
                 measure_options: MeasureOptions | None = None, tuner_options: dict[str, Any] | None = None,
                 seed: int = 0, callback: Callable[[NetworkSummary], None] | None = None) -> NetworkSummary:
    """Tune ``tasks`` (one per task of ``plan``, on one board: :func:`toolkit.backends.network_tasks`)
    with ``n_trials`` trials in all (see the module docstring).

    ``tuner`` is a registered tuner name (task ``i`` gets seed ``seed + i``) or a factory
    ``i -> Tuner``. ``callback`` runs after each round.
    """
    if n_trials < 0:
        raise LogError(f"the number of trials must be >= 0, got {n_trials}")
    if not plan.tasks:
        raise LogError(f"network {plan.network.name} has no task this board can run "
                       f"({'; '.join(f'{n}: {r}' for n, r in plan.skipped)})")
    if len(tasks) != len(plan.tasks):
        raise LogError(f"network {plan.network.name} has {len(plan.tasks)} tasks; {len(tasks)} were given")
    t_start = time.perf_counter()
    board = tasks[0].board
    factory = tuner if callable(tuner) else (lambda i: make_tuner(tuner, seed=seed + i, **(tuner_options or {})))
    outcomes = [TaskOutcome(t.workload.spec(), p.count, TuneSummary(workload=t.workload.label, board=board.name, tuner="",
                                                                  flops=t.flops))
                for t, p in zip(tasks, plan.tasks)]
    summary = NetworkSummary(plan.network.name, board.name, "", scheduler.name, outcomes, list(plan.skipped),
                             log=str(log) if log else None)

    journal, earlier = open_journal(log, network_description(plan, tasks), resume=resume)
    own = measure_with is None
    shared = (tasks[0].backend.default_builder(board), tasks[0].backend.make_runner(board)) if own else None
    try:
        position = {t.workload: i for i, t in enumerate(tasks)}    # workloads compare by shape, not name
        history: list[list[MeasureResult]] = [[] for _ in tasks]
        for r in earlier:
            i = position.get(Conv2dWorkload.from_dict(r.workload))
            if r.index is not None and i is not None:
                history[i].append(r.to_result())
        tuners = [factory(i) for i in range(len(tasks))]
        summary.tuner = tuners[0].name or type(tuners[0]).__name__
        for i, hist in enumerate(history):
            for res in hist:
                outcomes[i].summary.add(res)
            outcomes[i].summary.resumed = len(hist)
            outcomes[i].summary.tuner = summary.tuner
        scheduler.setup([p.count for p in plan.tasks], flops=[t.flops for t in tasks])
        scheduler.restore([[r.seconds for r in hist] for hist in history])
        for i, task in enumerate(tasks):
            if outcomes[i].trials >= task.space.size:
                outcomes[i].exhausted = True
                scheduler.exhausted.add(i)
        network_model = _network_transfer(tuners, tasks[0], seed)
        given: list[Any] = [None] * len(tasks)
        if network_model is not None:
            for i, hist in enumerate(history):
                network_model.add(i, hist)
        pairs = [shared or measure_with(task) for task in tasks]  # type: ignore[misc]
        sessions = [Session(task, tuners[i], builder=pairs[i][0], runner=pairs[i][1], measure_options=measure_options)
                    for i, task in enumerate(tasks)]     # one per task: its tuner lives across rounds

        while summary.trials < n_trials:
            i = scheduler.next_task()
            if i is None:
                break
            n = min(scheduler.trials_per_round, n_trials - summary.trials)
            out = outcomes[i]
            desc = tasks[i].describe()

            def record(first: int, results: Sequence[MeasureResult], desc: dict = desc, k: int = i) -> None:
                if journal is not None:   # the task's summary has counted them already: trials first, first + 1 ...
                    for j, r in enumerate(results):
                        journal.append(Record.from_result(r, trial=first + j, tuner=summary.tuner, task=desc))
                if network_model is not None:
                    network_model.add(k, results)

            before = out.trials
            if not sessions[i].started:
                sessions[i].start(history[i])
            if network_model is not None and (model := network_model.current()) is not given[i]:
                tuners[i].use_transfer(model)
                given[i] = model
            out.summary.stopped = "budget"
            sessions[i].run(before + n, out.summary, record=record)
            exhausted = out.summary.stopped == "exhausted" or out.trials >= tasks[i].space.size
            out.exhausted = exhausted
            scheduler.update(i, out.trials - before, out.best_seconds, exhausted=exhausted)
            summary.curve.append((summary.trials, summary.total_seconds))
            if callback is not None:
                callback(summary)
    finally:
        if journal is not None:
            journal.close()
        if shared is not None:
            shared[0].close()
            shared[1].close()
        summary.wall_s = time.perf_counter() - t_start
    return summary
