"""Building configs: the :class:`Builder` interface and :class:`LocalBuilder` (in-process or worker processes).

>>> LocalBuilder(n_parallel=0).n_parallel    # in-process, the simulator's default
0
"""

from __future__ import annotations

import abc
import contextlib
import concurrent.futures as cf
import multiprocessing
import os
import time
from collections import deque
from typing import Any, Callable, Iterator, Sequence

from toolkit.child_env import lean_env
from toolkit.errors import one_line
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Artifact, BuildError, Template

BuildOutcome = Artifact | MeasureResult
"""What building one config gives: an artifact, or the failed :class:`MeasureResult`."""

FeaturesOutcome = dict[str, float] | MeasureResult
"""What :meth:`LocalBuilder.features` gives per config: the compile-time features, or the failure."""


def _attempt(step: Callable[[Config], Any], config: Config) -> tuple[Any, MeasureResult | None, float]:
    """``step(config)``, its failure as a result (a :class:`BuildError`, or any exception), and the seconds."""
    t0 = time.perf_counter()
    try:
        return step(config), None, time.perf_counter() - t0
    except BuildError as exc:
        error, message = exc.error, one_line(exc)
    except Exception as exc:  # a template bug must not kill the tuning run
        error, message = ErrorClass.COMPILE_ERROR, f"{type(exc).__name__}: {one_line(exc)}"
    dt = time.perf_counter() - t0
    return None, MeasureResult(config.index, config.values, error=error, message=message, build_s=dt), dt


def build_one(template: Template, config: Config) -> BuildOutcome:
    """Build ``config``; a :class:`BuildError` (or any exception) becomes a failed result."""
    artifact, failed, dt = _attempt(template.build, config)
    if failed is not None:
        return failed
    artifact.build_s = artifact.build_s or dt
    return artifact


def build_in_worker(template: Template, config: Config) -> BuildOutcome:
    """:func:`build_one` in a worker process: the in-memory product stays there (the payload travels)."""
    out = build_one(template, config)
    if isinstance(out, Artifact):
        out.obj = None
    return out


def features_one(template: Template, config: Config) -> FeaturesOutcome:
    """``template.features(config)`` (lowering only, no code generation); failures become results."""
    features, failed, _ = _attempt(template.features, config)
    if failed is not None:
        return failed
    if features is None:
        raise TypeError(f"template {template.name!r} has no features-only path")
    return features


def features_in_worker(template: Template, configs: Sequence[Config]) -> list[FeaturesOutcome]:
    """:func:`features_one` of each config, in a worker process."""
    return [features_one(template, c) for c in configs]


def has_features_path(template: Template) -> bool:
    """True when ``template`` overrides :meth:`Template.features` (lowering without code generation)."""
    return type(template).features is not Template.features


def warm_up(preload: Sequence[str]) -> None:
    """Runs once per new worker: import what builds need (a no-op when the forkserver preloaded it)."""
    import importlib

    for name in preload:
        importlib.import_module(name)


WARM_UP_S = 120.0
"""How long a new pool's workers may take to start and import TVM before builds are handed out anyway."""



class Builder(abc.ABC):
    """Turns configs into artifacts (or failed results). Lifecycle: created with its settings,
    :meth:`build` called once per round by the tuning loop, :meth:`close` at the end of the run."""

    n_parallel: int = 0
    """Configs built at once (0: in-process); the loop sizes its rounds by it."""

    @abc.abstractmethod
    def build(self, template: Template, configs: Sequence[Config]) -> list[BuildOutcome]:
        """One outcome per config, in order."""

    def features(self, template: Template, configs: Sequence[Config]) -> list[FeaturesOutcome]:
        """Compile-time features of ``configs`` (a dict, or the failed :class:`MeasureResult`), in order;
        by default those of a full build."""
        return [o.features if isinstance(o, Artifact) else o for o in self.build(template, configs)]

    def close(self) -> None:
        """Release workers; the default has none."""


@contextlib.contextmanager
def worker_env() -> Iterator[None]:
    """The environment worker processes start with (:func:`~toolkit.child_env.lean_env`): ``PYTHONSAFEPATH=1``
    (``python -c`` would put the working folder first on their ``sys.path``: a ``toolkit.py`` or ``tvm.py``
    there would be imported instead of the packages) and no PyTorch."""
    keys = ("PYTHONSAFEPATH", "PYTHONPATH")
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: v for k, v in lean_env(os.environ).items() if k in keys})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


KILL_JOIN_S = 10.0
"""How long a killed pool's workers and reader thread are waited for before the builder goes on without them."""


