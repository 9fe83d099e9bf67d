"""CPU conv2d template (``cpu-conv2d``): float32 NCHW direct convolution for LLVM targets.

The kernel reads NCHW data and writes NCHW output; the weights come pre-transposed to
``IHWO`` (``[CI, KH, KW, CO]``), a layout that does not depend on the config, so a block of
output channels is one contiguous vector load (NCHWc-style blocking without repacking
activations). Each config picks:

* ``tile_co`` ``[outer, block]``: the output-channel block held in registers,
* ``tile_oh``, ``tile_ow`` ``[outer, inner]``: rows/columns of the register tile,
* ``tile_ci`` ``[outer, inner]``: reduction tiling,
* ``reorder``: where the kernel window loops sit among the reduction loops,
* ``acc_rows``: whether the inner rows are part of the register accumulator,
* ``vec``: vectorise over the channel block (``co``) or the output columns (``ow``),
* ``unroll_tile``: fully unroll the register tile,
* ``auto_unroll_max_step``: TVM's automatic unrolling of short loops,
* ``parallel``: which outer loops are fused and run in parallel,
* ``pack_weight``: repack the weights so a channel block's slice is contiguous (``none``,
  ``root``: the whole tensor once per call, ``block``: each parallel task its own slice).

The accumulator tile lives in a ``local`` buffer laid out vector-innermost, so LLVM keeps it
in vector registers across the reduction.

>>> from toolkit.boards import load_profile
>>> from toolkit.workloads import parse_workload
>>> t = CPUConv2dTemplate(parse_workload("resnet18.C5"), load_profile("local"))
>>> t.space().size >= 10_000
True
"""

from __future__ import annotations

import abc
import functools
import time
from typing import Any, ClassVar

import numpy as np

from toolkit.boards import BoardProfile
from toolkit.backends.tvm.epilogue import Epilogue
from toolkit.backends.tvm.link import link_library
from toolkit.errors import error_line
from toolkit.tuning.core.space import CategoricalKnob, Config, ConfigSpace, Knob, SplitKnob
from toolkit.tuning.core.template import Artifact, BuildError, Template
from toolkit.workloads import Conv2dWorkload

BUILD_TIMEOUT_S = 10.0
"""Seconds one TVM build may take on this machine before it counts as a ``TIMEOUT`` trial (AutoTVM's
default). The best configs of the CPU template build in about 1 s; the few that take 10-40 s are
huge unrolled tiles whose LLVM compile (its SLP vectorizer) is slow, and none was ever the best."""

REORDERS = ("ci.ci.kh.kw", "ci.kh.kw.ci", "kh.kw.ci.ci", "ci.kh.ci.kw")
"""Reduction loop orders (``ci`` outer, ``ci`` inner, ``kh``, ``kw``)."""

PARALLEL = ("co", "co.oh", "co.oh.ow")
"""Outer loops fused into the parallel loop."""

PACK_WEIGHT = ("none", "root", "block")
"""Where the weights are repacked to ``[CO/block, CI, KH, KW, block]`` (``block`` = ``tile_co[1]``)."""


def weight_shape(wl: Conv2dWorkload, layout: str) -> tuple[int, int, int, int]:
    """The weight tensor's shape in ``layout`` (``IHWO`` or ``OIHW``; ``I`` is the input channels of a group)."""
    cig = wl.ci_per_group
    return (cig, wl.kh, wl.kw, wl.co) if layout == "IHWO" else (wl.co, cig, wl.kh, wl.kw)


