"""Post-training int8 quantisation of a PyTorch model for VTA: per-tensor power-of-two scales.

:func:`float_graph` reads a ``torch.export`` program into a :class:`~toolkit.vta.graph.Graph` of float
layers (batch-norm folded into the conv before it, a ReLU fused into the conv or add before it);
:func:`quantize` calibrates it on inputs (the largest magnitude of every tensor over them), picks each
tensor's exponent so that it fits int8, quantises the weights per tensor, and turns every conv's scale
change into one exact right shift with the bias at the accumulator scale (the rounding offset folded in).
:func:`vta_refusal` says why a conv cannot run on VTA (groups; channels or batch not multiples of its
blocks).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.errors import ExportError
from toolkit.vta.graph import INPUT, Graph, Layer, conv2d_float, maxpool

ACC_EXP_MAX = 30
"""Largest accumulator exponent (input exp + weight exp) a conv may get: bias values stay within int32."""


@dataclass
class FloatModel:
    """A model as float layers: the graph (exps and shifts not set yet) and its float32 arrays."""

    graph: Graph
    arrays: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


def float_graph(program: Any, input_shape: tuple[int, ...]) -> FloatModel:
    """The layers of a ``torch.export`` program (``ExportedProgram``), batch-norm folded, ReLU fused."""
    gm = program.module()
    layers: list[Layer] = []
    arrays: dict[str, np.ndarray] = {}
    alias: dict[str, str] = {}      # fx node name -> the layer producing its value
    consts: dict[str, np.ndarray] = {}
    users = {n.name: len(n.users) for n in gm.graph.nodes}
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise ExportError(f"the model takes {len(inputs)} inputs; VTA exports take models of one input tensor")
    alias[inputs[0].name] = INPUT
    outputs: list[str] = []
    by_name: dict[str, Layer] = {}

    def src(node: Any) -> str:
        if getattr(node, "name", None) not in alias:
            raise ExportError(f"{_where(node)} is used as an activation but is a constant; VTA exports take "
                              "models whose layers are convs, batch-norm, ReLU, adds, pooling and linear layers")
        return alias[node.name]

    def const(node: Any) -> np.ndarray | None:
        return None if node is None else consts[node.name]

    def add(layer: Layer, node: Any) -> None:
        layers.append(layer)
        by_name[layer.name] = layer
        alias[node.name] = layer.name

    for node in gm.graph.nodes:
        if node.op == "get_attr":
            consts[node.name] = _attr(gm, node.target)
            continue
        if node.op == "output":
            flat = node.args[0] if isinstance(node.args[0], (tuple, list)) else [node.args[0]]
            outputs = [src(o) for o in flat]
            continue
        if node.op != "call_function":
            continue
        target, args = str(node.target), list(node.args)
        name = _unique(_where(node), by_name)
        if target.startswith(("aten.conv2d.", "aten.convolution.")):
            if target.startswith("aten.convolution.") and args[6]:
                raise ExportError(f"{_where(node)}: transposed convs have no VTA int8 lowering")
            stride, pad, dilation, groups = (_pair(args[3]) if len(args) > 3 else (1, 1),
                                             args[4] if len(args) > 4 else (0, 0),
                                             _pair(args[5]) if len(args) > 5 else (1, 1),
                                             (args[8] if target.startswith("aten.convolution.") else args[6])
                                             if len(args) > 6 else 1)
            w = const(args[1])
            if w is None or w.ndim != 4 or dilation != (1, 1) or isinstance(pad, str):
                raise ExportError(f"{_where(node)}: only 2-D convs with constant weights, no dilation and explicit "
                                  "padding quantise for VTA")
            b = const(args[2]) if len(args) > 2 else None
            lname = _unique(_module(node, args[1]), by_name)
            arrays[f"{lname}.weight"] = w.astype(np.float32)
            arrays[f"{lname}.bias"] = (np.zeros(w.shape[0], np.float32) if b is None else b.astype(np.float32))
            add(Layer(lname, "conv", [src(args[0])], attrs={"stride": list(stride), "pad": list(_pair(pad)),
                                                              "groups": int(groups), "relu": False}), node)
        elif target.startswith(("aten.batch_norm.", "aten._native_batch_norm_legit_no_training.")):
            prev = by_name.get(src(args[0]))
            if prev is None or prev.op != "conv" or prev.attrs["relu"] or users[args[0].name] != 1:
                raise ExportError(f"{_where(node)}: a batch-norm folds into the conv right before it; this one "
                                  "follows no conv")
            eps = float(args[7] if target.startswith("aten.batch_norm.") else args[6])
            gamma, beta, mean, var = (const(args[i]) for i in (1, 2, 3, 4))
            gamma = np.ones_like(mean) if gamma is None else gamma
            beta = np.zeros_like(mean) if beta is None else beta
            k = gamma / np.sqrt(var + eps)
            arrays[f"{prev.name}.weight"] = (arrays[f"{prev.name}.weight"] * k.reshape(-1, 1, 1, 1)).astype(np.float32)
            arrays[f"{prev.name}.bias"] = ((arrays[f"{prev.name}.bias"] - mean) * k + beta).astype(np.float32)
            alias[node.name] = prev.name
        elif target == "<built-in function getitem>" or node.target is operator.getitem:
            alias[node.name] = src(args[0])
        elif target.startswith(("aten.relu.", "aten.relu_.")):
            prev = by_name.get(src(args[0]))
            if prev is not None and prev.op in ("conv", "add") and not prev.attrs["relu"] \
                    and users[args[0].name] == 1:
                prev.attrs["relu"] = True
                alias[node.name] = prev.name
            else:
                add(Layer(name, "relu", [src(args[0])]), node)
        elif target.startswith("aten.add.Tensor"):
            if len(args) != 2 or node.kwargs.get("alpha", 1) != 1 or not all(hasattr(a, "name") for a in args):
                raise ExportError(f"{_where(node)}: only the sum of two activations quantises for VTA")
            add(Layer(name, "add", [src(args[0]), src(args[1])], attrs={"relu": False}), node)
        elif target.startswith("aten.max_pool2d."):
            kernel = _pair(args[1])
            stride = _pair(args[2]) if len(args) > 2 and args[2] else kernel
            pad = _pair(args[3]) if len(args) > 3 else (0, 0)
            if (len(args) > 4 and _pair(args[4]) != (1, 1)) or (len(args) > 5 and args[5]):
                raise ExportError(f"{_where(node)}: dilated or ceil-mode max pooling has no int8 lowering here")
            add(Layer(name, "maxpool", [src(args[0])], attrs={"kernel": list(kernel), "stride": list(stride),
                                                               "pad": list(pad)}), node)
        elif target.startswith("aten.adaptive_avg_pool2d.") and _pair(args[1]) == (1, 1) or \
                target.startswith("aten.mean.dim") and sorted(int(d) % 4 for d in args[1]) == [2, 3]:
            add(Layer(name, "avgpool", [src(args[0])]), node)
            if target.startswith("aten.mean.dim") and not (len(args) > 2 and args[2]):
                add(Layer(_unique(name + ".flatten", by_name), "flatten", [name]), node)
        elif target.startswith(("aten.flatten.", "aten.view.", "aten.reshape.")):
            add(Layer(name, "flatten", [src(args[0])]), node)
        elif target.startswith("aten.linear."):
            lname = _unique(_module(node, args[1]), by_name)
            arrays[f"{lname}.weight"] = const(args[1]).astype(np.float32)
            b = const(args[2]) if len(args) > 2 else None
            arrays[f"{lname}.bias"] = np.zeros(arrays[f"{lname}.weight"].shape[0], np.float32) if b is None \
                else b.astype(np.float32)
            add(Layer(lname, "linear", [src(args[0])]), node)
        elif target.startswith(("aten.dropout.", "aten.clone.", "aten.contiguous.", "aten.detach.")):
            alias[node.name] = src(args[0])
        else:
            raise ExportError(f"{_where(node)}: operator {target} has no int8 lowering for VTA exports (supported: "
                              "conv2d, batch-norm, ReLU, add, max pooling, global average pooling, flatten, linear)")
    if not layers:
        raise ExportError("the model has no layers")
    graph = Graph(tuple(input_shape), 0, layers, outputs)
    return FloatModel(graph, arrays)


def run_float(model: FloatModel, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every layer's float32 output for input ``x`` (the float graph: batch-norm folded, ReLU fused)."""
    values = {INPUT: x.astype(np.float32)}
    arrays = model.arrays
    for layer in model.graph.layers:
        a = layer.attrs
        args = [values[n] for n in layer.inputs]
        if layer.op == "conv":
            out = conv2d_float(args[0], arrays[f"{layer.name}.weight"], arrays[f"{layer.name}.bias"],
                               tuple(a["stride"]), tuple(a["pad"]), a["groups"])
        elif layer.op == "add":
            out = args[0] + args[1]
        elif layer.op == "relu":
            out = np.maximum(args[0], 0)
        elif layer.op == "maxpool":
            out = maxpool(args[0], tuple(a["kernel"]), tuple(a["stride"]), tuple(a["pad"]), -np.inf)
        elif layer.op == "avgpool":
            out = args[0].mean(axis=(2, 3), keepdims=True)
        elif layer.op == "flatten":
            out = args[0].reshape(args[0].shape[0], -1)
        else:
            out = args[0].reshape(args[0].shape[0], -1) @ arrays[f"{layer.name}.weight"].T \
                + arrays[f"{layer.name}.bias"]
        if a.get("relu"):
            out = np.maximum(out, 0)
        values[layer.name] = out.astype(np.float32)
    return values


