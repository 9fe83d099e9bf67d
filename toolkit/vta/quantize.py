"""Post-training int8 quantisation of a PyTorch model for VTA: per-tensor power-of-two scales.

:func:`toolkit.vta.from_torch.float_graph` reads a ``torch.export`` program into a :class:`FloatModel`;
:func:`quantize` calibrates it on inputs (the largest magnitude of every tensor over them) and asks each
layer's op (:data:`toolkit.vta.ops.OPS`) for its int8 form: each tensor's exponent so that it fits int8,
weights quantised per tensor, every conv's scale change one exact right shift with the bias at the
accumulator scale (the rounding offset folded in).
:func:`vta_refusal` says why a conv cannot run on VTA (groups; channels or batch not multiples of its
blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.errors import ExportError
from toolkit.vta.layout import POST_SHIFT_MAX, RESIDUAL_SCALE_MAX
from toolkit.vta.graph import INPUT, Graph, Layer
from toolkit.vta.op_base import rounding_offset
from toolkit.vta.ops import OPS, PER_CHANNEL, conv_shift, exponent, oihw_shape


@dataclass
class FloatModel:
    """A model as float layers: the graph (exps and shifts not set yet) and its float32 arrays."""

    graph: Graph
    arrays: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


def run_float(model: FloatModel, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every layer's float32 output for input ``x`` (the float graph: batch-norm folded, ReLU fused)."""
    values = {INPUT: x.astype(np.float32)}
    for layer in model.graph.layers:
        out = OPS[layer.op].run_float(layer, [values[n] for n in layer.inputs], model.arrays)
        values[layer.name] = np.asarray(out, dtype=np.float32)
    return values


@dataclass
class Quantized:
    """An int8 model: its graph (exps and shifts set), arrays (int8 weights, int32 biases at the accumulator
    scale, float32 classifier), each tensor's shape and exponent (``None``: float32)."""

    graph: Graph
    arrays: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    exps: dict[str, int | None]


def calibrate(model: FloatModel, inputs: np.ndarray) -> dict[str, float]:
    """The largest magnitude of every tensor over ``inputs`` (batches of the model's input shape stacked
    on axis 0); fills ``model.shapes``."""
    n = model.graph.input_shape[0]
    if inputs.ndim != 4 or tuple(inputs.shape[1:]) != tuple(model.graph.input_shape[1:]) or not inputs.shape[0] \
            or inputs.shape[0] % n:
        raise ExportError(f"calibration inputs must be float arrays of shape {list(model.graph.input_shape)} (or "
                          f"N of them stacked on axis 0), got {list(inputs.shape)}")
    if not np.all(np.isfinite(inputs)):
        raise ExportError("calibration inputs hold NaN or infinity; give finite inputs")
    peak: dict[str, float] = {}
    for i in range(0, inputs.shape[0], n):
        for name, value in run_float(model, inputs[i:i + n]).items():
            peak[name] = max(peak.get(name, 0.0), float(np.max(np.abs(value))) if value.size else 0.0)
            model.shapes[name] = tuple(value.shape)
    return peak


def quantize(model: FloatModel, inputs: np.ndarray) -> Quantized:
    """Calibrate ``model`` on ``inputs`` and quantise it: per-tensor power-of-two exponents, int8 weights,
    each conv's rescale one right shift (every layer on the CPU until its device is set)."""
    peak = calibrate(model, inputs)
    exps: dict[str, int | None] = {INPUT: exponent(peak[INPUT])}
    arrays: dict[str, np.ndarray] = {}
    layers = []
    for layer in model.graph.layers:
        q = Layer(layer.name, layer.op, list(layer.inputs), "cpu", dict(layer.attrs))
        exps[layer.name] = OPS[layer.op].quantize(q, [exps[n] for n in layer.inputs], peak[layer.name],
                                                  model.arrays, arrays)
        layers.append(q)
    graph = Graph(model.graph.input_shape, int(exps[INPUT] or 0), layers, list(model.graph.outputs))
    return Quantized(graph, arrays, dict(model.shapes), exps)