@functools.lru_cache(maxsize=64)
def _conv_prim_func(wl: Conv2dWorkload, weight_layout: str, epilogue: Epilogue) -> Any:
    """The PrimFunc of :meth:`ConvTemplateBase._compute`."""
    from tvm import te

    data = te.placeholder((wl.n, wl.ci, wl.h, wl.w), name="data")
    weight = te.placeholder(weight_shape(wl, weight_layout), name="weight")
    if wl.ph or wl.pw:
        hp, wp = wl.h + 2 * wl.ph, wl.w + 2 * wl.pw
        src = te.compute(
            (wl.n, wl.ci, hp, wp),
            lambda n, c, y, x: te.if_then_else(
                te.all(y >= wl.ph, y < wl.h + wl.ph, x >= wl.pw, x < wl.w + wl.pw),
                data[n, c, y - wl.ph, x - wl.pw], te.const(0.0, "float32")),
            name="pad")
    else:
        src = data
    cig, cog = wl.ci_per_group, wl.co // wl.g
    ci = te.reduce_axis((0, cig), "ci")
    kh = te.reduce_axis((0, wl.kh), "kh")
    kw = te.reduce_axis((0, wl.kw), "kw")
    if weight_layout == "IHWO":
        def w_at(co, c, y, x):
            return weight[c, y, x, co]
    else:
        def w_at(co, c, y, x):
            return weight[co, c, y, x]
    def channel(co: Any, c: Any) -> Any:   # the input channel of output ``co``'s group that ``c`` counts
        return c if wl.g == 1 else co // cog * cig + c

    conv = te.compute(
        (wl.n, wl.co, wl.oh, wl.ow),
        lambda n, co, y, x: te.sum(
            src[n, channel(co, ci), y * wl.sh + kh * wl.dh, x * wl.sw + kw * wl.dw] * w_at(co, ci, kh, kw),
            axis=[ci, kh, kw]),
        name="conv")
    if not epilogue:
        return te.create_prim_func([data, weight, conv])
    inputs = [data, weight]
    bias = te.placeholder((wl.co,), name="bias") if epilogue.bias else None
    residual = te.placeholder((wl.n, wl.co, wl.oh, wl.ow), name="residual") if epilogue.residual else None
    inputs += [t for t in (bias, residual) if t is not None]

    def after(n: Any, co: Any, y: Any, x: Any) -> Any:
        value = conv[n, co, y, x]
        if bias is not None:
            value = value + bias[co]
        if residual is not None:
            value = value + residual[n, co, y, x]
        return epilogue.apply(value)

    return te.create_prim_func([*inputs, te.compute((wl.n, wl.co, wl.oh, wl.ow), after, name="epilogue")])


def new_schedule(func: Any) -> Any:
    """An ``s_tir.Schedule`` of ``func`` whose primitives skip TVM's per-call argument type checks: they take a
    third of a template's scheduling time, which the tuners' compiled features pay for every candidate, and the
    templates pass well-typed arguments (the schedule is the same, tested)."""
    import tvm
    from tvm import s_tir

    return _Unchecked(s_tir.Schedule(tvm.IRModule({"main": func})))


class _Unchecked:
    """A schedule whose type-checked methods are called as they were before checking (``__wrapped__``, which
    ``functools.wraps`` sets); everything else is the schedule's own."""

    def __init__(self, sch: Any) -> None:
        self._sch = sch

    def __getattr__(self, name: str) -> Any:
        raw = getattr(getattr(type(self._sch), name, None), "__wrapped__", None)
        return raw.__get__(self._sch) if raw is not None else getattr(self._sch, name)


def conv2d_nchw_reference(data: np.ndarray, weight_oihw: np.ndarray, wl: Conv2dWorkload) -> np.ndarray:
    """NCHW conv2d in numpy (im2col + BLAS per group), float32 in, float32 out; groups and dilation as ``wl``
    says."""
    from numpy.lib.stride_tricks import sliding_window_view

    x = np.pad(data, ((0, 0), (0, 0), (wl.ph, wl.ph), (wl.pw, wl.pw)))
    span = (wl.dh * (wl.kh - 1) + 1, wl.dw * (wl.kw - 1) + 1)
    win = sliding_window_view(x, span, axis=(2, 3))[:, :, ::wl.sh, ::wl.sw, ::wl.dh, ::wl.dw][:, :, :wl.oh, :wl.ow]
    cig, cog = wl.ci_per_group, wl.co // wl.g
    if cig == 1 and cog == 1:   # depthwise: one multiply-add per window element, no BLAS needed
        out = np.einsum("nchwyx,cyx->nchw", win, weight_oihw[:, 0], optimize=True)
        return np.ascontiguousarray(out, dtype=np.float32)
    parts = [np.tensordot(win[:, g * cig:(g + 1) * cig], weight_oihw[g * cog:(g + 1) * cog],
                          axes=([1, 4, 5], [1, 2, 3])) for g in range(wl.g)]          # each N, OH, OW, CO/G
    return np.ascontiguousarray(np.concatenate(parts, axis=3).transpose(0, 3, 1, 2), dtype=np.float32)