class LocalBuilder(Builder):
    """Builds configs on this machine.

    ``n_parallel=0`` builds in-process (right for VTA, where a build takes milliseconds; no
    timeout is enforced there). ``n_parallel>=1`` builds in worker processes (``forkserver``
    context, the ``preload`` modules imported once) with a per-config ``timeout_s`` (-> ``TIMEOUT``): a new config is
    handed to a worker as soon as one is free, so one slow compile does not idle the others.
    A crashed worker gives a ``COMPILE_ERROR`` for its config and the pool is restarted
    (configs that were building beside it are built again, alone if the culprit is unclear).
    """

    def __init__(self, n_parallel: int = 0, timeout_s: float = 30.0, mp_context: str = "forkserver",
                 preload: Sequence[str] = ()) -> None:
        self.n_parallel = n_parallel
        self.timeout_s = timeout_s
        self.mp_context = mp_context
        self.preload = (*preload, __name__)
        self._pool: cf.ProcessPoolExecutor | None = None

    def _get_pool(self) -> cf.ProcessPoolExecutor:
        """The worker pool, started with TVM imported in every worker (so no build's timeout pays for it)."""
        if self._pool is None:
            ctx = multiprocessing.get_context(self.mp_context)
            if self.mp_context == "forkserver":
                ctx.set_forkserver_preload(list(self.preload))   # used when this process starts its forkserver
            self._pool = cf.ProcessPoolExecutor(max_workers=self.n_parallel, mp_context=ctx)
            with worker_env():   # the forkserver and workers start here: the working folder stays off sys.path
                cf.wait([self._pool.submit(warm_up, self.preload) for _ in range(self.n_parallel)],
                        timeout=WARM_UP_S)
        return self._pool

    def _kill_pool(self) -> None:
        """Kill the workers and drop the pool without waiting on it: a worker killed while sending its result
        leaves the pool's result pipe holding part of a message, which its reader thread would wait for forever
        (this process holds the pipe's write end too); closing that end lets the reader see the end of the pipe."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = list(getattr(pool, "_processes", {}).values())   # workers this builder started
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        for proc in procs:
            proc.join(timeout=KILL_JOIN_S)
        writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()
        pool.shutdown(wait=False, cancel_futures=True)
        thread = getattr(pool, "_executor_manager_thread", None)
        if thread is not None:
            thread.join(timeout=KILL_JOIN_S)

    def build(self, template: Template, configs: Sequence[Config]) -> list[BuildOutcome]:
        """One outcome per config, in order."""
        if self.n_parallel <= 0:
            return [build_one(template, c) for c in configs]
        out: list[BuildOutcome | None] = [None] * len(configs)
        queue = deque((pos, False) for pos in range(len(configs)))   # (position, must build alone)
        running: dict[cf.Future, tuple[int, bool, float]] = {}        # future -> (position, alone, deadline)
        while queue or running:
            pool = self._get_pool()
            while (queue and len(running) < self.n_parallel and not (running and queue[0][1])
                   and not any(alone for _, alone, _ in running.values())):
                pos, alone = queue.popleft()
                running[pool.submit(build_in_worker, template, configs[pos])] = (
                    pos, alone, time.monotonic() + self.timeout_s)
            wait = max(0.0, min(d for _, _, d in running.values()) - time.monotonic())
            done, _ = cf.wait(running, timeout=wait, return_when=cf.FIRST_COMPLETED)
            crashed: list[tuple[int, bool]] = []
            for f in done:
                pos, alone, _ = running.pop(f)
                c = configs[pos]
                try:
                    out[pos] = f.result()
                except cf.process.BrokenProcessPool:
                    crashed.append((pos, alone))
                except Exception as exc:   # e.g. the template could not be pickled
                    out[pos] = MeasureResult(c.index, c.values, error=ErrorClass.COMPILE_ERROR,
                                             message=f"{type(exc).__name__}: {one_line(exc)}")
            now = time.monotonic()
            expired = [f for f, (_, _, d) in running.items() if d <= now]
            for f in expired:
                pos, _, _ = running.pop(f)
                c = configs[pos]
                out[pos] = MeasureResult(c.index, c.values, error=ErrorClass.TIMEOUT,
                                         message=f"build exceeded {self.timeout_s:g} s", build_s=self.timeout_s)
            if not (expired or crashed):
                continue
            self._kill_pool()
            in_flight = [(pos, alone) for pos, alone, _ in running.values()]
            running.clear()
            if crashed:   # a crash breaks every build in flight: the culprit is clear only when it was alone
                in_flight += crashed
                if len(in_flight) == 1:
                    pos = in_flight.pop()[0]
                    out[pos] = MeasureResult(configs[pos].index, configs[pos].values, error=ErrorClass.COMPILE_ERROR,
                                             message="the builder worker crashed building this config")
                again = [(pos, True) for pos, _ in in_flight]
            else:         # builds beside a timeout are innocent: build them again
                again = in_flight
            queue.extendleft(reversed(again))
        return out  # type: ignore[return-value]

    def features(self, template: Template, configs: Sequence[Config]) -> list[FeaturesOutcome]:
        """Compile-time features of ``configs`` (a dict, or the failed :class:`MeasureResult`), in order.

        Templates with a features-only path (:meth:`Template.features`: lowering, no code
        generation) use it, split over the workers; others are built in full.
        """
        if not has_features_path(template):
            return [o.features if isinstance(o, Artifact) else o for o in self.build(template, configs)]
        if self.n_parallel <= 0 or len(configs) <= 1:
            return [features_one(template, c) for c in configs]
        pool = self._get_pool()
        n = min(self.n_parallel, len(configs))
        chunks = [list(configs[i::n]) for i in range(n)]
        futures = [pool.submit(features_in_worker, template, chunk) for chunk in chunks]
        done, pending = cf.wait(futures, timeout=self.timeout_s + 0.5 * len(chunks[0]))
        if pending:
            self._kill_pool()
        out: list[FeaturesOutcome | None] = [None] * len(configs)
        for i, (chunk, f) in enumerate(zip(chunks, futures)):
            try:
                got = f.result() if f in done else None
            except Exception:  # noqa: BLE001 - a crashed worker: those configs are taken one by one below
                got = None
                self._kill_pool()
            if got is None:   # timed out or crashed: in-process would risk this process; build them in full
                got = [o.features if isinstance(o, Artifact) else o for o in self.build(template, chunk)]
            for j, value in enumerate(got):
                out[i + j * n] = value
        return out  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the worker processes."""
        self._kill_pool()
