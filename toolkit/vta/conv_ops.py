"""The graph's conv ops: :class:`Conv` (VTA's conv with its requantisation epilogue) and :class:`ConvAdd` (a conv
with the residual add folded in), their arrays (weights, biases, per-channel shifts, the identity block) and float
reference. Entries of :data:`toolkit.vta.ops.OPS`; board-side code imports it: numpy only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.errors import ExportError
from toolkit.vta.layout import POST_SHIFT_MAX, RESIDUAL_SCALE_MAX
from toolkit.vta.op_base import ACC_EXP_MAX, EXP_LIMIT, Op, Shape, Tensor, elements, exponent, need_array, \
    oihw_shape, relu_if, rounding_offset, window_shape
from toolkit.vta.reference import (add_residual, conv2d_int32, conv2d_sum, requantize, shift_right, unpack_bias,
                                   unpack_weight)

if TYPE_CHECKING:
    from toolkit.vta.graph import Layer


def conv_arrays(layer: Layer, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A conv layer's OIHW int8 weights and (CO,) int32 bias, unpacked where they are stored in VTA's layout."""
    w, b = arrays[f"{layer.name}.weight"], arrays[f"{layer.name}.bias"]
    return (unpack_weight(w) if w.ndim == 6 else w), (unpack_bias(b) if b.ndim == 6 else b)


PER_CHANNEL = -1
"""A conv's ``shift`` attribute when each output channel has its own (the ``NAME.shift`` array)."""
PER_CHANNEL_MIN_BITS = 0.5
"""Per-output-channel weight exponents are taken when they give the channels at least this many bits more than one
exponent for all on average (each bit divides a channel's rounding error by 2): below it the gain is small and
one shift (an ALU immediate) saves VTA the shift tensor's loads."""


def conv_shift(layer: Layer, arrays: dict[str, np.ndarray]) -> int | np.ndarray:
    """A conv layer's right shift: its ``shift`` attribute, or the (CO,) int32 per-channel shifts."""
    if layer.attrs["shift"] != PER_CHANNEL:
        return layer.attrs["shift"]
    s = arrays[f"{layer.name}.shift"]
    return unpack_bias(s) if s.ndim == 6 else s


