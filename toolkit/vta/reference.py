"""NumPy reference for VTA conv2d: packed layouts (TVM's ``NCHW{B}n{BI}c`` / ``OIHW{BO}o{BI}i``) and the
requantised convolution TVM's VTA tests check against.

The reference is: int32 convolution, arithmetic ``>> shift``, ``+ bias`` (optional, int32 per output
channel; or added before the shift, at the accumulator scale), clip as ``min(., 127)`` then ``max(., 0)``
(``max(., -128)`` without ReLU), cast to int8.

>>> import numpy as np
>>> from toolkit.vta.config import get_preset
>>> from toolkit.workloads import parse_workload
>>> hw, wl = get_preset("pynq"), parse_workload("conv2d:H=4,W=4,CI=16,CO=16,K=3,S=1,P=1")
>>> data, weight, bias = random_inputs(wl, hw, np.random.default_rng(0), bias=True)
>>> unpack_output(pack_output(conv2d_reference(unpack_input(data, hw), unpack_weight(weight, hw),
...     unpack_bias(bias, hw), 8), hw), hw).shape
(1, 16, 4, 4)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from toolkit.errors import ConfigError
from toolkit.vta.config import VTAConfig

if TYPE_CHECKING:
    from toolkit.workloads import Conv2dWorkload


def _blocks(n: int, block: int, what: str) -> int:
    if n % block:
        raise ConfigError(f"{what}={n} is not a multiple of the VTA block {block}; pad it to a multiple first")
    return n // block


def pack_input(data: np.ndarray, hw: VTAConfig) -> np.ndarray:
    """NCHW -> (N/B, C/BI, H, W, B, BI)."""
    n, c, h, w = data.shape
    b, bi = hw.batch, hw.block_in
    x = data.reshape(_blocks(n, b, "batch"), b, _blocks(c, bi, "input channels"), bi, h, w)
    return np.ascontiguousarray(x.transpose(0, 2, 4, 5, 1, 3))


def unpack_input(packed: np.ndarray, hw: VTAConfig) -> np.ndarray:
    """Inverse of :func:`pack_input`."""
    nb, cb, h, w, b, bi = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 4, 1, 5, 2, 3)).reshape(nb * b, cb * bi, h, w)


def pack_weight(weight: np.ndarray, hw: VTAConfig) -> np.ndarray:
    """OIHW -> (O/BO, I/BI, KH, KW, BO, BI)."""
    o, i, kh, kw = weight.shape
    bo, bi = hw.block_out, hw.block_in
    x = weight.reshape(_blocks(o, bo, "output channels"), bo, _blocks(i, bi, "input channels"), bi, kh, kw)
    return np.ascontiguousarray(x.transpose(0, 2, 4, 5, 1, 3))


def unpack_weight(packed: np.ndarray, hw: VTAConfig | None = None) -> np.ndarray:
    """Inverse of :func:`pack_weight` (the blocks are in the packed shape: ``hw`` is not needed)."""
    ob, ib, kh, kw, bo, bi = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 4, 1, 5, 2, 3)).reshape(ob * bo, ib * bi, kh, kw)


def pack_bias(bias: np.ndarray, hw: VTAConfig, batch: int = 1) -> np.ndarray:
    """Per-channel int32 bias (CO,) -> (N/B, CO/BO, 1, 1, B, BO), repeated over the batch."""
    co = bias.shape[0]
    b, bo = hw.batch, hw.block_out
    x = np.broadcast_to(bias.astype(np.int32).reshape(1, co // bo, 1, 1, 1, bo),
                        (_blocks(batch, b, "batch"), _blocks(co, bo, "output channels"), 1, 1, b, bo))
    return np.ascontiguousarray(x)


def unpack_bias(packed: np.ndarray, hw: VTAConfig | None = None) -> np.ndarray:
    """The (CO,) bias of the first batch element of a packed bias (``hw`` is not needed)."""
    return packed[0, :, 0, 0, 0, :].reshape(-1).astype(np.int32)


def pack_output(out: np.ndarray, hw: VTAConfig) -> np.ndarray:
    """NCHW output -> (N/B, CO/BO, OH, OW, B, BO)."""
    n, c, h, w = out.shape
    b, bo = hw.batch, hw.block_out
    x = out.reshape(n // b, b, c // bo, bo, h, w)
    return np.ascontiguousarray(x.transpose(0, 2, 4, 5, 1, 3))


def unpack_output(packed: np.ndarray, hw: VTAConfig) -> np.ndarray:
    """(N/B, CO/BO, OH, OW, B, BO) -> NCHW (TVM's ``transpose(0, 4, 1, 5, 2, 3)``)."""
    nb, cb, oh, ow, b, bo = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 4, 1, 5, 2, 3)).reshape(nb * b, cb * bo, oh, ow)


