"""Run a bench: every tuner on every workload with every seed, same budget, same board; resumable.

:func:`run_bench` runs the grid (workload x seed x tuner, the tuners round-robin inside each
workload/seed block so that machine drift hits all of them alike); :func:`save_checkpoint` writes a
result atomically, so an interrupted bench keeps its last complete file and ``previous=`` resumes it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from toolkit.backends import backend_for, make_runner, make_task
from toolkit.boards import Board
from toolkit.errors import ConfigError
from toolkit.files import atomic_write_text
from toolkit.harness.caches import DEFAULT_CACHE_DIR, CompileReplayBuilder, ensure_cache, find_cache
from toolkit.harness.environment import environment
from toolkit.harness.results import MATCH_TOLERANCE, BenchResult, BenchRun, assign_trials_to_match, summarize
from toolkit.tuning.core.builder import Builder
from toolkit.tuning.core.runner import MeasureOptions, Runner
from toolkit.tuning.core.task import Task
from toolkit.tuning.replay import CachedRunner
from toolkit.tuning.session import tune
from toolkit.tuning.tuners.base import Tuner, make_tuner
from toolkit.workloads import Conv2dWorkload


def save_checkpoint(path: str | Path, data: Any, **dump_options: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (a private temporary in the same folder, then a rename):
    an interrupted bench keeps its last complete file, and a planted path is never written through.
    ``dump_options`` go to :func:`json.dump` (default ``indent=1``)."""
    atomic_write_text(Path(path), json.dumps(data, **{"indent": 1, **dump_options}) + "\n")


Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``: a bench step finished (``what`` names it)."""

def run_bench(board: Board, workloads: Sequence[Conv2dWorkload], tuners: Sequence[str], trials: int, seeds: int, *,
              reference: str = "xgb", template_options: dict[str, Any] | None = None, replay: bool = True,
              cache_dirs: Sequence[str | Path] = (DEFAULT_CACHE_DIR,), tuner_options: dict[str, Any] | None = None,
              command: str | None = None, progress: Progress | None = None,
              checkpoint: Callable[[BenchResult], None] | None = None,
              previous: BenchResult | None = None,
              variants: dict[str, tuple[str, dict[str, Any]]] | None = None,
              stop_at_optimum: bool = False, cluster: str | None = None) -> BenchResult:
    """Run every tuner on every workload with every seed (``trials`` each) and summarise.

    Inside each (workload, seed) block the tuners run one after another, starting with a
    different tuner in each block (round-robin), so slow drift of the machine hits all alike.
    ``reference`` must be one of ``tuners``. With ``replay`` the measurements come from the
    task's exhaustive simulator cache (built on first use into ``cache_dirs[0]``). ``checkpoint``
    gets the result so far (summarised) after each run, to save partial benches. ``previous`` (an
    earlier result of the same bench settings) resumes: its runs are reused, only missing
    (workload, tuner, seed) runs are run. ``variants`` names tuners with options: a label in ``tuners``
    found there runs ``(tuner name, options)`` (options may hold objects, e.g. a transfer model). With
    ``stop_at_optimum`` (replay only) a run ends at the space's optimum (``stopped="target"``): its best can
    no longer change, so figures over the budget hold the optimum from there on. ``cluster`` (a Ray head's
    ``HOST:PORT``) builds missing exhaustive logs, and live runs' configs, on that cluster.
    """
    tuners = list(dict.fromkeys(tuners))
    if not tuners:
        raise ConfigError("no tuners given; pass --tuners random,xgb")
    if reference not in tuners:
        raise ConfigError(f"the reference tuner {reference!r} is not among --tuners {','.join(tuners)}; add it or "
                          "choose another --reference")
    if trials < 1 or seeds < 1:
        raise ConfigError(f"--trials and --seeds must be >= 1 (got {trials} and {seeds})")
    variants = variants or {}
    for name in tuners:
        make_tuner(variants.get(name, (name, {}))[0])  # unknown names fail before anything runs
    template_options = template_options or {}
    hw = backend_for(board.profile).preset(board.profile)
    result = BenchResult(environment(command), {
        "board": board.name, "vta_config": hw, "tuners": tuners, "reference": reference, "trials": trials,
        "seeds": seeds, "replay": replay, "template_options": template_options,
        "match_tolerance": MATCH_TOLERANCE, **({"stop_at_optimum": True} if stop_at_optimum else {}),
        **({} if replay else {"target": board.profile.target}),   # live runs measure this machine's CPU or GPU
        **({"variants": {k: {"tuner": n, "options": {o: _describe(v) for o, v in opts.items()}}
                         for k, (n, opts) in variants.items()}} if variants else {})}, {})
    total = len(workloads) * seeds * len(tuners)
    result.settings["runs_planned"] = total
    done = _reusable_runs(previous, result.settings) if previous is not None else {}
    live = None if replay else make_runner(board)   # one runner (RPC session, tracker) for the whole bench
    try:
        for wi, wl in enumerate(workloads):
            _bench_workload(result, board, wl, wi, tuners, trials, seeds, template_options, replay, cache_dirs,
                            tuner_options or {}, live, progress, total, done, variants, stop_at_optimum, cluster,
                            (lambda: checkpoint(_with_pending(_finish(result, tuners, reference), previous)))
                            if checkpoint else None)
    finally:
        if live is not None:
            live.close()
    return _finish(result, tuners, reference)


def _shown(path: Path) -> str:
    """``path`` as results record it: relative to the working folder when inside it (results are committed and
    compared across machines), else as it is."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _bench_workload(result: BenchResult, board: Board, wl: Conv2dWorkload, wi: int, tuners: Sequence[str],
                    trials: int, seeds: int, template_options: dict[str, Any], replay: bool,
                    cache_dirs: Sequence[str | Path], tuner_options: dict[str, Any], live: Runner | None,
                    progress: Progress | None, total: int, done: dict[tuple[str, str, int], BenchRun],
                    variants: dict[str, tuple[str, dict[str, Any]]], stop_at_optimum: bool, cluster: str | None,
                    after_run: Callable[[], None] | None) -> None:
    """Every seed and tuner on one workload, appended to ``result`` (runs in ``done`` are reused)."""
    task = make_task(wl, board, **template_options)
    info: dict[str, Any] = {"spec": wl.spec(), "space_size": task.space.size, "optimum": None, "cache": None}
    builder, runner = None, live
    if replay:
        cache = ensure_cache(task, list(cache_dirs),
                             (lambda d, n: progress(f"cache {wl.label}", d, n)) if progress else None, cluster)
        best = cache.best()
        info.update(optimum=best.seconds if best else None, optimum_index=best.index if best else None,
                    cache=_shown(cache.path))
        builder, runner = CompileReplayBuilder.for_task(task, cache), CachedRunner(cache)
    else:
        if cluster is not None:
            from toolkit.cluster.builder import RayBuilder

            builder = RayBuilder.like(task.backend.default_builder(board), cluster)
        found = find_cache(task, list(cache_dirs)) if board.profile.is_simulator else None
        if found is not None and found.best() is not None:
            info.update(optimum=found.best().seconds, optimum_index=found.best().index, cache=str(found.path))
    result.workloads[wl.label] = info
    for seed in range(seeds):
        start = (wi + seed) % len(tuners)
        for name in list(tuners[start:]) + list(tuners[:start]):
            if (wl.label, name, seed) in done:
                result.runs.append(done[wl.label, name, seed])
                result.settings["resumed_runs"] = result.settings.get("resumed_runs", 0) + 1
                if progress:
                    progress(f"{name} {wl.label} seed {seed} (resumed)", len(result.runs), total)
                continue
            base, options = variants.get(name, (name, {}))
            tuner = make_tuner(base, seed=seed, **{**options, **tuner_options.get(name, {})})
            result.runs.append(run_one(task, tuner, trials, label=name, builder=builder, runner=runner,
                                       target_seconds=info["optimum"] if stop_at_optimum and replay else None))
            if progress:
                progress(f"{name} {wl.label} seed {seed}", len(result.runs), total)
            if after_run:
                after_run()

