"""The VTA conv2d schedule space: AutoTVM's ``conv2d_packed.vta`` knobs, in AutoTVM's order.

>>> from toolkit.vta.config import get_preset
>>> from toolkit.workloads import parse_workload
>>> space = vta_conv2d_space(parse_workload("resnet18.C2"), get_preset("pynq"))
>>> space.size, space.knob_names[:3]
(2304, ['tile_b', 'tile_h', 'tile_w'])
>>> space.get(828).values["tile_h"], space.get(828).values["oc_nthread"]
([7, 8], 2)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from toolkit.tuning.core.space import CategoricalKnob, ConfigSpace, SplitKnob
from toolkit.vta.config import VTAConfig
from toolkit.workloads import Conv2dWorkload


def vta_conv2d_space(workload: Conv2dWorkload, hw: VTAConfig) -> ConfigSpace:
    """Knobs ``tile_b, tile_h, tile_w, tile_ci, tile_co`` (2-way splits of batch/B, OH, OW, CI/BI, CO/BO),
    ``oc_nthread`` and ``h_nthread`` in {1, 2}; flat indices are AutoTVM's."""
    wl = workload
    return ConfigSpace([
        SplitKnob("tile_b", max(1, wl.n // hw.batch)),
        SplitKnob("tile_h", wl.oh),
        SplitKnob("tile_w", wl.ow),
        SplitKnob("tile_ci", max(1, wl.ci // hw.block_in)),
        SplitKnob("tile_co", max(1, wl.co // hw.block_out)),
        CategoricalKnob("oc_nthread", [1, 2]),
        CategoricalKnob("h_nthread", [1, 2]),
    ])


@dataclass
class SpaceReport:
    """Validity (and, when evaluated, the optimum) of a space under one compile mode."""

    size: int
    valid: int
    tvm_compat: bool
    errors: dict[str, int] = field(default_factory=dict)
    best_index: int | None = None
    best_config: dict | None = None
    best_cycles: int | None = None
    best_seconds: float | None = None

    def to_dict(self) -> dict:
        return {"size": self.size, "valid": self.valid, "tvm_compat": self.tvm_compat, "errors": self.errors,
                "optimum": None if self.best_index is None else {
                    "index": self.best_index, "config": self.best_config, "cycles": self.best_cycles,
                    "seconds": self.best_seconds}}


def explore(workload: Conv2dWorkload, hw: VTAConfig, *, exhaustive: bool = False, bias: bool = False,
            on_step: Callable[[int], None] | None = None) -> dict[str, SpaceReport]:
    """Validity of every config in edgetune's mode and TVM-compatible mode; with ``exhaustive`` also
    compile + timing-simulate every valid config and keep each mode's fastest (by modelled seconds).

    The two modes share knobs, so their sizes are equal; TVM-valid configs are a subset of
    edgetune-valid ones and compile to the same program, so one simulation serves both.
    Returns ``{"edgetune": SpaceReport, "tvm": SpaceReport}``.
    """
    from toolkit.vta.checks import TVMCompatError
    from toolkit.vta.compiler import check_config, compile_conv2d, tvm_compat_violation
    from toolkit.vta.errors import VTAError
    from toolkit.vta.sim import simulate

    space = vta_conv2d_space(workload, hw)
    reports = {"edgetune": SpaceReport(space.size, 0, False), "tvm": SpaceReport(space.size, 0, True)}
    for index in range(space.size):
        cfg = space.get(index).values
        try:
            check_config(workload, cfg, hw, bias=bias)
        except VTAError as exc:
            for r in reports.values():
                r.errors[type(exc).__name__] = r.errors.get(type(exc).__name__, 0) + 1
            if on_step:
                on_step(index)
            continue
        compat = tvm_compat_violation(workload, cfg, hw) is None
        reports["edgetune"].valid += 1
        if compat:
            reports["tvm"].valid += 1
        else:
            reports["tvm"].errors[TVMCompatError.__name__] = reports["tvm"].errors.get(TVMCompatError.__name__, 0) + 1
        if exhaustive:
            result = simulate(compile_conv2d(workload, cfg, hw, bias=bias).program, timing_only=True)
            for r in (reports["edgetune"], reports["tvm"]) if compat else (reports["edgetune"],):
                if r.best_seconds is None or result.seconds < r.best_seconds:
                    r.best_index, r.best_config = index, cfg
                    r.best_cycles, r.best_seconds = result.cycles, result.seconds
        if on_step:
            on_step(index)
    return reports
