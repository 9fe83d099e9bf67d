"""A conformance suite every tuner passes (Optuna's reusable sampler test cases, for tuners).

Inherit :class:`TunerConformance` in a pytest class and set ``tuner_factory`` to a callable
``seed -> Tuner`` (a tuner class works)::

    from toolkit.testing.conformance import TunerConformance
    from toolkit.tuning.tuners.xgb import XGBTuner

    class TestXGB(TunerConformance):
        tuner_factory = XGBTuner

The suite drives the tuner over :func:`synthetic_space` (560 configs, 4 knobs) with the
objective :func:`synthetic_measure`: a planted optimum (:data:`OPTIMUM`) and an invalid region,
so it needs no board, no simulator and runs in seconds. A cost-model tuner must also beat random search
on :func:`planted_space` (7560 configs, :data:`PLANTED_OPTIMUM`): :func:`beats_random_search`.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Callable, Sequence

from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.core.space import CategoricalKnob, ConfigSpace, SplitKnob
from toolkit.tuning.tuners.base import Tuner, TuningContext

FLOPS = 1e9
"""Nominal work of the synthetic task (so throughput = FLOPS / seconds)."""

OPTIMUM = {"x": [8, 8], "y": [4, 12], "u": 4, "flag": True}
"""The planted best config of :func:`synthetic_space`."""

PLANTED_OPTIMUM = {"x": [32, 8], "y": [16, 12], "u": 4, "z": [4, 8], "flag": True}
"""The planted best config of :func:`planted_space`."""

Objective = Callable[[ConfigSpace, int], MeasureResult]


def synthetic_space() -> ConfigSpace:
    """Four knobs, 7 x 10 x 4 x 2 = 560 configs."""
    return ConfigSpace([
        SplitKnob("x", 64, 2),
        SplitKnob("y", 48, 2),
        CategoricalKnob("u", [1, 2, 4, 8]),
        CategoricalKnob("flag", [False, True]),
    ])


def planted_space() -> ConfigSpace:
    """Five knobs, 9 x 14 x 5 x 6 x 2 = 7560 configs: 160 random trials see about 2 % of it."""
    return ConfigSpace([
        SplitKnob("x", 256, 2),
        SplitKnob("y", 192, 2),
        CategoricalKnob("u", [1, 2, 4, 8, 16]),
        SplitKnob("z", 32, 2),
        CategoricalKnob("flag", [False, True]),
    ])


def synthetic_measure(space: ConfigSpace, index: int) -> MeasureResult:
    """Deterministic cost: 1 ms at the planted optimum (:data:`OPTIMUM`, or :data:`PLANTED_OPTIMUM` on
    :func:`planted_space`), growing with the weighted knob-index distance from it.

    Configs whose ``x`` inner factor times ``u`` exceeds 32 are invalid (a "buffer" limit),
    about a quarter of the space.
    """
    cfg = space.get(index)
    if cfg["x"][1] * cfg["u"] > 32:
        return MeasureResult(index, cfg.values, error=ErrorClass.INVALID_CONFIG, message="buffer overflow")
    best = space.knob_indices(space.index_of(PLANTED_OPTIMUM if "z" in cfg.values else OPTIMUM))
    here = space.knob_indices(index)
    weights = (1.0, 0.5, 2.0, 1.0, 3.0) if "z" in cfg.values else (1.0, 0.5, 2.0, 3.0)
    dist = sum((a - b) ** 2 * w for a, b, w in zip(here, best, weights))
    return MeasureResult(index, cfg.values, costs=[1e-3 * (1.0 + dist)] * 2)


def synthetic_compile(space: ConfigSpace, indices: Sequence[int]) -> list[dict[str, float] | MeasureResult]:
    """Compile-time features of any space: per split knob its inner factor, and their product.

    A config :func:`synthetic_measure` calls a "buffer overflow" (``x`` inner * ``u`` > 32) fails to
    compile here, as a VTA SRAM overflow fails in the compiler."""
    out: list[dict[str, float] | MeasureResult] = []
    for i in indices:
        cfg = space.get(int(i))
        inner = {k: float(v[-1]) for k, v in cfg.values.items() if isinstance(v, list)}
        if "x" in cfg.values and "u" in cfg.values and cfg["x"][1] * cfg["u"] > 32:
            out.append(MeasureResult(int(i), cfg.values, error=ErrorClass.COMPILE_ERROR, message="overflow"))
            continue
        out.append({**{f"inner.{k}": v for k, v in inner.items()}, "footprint": math.prod(inner.values())})
    return out


def with_compiler(tuner: Tuner) -> Tuner:
    """Give ``tuner`` a ``compile_features`` (:func:`synthetic_compile`) over whatever space it is set up on,
    for tuners that compile ahead (``ml2tuner``, ``features=compile``)."""
    setup = tuner.setup

    def patched(ctx: TuningContext) -> None:
        if ctx.compile_features is None:
            ctx = dataclasses.replace(ctx, compile_features=lambda idx: synthetic_compile(ctx.space, idx))
        setup(ctx)

    tuner.setup = patched  # type: ignore[method-assign]
    return tuner


def all_invalid(space: ConfigSpace, index: int) -> MeasureResult:
    """Every config fails (a board where nothing builds)."""
    return MeasureResult(index, space.get(index).values, error=ErrorClass.COMPILE_ERROR, message="no")


def drive(tuner: Tuner, n_trials: int, *, batch: int = 8, objective: Objective = synthetic_measure,
          space: ConfigSpace | None = None, history: Sequence[MeasureResult] = (),
          check: bool = True) -> list[MeasureResult]:
    """A minimal tuning loop: set up, restore ``history``, propose/measure/update until ``n_trials``.

    With ``check``, every proposal is checked to be at most the number asked for.
    """
    space = space or synthetic_space()
    tuner.setup(TuningContext(space=space, flops=FLOPS))
    if history:
        tuner.load_history(list(history))
    out: list[MeasureResult] = []
    while len(out) < n_trials:
        ask = min(batch, n_trials - len(out))
        indices = tuner.propose(ask)
        if check:
            assert len(indices) <= ask, f"asked for {ask} configs, got {len(indices)}"
        if not indices:
            break
        results = [objective(space, int(i)) for i in indices]
        tuner.update(results)
        out.extend(results)
    return out


class TunerConformance:
    """Pytest mixin: the contract of :class:`~toolkit.tuning.tuners.base.Tuner`."""

    tuner_factory: Callable[[int], Tuner]
    n_trials: int = 160
    batch: int = 8

    def make(self, seed: int = 0) -> Tuner:
        """A fresh tuner from ``tuner_factory`` (plain function, lambda, class or staticmethod)."""
        factory = inspect.getattr_static(self, "tuner_factory")
        if isinstance(factory, staticmethod):
            factory = factory.__func__
        return factory(seed)

    def test_no_duplicate_proposals(self) -> None:
        indices = [r.index for r in drive(self.make(0), self.n_trials, batch=self.batch)]
        assert len(indices) == len(set(indices)), "a config was proposed twice"
        assert all(0 <= i < synthetic_space().size for i in indices)

    def test_budget_respected(self) -> None:
        for n in (1, 13, self.n_trials):
            results = drive(self.make(1), n, batch=self.batch)
            assert len(results) == n, f"budget {n}: the tuner stopped after {len(results)} trials"

    def test_exhausts_small_space_without_repeats(self) -> None:
        space = ConfigSpace([CategoricalKnob("a", [1, 2, 3]), SplitKnob("b", 12, 2)])   # 18 configs
        results = drive(self.make(2), 40, batch=5, space=space, objective=_small_objective)
        assert sorted(r.index for r in results) == list(range(space.size))

    def test_deterministic_under_seed(self) -> None:
        a = [r.index for r in drive(self.make(7), self.n_trials, batch=self.batch)]
        b = [r.index for r in drive(self.make(7), self.n_trials, batch=self.batch)]
        assert a == b, "two runs with the same seed proposed different configs"

    def test_survives_all_invalid_batches(self) -> None:
        results = drive(self.make(3), self.n_trials, batch=self.batch, objective=all_invalid)
        assert len(results) == self.n_trials
        assert len({r.index for r in results}) == self.n_trials

        seen: list[int] = []

        def invalid_first(space: ConfigSpace, index: int) -> MeasureResult:
            seen.append(index)
            return all_invalid(space, index) if len(seen) <= 3 * self.batch else synthetic_measure(space, index)

        results = drive(self.make(4), self.n_trials, batch=self.batch, objective=invalid_first)
        assert len({r.index for r in results}) == self.n_trials
        assert any(r.valid for r in results)

    def test_resume_from_history(self) -> None:
        first = drive(self.make(5), self.n_trials // 2 + 3, batch=self.batch)
        seen = {r.index for r in first}
        rest = drive(self.make(5), self.n_trials // 2, batch=self.batch, history=first)
        again = [r.index for r in rest]
        assert not seen & set(again), "a measured config was proposed again after load_history"
        assert len(again) == len(set(again)) == self.n_trials // 2

    def test_ends_when_nothing_builds(self) -> None:
        """A space where every config fails to compile, ahead of measuring or when measured: every tuner
        ends (proposes nothing, or uses its budget on invalid trials), none compiles forever."""
        space = synthetic_space()
        tuner = self.make(8)
        compiled: list[int] = []

        def nothing_compiles(indices: Sequence[int]) -> list[dict[str, float] | MeasureResult]:
            compiled.extend(int(i) for i in indices)
            assert len(compiled) == len(set(compiled)), "a config that failed to compile was compiled again"
            return [all_invalid(space, int(i)) for i in indices]

        tuner.setup(TuningContext(space=space, compile_features=nothing_compiles, flops=FLOPS))
        measured = 0
        for _ in range(self.n_trials):   # at most one round per trial of the budget
            indices = tuner.propose(min(self.batch, self.n_trials - measured))
            if not indices:
                break
            tuner.update([all_invalid(space, int(i)) for i in indices])
            measured += len(indices)
            if measured >= self.n_trials:
                break
        assert measured <= self.n_trials

    def test_finds_a_valid_config(self) -> None:
        results = drive(self.make(6), self.n_trials, batch=self.batch)
        assert any(r.valid for r in results)


def beats_random_search(factory: Callable[[int], Tuner], n_trials: int = 160, batch: int = 8,
                        seeds: int = 3) -> tuple[list[float], list[float]]:
    """The best seconds after ``n_trials`` on :func:`planted_space` of ``factory(seed)`` and of random search, for
    each seed; a cost-model tuner's sum must be below random search's (what ``tests`` check for every registered
    one, and what a user's own model-based tuner should pass)."""
    from toolkit.tuning.tuners.random import RandomTuner

    def best(tuner: Tuner) -> float:
        results = drive(tuner, n_trials, batch=batch, space=planted_space())
        return min(r.seconds for r in results if r.valid)

    return [best(factory(seed)) for seed in range(seeds)], [best(RandomTuner(seed=seed)) for seed in range(seeds)]


def _small_objective(space: ConfigSpace, index: int) -> MeasureResult:
    return MeasureResult(index, space.get(index).values, costs=[1e-3 * (1 + index % 5)])