def export(executable: Any, profile: BoardProfile, index: int, features: dict[str, float],
           started: float) -> Artifact:
    """Export a compiled module to a shared library linked by the profile's (cross) compiler."""
    payload = link_library(executable, profile.cross_compiler)
    return Artifact(index=index, kind="tvm-library", payload=payload, features=features,
                    build_s=time.perf_counter() - started)


class ConvTemplateBase(Template):
    """Shared parts of the TVM conv2d templates: inputs, targets and the build pipeline."""

    weight_layout: ClassVar[str] = "OIHW"

    @abc.abstractmethod
    def knobs(self) -> list[Knob]:
        """The template's knobs, in AutoTVM definition order."""

    def space(self) -> ConfigSpace:
        """The configuration space, built once per template instance."""
        if getattr(self, "_space", None) is None:
            self._space = ConfigSpace(self.knobs())
        return self._space

    def make_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        wl = self.workload
        data = rng.uniform(-1, 1, (wl.n, wl.ci, wl.h, wl.w)).astype(np.float32)
        weight = rng.uniform(-1, 1, weight_shape(wl, "OIHW")).astype(np.float32)
        if self.weight_layout == "IHWO":
            weight = np.ascontiguousarray(weight.transpose(1, 2, 3, 0))
        return [data, weight]

    def weight_oihw(self, weight: np.ndarray) -> np.ndarray:
        """The weight input in OIHW order."""
        return weight.transpose(3, 0, 1, 2) if self.weight_layout == "IHWO" else weight

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        return conv2d_nchw_reference(inputs[0], self.weight_oihw(inputs[1]), self.workload)

    def output_shape(self) -> tuple[int, int, int, int]:
        """Shape of the NCHW output."""
        wl = self.workload
        return (wl.n, wl.co, wl.oh, wl.ow)

    def target(self) -> Any:
        """The profile's ``tvm.target.Target``."""
        return self.profile.tvm_target()

    def _compute(self, epilogue: Epilogue | None = None) -> Any:
        """``te`` compute of the conv as a PrimFunc (data, weight, conv); with an ``epilogue``, the conv feeds
        an elementwise block ``epilogue`` (data, weight[, bias][, residual], out). Built once per process for
        each workload, layout and epilogue: a schedule copies what it changes."""
        return _conv_prim_func(self.workload, self.weight_layout, epilogue or Epilogue())

    def check(self, config: Config) -> None:
        """Reject a config before scheduling; :class:`BuildError` (INVALID_CONFIG) with the reason."""

    def schedule(self, config: Config) -> Any:
        """The scheduled ``IRModule`` of ``config``."""
        raise NotImplementedError

    def build(self, config: Config) -> Artifact:
        import tvm

        started = time.perf_counter()
        mod, features = self._lowered(config)
        target = self.target()
        try:
            with target:  # the CUDA compile callback reads the arch from the current target
                executable = tvm.compile(mod, target=target)
        except Exception as exc:  # noqa: BLE001
            raise BuildError(f"tvm.compile failed: {error_line(exc, first=True)}") from None
        return export(executable, self.profile, config.index, features, started)

    def verify(self, lowered: Any) -> None:
        """Check the lowered module against the board's limits (GPU templates)."""

    def features(self, config: Config) -> dict[str, float]:
        """The features :meth:`build` records (scheduled, lowered, verified), without ``tvm.compile``."""
        return self._lowered(config)[1]

    def _lowered(self, config: Config) -> tuple[Any, dict[str, float]]:
        """Check, schedule, lower and verify ``config``: the scheduled module and its lowered-TIR features."""
        from toolkit.backends.tvm import tir_features

        self.check(config)
        try:
            mod = self.schedule(config)
        except BuildError:
            raise
        except Exception as exc:  # noqa: BLE001 - ScheduleError and friends
            raise BuildError(f"scheduling failed: {error_line(exc, first=True)}") from None
        lowered = tir_features.lower(mod, self.target())
        self.verify(lowered)
        return mod, tir_features.extract(lowered, self.workload)


