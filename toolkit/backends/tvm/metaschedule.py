"""MetaSchedule (``tvm.s_tir.meta_schedule``) as a peer tuner of edgetune's TVM (CPU/CUDA) boards.

MetaSchedule tunes the *same* workload as edgetune's template: the template's ``te`` compute of
the conv2d (``data`` NCHW, ``weight`` in the template's layout, ``conv`` NCHW) as a PrimFunc,
for the board profile's target, with its evolutionary search and XGBoost cost model. It measures
through the board's TVM RPC tracker and key (MetaSchedule's ``RPCRunner``; the ``local`` board
gets the loopback tracker + server of :mod:`toolkit.rpc.tracker`) with edgetune's timing options.

MetaSchedule is not ask/tell: it owns its search loop. :class:`MetaScheduleTuner` is therefore a
*driver*: it is registered as tuner ``metaschedule`` (so ``edgetune tune --tuner metaschedule``
and ``edgetune bench --tuners metaschedule`` name it) and :func:`toolkit.tuning.session.tune` hands
the whole run to :meth:`MetaScheduleTuner.drive` instead of calling ``propose``/``update``. Every
measured candidate is journalled as an edgetune :class:`~toolkit.tuning.journal.Record` whose
``config`` is ``{"kind": "metaschedule", "trace": <trace JSON>}`` (index ``None``);
:func:`rebuild` applies such a trace to the workload's PrimFunc and builds it (``export``/``run``).

apache-tvm 0.27.0.post1 traps handled here: the LocalBuilder's default build imports
``tvm.s_tir.tensor_intrin`` in every worker (~20 s, so builds hit the 30 s timeout), so
:func:`build_module` is passed as ``f_build`` instead; LLVM targets get ``num-cores`` (MetaSchedule
needs it) and keep the profile's resolved ``mcpu``; ``apache-tvm-ffi==0.1.14.post1`` is pinned in
``pyproject.toml`` (newer ones segfault).

>>> from toolkit.boards import resolve_board
>>> from toolkit.backends import make_task
>>> from toolkit.workloads import parse_workload
>>> task = make_task(parse_workload("resnet18.C5"), resolve_board("local"))   # doctest: +SKIP
>>> tune(task, MetaScheduleTuner(seed=0), 64, log="c5.jsonl").best_gops        # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Sequence

from toolkit.boards import BoardProfile
from toolkit.errors import ConfigError, error_line
from toolkit.backends.tvm.cpu import BUILD_TIMEOUT_S, ConvTemplateBase
from toolkit.backends.tvm.link import link_library
from toolkit.tuning.core.builder import worker_env
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.journal import Journal, Record, open_journal
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.core.template import Artifact, BuildError, Template
from toolkit.tuning.tuners.base import Driver, Option

KIND = "metaschedule"
"""``config["kind"]`` of a MetaSchedule record."""

DEFAULT_LLVM_CORES = 4
"""``num-cores`` of a remote LLVM board whose profile target does not say (Pi 4/5, Jetson CPUs)."""


def is_trace_config(config: dict[str, Any] | None) -> bool:
    """True for the ``config`` of a MetaSchedule record."""
    return isinstance(config, dict) and config.get("kind") == KIND and "trace" in config


# ---- workload and target ----------------------------------------------------------------------
def workload_module(template: Template) -> Any:
    """The template's conv2d compute as an ``IRModule`` with one PrimFunc ``main`` (nothing scheduled)."""
    import tvm

    return tvm.IRModule({"main": template._compute()})  # type: ignore[attr-defined]


def ms_target(profile: BoardProfile) -> Any:
    """The profile's target (``mcpu`` resolved) for MetaSchedule; LLVM targets get ``num-cores`` (it needs it)."""
    from tvm.target import Target

    target = profile.tvm_target()
    if target.kind.name != "llvm" or "num-cores" in profile.target:
        return target
    cores = _physical_cores() if profile.name == "local" else DEFAULT_LLVM_CORES
    return Target({**dict(target.export()), "num-cores": cores})


def _physical_cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


