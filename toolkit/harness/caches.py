"""Replay caches: exhaustive simulator logs of a task, found, checked against the current backend, built.

A bench with ``replay`` answers every measurement from the task's cache (see :mod:`toolkit.tuning.replay`),
which also gives the space's optimum.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from toolkit.errors import ConfigError, LogError
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.task import Task
from toolkit.tuning.core.template import Artifact, BuildError, Template
from toolkit.tuning.journal import HEADER_KEY, LogHeader
from toolkit.tuning.replay import MeasurementCache, ReplayBuilder
from toolkit.tuning.session import measure_indices, tune
from toolkit.tuning.tuners.base import make_tuner

DEFAULT_CACHE_DIR = Path("edgetune-cache")

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
    now = measure_indices(task, picks, MeasureOptions())
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

def exhaustive_cache(task: Task, path: str | Path, callback: Callable[[int, int], None] | None = None,
                     cluster: str | None = None) -> MeasurementCache:
    """The exhaustive cache of ``task`` at ``path``: measured with the simulator (a ``grid`` run,
    resuming a partial log; on the Ray cluster at ``cluster`` when given: :func:`toolkit.cluster.sweep.sweep`);
    a log already there that the current backend no longer reproduces (:func:`stale_configs`) is set aside first
    (:func:`set_aside_if_stale`) and the space measured again."""
    path = Path(path)
    if path.exists() and _read_header(path) is not None:
        set_aside_if_stale(task, MeasurementCache.from_log(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    if cluster is not None:
        from toolkit.cluster.sweep import sweep

        sweep(task, path, cluster, callback=callback)
        return MeasurementCache.from_log(path)
    tune(task, make_tuner("grid"), task.space.size, log=path, resume=True, measure_options=MeasureOptions(),
         callback=(lambda s, _: callback(s.trials, task.space.size)) if callback else None)
    return MeasurementCache.from_log(path)

class StaleCacheWarning(UserWarning):
    """A replay cache disagreed with the current compiler or simulator and was set aside."""

def cache_path(task: Task, cache_dir: str | Path) -> Path:
    """Where :func:`ensure_cache` builds the cache of ``task``."""
    label = task.workload.name or task.workload.spec().replace(":", "_").replace(",", "_").replace("=", "")
    # each template option that is on names the space: `tvm_compat` -> `<board>-tvm`
    tags = "".join(f"-{name.split('_')[0]}" for name, on in sorted(task.template.options.items()) if on is True)
    return Path(cache_dir) / f"{task.board.name}{tags}" / f"{label}.jsonl"

def ensure_cache(task: Task, cache_dirs: Sequence[str | Path], callback: Callable[[int, int], None] | None = None,
                 cluster: str | None = None) -> MeasurementCache:
    """The exhaustive cache of ``task`` from ``cache_dirs``, else measure the whole space (a ``grid``
    log, resumable; on the Ray cluster at ``cluster`` when given) into the first directory. Only simulator boards
    can be enumerated; their caches
    are checked against the current simulator first (a stale one is set aside, :func:`stale_configs`)."""
    found = find_cache(task, cache_dirs)
    while found is not None and task.board.profile.is_simulator and set_aside_if_stale(task, found):
        found = find_cache(task, cache_dirs)
    if found is not None:
        return found
    if not task.board.profile.is_simulator:
        raise ConfigError(f"board {task.board.name!r} is measured on hardware; replay needs an exhaustive log of "
                          f"{task.workload.label} in --cache-dir, or pass --no-replay")
    return exhaustive_cache(task, cache_path(task, cache_dirs[0] if cache_dirs else DEFAULT_CACHE_DIR), callback,
                            cluster)

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
