"""A ``torch.export`` program as a float layer graph for VTA's int8 quantisation: one converter per aten op.

:func:`float_graph` walks the program's nodes in order; :data:`CONVERTERS` maps each aten op it reads to the
function that turns it into a layer of :data:`toolkit.vta.ops.OPS` (or folds it into the layer before it:
batch-norm into the conv, ReLU into the conv or add, dropout and views of the same tensor into nothing).
Arguments are read by position or keyword with :mod:`toolkit.workloads.aten`, as the conv extraction reads
them. Anything else is refused in one line naming the module and the op.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from toolkit.errors import ExportError
from toolkit.vta.graph import INPUT, Graph, Layer
from toolkit.vta.quantize import FloatModel
from toolkit.workloads.aten import arg, conv_args, is_conv, module_of, pair, padding_pair, where

SUPPORTED = "conv2d, batch-norm, ReLU, add, max pooling, global average pooling, flatten, linear"


class TorchReader:
    """What one read of a program has built so far: layers, their float arrays, and which layer each fx node's
    value is (``alias``)."""

    def __init__(self, gm: Any) -> None:
        self.layers: list[Layer] = []
        self.by_name: dict[str, Layer] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.alias: dict[str, str] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.users = {n.name: len(n.users) for n in gm.graph.nodes}

    def src(self, node: Any) -> str:
        """The layer whose output ``node`` is (an activation, never a constant)."""
        if getattr(node, "name", None) not in self.alias:
            raise ExportError(f"{where(node)} is used as an activation but is a constant; VTA exports take "
                              f"models whose layers are {SUPPORTED}")
        return self.alias[node.name]

    def const(self, node: Any) -> np.ndarray | None:
        return None if node is None else self.consts.get(getattr(node, "name", None))

    def unique(self, name: str) -> str:
        base, i = name, 1
        while name in self.by_name or name == INPUT:
            i += 1
            name = f"{base}_{i}"
        return name

    def weights(self, name: str, w: np.ndarray, b: np.ndarray | None) -> None:
        """A layer's float32 weight and bias (zeros when the model has none)."""
        self.arrays[f"{name}.weight"] = w.astype(np.float32)
        self.arrays[f"{name}.bias"] = np.zeros(w.shape[0], np.float32) if b is None else b.astype(np.float32)

    def add(self, layer: Layer, node: Any) -> None:
        self.layers.append(layer)
        self.by_name[layer.name] = layer
        self.alias[node.name] = layer.name

    def single_use_of(self, node: Any, ops: tuple[str, ...]) -> Layer | None:
        """The layer ``node`` is, when it is of one of ``ops``, without a fused ReLU and used by nothing else."""
        prev = self.by_name.get(self.src(node))
        if prev is None or prev.op not in ops or prev.attrs.get("relu") or self.users[node.name] != 1:
            return None
        return prev


def _conv(r: TorchReader, node: Any) -> None:
    c = conv_args(node)
    w = r.const(node.args[1])
    if c["transposed"]:
        raise ExportError(f"{where(node)}: transposed convs have no VTA int8 lowering")
    if w is None or w.ndim != 4 or c["dilation"] != (1, 1):
        raise ExportError(f"{where(node)}: only 2-D convs with constant weights and no dilation quantise for VTA")
    pad = padding_pair(c["padding"], c["dilation"], tuple(w.shape[2:]), c["stride"])
    if pad is None:
        raise ExportError(f"{where(node)}: padding {c['padding']!r} is asymmetric here; VTA convs pad symmetrically")
    name = r.unique(module_of(node))
    r.weights(name, w, r.const(arg(node, 2, "bias")))
    r.add(Layer(name, "conv", [r.src(node.args[0])], attrs={"stride": list(c["stride"]), "pad": list(pad),
                                                              "groups": int(c["groups"]), "relu": False}), node)


def _batch_norm(r: TorchReader, node: Any) -> None:
    prev = r.single_use_of(node.args[0], ("conv",))
    if prev is None:
        raise ExportError(f"{where(node)}: a batch-norm folds into the conv right before it; this one follows no conv")
    legit = str(node.target).startswith("aten._native_batch_norm_legit_no_training.")
    eps = float(arg(node, 6, "eps") if legit else arg(node, 7, "eps", 1e-5))
    gamma, beta, mean, var = (r.const(arg(node, i, key)) for i, key in
                              ((1, "weight"), (2, "bias"), (3, "running_mean"), (4, "running_var")))
    if mean is None or var is None:
        raise ExportError(f"{where(node)}: a batch-norm without running statistics does not fold; export the model "
                          "in eval mode")
    gamma = np.ones_like(mean) if gamma is None else gamma
    beta = np.zeros_like(mean) if beta is None else beta
    k = gamma / np.sqrt(var + eps)
    r.arrays[f"{prev.name}.weight"] = (r.arrays[f"{prev.name}.weight"] * k.reshape(-1, 1, 1, 1)).astype(np.float32)
    r.arrays[f"{prev.name}.bias"] = ((r.arrays[f"{prev.name}.bias"] - mean) * k + beta).astype(np.float32)
    r.alias[node.name] = prev.name


def _same(r: TorchReader, node: Any) -> None:
    """An op that leaves the value as it is at inference (dropout, clone, getitem of a batch-norm's tuple)."""
    r.alias[node.name] = r.src(node.args[0])


def _relu(r: TorchReader, node: Any) -> None:
    prev = r.single_use_of(node.args[0], ("conv", "add"))
    if prev is not None:
        prev.attrs["relu"] = True
        r.alias[node.name] = prev.name
    else:
        r.add(Layer(r.unique(where(node)), "relu", [r.src(node.args[0])]), node)


