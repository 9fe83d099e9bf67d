"""Running VTA programs on edgetune's simulator, in-process (the ``vta-fsim`` board)."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from toolkit.errors import one_line
from toolkit.tuning.core.check import check_output
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.core.runner import MeasureOptions, Runner
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Artifact, Template
from toolkit.vta.errors import VTAError
from toolkit.vta.program import Program
from toolkit.vta.sim import simulate


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
                correct, what = check_output(np.asarray((result.outputs or {}).get("out")), expected, exact=True)
                if not correct:
                    return MeasureResult(**base, error=ErrorClass.WRONG_ANSWER, message=what,
                                         run_s=time.perf_counter() - t0)
        except (VTAError, ValueError, KeyError, IndexError) as exc:   # the program failed, not the tuner
            return MeasureResult(**base, error=ErrorClass.RUNTIME_ERROR,
                                 message=f"{type(exc).__name__}: {one_line(exc)}", run_s=time.perf_counter() - t0)
        features = {**base.pop("features"), **{f"sim.{k}": float(v) for k, v in timing.counters.items()},
                    "sim.cycles": float(timing.cycles)}
        return MeasureResult(**base, features=features, costs=[float(timing.seconds)],
                             run_s=time.perf_counter() - t0)