def exponent(max_abs: float) -> int:
    """The largest ``e`` with ``max_abs * 2**e <= 127`` (int8), within [-EXP_LIMIT, EXP_LIMIT]."""
    if not max_abs > 0 or not math.isfinite(max_abs):
        return 0 if not max_abs > 0 else -EXP_LIMIT
    return int(min(EXP_LIMIT, max(-EXP_LIMIT, math.floor(math.log2(127.0 / max_abs)))))


EXP_LIMIT = 32


@dataclass
class Quantized:
    """An int8 model: its graph (exps and shifts set), arrays (int8 weights, int32 biases at the accumulator
    scale, float32 classifier) and each tensor's shape."""

    graph: Graph
    arrays: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]


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
        a = dict(layer.attrs)
        ein = [exps[n] for n in layer.inputs]
        if layer.op == "conv":
            if ein[0] is None:
                raise ExportError(f"{layer.name}: a conv after the model left int8 (after pooling to 1x1 or the "
                                  "classifier) has no VTA lowering")
            w, b = model.arrays[f"{layer.name}.weight"], model.arrays[f"{layer.name}.bias"]
            ew = exponent(float(np.max(np.abs(w))))
            # the bias at the accumulator scale must fit int32 with the rounding offset beside it
            while ew > -EXP_LIMIT and (ein[0] + ew > ACC_EXP_MAX
                                       or float(np.max(np.abs(b), initial=0.0)) * 2.0 ** (ein[0] + ew) >= 2 ** 30):
                ew -= 1
            eo = min(exponent(peak[layer.name]), ein[0] + ew)       # shift >= 0
            eo = max(eo, ein[0] + ew - 31)                          # shift <= 31
            shift = ein[0] + ew - eo
            arrays[f"{layer.name}.weight"] = np.clip(np.rint(w.astype(np.float64) * 2.0 ** ew), -127, 127
                                                     ).astype(np.int8)
            rounding = (1 << (shift - 1)) if shift > 0 else 0
            arrays[f"{layer.name}.bias"] = (np.rint(b.astype(np.float64) * 2.0 ** (ein[0] + ew)) + rounding
                                            ).astype(np.int32)
            a.update(shift=int(shift), exp=int(eo))
            exps[layer.name] = eo
        elif layer.op == "add":
            if None in ein:
                exps[layer.name] = None
                a["exp"] = 0
            else:
                exps[layer.name] = min(exponent(peak[layer.name]), max(ein))   # a right shift (or none)
                a["exp"] = int(exps[layer.name])
        elif layer.op in ("relu", "maxpool", "flatten"):
            exps[layer.name] = ein[0]
        elif layer.op in ("avgpool", "linear"):
            exps[layer.name] = None
            if layer.op == "linear":
                arrays[f"{layer.name}.weight"] = model.arrays[f"{layer.name}.weight"].astype(np.float32)
                arrays[f"{layer.name}.bias"] = model.arrays[f"{layer.name}.bias"].astype(np.float32)
        layers.append(Layer(layer.name, layer.op, list(layer.inputs), "cpu", a))
    graph = Graph(model.graph.input_shape, int(exps[INPUT] or 0), layers, list(model.graph.outputs))
    return Quantized(graph, arrays, dict(model.shapes))