class CPUConv2dTemplate(ConvTemplateBase):
    """Tunable float32 NCHW conv2d for LLVM CPU targets (x86, aarch64, armv7)."""

    name: ClassVar[str] = "cpu-conv2d"
    weight_layout: ClassVar[str] = "IHWO"
    device: ClassVar[str] = "cpu"
    """TVM device the built library runs on."""

    def knobs(self) -> list[Knob]:
        """A grouped conv's channel knobs split one group's channels; with one input channel per group the
        reduction orders coincide (one is kept), with one output channel per group only columns vectorise."""
        wl = self.workload
        cig, cog = wl.ci_per_group, wl.co // wl.g
        return [
            SplitKnob("tile_co", cog, 2),
            SplitKnob("tile_oh", wl.oh, 2),
            SplitKnob("tile_ow", wl.ow, 2),
            SplitKnob("tile_ci", cig, 2),
            CategoricalKnob("reorder", list(REORDERS if cig > 1 else REORDERS[2:3])),
            CategoricalKnob("acc_rows", [1, 0]),
            CategoricalKnob("vec", ["co", "ow"] if cog > 1 else ["ow"]),
            CategoricalKnob("unroll_tile", [1, 0]),
            CategoricalKnob("auto_unroll_max_step", [0, 16, 64, 512]),
            CategoricalKnob("parallel", list(PARALLEL)),
            CategoricalKnob("pack_weight", list(PACK_WEIGHT)),
        ]

    def fallback_config(self) -> Config:
        """The untuned config a whole-model export uses for a shape without a record: output-channel blocks of
        two vectors, rows of up to 8 columns (4 with 16 vector registers), a 16-deep reduction block, weights
        repacked once. Chosen among 17 candidates on the development set (ResNet-18 C1, C2, C6, C8, C11 on a
        Zen 5 CPU with AVX-512): the only one within 10 % of the best candidate on every layer but the noisiest.
        A conv with one output channel per group (depthwise) vectorises its columns instead: rows of up to one
        vector, up to 4 rows per tile."""
        wl = self.workload
        lanes, registers = vector_unit(self.profile)
        cig, cog = wl.ci_per_group, wl.co // wl.g

        def block(n: int, cap: int) -> list[int]:
            b = max(d for d in range(1, cap + 1) if n % d == 0)
            return [n // b, b]

        values = {"tile_co": block(cog, 2 * lanes), "tile_oh": [wl.oh, 1],
                  "tile_ow": block(wl.ow, 8 if registers >= 32 else 4), "tile_ci": block(cig, 16),
                  "reorder": "ci.kh.kw.ci" if cig > 1 else "kh.kw.ci.ci", "acc_rows": 1, "vec": "co",
                  "unroll_tile": 1, "auto_unroll_max_step": 16, "parallel": "co.oh", "pack_weight": "root"}
        if cog == 1:
            values |= {"tile_oh": block(wl.oh, 4), "tile_ow": block(wl.ow, lanes), "vec": "ow", "pack_weight": "none"}
        return self.space().get(self.space().index_of(values))

    def schedule(self, config: Config, epilogue: Epilogue | None = None) -> Any:
        """The scheduled module of ``config``; an ``epilogue`` is computed in the accumulator's write-back, where
        each output element leaves the registers (a kernel for a model's conv; tuning measures the plain conv)."""

        c = config.values
        sch = new_schedule(self._compute(epilogue))
        conv = sch.get_sblock("conv")
        n, co, oh, ow, rc, ry, rx = sch.get_loops(conv)
        groups = [] if self.workload.g == 1 else [n]
        if groups:   # a group's output channels are tiled; the groups are an outer loop
            groups[0], co = sch.split(co, [self.workload.g, None])
        co_o, co_v = sch.split(co, [None, c["tile_co"][1]])
        oh_o, oh_i = sch.split(oh, [None, c["tile_oh"][1]])
        ow_o, ow_i = sch.split(ow, [None, c["tile_ow"][1]])
        rc_o, rc_i = sch.split(rc, [None, c["tile_ci"][1]])
        named = {"ci": [rc_o, rc_i], "kh": [ry], "kw": [rx]}
        reduction = [named[p].pop(0) for p in c["reorder"].split(".")]
        inner = [ow_i, co_v] if c["vec"] == "co" else [co_v, ow_i]
        if c["acc_rows"]:
            order = [n, *groups, co_o, oh_o, ow_o, *reduction, oh_i, *inner]
            acc_at = ow_o
        else:
            order = [n, *groups, co_o, oh_o, ow_o, oh_i, *reduction, *inner]
            acc_at = oh_i
        sch.reorder(*order)
        local = sch.cache_write(conv, 0, "local")
        if c["vec"] == "co":
            sch.transform_layout(conv, ("write", 0), lambda n_, co_, y, x: (n_, y, x, co_))
        sch.reverse_compute_at(local, acc_at)

        outer = [n, *groups, co_o] + {"co": [], "co.oh": [oh_o], "co.oh.ow": [oh_o, ow_o]}[c["parallel"]]
        fused = sch.fuse(*outer)
        sch.parallel(fused)
        _pack_weight(sch, conv, c["pack_weight"], c["tile_co"][1], fused)
        if c["auto_unroll_max_step"]:
            sch.annotate(fused, "pragma_auto_unroll_max_step", c["auto_unroll_max_step"])
            sch.annotate(fused, "pragma_unroll_explicit", 1)
        _vectorize(sch, inner[1])
        if c["unroll_tile"]:
            sch.unroll(inner[0])
            if c["acc_rows"]:
                sch.unroll(oh_i)
        sch.decompose_reduction(conv, reduction[0])
        tile = [c["tile_co"][1], c["tile_ow"][1]] + ([c["tile_oh"][1]] if c["acc_rows"] else [])
        if max(tile) > 1:  # else the write-back has no loop of its own
            _vectorize(sch, sch.get_loops(local)[-1])
        if self.workload.ph or self.workload.pw:
            pad = sch.get_sblock("pad")
            loops = sch.get_loops(pad)
            sch.parallel(sch.fuse(*loops[:2]))
            _vectorize(sch, loops[-1])
        if epilogue:
            sch.reverse_compute_inline(sch.get_sblock("epilogue"))
        return sch.mod


AVX512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
               "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5",
               "x86-64-v4")
