"""Building and measuring configs: the local builder, the simulator runner, runner dispatch.

>>> from toolkit.tuning.measure import LocalBuilder
>>> LocalBuilder(n_parallel=0).n_parallel    # in-process, the simulator's default
0
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
from typing import Any, Sequence

import numpy as np

from toolkit.boards import Board
from toolkit.errors import BoardError, EdgetuneError
from toolkit.tuning.measure_result import ErrorClass, MeasureResult
from toolkit.tuning.runner import MeasureOptions, Runner
from toolkit.tuning.space import Config
from toolkit.tuning.template import Artifact, BuildError, Template

BuildOutcome = Artifact | MeasureResult
"""What building one config gives: an artifact, or the failed :class:`MeasureResult`."""


def build_one(template: Template, config: Config) -> BuildOutcome:
    """Build ``config``; a :class:`BuildError` (or any exception) becomes a failed result."""
    t0 = time.perf_counter()
    try:
        artifact = template.build(config)
    except BuildError as exc:
        return MeasureResult(config.index, config.values, error=exc.error, message=_one_line(exc),
                             build_s=time.perf_counter() - t0)
    except Exception as exc:  # a template bug must not kill the tuning run
        return MeasureResult(config.index, config.values, error=ErrorClass.COMPILE_ERROR,
                             message=f"{type(exc).__name__}: {_one_line(exc)}", build_s=time.perf_counter() - t0)
    artifact.build_s = artifact.build_s or time.perf_counter() - t0
    return artifact


def _build_remote(template: Template, config: Config) -> BuildOutcome:
    """:func:`build_one` in a worker process: the in-memory product stays there (the payload travels)."""
    out = build_one(template, config)
    if isinstance(out, Artifact):
        out.obj = None
    return out


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


class LocalBuilder:
    """Builds configs on this machine.

    ``n_parallel=0`` builds in-process (right for VTA, where a build takes milliseconds; no
    timeout is enforced there). ``n_parallel>=1`` builds in worker processes (``forkserver``
    context) with a per-config ``timeout_s`` (-> ``TIMEOUT``); a crashed worker gives a
    ``COMPILE_ERROR`` for the configs it held and the pool is restarted.
    """

    def __init__(self, n_parallel: int = 0, timeout_s: float = 30.0, mp_context: str = "forkserver") -> None:
        self.n_parallel = n_parallel
        self.timeout_s = timeout_s
        self.mp_context = mp_context
        self._pool: cf.ProcessPoolExecutor | None = None

    def _get_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=self.n_parallel,
                                                mp_context=multiprocessing.get_context(self.mp_context))
        return self._pool

    def _kill_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for proc in list(getattr(pool, "_processes", {}).values()):   # workers this builder started
            if proc.is_alive():
                proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)

    def build(self, template: Template, configs: Sequence[Config]) -> list[BuildOutcome]:
        """One outcome per config, in order."""
        if self.n_parallel <= 0:
            return [build_one(template, c) for c in configs]
        out: list[BuildOutcome] = []
        for start in range(0, len(configs), self.n_parallel):
            out.extend(self._build_chunk(template, configs[start:start + self.n_parallel]))
        return out

    def _build_chunk(self, template: Template, chunk: Sequence[Config]) -> list[BuildOutcome]:
        pool = self._get_pool()
        t0 = time.perf_counter()
        futures = [pool.submit(_build_remote, template, c) for c in chunk]
        done, pending = cf.wait(futures, timeout=self.timeout_s)
        out: list[BuildOutcome | None] = []
        crashed: list[int] = []
        for pos, (c, f) in enumerate(zip(chunk, futures)):
            if f in pending:
                out.append(MeasureResult(c.index, c.values, error=ErrorClass.TIMEOUT,
                                         message=f"build exceeded {self.timeout_s:g} s",
                                         build_s=time.perf_counter() - t0))
                continue
            try:
                out.append(f.result())
            except cf.process.BrokenProcessPool:
                crashed.append(pos)
                out.append(MeasureResult(c.index, c.values, error=ErrorClass.COMPILE_ERROR,
                                         message="the builder worker crashed building this config"))
            except Exception as exc:   # e.g. the template could not be pickled
                out.append(MeasureResult(c.index, c.values, error=ErrorClass.COMPILE_ERROR,
                                         message=f"{type(exc).__name__}: {_one_line(exc)}"))
        if pending or crashed:
            self._kill_pool()
        if len(crashed) > 1:   # a crash breaks the whole pool: rebuild each alone to find the culprit
            for pos in crashed:
                out[pos] = self._build_chunk(template, [chunk[pos]])[0]
        return out  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the worker processes."""
        self._kill_pool()