def vta_refusal(wl: Any, groups: int, hw: Any) -> str | None:
    """Why a conv (its :class:`~toolkit.workloads.Conv2dWorkload` and groups) cannot run on VTA ``hw``
    (``None`` when it can)."""
    if groups != 1:
        return f"{groups} groups (VTA runs dense convs)"
    for what, value, block in (("input channels", wl.ci, hw.block_in), ("output channels", wl.co, hw.block_out),
                               ("batch", wl.n, hw.batch)):
        if value % block:
            return f"{what} {value} not a multiple of VTA's block {block}"
    return None


def conv_workload(q: Quantized, layer: Layer) -> Any:
    """The :class:`~toolkit.workloads.Conv2dWorkload` of a conv layer."""
    from toolkit.workloads import Conv2dWorkload

    n, ci, h, w = q.shapes[layer.inputs[0]]
    co, _, kh, kw = q.arrays[f"{layer.name}.weight"].shape
    (sh, sw), (ph, pw) = layer.attrs["stride"], layer.attrs["pad"]
    return Conv2dWorkload(n, h, w, ci, co, kh, kw, sh, sw, ph, pw)


def _attr(gm: Any, target: str) -> np.ndarray:
    obj = gm
    for part in str(target).split("."):
        obj = getattr(obj, part)
    return obj.detach().cpu().numpy().astype(np.float32)


def _unique(name: str, taken: dict[str, Any]) -> str:
    base, i = name, 1
    while name in taken or name == INPUT:
        i += 1
        name = f"{base}_{i}"
    return name


def _where(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return (list(stack.values())[-1][0] if stack else "") or node.name


def _module(node: Any, weight: Any) -> str:
    """The module path of a layer: its weight's owner (``layer1.0.conv1``), else where the node is."""
    if getattr(weight, "op", None) == "get_attr" and "." in str(weight.target):
        return str(weight.target).rsplit(".", 1)[0]
    return _where(node)


def _pair(value: Any) -> tuple[int, int]:
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])
