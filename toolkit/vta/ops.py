"""The int8 graph's ops, one entry each: attributes, checks, int8 CPU reference, float reference, quantisation.

An :class:`Op` is stateless; :data:`OPS` holds one per op name. Its parts, in the order a model meets them:

1. :meth:`Op.run_float` runs the layer of a float graph (batch-norm folded, ReLU fused), which calibration
   measures every tensor of;
2. :meth:`Op.quantize` turns the float layer into its int8 form: its attributes (output exponent, shift) and
   arrays (int8 weights, int32 biases at the accumulator scale), from its inputs' exponents and its output's
   calibrated peak;
3. :meth:`Op.shape` checks an int8 layer's arrays against its inputs' shapes (an export's graph is untrusted)
   and gives its output's shape; :data:`Op.attrs` lists the attributes :meth:`toolkit.vta.graph.Graph.from_json`
   checks, by kind;
4. :meth:`Op.run` computes the int8 layer in numpy: the reference a VTA program is checked against, and what
   the board's CPU runs for a layer VTA does not.

``devices`` says where an op may run; which ops VTA runs, and how, is :mod:`toolkit.backends.vta.model`'s.
Board-side code imports this module: numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from toolkit.errors import ExportError
from toolkit.vta.layout import POST_SHIFT_MAX, RESIDUAL_SCALE_MAX
from toolkit.vta.reference import (add_residual, conv2d_int32, conv2d_sum, requantize, shift_right, unpack_bias,
                                   unpack_weight)

if TYPE_CHECKING:
    from toolkit.vta.graph import Layer

Shape = tuple[int, ...]

EXP_LIMIT = 32
"""Exponents stay within [-EXP_LIMIT, EXP_LIMIT]."""
ACC_EXP_MAX = 30
"""Largest accumulator exponent (input exp + weight exp) a conv may get: bias values stay within int32."""


@dataclass
class Tensor:
    """An activation: int8 ``data`` at scale ``2**-exp`` (``exp`` ``None``: float32), NCHW or VTA-packed."""

    data: np.ndarray
    exp: int | None
    packed: bool = False

    def nchw(self, hw: Any) -> np.ndarray:
        from toolkit.vta.reference import unpack_output

        return unpack_output(self.data, hw) if self.packed else self.data

    def real(self, hw: Any) -> np.ndarray:
        """The values as float32."""
        x = self.nchw(hw)
        return x if self.exp is None else (x.astype(np.float32) * np.float32(2.0 ** -self.exp))


def exponent(max_abs: float) -> int:
    """The largest ``e`` with ``max_abs * 2**e <= 127`` (int8), within [-EXP_LIMIT, EXP_LIMIT].

    >>> exponent(1.0), exponent(127.0), exponent(128.0), exponent(0.0)
    (6, 0, -1, 0)
    """
    if not max_abs > 0 or not math.isfinite(max_abs):
        return 0 if not max_abs > 0 else -EXP_LIMIT
    return int(min(EXP_LIMIT, max(-EXP_LIMIT, math.floor(math.log2(127.0 / max_abs)))))


def need_array(arrays: dict[str, np.ndarray], name: str, dtype: str, ndim: int) -> np.ndarray:
    """``arrays[name]``, non-empty, of ``dtype`` and ``ndim`` dimensions (else :class:`ExportError`)."""
    a = arrays.get(name)
    if a is None or a.dtype != np.dtype(dtype) or a.ndim != ndim or not a.size:
        raise ExportError(f"the model's weights have no {name} as a {ndim}-D {dtype} array; re-export the model")
    return a


def window_shape(s: Shape, kernel: Any, stride: Any, pad: Any) -> Shape:
    """NCHW output shape of a sliding window (floor mode) over NCHW ``s``."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    return (s[0], s[1], (s[2] + 2 * ph - kh) // sh + 1, (s[3] + 2 * pw - kw) // sw + 1)


def oihw_shape(shape: Shape) -> Shape:
    """A conv weight's OIHW shape, whether stored OIHW or packed ``(O/BO, I/BI, KH, KW, BO, BI)``."""
    if len(shape) == 6:
        ob, ib, kh, kw, bo, bi = shape
        return (ob * bo, ib * bi, kh, kw)
    return tuple(shape)


