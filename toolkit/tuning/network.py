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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from toolkit.errors import BoardError, ConfigError, LogError
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
                 measure_with: MeasureWith | None = None, lanes: Sequence[tuple[Builder, Runner]] | None = None,
                 measure_options: MeasureOptions | None = None, tuner_options: dict[str, Any] | None = None,
                 seed: int = 0, callback: Callable[[NetworkSummary], None] | None = None,
                 on_lane_lost: Callable[[int, BaseException], None] | None = None) -> NetworkSummary:
    """Tune ``tasks`` (one per task of ``plan``, on one board type: :func:`toolkit.backends.network_tasks`)
    with ``n_trials`` trials in all (see the module docstring).

    ``tuner`` is a registered tuner name (task ``i`` gets seed ``seed + i``) or a factory
    ``i -> Tuner``. ``callback`` runs after each round. ``lanes`` (one builder and runner per board, e.g. each
    runner holding one of several boards behind the tracker) tunes that many tasks at once, one round of one task
    per lane, in threads; the scheduler never gives a task to two lanes. A lane whose board is lost for good
    (:class:`~toolkit.errors.BoardError`) stops, ``on_lane_lost(lane, error)`` is told, and the others go on; when
    the last one stops, its error is raised. Without ``lanes``, ``measure_with`` gives each task its builder and
    runner (default: the board's, shared).
    """
    if n_trials < 0:
        raise LogError(f"the number of trials must be >= 0, got {n_trials}")
    if not plan.tasks:
        raise LogError(f"network {plan.network.name} has no task this board can run "
                       f"({'; '.join(f'{n}: {r}' for n, r in plan.skipped)})")
    if len(tasks) != len(plan.tasks):
        raise LogError(f"network {plan.network.name} has {len(plan.tasks)} tasks; {len(tasks)} were given")
    if lanes is not None and (not lanes or measure_with is not None):
        raise ConfigError("give lanes (one builder and runner per board) or measure_with, not both; and at least "
                          "one lane")
    t_start = time.perf_counter()
    board = tasks[0].board
    factory = tuner if callable(tuner) else (lambda i: make_tuner(tuner, seed=seed + i, **(tuner_options or {})))
    outcomes = [TaskOutcome(t.workload.spec(), p.count,
                            TuneSummary(workload=t.workload.label, board=board.name, tuner="", flops=t.flops))
                for t, p in zip(tasks, plan.tasks)]
    summary = NetworkSummary(plan.network.name, board.name, "", scheduler.name, outcomes, list(plan.skipped),
                             log=str(log) if log else None)

    journal, earlier = open_journal(log, network_description(plan, tasks), resume=resume)
    own = measure_with is None and lanes is None
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
        if network_model is not None:
            for i, hist in enumerate(history):
                network_model.add(i, hist)
        pairs = None if lanes is not None else [shared or measure_with(task) for task in tasks]  # type: ignore[misc]
        lanes = list(lanes) if lanes is not None else [None]   # type: ignore[list-item]
        first = pairs[0] if pairs else lanes[0]
        sessions = [Session(task, tuners[i], builder=(pairs[i] if pairs else first)[0],
                            runner=(pairs[i] if pairs else first)[1], measure_options=measure_options)
                    for i, task in enumerate(tasks)]     # one per task: its tuner lives across rounds
        rounds = _Rounds(summary, outcomes, tasks, sessions, scheduler, n_trials, journal, network_model, history,
                         callback)
        rounds.run([(lambda i, lane=lane: pairs[i] if pairs else lane) for lane in lanes], on_lane_lost)
    finally:
        if journal is not None:
            journal.close()
        if shared is not None:
            shared[0].close()
            shared[1].close()
        summary.wall_s = time.perf_counter() - t_start
    return summary


