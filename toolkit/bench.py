"""Tuners side by side: every tuner on every workload with every seed, same budget, same board.

:func:`run_bench` runs the grid (workload x seed x tuner, the tuners round-robin inside each
workload/seed block so that machine drift hits all of them alike) and :func:`summarize` turns
the runs into the headline numbers. With ``replay=True`` every measurement is replayed from an
exhaustive simulator log of the task (a *cache*, see :mod:`toolkit.tuning.replay`), which also
gives the space's optimum.

Definitions (also in ``docs/benchmarks.md``):

* ``trials_to_match`` of a run: the first trial (1-based) whose best-so-far is within 1 % of the
  *reference* tuner's final best on the same workload **and the same seed**; ``None`` if never.
* ``summary[tuner]["best_vs_optimum"]``: geometric mean over (workload, seed) of best / optimum.
* ``summary[tuner]["trials_to_match_vs_reference"]``: geometric mean over (workload, seed) of
  trials_to_match / the reference's; a run that never matched counts with its whole budget
  (a lower bound; ``unmatched`` says how many).
* ``summary[tuner]["invalid_vs_reference"]``: geometric mean of (invalid + 1) / (reference invalid + 1).

>>> trials_to_match([3.0, 2.0, 1.005, 1.0], 1.0)
3
>>> round(geomean([1.0, 4.0]), 6)
2.0
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from toolkit.version import __version__
from toolkit.boards import Board
from toolkit.errors import ConfigError, LogError, WorkloadError
from toolkit.tuning.session import measure_indices, tune
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.journal import HEADER_KEY, LogHeader, tvm_version
from toolkit.tuning.replay import CachedRunner, MeasurementCache, ReplayBuilder
from toolkit.backends import make_runner
from toolkit.tuning.core.runner import MeasureOptions, Runner
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.task import Task
from toolkit.tuning.core.template import Artifact, BuildError, Template
from toolkit.tuning.tuners.base import make_tuner
from toolkit.workloads import Conv2dWorkload, parse_workload
from toolkit.backends import make_task

MATCH_TOLERANCE = 0.01
"""A run matches the reference once its best is within this fraction of the reference's final best."""

DEFAULT_CACHE_DIR = Path("edgetune-cache")


@dataclass
class BenchRun:
    """One tuner on one workload with one seed (one JSON object of ``runs``)."""

    workload: str
    tuner: str
    seed: int
    trials: int
    invalid: int
    best_seconds: float | None
    wall_s: float
    tuner_s: float
    history: list[float | None]
    best_config: dict[str, Any] | None = None
    stopped: str = "budget"
    trials_to_match: int | None = None
    build_s: float = 0.0
    compiled: int = 0
    """Configs the tuner compiled to read their features (``stats()["compiled"]``), measured or not."""

    def best(self) -> float:
        """Best seconds, ``inf`` if no valid trial."""
        return math.inf if self.best_seconds is None else self.best_seconds


@dataclass
class BenchResult:
    """Everything ``edgetune bench --json`` writes."""

    environment: dict[str, Any]
    settings: dict[str, Any]
    workloads: dict[str, dict[str, Any]]
    runs: list[BenchRun] = field(default_factory=list)
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"environment": self.environment, "settings": self.settings, "workloads": self.workloads,
                "runs": [asdict(r) for r in self.runs], "summary": self.summary}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BenchResult:
        return cls(d["environment"], d["settings"], d["workloads"], [BenchRun(**r) for r in d["runs"]],
                   d.get("summary", {}))

    @classmethod
    def load(cls, path: str | Path) -> BenchResult:
        """Read a bench JSON file; :class:`LogError` if it is not one."""
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LogError(f"{path} is not an edgetune bench JSON file ({exc}); write one with edgetune bench "
                           "--json") from None