def run_one(task: Task, tuner: Tuner, trials: int, *, label: str | None = None, builder: Builder | None = None,
            runner: Runner | None = None, target_seconds: float | None = None) -> BenchRun:
    """One bench run: ``tuner`` on ``task`` for ``trials`` trials (at most the space), measured by ``runner``
    (a :class:`~toolkit.tuning.replay.CachedRunner` replays), as a :class:`BenchRun` named ``label`` (default:
    the tuner's name) with its best-so-far history, build and CPU seconds and the tuner's counters."""
    built = [0.0]
    cpu0 = time.process_time()
    s = tune(task, tuner, min(trials, task.space.size), builder=builder, runner=runner,
             measure_options=MeasureOptions(),
             callback=lambda _, res: built.__setitem__(0, built[0] + sum(r.build_s for r in res)),
             target_seconds=target_seconds)
    js = s.to_json()
    stats = {k: float(v) for k, v in tuner.stats().items()}
    return BenchRun(workload=task.workload.label, tuner=label or tuner.name, seed=tuner.seed, trials=s.trials,
                    invalid=s.invalid, best_seconds=js["best_seconds"], wall_s=s.wall_s, tuner_s=s.tuner_s,
                    history=js["history"], best_config=s.best_config, stopped=s.stopped, build_s=built[0],
                    compiled=int(stats.get("compiled", 0)), cpu_s=time.process_time() - cpu0, stats=stats)