def fuse_residuals(q: Quantized) -> dict[str, str]:
    """Fold each residual add into the conv that feeds it alone (:class:`~toolkit.vta.ops.ConvAdd`: one VTA program
    computes both, with no int8 rounding between them); returns why each add left alone was not fused.

    An add is fused with its later conv operand when that conv has no ReLU and feeds nothing else, and the scales
    fit VTA's epilogue: the conv's accumulator (exponent ``a``) is shifted to ``r + k`` (``r`` the other operand's
    exponent, ``0 <= k <= 6``: the residual enters through the weight block ``2**k * I``), then to the add's
    output exponent by a shift of at most 15. The fused layer takes the conv's place and name; the add's users
    read it."""
    g, exp = q.graph, q.exps
    index = {layer.name: i for i, layer in enumerate(g.layers)}
    users: dict[str, int] = {}
    for layer in g.layers:
        for n in layer.inputs:
            users[n] = users.get(n, 0) + 1
    fused: dict[str, str] = {}       # add -> conv
    kept: dict[str, str] = {}        # add -> why not
    for add in (layer for layer in g.layers if layer.op == "add"):
        convs = [n for n in add.inputs if n in index and g.layers[index[n]].op == "conv"]
        if None in (exp[n] for n in add.inputs) or not convs:
            kept[add.name] = "a float operand" if convs else "no conv operand to fold it into"
            continue
        name = max(convs, key=index.__getitem__)
        conv, other = g.layers[index[name]], add.inputs[1] if add.inputs[0] == name else add.inputs[0]
        old = np.asarray(conv_shift(conv, q.arrays), np.int64)
        acc = old + conv.attrs["exp"]           # the accumulator's exponent (per channel where the shifts are)
        scale = min(RESIDUAL_SCALE_MAX, int(acc.min()) - exp[other])
        shift, post = acc - exp[other] - scale, exp[other] + scale - add.attrs["exp"]
        why = next((w for bad, w in (
            (conv.attrs["relu"], f"its conv {name} has a ReLU"),
            (users[name] != 1 or name in g.outputs or other == name, f"its conv {name} has other users"),
            (index.get(other, -1) > index[name], f"its other operand comes after its conv {name}"),
            (scale < 0, "its residual is finer than the conv's accumulator"),
            (not 0 <= post <= POST_SHIFT_MAX or shift.max() > 31, f"its scales need a shift of {post} (VTA's "
                                                                   f"residual epilogue takes 0 to {POST_SHIFT_MAX})"))
            if bad), None)
        if why:
            kept[add.name] = why
            continue
        q.arrays[f"{name}.bias"] = (q.arrays[f"{name}.bias"].astype(np.int64) + rounding_offset(shift)
                                    - rounding_offset(old)).astype(np.int32)
        conv.op, conv.inputs = "conv_add", [conv.inputs[0], other]
        if shift.ndim:
            q.arrays[f"{name}.shift"] = shift.astype(np.int32)
        conv.attrs.update(shift=PER_CHANNEL if shift.ndim else int(shift), scale=int(scale), post_shift=int(post),
                          relu=add.attrs["relu"], exp=add.attrs["exp"])
        fused[add.name] = name
    if fused:
        g.layers = [layer for layer in g.layers if layer.name not in fused]
        for layer in g.layers:
            layer.inputs = [fused.get(n, n) for n in layer.inputs]
        g.outputs = [fused.get(n, n) for n in g.outputs]
        for add, conv in fused.items():
            q.shapes[conv], q.exps[conv] = q.shapes.pop(add), q.exps.pop(add)
    return kept


def rewrite_space_to_depth(q: Quantized, layer: Layer, workload: Any) -> Layer:
    """Make int8 conv ``layer`` the stride-1 conv ``workload`` (:func:`~toolkit.workloads.networks.space_to_depth`
    of its own) over a ``space_to_depth`` layer inserted before it: its weights rearranged and zero-padded, its
    sums, and so its outputs, unchanged. Returns the inserted layer."""
    from toolkit.vta.ops import space_to_depth_weight

    g = q.graph
    src = layer.inputs[0]
    block = layer.attrs["stride"][0]
    pad = [layer.attrs["pad"][0] - workload.ph, layer.attrs["pad"][1] - workload.pw]     # what VTA does not pad
    s2d = Layer(f"{layer.name}.space_to_depth", "space_to_depth", [src], "cpu",
                {"block": block, "pad": pad, "size": [workload.h, workload.w], "channels": workload.ci})
    g.layers.insert(g.layers.index(layer), s2d)
    q.shapes[s2d.name], q.exps[s2d.name] = (q.shapes[src][0], workload.ci, workload.h, workload.w), q.exps[src]
    key = f"{layer.name}.weight"
    q.arrays[key] = space_to_depth_weight(q.arrays[key], block, workload.ci)
    layer.inputs[0] = s2d.name
    layer.attrs.update(stride=[workload.sh, workload.sw], pad=[workload.ph, workload.pw])
    return s2d


def vta_refusal(wl: Any, hw: Any) -> str | None:
    """Why a conv (its :class:`~toolkit.workloads.Conv2dWorkload`) cannot run on VTA ``hw`` (``None`` when it
    can)."""
    from toolkit.workloads.networks import dense_refusal

    refusal = dense_refusal(wl)
    if refusal:
        return refusal
    for what, value, block in (("input channels", wl.ci, hw.block_in), ("output channels", wl.co, hw.block_out),
                               ("batch", wl.n, hw.batch)):
        if value % block:
            return f"{what} {value} not a multiple of VTA's block {block}"
    return None


def conv_workload(q: Quantized, layer: Layer) -> Any:
    """The :class:`~toolkit.workloads.Conv2dWorkload` of a conv layer."""
    from toolkit.workloads import Conv2dWorkload

    n, ci, h, w = q.shapes[layer.inputs[0]]
    co, _, kh, kw = oihw_shape(q.arrays[f"{layer.name}.weight"].shape)
    (sh, sw), (ph, pw) = layer.attrs["stride"], layer.attrs["pad"]
    return Conv2dWorkload(n, h, w, ci, co, kh, kw, sh, sw, ph, pw, g=layer.attrs["groups"])