# -- workloads, boards --------------------------------------------------------------------------------
def expand_workloads(items: Iterable[str], *, first_conv_on_cpu: bool = False) -> list[Conv2dWorkload]:
    """Workload specs, named layers and network names -> workloads (duplicates dropped, order kept).

    A network name means its tunable layers; ``resnet18`` on a board whose backend leaves the first
    conv on the CPU (VTA: ``first_conv_on_cpu``) means C2..C11 (C1 has 3 input channels, as in TVM's
    VTA tutorials).

    >>> [w.name for w in expand_workloads(["resnet18"], first_conv_on_cpu=True)][:2]
    ['resnet18.C2', 'resnet18.C3']
    """
    from toolkit.workloads.networks import NETWORKS, get_network

    out: dict[Conv2dWorkload, None] = {}
    for item in items:
        for part in (p.strip() for p in item.split(";" if ":" in item else ",")):
            if not part:
                continue
            key = part.lower().replace("-", "_")
            if key in NETWORKS:
                layers = [layer.workload for layer in get_network(key).supported()]
                if first_conv_on_cpu and key == "resnet18":
                    layers = [w for w in layers if w.name != "resnet18.C1"]
                out.update(dict.fromkeys(layers))
            else:
                out[parse_workload(part)] = None
    if not out:
        raise WorkloadError("no workloads given; pass --workloads resnet18, resnet18.C2,resnet18.C5 or a spec")
    return list(out)


# -- replay caches ------------------------------------------------------------------------------------
def _read_header(path: Path) -> LogHeader | None:
    try:
        with path.open() as f:
            obj = json.loads(f.readline())
        return LogHeader.from_json(obj, str(path)) if isinstance(obj, dict) and HEADER_KEY in obj else None
    except (OSError, ValueError, LogError):
        return None


CHECKED_CONFIGS = 8
"""Configs of a simulator cache measured again before it is replayed: its best and a fixed sample."""


def find_cache(task: Task, dirs: Sequence[str | Path]) -> MeasurementCache | None:
    """An exhaustive log of ``task`` (header equal to the task, every config recorded) in ``dirs``."""
    desc, size = task.describe(), task.space.size
    for d in dirs:
        for path in sorted(Path(d).rglob("*.jsonl")) if Path(d).is_dir() else []:
            header = _read_header(path)
            if header is None or header.mismatch(desc):
                continue
            cache = MeasurementCache.from_log(path)
            if len(cache) >= size:
                return cache
    return None


def stale_configs(task: Task, cache: MeasurementCache, n: int = CHECKED_CONFIGS) -> list[str]:
    """Configs whose recorded verdict or latency differs from what the simulator gives now.

    A cache's header names the task, not the compiler and simulator that measured it: after a
    change to either (a schedule the compiler now accepts, a recalibrated timing model) an old
    cache would replay the old backend's answers. Simulated latencies are deterministic, so the
    cache's best config and ``n - 1`` configs drawn with a fixed seed must measure as recorded.
    Only for simulator boards; ``[]`` means the sample agrees.

    >>> # stale_configs(task, MeasurementCache.from_log("C2.jsonl"))  -> ["config 17: recorded invalid, now 5.70 ms"]
    """
    if not task.board.profile.is_simulator or not len(cache):
        return []
    best = cache.best()
    rng = np.random.default_rng(0)
    picks = [best.index] if best is not None else []
    picks += [i for i in rng.permutation(sorted(cache.by_index)).tolist() if i not in picks][: n - len(picks)]
    now = measure_indices(task, picks, MeasureOptions(check=False))
    out = []
    for index, result in zip(picks, now):
        rec = cache.lookup(index)
        if rec.valid != result.valid or (rec.valid and not math.isclose(rec.seconds, result.seconds, rel_tol=1e-6)):
            out.append(f"config {index}: recorded {_verdict(rec.valid, rec.seconds)}, "
                       f"now {_verdict(result.valid, result.seconds)}")
    return out