def _describe(value: Any) -> Any:
    """A tuner option as the bench JSON records it (an object by its class name)."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__

RESUME_KEYS = ("board", "vta_config", "trials", "replay", "template_options", "stop_at_optimum", "target")
"""Settings two benches must share for one to resume the other's runs (``target``: recorded by live benches only,
so another CPU's, or an unrecorded one's, live measurements are not taken for this one's)."""

def _reusable_runs(previous: BenchResult, settings: dict[str, Any]) -> dict[tuple[str, str, int], BenchRun]:
    """The runs of ``previous`` by (workload, tuner, seed); :class:`ConfigError` if its settings differ."""
    differ = [k for k in RESUME_KEYS if previous.settings.get(k) != settings.get(k)]
    if differ:
        what = ", ".join(f"{k} {previous.settings.get(k)!r} vs {settings.get(k)!r}" for k in differ)
        raise ConfigError(f"cannot resume a bench with other settings ({what}); choose another --json")
    return {(r.workload, r.tuner, r.seed): r for r in previous.runs}

def _with_pending(result: BenchResult, previous: BenchResult | None) -> BenchResult:
    """``result`` plus the runs of ``previous`` it has not reached yet, so an interrupted resume loses none."""
    if previous is None:
        return result
    have = {(r.workload, r.tuner, r.seed) for r in result.runs}
    pending = [r for r in previous.runs if (r.workload, r.tuner, r.seed) not in have]
    return dataclasses.replace(result, runs=result.runs + pending, workloads={**previous.workloads, **result.workloads})

def _finish(result: BenchResult, tuners: Sequence[str], reference: str) -> BenchResult:
    """Sort the runs (workload, seed, tuner), set trials_to_match and the summary."""
    order = {t: i for i, t in enumerate(tuners)}
    result.runs.sort(key=lambda r: (list(result.workloads).index(r.workload), r.seed, order[r.tuner]))
    assign_trials_to_match(result.runs, reference)
    result.summary = summarize(result.runs, {k: v["optimum"] for k, v in result.workloads.items()}, reference)
    return result