FLOAT32_EXACT_TERMS = 1 << 10
"""Products of two int8 values are at most 2**14 in magnitude: up to 2**10 of them sum exactly in float32."""


def conv2d_int32(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pad: tuple[int, int],
                 groups: int = 1) -> np.ndarray:
    """Exact int32 NCHW x OIHW convolution of int8 data and weights (grouped allowed): the products summed by
    BLAS in float32 when every partial sum stays below 2**24 (at most :data:`FLOAT32_EXACT_TERMS` terms of at
    most 2**14), else in float64 (exact below 2**53), then wrapped to int32 as VTA's accumulator wraps."""
    _, cg, kh, kw = w.shape
    dtype = np.float32 if cg * kh * kw <= FLOAT32_EXACT_TERMS else np.float64
    return conv2d_sum(x, w, stride, pad, groups, dtype).astype(np.int64).astype(np.int32)


def conv2d_sum(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pad: tuple[int, int], groups: int,
               dtype: type[np.floating]) -> np.ndarray:
    """NCHW x OIHW convolution (grouped allowed, zero padding) as ``dtype``: im2col, then one BLAS product per
    group."""
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    cols, oh, ow = im2col(x.astype(dtype), kh, kw, stride, pad, 0.0)   # (n, c, kh*kw, oh*ow)
    og = o // groups
    out = np.empty((n, o, oh * ow), dtype)
    for g in range(groups):
        xs = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        ws = w[g * og:(g + 1) * og].reshape(og, cg * kh * kw).astype(dtype)
        out[:, g * og:(g + 1) * og] = np.einsum("ok,nkp->nop", ws, xs, optimize=True)
    return out.reshape(n, o, oh, ow)


def im2col(x: np.ndarray, kh: int, kw: int, stride: tuple[int, int], pad: tuple[int, int], fill: float
           ) -> tuple[np.ndarray, int, int]:
    """The ``kh x kw`` windows of NCHW ``x`` (padded with ``fill``) as ``(n, c, kh*kw, oh*ow)``, and ``oh, ow``."""
    n, c, h, w = x.shape
    (sh, sw), (ph, pw) = stride, pad
    xp = np.full((n, c, h + 2 * ph, w + 2 * pw), fill, x.dtype)
    xp[:, :, ph:ph + h, pw:pw + w] = x
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
    return np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3)).reshape(n, c, kh * kw, oh * ow), oh, ow