# ---- build (runs in MetaSchedule's builder workers) --------------------------------------------
def build_module(mod: Any, target: Any, _params: Any = None) -> Any:
    """MetaSchedule ``f_build`` without ``import tvm.s_tir.tensor_intrin`` (the default's ~20 s import)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    with target:  # the CUDA compile callback reads the arch from the current target
        return tvm.tirx.build(mod, target=target)


def export_module(rt_mod: Any, compiler: str | None = None) -> str:
    """MetaSchedule ``f_export``: a shared library linked on the host by ``compiler`` (the profile's)."""
    path = os.path.join(tempfile.mkdtemp(prefix="edgetune-ms-"), "kernel.so")
    Path(path).write_bytes(link_library(rt_mod, compiler))
    return path


def ms_builder(profile: BoardProfile, max_workers: int | None = None, timeout_s: float = BUILD_TIMEOUT_S) -> Any:
    """A MetaSchedule ``LocalBuilder`` with :func:`build_module` and a host-linked export for ``profile``."""
    from tvm.s_tir.meta_schedule.builder import LocalBuilder

    return LocalBuilder(max_workers=max_workers or os.cpu_count() or 1, timeout_sec=timeout_s,
                        f_build=build_module,
                        f_export=functools.partial(export_module, compiler=profile.cross_compiler))


def ms_rpc_runner(host: str, port: int, key: str, options: MeasureOptions) -> Any:
    """MetaSchedule's ``RPCRunner`` on the tracker ``host:port`` and ``key``, timing as edgetune does."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RPCConfig, RPCRunner

    rpc = RPCConfig(tracker_host=host, tracker_port=int(port), tracker_key=key,
                    session_timeout_sec=int(math.ceil(options.timeout_s + 30)))
    evaluator = EvaluatorConfig(number=options.number, repeat=options.repeat,
                                min_repeat_ms=int(math.ceil(options.min_repeat_ms)), enable_cpu_cache_flush=False)
    return RPCRunner(rpc_config=rpc, evaluator_config=evaluator, max_workers=1)


# ---- traces -----------------------------------------------------------------------------------
def trace_json(trace: Any) -> Any:
    """A ``Trace`` as plain JSON (``Trace.as_json`` leaves ``IntImm``/``FloatImm`` objects in it)."""
    from tvm import tirx

    def plain(obj: Any) -> Any:
        if isinstance(obj, tirx.IntImm):
            return int(obj.value)
        if isinstance(obj, tirx.FloatImm):
            return float(obj.value)
        if isinstance(obj, dict):
            return {str(k): plain(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [plain(v) for v in obj]
        return obj

    return plain(trace.as_json(remove_postproc=False))


def apply_trace(template: Template, trace_json: Any) -> Any:
    """The workload's PrimFunc scheduled by a MetaSchedule trace (``Trace.as_json()``): a ``Schedule``."""
    from tvm import s_tir

    sch = s_tir.Schedule(workload_module(template))
    s_tir.schedule.Trace.apply_json_to_schedule(trace_json, sch)
    return sch


def rebuild(template: Template, config: dict[str, Any], index: int | None = None) -> Artifact:
    """Build a MetaSchedule record's config (its trace applied to the workload) into an :class:`Artifact`."""
    from toolkit.backends.tvm.cpu import export

    if not is_trace_config(config):
        raise BuildError("not a MetaSchedule config (no 'trace')", ErrorClass.INVALID_CONFIG)
    started = time.perf_counter()
    try:
        sch = apply_trace(template, config["trace"])
    except Exception as exc:  # noqa: BLE001 - ScheduleError / TVMError on a trace of another workload
        raise BuildError(f"applying the MetaSchedule trace failed: {error_line(exc, first=True)}",
                         ErrorClass.INVALID_CONFIG) from None
    try:
        executable = build_module(sch.mod, ms_target(template.profile))
    except Exception as exc:  # noqa: BLE001
        raise BuildError(f"building the MetaSchedule schedule failed: {error_line(exc, first=True)}") from None
    return export(executable, template.profile, -1 if index is None else index, {}, started)


class TraceTemplate(Template):
    """A template whose one config is a MetaSchedule trace; the rest (inputs, layouts) is ``base``'s.

    ``export`` rebuilds MetaSchedule records through it: ``build`` applies the trace.
    """

    def __init__(self, base: Template) -> None:
        super().__init__(base.workload, base.profile, **base.options)
        self.base = base
        self.name = base.name  # type: ignore[misc]
        self.weight_layout = getattr(base, "weight_layout", "OIHW")

    def space(self) -> Any:
        return self.base.space()

    def build(self, config: Any) -> Artifact:
        return rebuild(self.base, config.values, None)

    def make_inputs(self, rng: Any) -> list[Any]:
        return self.base.make_inputs(rng)

    def reference(self, inputs: list[Any]) -> Any:
        return self.base.reference(inputs)

    def describe(self) -> dict[str, Any]:
        return self.base.describe()


# ---- the driver --------------------------------------------------------------------------------
class MetaScheduleTuner(Driver):
    """TVM MetaSchedule (evolutionary search + XGBoost) as a peer; a driver that tune() runs whole."""

    name: ClassVar[str] = KIND
    options: ClassVar[dict[str, Option]] = {
        "trials_per_iter": Option(64, "candidates MetaSchedule measures per search round", int, low=1),
        "cost_model": Option("xgb", "MetaSchedule cost model", str, ("xgb", "mlp", "random")),
        "strategy": Option("evolutionary", "MetaSchedule search strategy", str,
                           ("evolutionary", "replay-trace", "replay-func")),
        "population": Option(512, "candidates the evolutionary search keeps per generation (MetaSchedule's "
                             "default)", int, low=2),
        "build_timeout": Option(BUILD_TIMEOUT_S, "seconds one build may take before it counts as failed "
                                "(edgetune's builder default)", float, low=0, low_open=True),
    }

    def drive(self, task: Any, n_trials: int, *, log: str | os.PathLike | None = None, resume: bool = False,
              runner: Any = None, measure_options: MeasureOptions | None = None,
              callback: Callable[[Any, Sequence[MeasureResult]], None] | None = None) -> Any:
        """Tune ``task`` with MetaSchedule for ``n_trials`` measured candidates; a ``TuneSummary``.

        ``runner`` is the board's edgetune RPC runner (its tracker address and key are used);
        ``None``: the board's tracker (``local``: a loopback tracker + server, stopped afterwards).
        With ``log`` every candidate is journalled; ``resume`` counts the log's MetaSchedule
        records towards ``n_trials`` and seeds MetaSchedule's database with them (warm start).
        """
        from toolkit.tuning.session import TuneSummary

        if not isinstance(task.template, ConvTemplateBase) or task.board.profile.executor != "tvm":
            raise ConfigError(f"the metaschedule tuner tunes TVM CPU/CUDA boards; {task.board.name!r} is a "
                              f"{task.board.profile.family} board")
        t_start = time.perf_counter()
        options = measure_options or MeasureOptions()
        desc = task.describe()
        summary = TuneSummary(workload=task.workload.label, board=task.board.name, tuner=self.name,
                              flops=task.flops, log=str(log) if log else None)
        journal, earlier = open_journal(log, desc, resume=resume)
        release = None
        try:
            for r in earlier:
                summary.add(_result(r.config, r.costs, r.error, r.message, r.build_s, r.run_s))
            summary.resumed = len(earlier)
            if runner is not None and getattr(runner, "key", None):
                host, port, key = runner.host, runner.port, runner.key
            else:
                from toolkit.backends.tvm.rpc_session import board_tracker

                (host, port), release = board_tracker(task.board)
                key = task.board.rpc_key
            remaining = n_trials - summary.trials
            if remaining > 0:
                self._search(task, remaining, [r for r in earlier if r.valid and is_trace_config(r.config)],
                             host, port, key, options, journal, summary, desc, callback)
        finally:
            if journal is not None:
                journal.close()
            if release is not None:
                release()
        summary.best_index = None
        summary.wall_s = time.perf_counter() - t_start
        return summary

    def _search(self, task: Any, n_trials: int, seeds: list[Record], host: str, port: int, key: str,
                options: MeasureOptions, journal: Journal | None, summary: Any, desc: dict[str, Any],
                callback: Any) -> None:
        from tvm.s_tir import meta_schedule as ms

        template = task.template
        mod = workload_module(template)
        target = ms_target(task.board.profile)
        database = ms.database.MemoryDatabase()
        for rec in seeds:
            _commit(database, template, mod, target, rec)
        first = summary.trials
        journal_cb = _journal_callback(self.name, task, summary, journal, desc, callback, n_trials)
        with _quiet_ms_logging():
            self._tune_tir(mod, target, n_trials, task, host, port, key, options, database, journal_cb)
        if summary.trials - first < n_trials:
            summary.stopped = "exhausted"

    def _tune_tir(self, mod: Any, target: Any, n_trials: int, task: Any, host: str, port: int, key: str,
                  options: MeasureOptions, database: Any, journal_cb: Any) -> None:
        from tvm.s_tir import meta_schedule as ms

        with tempfile.TemporaryDirectory(prefix="edgetune-ms-") as work_dir, worker_env():   # its build workers
            ms.tune_tir(
                mod, target, work_dir, max_trials_global=n_trials,
                num_trials_per_iter=min(self.params["trials_per_iter"], n_trials),
                builder=ms_builder(task.board.profile, timeout_s=self.params["build_timeout"]),
                runner=ms_rpc_runner(host, port, key, options), database=database,
                cost_model=self.params["cost_model"], strategy=self._strategy(),
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), journal_cb],
                seed=self.seed, num_tuning_cores=os.cpu_count() or 1)

    def _strategy(self) -> Any:
        """The search strategy: MetaSchedule's evolutionary search with ``population``, or a replay by name."""
        from tvm.s_tir import meta_schedule as ms

        if self.params["strategy"] != "evolutionary":
            return self.params["strategy"]
        return ms.search_strategy.EvolutionarySearch(population_size=self.params["population"])