class Conv(Op):
    """A 2-D conv: int32 accumulation, ``+ bias`` at the accumulator scale (rounding offset folded in),
    arithmetic ``>> shift``, clip to [0, 127] with ReLU or [-128, 127]: VTA's ALU epilogue."""

    name = "conv"
    attrs = {"stride": "pair", "pad": "pad", "groups": "int", "shift": "int", "relu": "bool", "exp": "int"}
    devices = ("cpu", "vta")
    cpu_why = "its plan keeps it on the CPU (the convs' table says why)"

    def check(self, attrs: dict[str, Any]) -> str | None:
        return None if PER_CHANNEL <= attrs["shift"] <= 31 and attrs["groups"] >= 1 else "a bad shift or groups"

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        s, at = shapes[0], layer.attrs
        if layer.device == "vta":     # stored packed, as VTA reads them
            w = need_array(arrays, f"{layer.name}.weight", "int8", 6)
            b = need_array(arrays, f"{layer.name}.bias", "int32", 6)
            oihw = oihw_shape(w.shape)
            if len(s) != 4 or b.shape[2:4] != (1, 1) or b.shape[1] * b.shape[5] != oihw[0] or b.shape[5] != w.shape[4] \
                    or b.shape[0] * b.shape[4] != s[0]:
                raise ExportError(f"layer {layer.name}: its packed bias {list(b.shape)} does not fit its weights "
                                  f"{list(w.shape)} and input {list(s)}; re-export the model")
        else:
            w = need_array(arrays, f"{layer.name}.weight", "int8", 4)
            b = need_array(arrays, f"{layer.name}.bias", "int32", 1)
            oihw = w.shape
        (kh, kw), (ph, pw) = oihw[2:], at["pad"]
        if len(s) != 4 or oihw[1] * at["groups"] != s[1] or oihw[0] % at["groups"] or \
                (b.ndim == 1 and b.shape[0] != oihw[0]) or s[2] + 2 * ph < kh or s[3] + 2 * pw < kw:
            raise ExportError(f"layer {layer.name}: weights {list(w.shape)} do not fit its input {list(s)}; "
                              "re-export the model")
        if at["shift"] == PER_CHANNEL:
            shifts = need_array(arrays, f"{layer.name}.shift", "int32", b.ndim)
            if shifts.shape != b.shape or shifts.min() < 0 or shifts.max() > 31:
                raise ExportError(f"layer {layer.name}: its per-channel shifts are not one in [0, 31] per bias "
                                  "entry; re-export the model")
        return (s[0], oihw[0], *window_shape(s, (kh, kw), at["stride"], at["pad"])[2:])

    def work(self, layer: Layer, shapes: list[Shape], out: Shape, arrays: dict[str, np.ndarray]
             ) -> tuple[int, int]:
        """Multiply-adds; the requantisation (bias, shift, clip) once per output element."""
        _, cg, kh, kw = oihw_shape(arrays[f"{layer.name}.weight"].shape)
        return elements(out) * cg * kh * kw, elements(out)

    def to_vta(self, layer: Layer, arrays: dict[str, np.ndarray], hw: Any, batch: int) -> None:
        """Weights packed ``(O/BO, I/BI, KH, KW, BO, BI)`` and the bias ``(N/B, CO/BO, 1, 1, B, BO)`` once, here, so
        that loading the package on a board packs nothing."""
        from toolkit.vta.reference import pack_bias, pack_weight

        w, b = conv_arrays(layer, arrays)
        arrays[f"{layer.name}.weight"] = pack_weight(w, hw)
        arrays[f"{layer.name}.bias"] = pack_bias(b, hw, batch=batch)
        if layer.attrs["shift"] == PER_CHANNEL:
            arrays[f"{layer.name}.shift"] = pack_bias(conv_shift(layer, arrays), hw, batch=batch)
        layer.device = "vta"

    def vta_arrays(self, layer: Layer, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        named = {"wgt": arrays[f"{layer.name}.weight"], "bias": arrays[f"{layer.name}.bias"]}
        if layer.attrs["shift"] == PER_CHANNEL:
            named["shift"] = arrays[f"{layer.name}.shift"]
        return named

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        a = layer.attrs
        w, b = conv_arrays(layer, arrays)
        acc = conv2d_int32(args[0].data, w, tuple(a["stride"]), tuple(a["pad"]), a["groups"])
        return Tensor(requantize(acc, b, conv_shift(layer, arrays), relu=a["relu"], acc_bias=True), a["exp"])

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        a = layer.attrs
        return relu_if(conv2d_float(args[0], arrays[f"{layer.name}.weight"], arrays[f"{layer.name}.bias"],
                                    tuple(a["stride"]), tuple(a["pad"]), a["groups"]), a["relu"])

    def quantize(self, layer: Layer, exps: list[int | None], peak: float, floats: dict[str, np.ndarray],
                 arrays: dict[str, np.ndarray]) -> int | None:
        """Weights per tensor, or per output channel where the channels' weights are small enough to take finer
        exponents, :data:`PER_CHANNEL_MIN_BITS` more on average (less rounding, the same output scale; each
        channel's shift then its own, applied by VTA's ALU from a tensor). Each exponent keeps the bias at the
        accumulator scale within int32 and the shift <= 31."""
        ein = exps[0]
        if ein is None:
            raise ExportError(f"{layer.name}: a conv after the model left int8 (after pooling to 1x1 or the "
                              "classifier) has no VTA lowering")
        w, b = floats[f"{layer.name}.weight"], floats[f"{layer.name}.bias"]
        co = w.shape[0]
        peak_w = np.max(np.abs(w.reshape(co, -1)), axis=1)
        ew = np.array([exponent(float(p)) for p in peak_w], dtype=np.int64)
        for o in range(co):      # the bias at the accumulator scale must fit int32 with the rounding offset
            while ew[o] > -EXP_LIMIT and (ein + ew[o] > ACC_EXP_MAX
                                          or abs(float(b[o])) * 2.0 ** (ein + ew[o]) >= 2 ** 30):
                ew[o] -= 1
        if np.mean(ew - ew.min()) < PER_CHANNEL_MIN_BITS:
            ew[:] = ew.min()                             # one exponent: one shift, no shift tensor on VTA
        eo = min(exponent(peak), int(ew.min()) + ein)    # every shift >= 0
        eo = max(eo, int(ew.min()) + ein - 31)
        ew = np.minimum(ew, eo + 31 - ein)               # every shift <= 31
        shift = ein + ew - eo
        arrays[f"{layer.name}.weight"] = np.clip(np.rint(w.astype(np.float64) * 2.0 ** ew.reshape(-1, 1, 1, 1)),
                                                 -127, 127).astype(np.int8)
        arrays[f"{layer.name}.bias"] = (np.rint(b.astype(np.float64) * 2.0 ** (ein + ew)) + rounding_offset(shift)
                                        ).astype(np.int32)
        if np.all(shift == shift[0]):
            layer.attrs.update(shift=int(shift[0]), exp=int(eo))
        else:
            arrays[f"{layer.name}.shift"] = shift.astype(np.int32)
            layer.attrs.update(shift=PER_CHANNEL, exp=int(eo))
        return int(eo)


class ConvAdd(Conv):
    """A conv and the residual add after it as one layer: ``(acc + bias) >> shift``, ``+ (res << scale)``,
    ``(+ 2**(post_shift-1)) >> post_shift``, clip: a VTA conv program with a residual
    (:class:`toolkit.vta.compiler.Residual`). Made from a quantised conv and add by
    :func:`toolkit.vta.quantize.fuse_residuals`, not from a float layer."""

    name = "conv_add"
    arity = 2
    attrs = {**Conv.attrs, "scale": "int", "post_shift": "int"}
    vta_inputs = ("inp", "res")

    def check(self, attrs: dict[str, Any]) -> str | None:
        if not (0 <= attrs["scale"] <= RESIDUAL_SCALE_MAX and 0 <= attrs["post_shift"] <= POST_SHIFT_MAX):
            return "a bad residual scale or shift"
        return super().check(attrs)

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        out = super().shape(layer, shapes[:1], arrays)
        if shapes[1] != out:
            raise ExportError(f"layer {layer.name} adds a tensor of shape {list(shapes[1])} to its conv's "
                              f"{list(out)}; re-export the model")
        if layer.device == "vta":
            w = arrays[f"{layer.name}.weight"]
            ident = need_array(arrays, f"{layer.name}.ident", "int8", 6)
            if ident.shape != (1, 1, 1, 1, w.shape[4], w.shape[5]):
                raise ExportError(f"layer {layer.name}: its identity block {list(ident.shape)} does not fit its "
                                  f"weights {list(w.shape)}; re-export the model")
        return out

    def work(self, layer: Layer, shapes: list[Shape], out: Shape, arrays: dict[str, np.ndarray]
             ) -> tuple[int, int]:
        """The conv's multiply-adds and requantisation, and the add (with its rounding) per output element."""
        macs, elementwise = super().work(layer, shapes, out, arrays)
        return macs, 2 * elementwise

    def to_vta(self, layer: Layer, arrays: dict[str, np.ndarray], hw: Any, batch: int) -> None:
        """The conv's packed arrays and the residual's weight block ``2**scale * I``."""
        super().to_vta(layer, arrays, hw, batch)
        arrays[f"{layer.name}.ident"] = identity_block(hw, layer.attrs["scale"])

    def vta_arrays(self, layer: Layer, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**super().vta_arrays(layer, arrays), "ident": arrays[f"{layer.name}.ident"]}

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        a = layer.attrs
        w, b = conv_arrays(layer, arrays)
        acc = conv2d_int32(args[0].data, w, tuple(a["stride"]), tuple(a["pad"]), a["groups"])
        acc = shift_right((acc.astype(np.int64) + b.astype(np.int64).reshape(1, -1, 1, 1)).astype(np.int32),
                          conv_shift(layer, arrays))
        return Tensor(add_residual(acc, args[1].data, a["scale"], a["post_shift"], relu=a["relu"]), a["exp"])

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        a = layer.attrs
        return relu_if(conv2d_float(args[0], arrays[f"{layer.name}.weight"], arrays[f"{layer.name}.bias"],
                                    tuple(a["stride"]), tuple(a["pad"]), a["groups"]) + args[1], a["relu"])

    def quantize(self, layer: Layer, exps: list[int | None], peak: float, floats: dict[str, np.ndarray],
                 arrays: dict[str, np.ndarray]) -> int | None:
        raise ExportError(f"layer {layer.name}: {self.name} is made from an int8 conv and add, never quantised")


def conv2d_float(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: tuple[int, int], pad: tuple[int, int],
                 groups: int = 1) -> np.ndarray:
    """float32 NCHW x OIHW convolution plus bias (the float graph calibration runs)."""
    return conv2d_sum(x, w, stride, pad, groups, np.float32) + b.reshape(1, -1, 1, 1).astype(np.float32)


def identity_block(hw: Any, scale: int) -> np.ndarray:
    """VTA's weight block ``2**scale * I``, packed ``(1, 1, 1, 1, BO, BI)``: a GEMM with it adds an int8 input tile
    into the accumulator, scaled."""
    from toolkit.vta.reference import pack_weight

    eye = np.eye(hw.block_out, hw.block_in, dtype=np.int8) * np.int8(1 << scale)
    return pack_weight(eye.reshape(hw.block_out, hw.block_in, 1, 1), hw)
