"""A VTA conv2d schedule: AutoTVM's knobs of ``conv2d_packed.vta`` validated against a workload, and the rule for
which schedules TVM v0.18's own lowering and runtime can build; a tile's DMA shapes; and the residual epilogue's
parameters (:class:`Residual`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.vta import checks
from toolkit.vta.checks import ScheduleConfigError
from toolkit.vta.config import VTAConfig
from toolkit.vta.layout import POST_SHIFT_MAX, RESIDUAL_SCALE_MAX
from toolkit.workloads import Conv2dWorkload

KNOBS = ("tile_b", "tile_h", "tile_w", "tile_ci", "tile_co", "oc_nthread", "h_nthread")


@dataclass(frozen=True)
class Schedule:
    """A validated config: ``[outer, inner]`` splits and thread counts."""

    tb: tuple[int, int]
    th: tuple[int, int]
    tw: tuple[int, int]
    tci: tuple[int, int]
    tco: tuple[int, int]
    oc_nthread: int
    h_nthread: int

    @property
    def threads(self) -> int:
        return self.oc_nthread * self.h_nthread


def parse_schedule(workload: Conv2dWorkload, config: dict[str, Any], hw: VTAConfig) -> Schedule:
    """Validate ``config`` against ``workload`` (:class:`ScheduleConfigError` names the bad knob)."""
    wl = workload
    if not isinstance(config, dict):
        raise ScheduleConfigError(f"a VTA schedule config is a JSON object with knobs {', '.join(KNOBS)}")
    unknown = set(config) - set(KNOBS)
    if unknown:
        raise ScheduleConfigError(f"unknown knob(s) {sorted(unknown)}; VTA conv2d knobs are {', '.join(KNOBS)}")
    for what, n, block in (("batch", wl.n, hw.batch), ("CI", wl.ci, hw.block_in), ("CO", wl.co, hw.block_out)):
        if n % block:
            raise ScheduleConfigError(f"workload {what}={n} is not a multiple of the VTA block {block}; "
                                      "pad the layer to a multiple first")
    lengths = {"tile_b": wl.n // hw.batch, "tile_h": wl.oh, "tile_w": wl.ow,
               "tile_ci": wl.ci // hw.block_in, "tile_co": wl.co // hw.block_out}
    splits = {}
    for knob, length in lengths.items():
        value = config.get(knob, [length, 1] if knob == "tile_b" else None)
        if value is None:
            raise ScheduleConfigError(f"config is missing knob {knob!r} (a split [outer, inner] of {length})")
        if (not isinstance(value, (list, tuple)) or len(value) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
            raise ScheduleConfigError(f"knob {knob} must be [outer, inner] positive integers, got {value!r}")
        if value[0] * value[1] != length:
            raise ScheduleConfigError(f"knob {knob}={list(value)} does not split {length} "
                                      f"({value[0]} x {value[1]} != {length})")
        splits[knob] = (int(value[0]), int(value[1]))
    threads = {}
    for knob in ("oc_nthread", "h_nthread"):
        value = config.get(knob)
        if value not in (1, 2) or isinstance(value, bool):
            raise ScheduleConfigError(f"knob {knob} must be 1 or 2, got {value!r}")
        threads[knob] = int(value)
    if splits["tile_b"][1] != 1:
        raise ScheduleConfigError(f"tile_b={list(splits['tile_b'])}: batch tiles of more than one batch block "
                                  "are not supported (TVM's schedule never applies tile_b); use [N/B, 1]")
    return Schedule(splits["tile_b"], splits["tile_h"], splits["tile_w"], splits["tile_ci"], splits["tile_co"],
                    threads["oc_nthread"], threads["h_nthread"])


def tvm_compat_violation(workload: Conv2dWorkload, config: dict[str, Any], hw: VTAConfig) -> str | None:
    """Why TVM v0.18's VTA lowering/runtime cannot build or run ``config`` (a software limit), or None.

    The rule, derived from ``InjectVirtualThread``/``InjectDMAIntrin`` (``vta/python/vta/transform.py``)
    and the runtime's ``UopKernelMap``:

    * a virtual-thread split that does not divide its axis leaves a guard around each copy
      ("Cannot match copy pattern");
    * ``oc_nthread = h_nthread = 2`` makes each micro-op kernel depend on two thread variables, whose
      signature the runtime rejects ("nbytes == 0 || nbytes == sizeof(int)");
    * the padded input copy must be exactly ``(rows, columns, block)`` after dropping unit loops:
      more input-channel blocks per load pad "the innermost block"; fewer loops hit "Limitation of
      2D pad load";
    * every other copy (unpadded input, weights, store) must fold into one 2-D DMA
      (:func:`~toolkit.vta.checks.tvm_2d_dims`), else "cannot detect 2d pattern".

    Capacity and micro-op hazards are hardware limits and are checked in both modes.
    """
    wl = workload
    for knob, length in (("tile_co", wl.co // hw.block_out), ("tile_h", wl.oh)):
        nthread = config.get("oc_nthread" if knob == "tile_co" else "h_nthread", 1)
        if config[knob][0] % nthread:
            return (f"TVM cannot split {knob} outer {config[knob][0]} into {nthread} virtual threads "
                    "(Cannot match copy pattern)")
    if config.get("oc_nthread", 1) > 1 and config.get("h_nthread", 1) > 1:
        return "TVM's runtime rejects micro-op kernels of two virtual-thread axes (nbytes == sizeof(int) check)"
    tb = config.get("tile_b", [1, 1])
    if tb[1] != 1:
        return "TVM's schedule never applies tile_b"
    th, tw, tci, tco = config["tile_h"][1], config["tile_w"][1], config["tile_ci"][1], config["tile_co"][1]
    h_ext = (th - 1) * wl.sh + wl.kh
    w_ext = (tw - 1) * wl.sw + wl.kw
    if wl.ph or wl.pw:
        loops = sum(e > 1 for e in (tci, h_ext, w_ext))  # besides the (batch, channel) block
        if loops < 2:
            return f"TVM cannot pad a load of {loops + 1} dimensions (Limitation of 2D pad load)"
        if loops > 2:
            return "TVM cannot pad an input load of several channel blocks (Do not support pad on the innermost block)"
    elif checks.tvm_2d_dims([tci, h_ext, w_ext], [wl.h * wl.w, wl.w, 1]) > 2:
        return "TVM cannot express the input load as one 2-D DMA (Scope[local.inp_buffer]: cannot detect 2d pattern)"
    if checks.tvm_2d_dims([tco, th, tw], [wl.oh * wl.ow, wl.ow, 1]) > 2:
        return "TVM cannot express the output store as one 2-D DMA (Scope[local.acc_buffer]: cannot detect 2d pattern)"
    return None


def inp_pattern(wl: Conv2dWorkload, tci: int, h_ext: int, w_ext: int) -> tuple[int, int, int, int]:
    """``(n_dma, y, x, stride)`` of one thread's input tile (full tile, before padding is cut)."""
    hwsz = wl.h * wl.w
    if wl.ph or wl.pw or tci == 1:
        return tci, h_ext, w_ext, wl.w  # one DMA per channel block (TVM: tci must be 1 when padded)
    if w_ext == wl.w and h_ext == wl.h:
        return 1, 1, tci * hwsz, tci * hwsz
    if w_ext == wl.w:
        return 1, tci, h_ext * wl.w, hwsz
    if h_ext == 1:
        return 1, tci, w_ext, hwsz
    return tci, h_ext, w_ext, wl.w