@contextlib.contextmanager
def _quiet_ms_logging() -> Iterator[None]:
    """Run ``tune_tir`` without its INFO/DEBUG tables on stdout, and undo its logging setup afterwards.

    ``tune_tir`` (re)configures the ``tvm.s_tir.meta_schedule`` loggers with ``dictConfig``: a
    console handler at that logger's level (DEBUG when unset) and file handlers in its work_dir.
    It lists the logger's existing handlers by name, so an unnamed one (added by someone else)
    breaks a second run; those are set aside during the run and every handler it adds is closed.
    """
    root = logging.getLogger("tvm.s_tir.meta_schedule")
    level, saved = root.level, list(root.handlers)
    before = {name: list(lg.handlers) for name, lg in logging.root.manager.loggerDict.items()
              if name.startswith(root.name + ".") and isinstance(lg, logging.Logger)}
    root.handlers = [h for h in saved if h.get_name()]
    if level == logging.NOTSET:
        root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for name, lg in list(logging.root.manager.loggerDict.items()):
            if isinstance(lg, logging.Logger) and (name == root.name or name.startswith(root.name + ".")):
                keep = saved if name == root.name else before.get(name, [])
                for h in lg.handlers:
                    if h not in keep:
                        h.close()
                lg.handlers = list(keep)
        root.setLevel(level)


