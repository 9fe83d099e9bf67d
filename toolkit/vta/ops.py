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

from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.errors import ExportError
from toolkit.vta.conv_ops import PER_CHANNEL as PER_CHANNEL, Conv, ConvAdd, conv_arrays as conv_arrays, \
    conv_shift as conv_shift, conv2d_float as conv2d_float, identity_block
from toolkit.vta.op_base import ACC_EXP_MAX as ACC_EXP_MAX, Op, Shape, Tensor as Tensor, elements, \
    exponent as exponent, need_array, oihw_shape as oihw_shape, relu_if, window_shape

if TYPE_CHECKING:
    from toolkit.vta.graph import Layer


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
        return 0, elements(out) * kh * kw

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
        return 0, elements(shapes[0])

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
        return elements(out) * elements(shapes[0]) // shapes[0][0], elements(out)

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