def conv2d_reference(data: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, shift: int,
                     stride: tuple[int, int] = (1, 1), pad: tuple[int, int] | None = None, *,
                     relu: bool = True, acc_bias: bool = False) -> np.ndarray:
    """``clip((conv(data, weight) >> shift) + bias, 0, 127).astype(int8)`` in NCHW, as VTA requantises.

    ``acc_bias`` adds the bias before the shift (at the accumulator scale); without ``relu`` the clip is
    [-128, 127]. ``pad`` defaults to "same" padding ``(KH // 2, KW // 2)``; the clip is MIN then MAX, in int32.
    """
    if pad is None:
        pad = (weight.shape[2] // 2, weight.shape[3] // 2)
    return requantize(conv2d_int32(data, weight, stride, pad), bias, shift, relu=relu, acc_bias=acc_bias)


def requantize(acc: np.ndarray, bias: np.ndarray | None, shift: int | np.ndarray, *, relu: bool = True,
               acc_bias: bool = False) -> np.ndarray:
    """VTA's ALU epilogue on an int32 NCHW accumulator: shift (one, or one per output channel), bias (before or
    after), MIN 127, MAX 0/-128."""
    def add(x: np.ndarray) -> np.ndarray:
        if bias is None:
            return x
        return (x.astype(np.int64) + bias.astype(np.int64).reshape(1, -1, 1, 1)).astype(np.int32)

    if acc_bias:
        acc = add(acc)
    acc = shift_right(acc, shift)
    if not acc_bias:
        acc = add(acc)
    acc = np.minimum(acc, 127)
    acc = np.maximum(acc, 0 if relu else -128)
    return acc.astype(np.int8)


def add_residual(acc: np.ndarray, residual: np.ndarray, scale: int, post_shift: int, *, relu: bool) -> np.ndarray:
    """VTA's residual epilogue on a shifted int32 NCHW accumulator: ``+ (residual << scale)`` (a GEMM with the
    weight block ``2**scale * I``), then ``(+ 2**(post_shift-1)) >> post_shift``, MIN 127, MAX 0/-128; int8."""
    acc = (acc.astype(np.int64) + (residual.astype(np.int64) << scale)).astype(np.int32)
    if post_shift:
        acc = (acc.astype(np.int64) + (1 << (post_shift - 1))).astype(np.int32) >> np.int32(post_shift)
    return np.maximum(np.minimum(acc, 127), 0 if relu else -128).astype(np.int8)


def shift_right(acc: np.ndarray, shift: int | np.ndarray) -> np.ndarray:
    """VTA's ALU ``SHR`` of an int32 NCHW accumulator by one shift or one per channel (a negative one shifts
    left)."""
    s = np.asarray(shift, np.int32).reshape((1, -1, 1, 1) if np.ndim(shift) else ())
    return np.where(s >= 0, acc >> np.maximum(s, 0), acc << np.maximum(-s, 0)).astype(np.int32)


def workload_reference(workload: Conv2dWorkload, data: np.ndarray, weight: np.ndarray,
                       bias: np.ndarray | None, shift: int = 8, **requant: bool) -> np.ndarray:
    """:func:`conv2d_reference` with ``workload``'s stride and padding (NCHW in and out); ``requant``:
    ``relu``, ``acc_bias``."""
    return conv2d_reference(data, weight, bias, shift, (workload.sh, workload.sw), (workload.ph, workload.pw),
                            **requant)


def random_inputs(workload: Conv2dWorkload, hw: VTAConfig, rng: np.random.Generator, *,
                  bias: bool = False) -> list[np.ndarray]:
    """Packed random int8 data and weights (and int32 bias), data first, as TVM's VTA tests draw them."""
    wl = workload
    data = rng.integers(-128, 128, size=(wl.n, wl.ci, wl.h, wl.w), dtype=np.int8)
    weight = rng.integers(-128, 128, size=(wl.co, wl.ci, wl.kh, wl.kw), dtype=np.int8)
    out = [pack_input(data, hw), pack_weight(weight, hw)]
    if bias:
        out.append(pack_bias(rng.integers(-128, 128, size=wl.co, dtype=np.int32), hw, wl.n))
    return out


def packed_reference(workload: Conv2dWorkload, hw: VTAConfig, inputs: list[np.ndarray], shift: int = 8,
                     **requant: bool) -> np.ndarray:
    """The packed (N/B, CO/BO, OH, OW, B, BO) int8 output for packed ``inputs`` (see :func:`random_inputs`)."""
    bias = unpack_bias(inputs[2], hw) if len(inputs) > 2 else None
    out = workload_reference(workload, unpack_input(inputs[0], hw), unpack_weight(inputs[1], hw), bias, shift,
                             **requant)
    return pack_output(out, hw)


def run_conv2d(workload: Conv2dWorkload, config: dict, hw: VTAConfig, *, bias: bool = False, shift: int = 8,
               relu: bool = True, acc_bias: bool = False, tvm_compat: bool = False, check: bool = True,
               timing_only: bool = False, rng: np.random.Generator | None = None) -> dict:
    """Compile, simulate and (with ``check``) compare against the NumPy reference.

    Returns ``{"compiled", "counters", "cycles", "seconds", "output" (packed, or None), "correct"
    (None unless checked)}``. ``timing_only`` skips data movement (counters and cycles only).
    """
    from toolkit.vta.compiler import compile_conv2d
    from toolkit.vta.sim import simulate

    compiled = compile_conv2d(workload, config, hw, bias=bias, shift=shift, relu=relu, acc_bias=acc_bias,
                              tvm_compat=tvm_compat)
    if timing_only:
        result = simulate(compiled.program, timing_only=True)
        return {"compiled": compiled, "counters": result.counters, "cycles": result.cycles,
                "seconds": result.seconds, "output": None, "correct": None}
    inputs = random_inputs(workload, hw, rng if rng is not None else np.random.default_rng(0), bias=bias)
    named = dict(zip(("inp", "wgt", "bias"), inputs))
    result = simulate(compiled.program, named)
    out = result.outputs["out"].reshape(compiled.program.regions["out"].shape)
    correct = None
    if check:
        expected = packed_reference(workload, hw, inputs, shift, relu=relu, acc_bias=acc_bias)
        correct = bool(np.array_equal(out, expected))
    return {"compiled": compiled, "counters": result.counters, "cycles": result.cycles, "seconds": result.seconds,
            "output": out, "correct": correct}