class SimRunner(Runner):
    """Runs VTA programs on edgetune's simulator, in-process.

    Timing comes from the timing model (``simulate(..., timing_only=True)``); the model is
    deterministic, so one run gives the cost and ``repeat`` is not used. With
    ``options.check`` the program also runs functionally on random inputs (seeded by
    ``seed`` and the config index) and a mismatch with the template's reference is a
    ``WRONG_ANSWER``. A :class:`~toolkit.vta.errors.VTAError` while simulating is a
    ``RUNTIME_ERROR``.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def run(self, template: Template, items: Sequence[tuple[Config, Artifact]],
            options: MeasureOptions) -> list[MeasureResult]:
        return [self._run_one(template, config, artifact, options) for config, artifact in items]

    def _run_one(self, template: Template, config: Config, artifact: Artifact,
                 options: MeasureOptions) -> MeasureResult:
        from toolkit.vta.errors import VTAError
        from toolkit.vta.program import Program
        from toolkit.vta.sim import simulate

        t0 = time.perf_counter()
        base = dict(index=config.index, config=config.values, features=dict(artifact.features),
                    build_s=artifact.build_s)
        try:
            program = artifact.obj if isinstance(artifact.obj, Program) else Program.from_bytes(artifact.payload)
            timing = simulate(program, timing_only=True)
            if options.check:
                rng = np.random.default_rng([self.seed, config.index])
                inputs = template.make_inputs(rng)
                result = simulate(program, dict(zip(("inp", "wgt", "bias"), inputs)))
                expected = template.reference(inputs)
                got = np.asarray((result.outputs or {}).get("out"))
                if got.shape != expected.shape or not np.array_equal(got, expected):
                    bad = int(np.sum(got != expected)) if got.shape == expected.shape else -1
                    what = f"{bad} of {expected.size} outputs differ" if bad >= 0 else \
                        f"output shape {got.shape} != reference {expected.shape}"
                    return MeasureResult(**base, error=ErrorClass.WRONG_ANSWER, message=what,
                                         run_s=time.perf_counter() - t0)
        except (VTAError, ValueError, KeyError, IndexError) as exc:   # the program failed, not the tuner
            return MeasureResult(**base, error=ErrorClass.RUNTIME_ERROR,
                                 message=f"{type(exc).__name__}: {_one_line(exc)}", run_s=time.perf_counter() - t0)
        features = {**base.pop("features"), **{f"sim.{k}": float(v) for k, v in timing.counters.items()},
                    "sim.cycles": float(timing.cycles)}
        return MeasureResult(**base, features=features, costs=[float(timing.seconds)],
                             run_s=time.perf_counter() - t0)


_RUNNERS = {
    "fsim": ("toolkit.tuning.measure", "SimRunner"),
    "tvm": ("toolkit.tuning.rpc_runner", "RPCRunner"),
    "fpga": ("toolkit.rpc.vta_runner", "VTARPCRunner"),
}


def make_runner(board: Board, **options: Any) -> Runner:
    """The runner for ``board``'s executor: ``fsim`` -> :class:`SimRunner`, ``tvm`` ->
    ``RPCRunner(board, **options)``, ``fpga`` -> ``VTARPCRunner(board, **options)``.

    A *registered* board of the simulator type is a provisioned agent reached over RPC like an
    FPGA board; only the built-in ``vta-fsim`` runs in-process.
    """
    import importlib

    executor = board.profile.executor
    if executor == "fsim" and board.entry is not None:
        executor = "fpga"
    if executor not in _RUNNERS:
        raise BoardError(f"board {board.name!r} has executor {executor!r}; known executors: {', '.join(_RUNNERS)}")
    module, name = _RUNNERS[executor]
    if executor == "fsim":
        return SimRunner(**options)
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise EdgetuneError(f"the {executor!r} runner ({module}.{name}) for board {board.name!r} is not "
                            f"available in this installation ({exc}); use the vta-fsim board or update edgetune")
    return cls(board, **options)


def default_builder(board: Board) -> LocalBuilder:
    """In-process for VTA boards (millisecond builds), else one worker per CPU (at most 4)."""
    import os

    if board.profile.family == "vta":
        return LocalBuilder(n_parallel=0)
    return LocalBuilder(n_parallel=max(1, min(4, os.cpu_count() or 1)), timeout_s=60.0)