"""LLVM CPU names with AVX-512 (16 float lanes, 32 vector registers)."""


def vector_unit(profile: BoardProfile) -> tuple[int, int]:
    """(float32 lanes, vector registers) of the profile's CPU: AVX-512 16/32, other x86 AVX2 8/16, AArch64 NEON
    4/32, 32-bit ARM NEON 4/16."""
    target = profile.target.get("host", profile.target)
    mcpu, arch = str(target.get("mcpu", "")), profile.arch.lower()
    if arch in ("x86_64", "amd64"):
        return (16, 32) if mcpu in AVX512_CPUS or "avx512" in str(target.get("mattr", "")) else (8, 16)
    return (4, 32) if arch in ("aarch64", "arm64") else (4, 16)


def _pack_weight(sch: Any, conv: Any, where: str, block: int, task: Any) -> None:
    """Stage the ``IHWO`` weights so that one channel block's slice is contiguous.

    In ``IHWO`` the ``block`` output channels of one ``(ci, kh, kw)`` are one vector, but
    consecutive vectors of a block lie ``CO`` floats apart: a block's slice spans the whole
    tensor (one TLB page per four vectors when ``CO = 256``). ``root`` copies the tensor to
    ``[CO/block, CI, KH, KW, block]`` before the convolution (its own parallel loop);
    ``block`` copies the slice ``[CI, KH, KW, block]`` at the start of each parallel task
    (``task``, the fused parallel loop), where it stays in cache for the task's tiles.
    """
    if where == "none":
        return
    cache = sch.cache_read(conv, 1, "global")
    if where == "root":
        sch.transform_layout(conv, ("read", 1), lambda ci, y, x, co: (co // block, ci, y, x, co % block))
        *outer, co = sch.get_loops(cache)
        co_o, co_v = sch.split(co, [None, block])
        sch.reorder(co_o, *outer, co_v)
        sch.parallel(co_o)
    else:
        sch.compute_at(cache, task)
    _vectorize(sch, sch.get_loops(cache)[-1])


def _vectorize(sch: Any, loop: Any) -> None:
    """Vectorise ``loop`` unless it has a single iteration (TVM refuses those)."""
    if int(sch.get(loop).extent) > 1:
        sch.vectorize(loop)