class _Rounds:
    """The rounds of one network tune, handed out to lanes (one lane: in this thread; several: one thread each).

    Under one lock: the scheduler's choice (a task goes to one lane at a time: ``scheduler.busy``), the trials
    reserved by rounds in flight, the journal and the network's transfer model, the summary's curve.
    """

    def __init__(self, summary: NetworkSummary, outcomes: list[TaskOutcome], tasks: Sequence[Task],
                 sessions: list[Session], scheduler: TaskScheduler, n_trials: int, journal: Any,
                 network_model: GrowingTransfer | None, history: list[list[MeasureResult]],
                 callback: Callable[[NetworkSummary], None] | None) -> None:
        self.summary, self.outcomes, self.tasks, self.sessions = summary, outcomes, tasks, sessions
        self.scheduler, self.n_trials, self.journal, self.network_model = scheduler, n_trials, journal, network_model
        self.history, self.callback = history, callback
        self.given: list[Any] = [None] * len(tasks)
        self.cond = threading.Condition()
        self.reserved = 0
        self.stop: BaseException | None = None

    def run(self, lanes: list[Callable[[int], tuple[Builder, Runner]]],
            on_lane_lost: Callable[[int, BaseException], None] | None) -> None:
        if len(lanes) == 1:
            self._lane(lanes[0])
            return
        lost: list[BaseException] = []

        def work(k: int) -> None:
            try:
                self._lane(lanes[k])
            except BoardError as exc:     # this board is gone: the others go on
                lost.append(exc)
                if on_lane_lost is not None:
                    on_lane_lost(k, exc)
            except BaseException as exc:  # noqa: BLE001 - anything else ends the run, raised in the caller
                with self.cond:
                    self.stop = self.stop or exc
            finally:
                with self.cond:
                    self.cond.notify_all()

        threads = [threading.Thread(target=work, args=(k,), name=f"lane-{k}", daemon=True) for k in range(len(lanes))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.stop is not None:
            raise self.stop
        if len(lost) == len(lanes) and self.summary.trials < self.n_trials and not self._done():
            raise lost[-1]

    def _done(self) -> bool:
        return all(i in self.scheduler.exhausted for i in range(len(self.tasks)))

    def _take(self) -> tuple[int, int] | None:
        """The next round (task, trials) for a lane, waiting while every task left is busy; ``None``: done."""
        with self.cond:
            while self.stop is None:
                left = self.n_trials - self.summary.trials - self.reserved
                if left <= 0:
                    return None
                i = self.scheduler.next_task()
                if i is not None:
                    n = min(self.scheduler.trials_per_round, left, self._first_share(i, left))
                    self.scheduler.busy.add(i)
                    self.reserved += n
                    return i, n
                if not self.scheduler.busy:
                    return None           # every task exhausted
                self.cond.wait()
            return None

    def _first_share(self, i: int, left: int) -> int:
        """A task's first round shares what is left with every task still waiting for its first round (a small
        budget tries every task before any gets a second round); later rounds are not capped here."""
        s = self.scheduler
        if s.history[i]:
            return left
        waiting = sum(1 for j in s.live if not s.history[j] and j not in s.busy)
        return max(1, left // max(1, waiting))

    def _lane(self, pair_for: Callable[[int], tuple[Builder, Runner]]) -> None:
        while (got := self._take()) is not None:
            i, n = got
            try:
                self._round(i, n, pair_for(i))
            finally:
                with self.cond:
                    self.scheduler.busy.discard(i)
                    self.reserved -= n
                    self.cond.notify_all()

    def _round(self, i: int, n: int, pair: tuple[Builder, Runner]) -> None:
        out, session, desc = self.outcomes[i], self.sessions[i], self.tasks[i].describe()

        def record(first: int, results: Sequence[MeasureResult]) -> None:
            with self.cond:          # trials first, first + 1 ... of the task: its summary counted them already
                if self.journal is not None:
                    for j, r in enumerate(results):
                        self.journal.append(Record.from_result(r, trial=first + j, tuner=self.summary.tuner,
                                                               task=desc))
                if self.network_model is not None:
                    self.network_model.add(i, results)

        session.builder, session.runner = pair
        before = out.trials
        if not session.started:
            session.start(self.history[i])
        if self.network_model is not None:
            with self.cond:
                model = self.network_model.current()
            if model is not self.given[i]:
                self._give(i, model)
        out.summary.stopped = "budget"
        session.run(before + n, out.summary, record=record)
        exhausted = out.summary.stopped == "exhausted" or out.trials >= self.tasks[i].space.size
        with self.cond:
            out.exhausted = exhausted
            self.scheduler.update(i, out.trials - before, out.best_seconds, exhausted=exhausted)
            self.summary.curve.append((self.summary.trials, self.summary.total_seconds))
            if self.callback is not None:
                self.callback(self.summary)

    def _give(self, i: int, model: Any) -> None:
        """Give task ``i``'s tuner the network's current transfer model."""
        self.sessions[i].tuner.use_transfer(model)
        self.given[i] = model