def _result(config: dict[str, Any], costs: Sequence[float], error: str | None, message: str,
            build_s: float = 0.0, run_s: float = 0.0) -> MeasureResult:
    return MeasureResult(index=-1, config=config, costs=list(costs),
                         error=None if error is None else ErrorClass(error), message=message,
                         build_s=build_s, run_s=run_s)


def _commit(database: Any, template: Template, mod: Any, target: Any, rec: Record) -> None:
    """Add an earlier record to MetaSchedule's database (a warm-start seed of its search)."""
    from tvm.s_tir import meta_schedule as ms

    try:
        sch = apply_trace(template, rec.config["trace"])
    except Exception:  # noqa: BLE001 - a trace from another TVM version: not a seed
        return
    workload = database.commit_workload(mod)
    database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, run_secs=[float(c) for c in rec.costs], target=target,
        args_info=ms.arg_info.ArgInfo.from_prim_func(mod["main"])))


def _journal_callback(tuner: str, task: Any, summary: Any, journal: Journal | None, desc: dict[str, Any],
                      callback: Any, budget: int) -> Any:
    """A MetaSchedule measure callback that turns each measured candidate into an edgetune record."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    first = summary.trials

    @derived_object
    class JournalCallback(PyMeasureCallback):
        def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any, builder_results: Any,
                  runner_results: Any) -> None:
            results = []
            for cand, built, ran in zip(measure_candidates, builder_results, runner_results):
                if summary.trials - first >= budget:
                    break
                config = {"kind": KIND, "trace": trace_json(cand.sch.trace)}
                if built.error_msg is not None:
                    text = str(built.error_msg)
                    error = (ErrorClass.TIMEOUT if "Timeout" in text else ErrorClass.COMPILE_ERROR).value
                    msg, costs = _tail(text), []
                elif ran.error_msg is not None:
                    text = str(ran.error_msg)
                    error = (ErrorClass.TIMEOUT if "timeout" in text.lower() else ErrorClass.RUNTIME_ERROR).value
                    msg, costs = _tail(text), []
                else:
                    error, msg, costs = None, "", [float(s) for s in ran.run_secs]
                rec = Record(workload=desc["workload"], board=desc["board"], target=desc.get("target"),
                             template=desc.get("template", {}), tuner=tuner, trial=summary.trials, index=None,
                             config=config, costs=costs, error=error, message=msg)
                if journal is not None:
                    journal.append(rec)
                result = _result(config, costs, error, msg)
                summary.add(result)
                results.append(result)
            if callback is not None and results:
                callback(summary, results)

    return JournalCallback()


def _tail(text: Any) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    err = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
    return err[:300]