def _verdict(valid: bool, seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms" if valid else "invalid"


def set_aside_if_stale(task: Task, cache: MeasurementCache) -> bool:
    """When :func:`stale_configs` finds ``cache`` stale, rename its file to ``<name>.stale`` (``.stale-2``
    ... if taken: kept, never replayed again), warn (:class:`StaleCacheWarning`) and return True."""
    stale = stale_configs(task, cache)
    if not stale:
        return False
    path = Path(cache.path)
    target, k = path.with_name(path.name + ".stale"), 1
    while target.exists():
        k += 1
        target = path.with_name(f"{path.name}.stale-{k}")
    path.rename(target)
    warnings.warn(f"{path} was measured by another compiler or simulator ({stale[0]}); kept as {target.name}, "
                  "not replayed", StaleCacheWarning, stacklevel=3)
    return True


def exhaustive_cache(task: Task, path: str | Path,
                     callback: Callable[[int, int], None] | None = None) -> MeasurementCache:
    """The exhaustive cache of ``task`` at ``path``: measured with the simulator (a ``grid`` run,
    resuming a partial log); a log already there that the current backend no longer reproduces
    (:func:`stale_configs`) is set aside first (:func:`set_aside_if_stale`) and the space measured again."""
    path = Path(path)
    if path.exists() and _read_header(path) is not None:
        set_aside_if_stale(task, MeasurementCache.from_log(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tune(task, make_tuner("grid"), task.space.size, log=path, resume=True, measure_options=MeasureOptions(check=False),
         callback=(lambda s, _: callback(s.trials, task.space.size)) if callback else None)
    return MeasurementCache.from_log(path)


class StaleCacheWarning(UserWarning):
    """A replay cache disagreed with the current compiler or simulator and was set aside."""


def cache_path(task: Task, cache_dir: str | Path) -> Path:
    """Where :func:`ensure_cache` builds the cache of ``task``."""
    label = task.workload.name or task.workload.spec().replace(":", "_").replace(",", "_").replace("=", "")
    compat = "-tvm" if task.template.options.get("tvm_compat") else ""
    return Path(cache_dir) / f"{task.board.name}{compat}" / f"{label}.jsonl"


def ensure_cache(task: Task, cache_dirs: Sequence[str | Path],
                 callback: Callable[[int, int], None] | None = None) -> MeasurementCache:
    """The exhaustive cache of ``task`` from ``cache_dirs``, else measure the whole space (a ``grid``
    log, resumable) into the first directory. Only simulator boards can be enumerated; their caches
    are checked against the current simulator first (a stale one is set aside, :func:`stale_configs`)."""
    found = find_cache(task, cache_dirs)
    while found is not None and task.board.profile.is_simulator and set_aside_if_stale(task, found):
        found = find_cache(task, cache_dirs)
    if found is not None:
        return found
    if not task.board.profile.is_simulator:
        raise ConfigError(f"board {task.board.name!r} is measured on hardware; replay needs an exhaustive log of "
                          f"{task.workload.label} in --cache-dir, or pass --no-replay")
    return exhaustive_cache(task, cache_path(task, cache_dirs[0] if cache_dirs else DEFAULT_CACHE_DIR), callback)


class CompileReplayBuilder(ReplayBuilder):
    """A :class:`ReplayBuilder` whose artifacts carry only the features a real build returns.

    The cache's records also hold measurement counters (the simulator's ``sim.*``); a tuner
    that ranks configs by compile-time features must not see them before measuring.
    """

    def __init__(self, cache: MeasurementCache, compile_keys: set[str] | None) -> None:
        super().__init__(cache)
        self.compile_keys = compile_keys

    @classmethod
    def for_task(cls, task: Task, cache: MeasurementCache) -> CompileReplayBuilder:
        """Learn the compile-time feature names by building the cache's best config once."""
        best = cache.best()
        keys = None
        if best is not None:
            try:
                keys = set(task.template.build(task.space.get(best.index)).features)
            except BuildError:
                keys = None
        return cls(cache, keys)

    def build(self, template: Template, configs: Sequence[Config]) -> list[Artifact | MeasureResult]:
        out = super().build(template, configs)
        if self.compile_keys is not None:
            for o in out:
                o.features = {k: v for k, v in o.features.items() if k in self.compile_keys}
        return out


# -- the bench ---------------------------------------------------------------------------------------
def trials_to_match(history: Sequence[float | None], target: float | None,
                    tolerance: float = MATCH_TOLERANCE) -> int | None:
    """First trial (1-based) whose best-so-far is within ``tolerance`` of ``target``; ``None`` if never."""
    if target is None or not math.isfinite(target):
        return None
    for i, h in enumerate(history):
        if h is not None and h <= target * (1 + tolerance):
            return i + 1
    return None


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive finite values (``None`` when there are none)."""
    vs = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in vs) / len(vs)) if vs else None


MODEL_LIBRARIES = ("numpy", "scipy", "scikit-learn", "xgboost-cpu", "torch")
"""The libraries the tuners' models are built on: a replay reproduces a run bit for bit only with the same ones."""


def library_versions() -> dict[str, str]:
    """Installed versions of :data:`MODEL_LIBRARIES` (``-`` where one is missing)."""
    from importlib import metadata

    out = {}
    for name in MODEL_LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "-"
    return out


def cpu_name() -> str:
    """This machine's CPU model (``/proc/cpuinfo``), else its architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(command: str | None = None) -> dict[str, Any]:
    """Machine, command, date and versions, for the header of every bench output."""
    cpu = cpu_name()
    return {"machine": f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
            "python": platform.python_version(), "edgetune": __version__, "tvm": tvm_version(),
            "libraries": library_versions(),
            "command": command or " ".join(["edgetune", *sys.argv[1:]]),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def assign_trials_to_match(runs: Sequence[BenchRun], reference: str) -> None:
    """Set each run's ``trials_to_match`` against the reference run of the same workload and seed."""
    ref = {(r.workload, r.seed): r.best_seconds for r in runs if r.tuner == reference}
    for r in runs:
        r.trials_to_match = trials_to_match(r.history, ref.get((r.workload, r.seed)))


def summarize(runs: Sequence[BenchRun], optimum: dict[str, float | None], reference: str) -> dict[str, dict]:
    """Per tuner: geometric means against the optimum and the reference (see the module docstring)."""
    ref = {(r.workload, r.seed): r for r in runs if r.tuner == reference}
    out: dict[str, dict] = {}
    for tuner in dict.fromkeys(r.tuner for r in runs):
        mine = [r for r in runs if r.tuner == tuner]
        vs_opt = [r.best() / optimum[r.workload] for r in mine if optimum.get(r.workload)]
        pairs = [(r, ref[(r.workload, r.seed)]) for r in mine if (r.workload, r.seed) in ref]
        ttm = [(r.trials_to_match or r.trials) / p.trials_to_match for r, p in pairs if p.trials_to_match]
        out[tuner] = {
            "runs": len(mine),
            "best_vs_optimum": geomean(vs_opt),
            "found_optimum": sum(1 for v in vs_opt if v <= 1 + 1e-9),
            "trials_to_match_vs_reference": geomean(ttm),
            "unmatched": sum(1 for r, _ in pairs if r.trials_to_match is None),
            "invalid_vs_reference": geomean((r.invalid + 1) / (p.invalid + 1) for r, p in pairs),
            "invalid_share": sum(r.invalid for r in mine) / max(1, sum(r.trials for r in mine)),
            "wall_s": sum(r.wall_s for r in mine) / max(1, len(mine)),
            "tuner_s": sum(r.tuner_s for r in mine) / max(1, len(mine)),
        }
    return out


def shared_starts(runs: Sequence[BenchRun], at_least: int = 4) -> list[tuple[list[str], int]]:
    """Groups of tuners whose best-so-far curves are identical over their first K trials in every run
    (same workload, same seed), with K; only groups with K >= ``at_least``. Seeded random warm-ups make
    model-based tuners start alike, and a budget of K trials or fewer cannot tell them apart."""
    by_key: dict[tuple[str, int], dict[str, list[float | None]]] = {}
    for r in runs:
        by_key.setdefault((r.workload, r.seed), {})[r.tuner] = r.history
    tuners = list(dict.fromkeys(r.tuner for r in runs))

    def prefix(a: str, b: str) -> int:
        lengths = []
        for hist in by_key.values():
            if a not in hist or b not in hist:
                continue
            ha, hb = hist[a], hist[b]
            n = next((i for i, (x, y) in enumerate(zip(ha, hb)) if x != y), min(len(ha), len(hb)))
            lengths.append(n)
        return min(lengths, default=0)

    groups: list[tuple[list[str], int]] = []
    grouped: set[str] = set()
    for t in tuners:
        if t in grouped:
            continue
        mates = [u for u in tuners if u != t and u not in grouped and prefix(t, u) >= at_least]
        if mates:
            members = [t, *mates]
            k = min(prefix(a, b) for i, a in enumerate(members) for b in members[i + 1:])
            if k >= at_least:
                groups.append((members, k))
                grouped.update(members)
    return groups


Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``: a bench step finished (``what`` names it)."""


def run_bench(board: Board, workloads: Sequence[Conv2dWorkload], tuners: Sequence[str], trials: int, seeds: int, *,
              reference: str = "xgb", template_options: dict[str, Any] | None = None, replay: bool = True,
              cache_dirs: Sequence[str | Path] = (DEFAULT_CACHE_DIR,), tuner_options: dict[str, Any] | None = None,
              command: str | None = None, progress: Progress | None = None,
              checkpoint: Callable[[BenchResult], None] | None = None,
              previous: BenchResult | None = None,
              variants: dict[str, tuple[str, dict[str, Any]]] | None = None,
              stop_at_optimum: bool = False) -> BenchResult:
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
    no longer change, so figures over the budget hold the optimum from there on.
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
    hw = (board.profile.vta or {}).get("preset")
    result = BenchResult(environment(command), {
        "board": board.name, "vta_config": hw, "tuners": tuners, "reference": reference, "trials": trials,
        "seeds": seeds, "replay": replay, "template_options": template_options,
        "match_tolerance": MATCH_TOLERANCE, **({"stop_at_optimum": True} if stop_at_optimum else {}),
        **({"variants": {k: {"tuner": n, "options": {o: _describe(v) for o, v in opts.items()}}
                         for k, (n, opts) in variants.items()}} if variants else {})}, {})
    total = len(workloads) * seeds * len(tuners)
    result.settings["runs_planned"] = total
    done = _reusable_runs(previous, result.settings) if previous is not None else {}
    live = None if replay else make_runner(board)   # one runner (RPC session, tracker) for the whole bench
    try:
        for wi, wl in enumerate(workloads):
            _bench_workload(result, board, wl, wi, tuners, trials, seeds, template_options, replay, cache_dirs,
                            tuner_options or {}, live, progress, total, done, variants, stop_at_optimum,
                            (lambda: checkpoint(_with_pending(_finish(result, tuners, reference), previous)))
                            if checkpoint else None)
    finally:
        if live is not None:
            live.close()
    return _finish(result, tuners, reference)


def _bench_workload(result: BenchResult, board: Board, wl: Conv2dWorkload, wi: int, tuners: Sequence[str],
                    trials: int, seeds: int, template_options: dict[str, Any], replay: bool,
                    cache_dirs: Sequence[str | Path], tuner_options: dict[str, Any], live: Runner | None,
                    progress: Progress | None, total: int, done: dict[tuple[str, str, int], BenchRun],
                    variants: dict[str, tuple[str, dict[str, Any]]], stop_at_optimum: bool,
                    after_run: Callable[[], None] | None) -> None:
    """Every seed and tuner on one workload, appended to ``result`` (runs in ``done`` are reused)."""
    task = make_task(wl, board, **template_options)
    info: dict[str, Any] = {"spec": wl.spec(), "space_size": task.space.size, "optimum": None, "cache": None}
    builder, runner = None, live
    if replay:
        cache = ensure_cache(task, list(cache_dirs),
                             (lambda d, n: progress(f"cache {wl.label}", d, n)) if progress else None)
        best = cache.best()
        info.update(optimum=best.seconds if best else None, optimum_index=best.index if best else None,
                    cache=str(cache.path))
        builder, runner = CompileReplayBuilder.for_task(task, cache), CachedRunner(cache)
    else:
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
            built = [0.0]
            s = tune(task, tuner, min(trials, task.space.size), builder=builder, runner=runner,
                     measure_options=MeasureOptions(check=False),
                     callback=lambda _, res: built.__setitem__(0, built[0] + sum(r.build_s for r in res)),
                     target_seconds=info["optimum"] if stop_at_optimum and replay else None)
            js = s.to_json()
            result.runs.append(BenchRun(workload=wl.label, tuner=name, seed=seed, trials=s.trials,
                                        invalid=s.invalid, best_seconds=js["best_seconds"], wall_s=s.wall_s,
                                        tuner_s=s.tuner_s, history=js["history"], best_config=s.best_config,
                                        stopped=s.stopped, build_s=built[0],
                                        compiled=int(tuner.stats().get("compiled", 0))))
            if progress:
                progress(f"{name} {wl.label} seed {seed}", len(result.runs), total)
            if after_run:
                after_run()


def _describe(value: Any) -> Any:
    """A tuner option as the bench JSON records it (an object by its class name)."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__


RESUME_KEYS = ("board", "vta_config", "trials", "replay", "template_options", "stop_at_optimum")
"""Settings two benches must share for one to resume the other's runs."""


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


def write_doc_section(path: str | Path, heading: str, text: str) -> None:
    """Replace the section ``heading`` (a ``## `` line, up to the next ``## `` heading) of the markdown file
    ``path`` with ``text``, or append it; the other sections are left as they are."""
    path = Path(path)
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = old.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
    body = text.rstrip("\n") + "\n"
    if start is None:
        new = old.rstrip("\n") + "\n\n" + body
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
        new = "".join(lines[:start]) + body + ("\n" + "".join(lines[end:]) if end < len(lines) else "")
    path.write_text(new)