def _add(r: TorchReader, node: Any) -> None:
    args = node.args[:2]
    if len(args) != 2 or arg(node, 2, "alpha", 1) != 1 or not all(hasattr(a, "name") for a in args):
        raise ExportError(f"{where(node)}: only the sum of two activations quantises for VTA")
    r.add(Layer(r.unique(where(node)), "add", [r.src(args[0]), r.src(args[1])], attrs={"relu": False}), node)


def _max_pool(r: TorchReader, node: Any) -> None:
    kernel = pair(arg(node, 1, "kernel_size"))
    stride = pair(arg(node, 2, "stride") or kernel)
    pad = pair(arg(node, 3, "padding", 0))
    if pair(arg(node, 4, "dilation", 1)) != (1, 1) or arg(node, 5, "ceil_mode", False):
        raise ExportError(f"{where(node)}: dilated or ceil-mode max pooling has no int8 lowering here")
    r.add(Layer(r.unique(where(node)), "maxpool", [r.src(node.args[0])],
                attrs={"kernel": list(kernel), "stride": list(stride), "pad": list(pad)}), node)


def _global_pool(r: TorchReader, node: Any) -> None:
    target = str(node.target)
    if target.startswith("aten.adaptive_avg_pool2d."):
        if pair(arg(node, 1, "output_size")) != (1, 1):
            raise ExportError(f"{where(node)}: adaptive average pooling quantises only to 1x1")
        keep = True
    else:
        if sorted(int(d) % 4 for d in arg(node, 1, "dim", [])) != [2, 3]:
            raise ExportError(f"{where(node)}: a mean quantises only over the spatial axes (2, 3)")
        keep = bool(arg(node, 2, "keepdim", False))
    name = r.unique(where(node))
    r.add(Layer(name, "avgpool", [r.src(node.args[0])]), node)
    if not keep:
        r.add(Layer(r.unique(name + ".flatten"), "flatten", [name]), node)


def _flatten(r: TorchReader, node: Any) -> None:
    val = node.meta.get("val")
    rank = len(val.shape) if hasattr(val, "shape") else 2
    ok = rank == 2 and (not str(node.target).startswith("aten.flatten.")
                        or (arg(node, 1, "start_dim", 0) == 1 and arg(node, 2, "end_dim", -1) in (-1, 3)))
    if not ok:
        raise ExportError(f"{where(node)}: only a flatten to (batch, features) quantises for VTA")
    r.add(Layer(r.unique(where(node)), "flatten", [r.src(node.args[0])]), node)


def _linear(r: TorchReader, node: Any) -> None:
    w = r.const(node.args[1])
    if w is None or w.ndim != 2:
        raise ExportError(f"{where(node)}: a linear layer quantises only with constant 2-D weights")
    name = r.unique(module_of(node))
    r.weights(name, w, r.const(arg(node, 2, "bias")))
    r.add(Layer(name, "linear", [r.src(node.args[0])]), node)


Converter = Callable[[TorchReader, Any], None]

CONVERTERS: tuple[tuple[tuple[str, ...], Converter], ...] = (
    (("aten.batch_norm.", "aten._native_batch_norm_legit_no_training."), _batch_norm),
    (("aten.relu.", "aten.relu_."), _relu),
    (("aten.add.Tensor",), _add),
    (("aten.max_pool2d.",), _max_pool),
    (("aten.adaptive_avg_pool2d.", "aten.mean.dim"), _global_pool),
    (("aten.flatten.", "aten.view.", "aten.reshape."), _flatten),
    (("aten.linear.",), _linear),
    (("aten.dropout.", "aten.clone.", "aten.contiguous.", "aten.detach."), _same),
)
"""aten op prefixes -> converter (convs, of any overload, are recognised by :func:`toolkit.workloads.aten.is_conv`;
``getitem`` by its Python target)."""


def converter(node: Any) -> Converter:
    """The converter of a ``call_function`` node (:class:`ExportError` for an op with none)."""
    target = str(node.target)
    if is_conv(node.target):
        return _conv
    if node.target is operator.getitem:
        return _same
    for prefixes, fn in CONVERTERS:
        if target.startswith(prefixes):
            return fn
    raise ExportError(f"{where(node)}: operator {target} has no int8 lowering for VTA exports (supported: "
                      f"{SUPPORTED})")


def float_graph(program: Any, input_shape: tuple[int, ...]) -> FloatModel:
    """The layers of a ``torch.export`` program (``ExportedProgram``), batch-norm folded, ReLU fused."""
    gm = program.module()
    r = TorchReader(gm)
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise ExportError(f"the model takes {len(inputs)} inputs; VTA exports take models of one input tensor")
    r.alias[inputs[0].name] = INPUT
    outputs: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            r.consts[node.name] = _attr(gm, node.target)
        elif node.op == "output":
            flat = node.args[0] if isinstance(node.args[0], (tuple, list)) else [node.args[0]]
            outputs = [r.src(o) for o in flat]
        elif node.op == "call_function":
            converter(node)(r, node)
    if not r.layers:
        raise ExportError("the model has no layers")
    return FloatModel(Graph(tuple(input_shape), 0, r.layers, outputs), r.arrays)


def _attr(gm: Any, target: str) -> np.ndarray:
    obj = gm
    for part in str(target).split("."):
        obj = getattr(obj, part)
    return obj.detach().cpu().numpy().astype(np.float32)
