"""The tuning loop: ask the tuner, build, measure, journal, tell the tuner.

>>> from toolkit.boards import resolve_board
>>> from toolkit.backends import make_task
>>> from toolkit.tuning.tuners import make_tuner
>>> from toolkit.workloads import parse_workload
>>> task = make_task(parse_workload("resnet18.C11"), resolve_board("vta-fsim"))  # doctest: +SKIP
>>> tune(task, make_tuner("random", seed=0), 16).trials  # doctest: +SKIP
16
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from toolkit.errors import BoardError, LogError
from toolkit.tuning.core.builder import Builder
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.journal import Record, open_journal, workload_key
from toolkit.tuning.core.runner import BoardLostError, MeasureOptions, Runner
from toolkit.tuning.core.task import Task
from toolkit.tuning.core.template import Artifact
from toolkit.tuning.tuners.base import Driver, Tuner, TuningContext

MAX_BOARD_RETRIES = 3
"""How often a batch is re-measured after the board was lost before the run stops."""


@dataclass
class TuneSummary:
    """Outcome of :func:`tune` (also what ``edgetune tune --json`` prints).

    ``trials`` and ``invalid`` include trials restored from the log on resume
    (``resumed``); ``history[i]`` is the best seconds after trial ``i`` (``inf`` until a
    valid one); ``stopped`` is ``"budget"``, ``"early_stopping"`` or ``"exhausted"``.
    """

    workload: str
    board: str
    tuner: str
    flops: int
    best_index: int | None = None
    best_config: dict[str, Any] | None = None
    best_seconds: float = math.inf
    trials: int = 0
    invalid: int = 0
    resumed: int = 0
    wall_s: float = 0.0
    tuner_s: float = 0.0
    history: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    stopped: str = "budget"
    log: str | None = None
    best_trial: int = -1

    @property
    def best_gops(self) -> float:
        """Throughput of the best config, 1e9 operations per second (0 if none was valid)."""
        return self.flops / self.best_seconds / 1e9 if math.isfinite(self.best_seconds) else 0.0

    @property
    def valid(self) -> int:
        return self.trials - self.invalid

    def add(self, result: MeasureResult) -> None:
        """Count one finished trial."""
        if result.valid:
            if result.seconds < self.best_seconds:
                self.best_seconds, self.best_index = result.seconds, result.index
                self.best_config, self.best_trial = result.config, self.trials
        else:
            self.invalid += 1
            key = result.error.value if result.error else "no_cost"
            self.errors[key] = self.errors.get(key, 0) + 1
        self.trials += 1
        self.history.append(self.best_seconds)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["best_gops"] = self.best_gops
        d["best_seconds"] = self.best_seconds if math.isfinite(self.best_seconds) else None
        d["history"] = [s if math.isfinite(s) else None for s in self.history]
        return d


Callback = Callable[[TuneSummary, Sequence[MeasureResult]], None]


def default_log_path(task: Task, root: str | Path = "edgetune-logs") -> Path:
    """``edgetune-logs/<board>/<workload label>.jsonl`` (the spec when the workload has no name)."""
    label = task.workload.name or task.workload.spec().replace(":", "_").replace(",", "_").replace("=", "")
    return Path(root) / task.board.name / f"{label}.jsonl"


def tune(task: Task, tuner: Tuner | Driver, n_trials: int, *, log: str | Path | None = None, resume: bool = False,
         early_stopping: int | None = None, builder: Builder | None = None, runner: Runner | None = None,
         measure_options: MeasureOptions | None = None, callback: Callback | None = None,
         batch_size: int | None = None, time_budget_s: float | None = None,
         target_seconds: float | None = None) -> TuneSummary:
    """Tune ``task`` for ``n_trials`` trials in all (a resumed log's trials count towards them).

    Every config sent to build+measure is a trial; every failure is an invalid trial; a lost
    board is re-measured, never recorded. With ``log``, each trial is appended durably; with
    ``resume`` the log's trials are restored (header must match the task, else
    :class:`LogError`) and never measured again. ``early_stopping=K`` stops when the best has
    not improved for ``K`` trials (AutoTVM); ``time_budget_s`` stops starting new rounds once the run has
    lasted that long (``stopped="time_budget"``); ``target_seconds`` stops once the best is that fast
    (``stopped="target"``: benchmarks that know a space's optimum stop there, nothing after it can change).
    Builder and runner default to the board's;
    a :class:`~toolkit.tuning.tuners.base.Driver` (e.g. ``metaschedule``) gets the whole run through its
    ``drive(task, n_trials, log=, resume=, runner=, measure_options=, callback=)`` instead;
    ``measure_options`` defaults to timing only (no output check, as AutoTVM); pass
    ``MeasureOptions(check=True)`` to compare every output with the reference.
    """
    if n_trials < 0:
        raise LogError(f"the number of trials must be >= 0, got {n_trials}")
    if isinstance(tuner, Driver):   # a driver (metaschedule) runs its own search loop
        return tuner.drive(task, n_trials, log=log, resume=resume, runner=runner,
                           measure_options=measure_options, callback=callback)
    t_start = time.perf_counter()
    own_builder = builder is None
    builder = builder or task.backend.default_builder(task.board)
    own_runner = runner is None
    runner = runner or task.backend.make_runner(task.board)
    desc = task.describe()
    summary = TuneSummary(workload=task.workload.label, board=task.board.name, tuner=tuner.name or type(tuner).__name__,
                          flops=task.flops, log=str(log) if log else None)
    journal, earlier = open_journal(log, desc, resume=resume)
    try:
        _check_resumed(earlier, desc, task.space.size, log)
        history = [r.to_result() for r in earlier if r.index is not None]
        del earlier                     # the results hold what the tuner needs; the records go
        for r in history:
            summary.add(r)
        summary.resumed = len(history)

        def record(first: int, results: Sequence[MeasureResult]) -> None:
            for k, r in enumerate(results):
                journal.append(Record.from_result(r, trial=first + k, tuner=summary.tuner, task=desc))

        session = Session(task, tuner, builder=builder, runner=runner, measure_options=measure_options,
                          batch_size=batch_size)
        summary.tuner_s += session.start(history)
        session.run(n_trials, summary, early_stopping=early_stopping, time_budget_s=time_budget_s,
                    started=t_start, target_seconds=target_seconds,
                    record=record if journal is not None else None, callback=callback)
    finally:
        if journal is not None:
            journal.close()
        if own_runner:
            runner.close()
        if own_builder:
            builder.close()
        summary.wall_s = time.perf_counter() - t_start
    return summary


class Session:
    """One task's tuner bound to a builder and a runner: the ask/build/measure/tell loop.

    :meth:`start` sets the tuner up on the task's space and restores ``history`` (once); each
    :meth:`run` tunes until a summary holds ``n_trials`` trials. :func:`tune` runs one session for a
    whole budget (with a journal); whole-network tuning keeps one session per task and runs it a
    round at a time, so each tuner lives across rounds.
    """

    def __init__(self, task: Task, tuner: Tuner, *, builder: Builder, runner: Runner,
                 measure_options: MeasureOptions | None = None, batch_size: int | None = None) -> None:
        self.task, self.tuner, self.builder, self.runner = task, tuner, builder, runner
        self.options = measure_options or MeasureOptions()
        self.batch = batch_size or default_batch_size(builder)
        self.measured: set[int] = set()
        self.started = False
        self.seeded = False

    def start(self, history: Sequence[MeasureResult] = ()) -> float:
        """Set the tuner up and give it ``history`` (earlier trials, never measured again); the tuner's seconds."""
        task = self.task

        def compile_features(indices: Sequence[int]) -> list[dict[str, float] | MeasureResult]:
            return self.builder.features(task.template, [task.space.get(i) for i in indices])

        ctx = TuningContext(space=task.space, compile_features=compile_features,
                            n_parallel=max(1, self.builder.n_parallel),
                            flops=float(task.flops), task=task.describe(),
                            pretrained=lambda: task.backend.pretrained_transfer(task.board.profile))
        t0 = time.perf_counter()
        self.tuner.setup(ctx)
        self.measured.update(r.index for r in history)
        if history:
            self.tuner.load_history(list(history))
        self.started = True
        return time.perf_counter() - t0

    def run(self, n_trials: int, summary: TuneSummary, *, early_stopping: int | None = None,
            time_budget_s: float | None = None, started: float | None = None, target_seconds: float | None = None,
            record: Callable[[int, Sequence[MeasureResult]], None] | None = None,
            callback: Callback | None = None) -> TuneSummary:
        """Tune until ``summary`` holds ``n_trials`` trials (or the tuner, early stopping or the time
        budget ends it: ``summary.stopped``). ``record(first_trial, results)`` runs as soon as a batch is
        measured, before the tuner learns from it (journals write there); ``callback(summary, results)``
        after the tuner has."""
        if not self.started:
            self.start()
        t_start = time.perf_counter() if started is None else started
        options, stale = self.options, 0
        if not self.seeded:
            self.seeded = True
            _fallback_first(self, n_trials, summary, options, record)
        while summary.trials < n_trials:
            if early_stopping is not None and summary.trials >= summary.best_trial + 1 + early_stopping:
                summary.stopped = "early_stopping"
                break
            if time_budget_s is not None and time.perf_counter() - t_start >= time_budget_s:
                summary.stopped = "time_budget"
                break
            if target_seconds is not None and summary.best_seconds <= target_seconds:
                summary.stopped = "target"
                break
            t0 = time.perf_counter()
            proposed = self.tuner.propose(min(self.batch, n_trials - summary.trials))
            summary.tuner_s += time.perf_counter() - t0
            indices = [int(i) for i in dict.fromkeys(proposed) if int(i) not in self.measured]
            if not proposed:
                summary.stopped = "exhausted"
                break
            if not indices:     # a tuner re-proposing measured configs: give it a few chances
                stale += 1
                if stale > 10:
                    summary.stopped = "exhausted"
                    break
                continue
            stale = 0
            if options.hopeless_factor > 0:
                options = dataclasses.replace(options, best_s=summary.best_seconds)
            results = _measure(self.task, self.builder, self.runner, options, indices)
            self.count(summary, results, record)
            t0 = time.perf_counter()
            self.tuner.update(results)
            summary.tuner_s += time.perf_counter() - t0
            if callback is not None:
                callback(summary, results)
        return summary

    def count(self, summary: TuneSummary, results: Sequence[MeasureResult],
              record: Callable[[int, Sequence[MeasureResult]], None] | None) -> None:
        """Count measured ``results`` in ``summary`` and hand them to ``record`` (before any tuner learns them)."""
        first = summary.trials
        for r in results:
            self.measured.add(r.index)
            summary.add(r)
        if record is not None:
            record(first, results)


def _fallback_first(session: Session, n_trials: int, summary: TuneSummary, options: MeasureOptions,
                    record: Callable[[int, Sequence[MeasureResult]], None] | None) -> None:
    """A fresh task whose template has a fallback config (the untuned config a whole-model export compiles a shape
    without a record with) measures it first, as trial 0, and its tuner learns it as an earlier trial: the best
    of a tuning run is never slower than the untuned export, as measured."""
    config = session.task.template.fallback_config()
    if config is None or session.measured or summary.trials >= n_trials:
        return
    results = _measure(session.task, session.builder, session.runner, options, [config.index])
    session.count(summary, results, record)
    t0 = time.perf_counter()
    session.tuner.load_history(list(results))
    summary.tuner_s += time.perf_counter() - t0


def _check_resumed(records: Sequence[Record], desc: dict[str, Any], size: int, log: str | Path | None) -> None:
    """Refuse resuming from records that are not this task's: another workload, or an index outside its space."""
    own = workload_key(desc["workload"])
    for r in records:
        if r.workload_key != own:
            raise LogError(f"{log} holds a record of another workload (trial {r.trial}); it is not this task's "
                           "log: choose another --log")
        if r.index is not None and not 0 <= r.index < size:
            raise LogError(f"{log}: trial {r.trial} names config {r.index}, outside this task's space of {size}; "
                           "the log is not this task's: choose another --log")


def measure_indices(task: Task, indices: Sequence[int], options: MeasureOptions | None = None) -> list[MeasureResult]:
    """Build and measure ``indices`` once with the board's own builder and runner, as a trial would
    (nothing is logged); results in order."""
    builder, runner = task.backend.default_builder(task.board), task.backend.make_runner(task.board)
    try:
        return _measure(task, builder, runner, options or MeasureOptions(), list(indices))
    finally:
        runner.close()
        builder.close()


def default_batch_size(builder: Builder) -> int:
    """Configs per ask/build/measure round: 8 in-process, else 4 per build worker.

    Parallel builds hand each worker a new config as soon as it is free, so a round of several
    configs per worker keeps them busy past one slow compile; builds never overlap measurements.
    """
    return 8 if builder.n_parallel <= 1 else 4 * builder.n_parallel


def _measure(task: Task, builder: Builder, runner: Runner, options: MeasureOptions,
             indices: list[int]) -> list[MeasureResult]:
    """Build and run ``indices``; results in order; lost-board results are re-run."""
    configs = [task.space.get(i) for i in indices]
    built = builder.build(task.template, configs)
    results: dict[int, MeasureResult] = {o.index: o for o in built if isinstance(o, MeasureResult)}
    todo = [(c, o) for c, o in zip(configs, built) if isinstance(o, Artifact)]
    for attempt in range(MAX_BOARD_RETRIES + 1):
        if not todo:
            break
        try:
            measured = runner.run(task.template, todo, options)
        except BoardLostError:
            measured = []
        lost = []
        for (c, art), r in zip(todo, measured):
            if r.error == ErrorClass.BOARD_LOST:
                lost.append((c, art))
                continue
            r.features = {**art.features, **r.features}
            r.build_s = r.build_s or art.build_s
            r.config = c.values
            results[c.index] = r
        lost += todo[len(measured):]
        todo = lost
    if todo:
        raise BoardError(f"board {task.board.name!r} was lost {MAX_BOARD_RETRIES + 1} times in a row; every "
                         "finished trial is in the log; check the board and rerun with --resume")
    return [results[i] for i in indices]