def out_pattern(wl: Conv2dWorkload, tco: int, th: int, tw: int) -> tuple[int, int, int, int]:
    """``(n_dma, y, x, stride)`` of one thread's output tile store (TVM's fold of (co, h, w))."""
    plane = wl.oh * wl.ow
    if tw == wl.ow and th == wl.oh:
        return 1, 1, tco * plane, tco * plane
    if tw == wl.ow:
        return 1, tco, th * wl.ow, plane
    if tco == 1:
        return 1, th, tw, wl.ow
    if th == 1:
        return 1, tco, tw, plane
    return tco, th, tw, wl.ow


@dataclass(frozen=True)
class Residual:
    """An int8 tensor of the output's shape added inside the conv's program (a residual connection): after
    the conv's ``(acc + bias) >> shift``, a GEMM whose weight block is ``2**scale * I`` adds it, already packed,
    into the accumulator; then ``(+ 2**(post_shift-1)) >> post_shift`` (when ``post_shift > 0``) and the clip.
    The tensor is loaded as input blocks (VTA's input and output blocks are equal)."""

    scale: int
    post_shift: int

    def check(self) -> None:
        """:class:`~toolkit.vta.checks.FieldWidthError` for a scale or shift the ISA cannot hold."""
        for what, value, top in (("scale", self.scale, RESIDUAL_SCALE_MAX),
                                 ("post_shift", self.post_shift, POST_SHIFT_MAX)):
            if not 0 <= value <= top:
                raise checks.FieldWidthError(f"residual {what}={value} is outside [0, {top}]",
                                             resource=f"residual_{what}", needed=value, available=top)