def conv_arrays(layer: Layer, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A conv layer's OIHW int8 weights and (CO,) int32 bias, unpacked where they are stored in VTA's layout."""
    w, b = arrays[f"{layer.name}.weight"], arrays[f"{layer.name}.bias"]
    return (unpack_weight(w) if w.ndim == 6 else w), (unpack_bias(b) if b.ndim == 6 else b)


PER_CHANNEL = -1
"""A conv's ``shift`` attribute when each output channel has its own (the ``NAME.shift`` array)."""


def conv_shift(layer: Layer, arrays: dict[str, np.ndarray]) -> int | np.ndarray:
    """A conv layer's right shift: its ``shift`` attribute, or the (CO,) int32 per-channel shifts."""
    if layer.attrs["shift"] != PER_CHANNEL:
        return layer.attrs["shift"]
    s = arrays[f"{layer.name}.shift"]
    return unpack_bias(s) if s.ndim == 6 else s


def _size(shape: Shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def relu_if(x: np.ndarray, on: bool) -> np.ndarray:
    return np.maximum(x, 0) if on else x


class Op:
    """One op of the int8 graph (see the module docstring for the order its methods are used in)."""

    name: ClassVar[str]
    arity: ClassVar[int] = 1
    attrs: ClassVar[dict[str, str]] = {}
    """Attribute name -> kind: ``bool``, ``int`` (|v| <= 64), ``pair`` (two ints >= 1), ``pad`` (two ints >= 0)."""
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    cpu_why: ClassVar[str] = "no VTA lowering yet"
    """Why the op runs on the board's CPU in a VTA export (said in the export's layer table and manifest)."""

    def check(self, attrs: dict[str, Any]) -> str | None:
        """What is wrong with well-formed attributes beyond their kinds (``None``: nothing)."""
        return None

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        """The output's shape from the inputs' shapes; the layer's arrays checked to fit them."""
        return shapes[0]

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        """The int8 layer on (NCHW) tensors: the reference."""
        raise NotImplementedError

    def work(self, layer: Layer, shapes: list[Shape], out: Shape, arrays: dict[str, np.ndarray]
             ) -> tuple[int, int]:
        """(multiply-adds, elementwise operations) of the layer for inputs ``shapes`` and output ``out`` (its arrays
        checked by :meth:`shape`): one operation per output element unless the op says otherwise."""
        return 0, _size(out)

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        """The float layer (its fused ReLU included)."""
        raise NotImplementedError

    def quantize(self, layer: Layer, exps: list[int | None], peak: float, floats: dict[str, np.ndarray],
                 arrays: dict[str, np.ndarray]) -> int | None:
        """Set the int8 ``layer``'s attributes and write its arrays into ``arrays`` from the float ones, given its
        inputs' exponents and its output's calibrated peak; returns the output's exponent (``None``: float)."""
        return exps[0]

    def to_vta(self, layer: Layer, arrays: dict[str, np.ndarray], hw: Any, batch: int) -> None:
        """Place the int8 layer on VTA ``hw``: its device set and its arrays rewritten as VTA reads them."""
        raise ExportError(f"layer {layer.name}: {self.name} has no VTA lowering")

    vta_inputs: ClassVar[tuple[str, ...]] = ("inp",)
    """The program regions a VTA layer's input tensors fill, in the order of its inputs."""

    def vta_arrays(self, layer: Layer, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The program regions a VTA layer's stored arrays fill (already in VTA's layout), by region name."""
        return {}


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
        return _size(out) * cg * kh * kw, _size(out)

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
        """Weights per tensor, or per output channel where a channel's weights are small enough to take a finer
        exponent (less rounding, the same output scale; each channel's shift then its own, applied by VTA's ALU
        from a tensor). Each exponent keeps the bias at the accumulator scale within int32 and the shift <= 31."""
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
        eo = min(exponent(peak), int(ew.min()) + ein)    # every shift >= 0
        eo = max(eo, int(ew.min()) + ein - 31)
        ew = np.minimum(ew, eo + 31 - ein)               # every shift <= 31
        shift = ein + ew - eo
        arrays[f"{layer.name}.weight"] = np.clip(np.rint(w.astype(np.float64) * 2.0 ** ew.reshape(-1, 1, 1, 1)),
                                                 -127, 127).astype(np.int8)
        rounding = np.where(shift > 0, 1 << np.maximum(shift - 1, 0), 0)
        arrays[f"{layer.name}.bias"] = (np.rint(b.astype(np.float64) * 2.0 ** (ein + ew)) + rounding).astype(np.int32)
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


class Add(Op):
    """A residual add: both int8 inputs aligned to the finer scale, summed in int32, rounded back by a shift,
    optional ReLU (float inputs: a float sum)."""

    name = "add"
    arity = 2
    cpu_why = "not folded into a conv's program (the export says why)"
    attrs = {"relu": "bool", "exp": "int"}

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        if shapes[1] != shapes[0]:
            raise ExportError(f"layer {layer.name} adds tensors of shapes {list(shapes[0])} and "
                              f"{list(shapes[1])}; re-export the model")
        return shapes[0]

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        x, y, a = args[0], args[1], layer.attrs
        if x.exp is None or y.exp is None:
            return Tensor(relu_if(x.real(hw) + y.real(hw), a["relu"]), None)
        top = max(x.exp, y.exp)
        s = (x.data.astype(np.int32) << (top - x.exp)) + (y.data.astype(np.int32) << (top - y.exp))
        r = top - a["exp"]
        if r > 0:
            s = (s + (1 << (r - 1))) >> r
        return Tensor(np.clip(s, 0 if a["relu"] else -128, 127).astype(np.int8), a["exp"])

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        return relu_if(args[0] + args[1], layer.attrs["relu"])

    def quantize(self, layer: Layer, exps: list[int | None], peak: float, floats: dict[str, np.ndarray],
                 arrays: dict[str, np.ndarray]) -> int | None:
        if None in exps:
            layer.attrs["exp"] = 0
            return None
        eo = min(exponent(peak), max(e for e in exps if e is not None))   # a right shift (or none)
        layer.attrs["exp"] = int(eo)
        return int(eo)


class Relu(Op):
    """max(x, 0), int8 or float."""

    name = "relu"
    cpu_why = "no VTA lowering yet (ALU MAX 0)"

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        return Tensor(np.maximum(args[0].data, 0).astype(args[0].data.dtype), args[0].exp)

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        return np.maximum(args[0], 0)


class MaxPool(Op):
    """Max pooling (floor mode), padding at the type's lowest value; the scale is kept. On VTA
    (:mod:`toolkit.vta.pooling`) for a non-negative input: the identity block copies it into the accumulator,
    ALU ``MAX`` takes each window position."""

    name = "maxpool"
    devices = ("cpu", "vta")
    cpu_why = "VTA's pooling program does not apply (the export says why)"
    attrs = {"kernel": "pair", "stride": "pair", "pad": "pad"}

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        s, at = shapes[0], layer.attrs
        (kh, kw), (ph, pw) = at["kernel"], at["pad"]
        if len(s) != 4 or s[2] + 2 * ph < kh or s[3] + 2 * pw < kw:
            raise ExportError(f"layer {layer.name}: pooling window larger than its input; re-export the model")
        if layer.device == "vta":
            ident = need_array(arrays, f"{layer.name}.ident", "int8", 6)
            if ident.shape[:4] != (1, 1, 1, 1) or ident.shape[4] != ident.shape[5]:
                raise ExportError(f"layer {layer.name}: its identity block {list(ident.shape)} is not one square "
                                  "block; re-export the model")
        return window_shape(s, at["kernel"], at["stride"], at["pad"])

    def to_vta(self, layer: Layer, arrays: dict[str, np.ndarray], hw: Any, batch: int) -> None:
        """The identity block that copies the input into the accumulator."""
        arrays[f"{layer.name}.ident"] = identity_block(hw, 0)
        layer.device = "vta"

    def vta_arrays(self, layer: Layer, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"ident": arrays[f"{layer.name}.ident"]}

    def work(self, layer: Layer, shapes: list[Shape], out: Shape, arrays: dict[str, np.ndarray]
             ) -> tuple[int, int]:
        kh, kw = layer.attrs["kernel"]
        return 0, _size(out) * kh * kw

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        x, a = args[0], layer.attrs
        return Tensor(maxpool(x.data, tuple(a["kernel"]), tuple(a["stride"]), tuple(a["pad"]),
                              -128 if x.exp is not None else -np.inf), x.exp)

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        a = layer.attrs
        return maxpool(args[0], tuple(a["kernel"]), tuple(a["stride"]), tuple(a["pad"]), -np.inf)


class SpaceToDepth(Op):
    """A conv's input rearranged for VTA (:func:`toolkit.workloads.networks.space_to_depth`): zero-padded by
    ``pad`` and cut to ``size`` blocks of ``block x block`` pixels, each block's pixels made channels
    (``c * block**2 + dy * block + dx``), zero channels up to ``channels``. A layout change, no arithmetic."""

    name = "space_to_depth"
    attrs = {"block": "int", "pad": "pad", "size": "pair", "channels": "int"}
    cpu_why = "a layout change for the conv after it (no arithmetic)"

    def check(self, attrs: dict[str, Any]) -> str | None:
        return None if attrs["block"] in (1, 2) and attrs["channels"] >= 1 else "a bad block or channel count"

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        s, a = shapes[0], layer.attrs
        if len(s) != 4 or a["channels"] < s[1] * a["block"] ** 2:
            raise ExportError(f"layer {layer.name}: {a['channels']} channels cannot hold the {a['block']}x"
                              f"{a['block']} blocks of a {list(s)} input; re-export the model")
        return (s[0], a["channels"], *a["size"])

    def work(self, layer: Layer, shapes: list[Shape], out: Shape, arrays: dict[str, np.ndarray]
             ) -> tuple[int, int]:
        return 0, 0

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        return Tensor(self.run_float(layer, [args[0].data], arrays), args[0].exp)

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        a = layer.attrs
        return space_to_depth(args[0], a["block"], tuple(a["pad"]), tuple(a["size"]), a["channels"])


class AvgPool(Op):
    """Global average pooling to 1x1; the model leaves int8 here (float32 output)."""

    name = "avgpool"
    cpu_why = "leaves int8: float32 from here on"

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        s = shapes[0]
        if len(s) != 4:
            raise ExportError(f"layer {layer.name} pools a {len(s)}-D tensor; re-export the model")
        return (s[0], s[1], 1, 1)

    def work(self, layer: Layer, shapes: list[Shape], out: Shape, arrays: dict[str, np.ndarray]
             ) -> tuple[int, int]:
        return 0, _size(shapes[0])

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        return Tensor(args[0].real(hw).mean(axis=(2, 3), keepdims=True, dtype=np.float32), None)

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        return args[0].mean(axis=(2, 3), keepdims=True)

    def quantize(self, layer: Layer, exps: list[int | None], peak: float, floats: dict[str, np.ndarray],
                 arrays: dict[str, np.ndarray]) -> int | None:
        return None


class Flatten(Op):
    """(N, ...) -> (N, the rest)."""

    name = "flatten"
    cpu_why = "a view, no arithmetic"

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        s = shapes[0]
        return (s[0], int(np.prod(s[1:])))

    def work(self, layer: Layer, shapes: list[Shape], out: Shape, arrays: dict[str, np.ndarray]
             ) -> tuple[int, int]:
        return 0, 0

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        return Tensor(args[0].data.reshape(args[0].data.shape[0], -1), args[0].exp)

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        return args[0].reshape(args[0].shape[0], -1)


class Linear(Op):
    """The classifier, in float32."""

    name = "linear"
    cpu_why = "the float32 classifier"

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        s = shapes[0]
        w = need_array(arrays, f"{layer.name}.weight", "float32", 2)
        b = need_array(arrays, f"{layer.name}.bias", "float32", 1)
        if int(np.prod(s[1:])) != w.shape[1] or b.shape[0] != w.shape[0]:
            raise ExportError(f"layer {layer.name}: weights {list(w.shape)} do not fit its input {list(s)}; "
                              "re-export the model")
        return (s[0], w.shape[0])

    def work(self, layer: Layer, shapes: list[Shape], out: Shape, arrays: dict[str, np.ndarray]
             ) -> tuple[int, int]:
        """Multiply-adds; the bias once per output element."""
        return _size(out) * _size(shapes[0]) // shapes[0][0], _size(out)

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        x = args[0].real(hw)
        return Tensor(self.run_float(layer, [x], arrays).astype(np.float32), None)

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        x = args[0]
        return x.reshape(x.shape[0], -1) @ arrays[f"{layer.name}.weight"].T + arrays[f"{layer.name}.bias"]

    def quantize(self, layer: Layer, exps: list[int | None], peak: float, floats: dict[str, np.ndarray],
                 arrays: dict[str, np.ndarray]) -> int | None:
        for part in ("weight", "bias"):
            arrays[f"{layer.name}.{part}"] = floats[f"{layer.name}.{part}"].astype(np.float32)
        return None


OPS: dict[str, Op] = {op.name: op for op in (Conv(), ConvAdd(), Add(), Relu(), MaxPool(), SpaceToDepth(), AvgPool(),
                                               Flatten(), Linear())}
"""Every op of the int8 graph, by name."""
CONVS = ("conv", "conv_add")
"""The ops that are a model's convs (one per conv the model's trace finds)."""


def conv2d_float(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: tuple[int, int], pad: tuple[int, int],
                 groups: int = 1) -> np.ndarray:
    """float32 NCHW x OIHW convolution plus bias (the float graph calibration runs)."""
    return conv2d_sum(x, w, stride, pad, groups, np.float32) + b.reshape(1, -1, 1, 1).astype(np.float32)


def maxpool(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int],
            fill: float) -> np.ndarray:
    """Max pooling (floor mode) with ``fill`` as the padding value: the running maximum of the window's
    ``kh * kw`` strided views (contiguous passes, several times faster than reducing a sliding window)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    xp = np.full((n, c, h + 2 * ph, w + 2 * pw), fill, x.dtype)
    xp[:, :, ph:ph + h, pw:pw + w] = x
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out = np.full((n, c, oh, ow), fill, x.dtype)
    for i in range(kh):
        for j in range(kw):
            np.maximum(out, xp[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw], out=out)
    return out


def identity_block(hw: Any, scale: int) -> np.ndarray:
    """VTA's weight block ``2**scale * I``, packed ``(1, 1, 1, 1, BO, BI)``: a GEMM with it adds an int8 input tile
    into the accumulator, scaled."""
    from toolkit.vta.reference import pack_weight

    eye = np.eye(hw.block_out, hw.block_in, dtype=np.int8) * np.int8(1 << scale)
    return pack_weight(eye.reshape(hw.block_out, hw.block_in, 1, 1), hw)


def space_to_depth(x: np.ndarray, block: int, pad: tuple[int, int], size: tuple[int, int], channels: int
                   ) -> np.ndarray:
    """NCHW ``x`` zero-padded by ``pad`` and cut (or zero-extended) to ``size`` blocks of ``block x block`` pixels,
    each block's pixels made channels (``c * block**2 + dy * block + dx``), zero channels up to ``channels``."""
    n, c, h, w = x.shape
    (ph, pw), (sh, sw), r = pad, size, block
    xp = np.zeros((n, c, sh * r, sw * r), x.dtype)
    hh, ww = max(0, min(h, sh * r - ph)), max(0, min(w, sw * r - pw))
    xp[:, :, ph:ph + hh, pw:pw + ww] = x[:, :, :hh, :ww]
    y = xp.reshape(n, c, sh, r, sw, r).transpose(0, 1, 3, 5, 2, 4).reshape(n, c * r * r, sh, sw)
    out = np.zeros((n, channels, sh, sw), x.dtype)
    out[:, :c * r * r] = y
    return out


def space_to_depth_weight(w: np.ndarray, block: int, channels: int) -> np.ndarray:
    """OIHW weights of a stride-``block`` conv as the stride-1 conv over :func:`space_to_depth`'s output computes
    the same sums with: kernel ``ceil(K/block)``, tap ``(c, dy, dx)`` of position ``(a, b)`` the weight
    ``w[o, c, block*a + dy, block*b + dx]`` (zero past the kernel), zero for the padding channels."""
    o, c, kh, kw = w.shape
    r = block
    KH, KW = -(-kh // r), -(-kw // r)
    wp = np.zeros((o, c, KH * r, KW * r), w.dtype)
    wp[:, :, :kh, :kw] = w
    y = wp.reshape(o, c, KH, r, KW, r).transpose(0, 1, 3, 5, 2, 4).reshape(o, c * r * r, KH, KW)
    out = np.zeros((o, channels, KH, KW), w.dtype)
    out[:, :c * r * r] = y
    return out
