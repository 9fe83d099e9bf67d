"""An int8 layer graph for VTA boards: a quantised model's layers, run in numpy with its convs on VTA.

A :class:`Graph` is plain data (``graph.json`` plus an ``.npz`` of arrays in an export): layers in
execution order, each naming its inputs. Tensors between layers are int8 with a per-tensor power-of-two
scale (``value = q * 2**-exp``) until the first layer that leaves the integers (global average pooling,
the classifier), then float32. Layers:

- ``conv`` (``device`` ``vta`` or ``cpu``): int32 accumulation, ``+ bias`` at the accumulator scale
  (the rounding offset folded in), arithmetic ``>> shift``, clip to [0, 127] with ReLU or [-128, 127]:
  exactly VTA's ALU epilogue (:func:`toolkit.vta.reference.requantize`). A VTA conv runs the program the
  export holds, on packed tensors; consecutive VTA convs pass packed tensors without unpacking.
- ``add`` (a residual add, on the CPU: VTA's ALU adds int32 accumulator tensors, not two int8 tensors in
  DRAM): both inputs aligned to the finer scale, summed in int32, rounded back by a shift, optional ReLU.
- ``relu``, ``maxpool`` (int8), ``avgpool`` (global, dequantises), ``flatten``, ``linear`` (float32).

:func:`execute` runs a graph: with ``vta=None`` every conv runs in numpy (the int8 reference), else VTA
convs call ``vta(layer, packed_input)``. Board-side code needs only numpy and this package.

>>> g = Graph.from_json({"input": {"shape": [1, 16, 4, 4], "exp": 6}, "outputs": ["r"],
...     "layers": [{"name": "r", "op": "relu", "inputs": ["input"]}]})
>>> x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(1, 16, 4, 4)
>>> run = execute(g, {}, x)
>>> float(run.outputs[0].min()), float(run.outputs[0].max())
(0.0, 1.0)
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.errors import ExportError
from toolkit.vta.reference import conv2d_int32, im2col, requantize

OPS = ("conv", "add", "relu", "maxpool", "avgpool", "flatten", "linear")
DEVICES = ("cpu", "vta")
INPUT = "input"
MAX_LAYERS = 10_000
_ATTRS: dict[str, tuple[str, ...]] = {
    "conv": ("stride", "pad", "groups", "shift", "relu", "exp"),
    "add": ("relu", "exp"),
    "relu": (), "maxpool": ("kernel", "stride", "pad"), "avgpool": (), "flatten": (), "linear": (),
}


@dataclass
class Layer:
    """One layer: its name (the module path), op, input layer names, where it runs and its attributes
    (see the module docstring); array names are ``NAME.weight`` / ``NAME.bias`` in the graph's arrays."""

    name: str
    op: str
    inputs: list[str]
    device: str = "cpu"
    attrs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "inputs": list(self.inputs), "device": self.device,
                "attrs": self.attrs}


@dataclass
class Graph:
    """Layers in execution order, the input (shape, exp) and the output layer names."""

    input_shape: tuple[int, ...]
    input_exp: int
    layers: list[Layer]
    outputs: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"input": {"shape": list(self.input_shape), "exp": self.input_exp},
                "layers": [layer.to_json() for layer in self.layers], "outputs": list(self.outputs)}

    @classmethod
    def from_json(cls, obj: Any, where: str = "graph") -> Graph:
        """A graph from its JSON form, every field checked (an export's graph is untrusted data)."""
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ExportError(f"{where}: {what}; re-export the model")

        need(isinstance(obj, dict), "not a JSON object")
        inp = obj.get("input")
        need(isinstance(inp, dict) and _ints(inp.get("shape"), 4) and _int(inp.get("exp")),
             "input must have a shape of four positive integers and an integer exp")
        layers_obj = obj.get("layers")
        need(isinstance(layers_obj, list) and 0 < len(layers_obj) <= MAX_LAYERS, "layers must be a non-empty list")
        seen = {INPUT}
        layers = []
        for i, lo in enumerate(layers_obj):
            need(isinstance(lo, dict), f"layer {i} is not an object")
            name, op, inputs = lo.get("name"), lo.get("op"), lo.get("inputs")
            need(isinstance(name, str) and name not in seen and 0 < len(name) <= 200, f"layer {i} has a bad or "
                 "repeated name")
            need(op in OPS, f"layer {name} has an unknown op {str(op)[:40]!r}")
            need(isinstance(inputs, list) and len(inputs) == (2 if op == "add" else 1)
                 and all(isinstance(n, str) and n in seen for n in inputs),
                 f"layer {name} must take {'two' if op == 'add' else 'one'} earlier layer(s) as inputs")
            device = lo.get("device", "cpu")
            need(device in DEVICES and (device == "cpu" or op == "conv"), f"layer {name} has a bad device")
            attrs = lo.get("attrs", {})
            need(isinstance(attrs, dict), f"layer {name} attrs must be an object")
            for key in _ATTRS[op]:
                value = attrs.get(key)
                ok = isinstance(value, bool) if key == "relu" else (
                    _ints(value, 2) if key in ("stride", "kernel") else
                    _ints(value, 2, low=0) if key == "pad" else _int(value))
                need(ok, f"layer {name} attribute {key} is missing or malformed")
            if op == "conv":
                need(0 <= attrs["shift"] <= 31 and attrs["groups"] >= 1, f"layer {name} has a bad shift or groups")
            seen.add(name)
            layers.append(Layer(name, op, list(inputs), device, attrs))
        outputs = obj.get("outputs")
        need(isinstance(outputs, list) and outputs and all(o in seen for o in outputs), "outputs must name layers")
        return cls(tuple(inp["shape"]), int(inp["exp"]), layers, list(outputs))

    def layer(self, name: str) -> Layer:
        return next(layer for layer in self.layers if layer.name == name)


def check_arrays(graph: Graph, arrays: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Every array a layer needs, of its dtype and a shape that fits its input (:class:`ExportError` saying
    which does not); each tensor's shape."""
    shapes: dict[str, tuple[int, ...]] = {INPUT: tuple(graph.input_shape)}

    def array(name: str, dtype: str, ndim: int) -> np.ndarray:
        a = arrays.get(name)
        if a is None or a.dtype != np.dtype(dtype) or a.ndim != ndim or not a.size:
            raise ExportError(f"the model's weights lack {name} ({dtype}, {ndim}-D); re-export the model")
        return a

    for layer in graph.layers:
        s = shapes[layer.inputs[0]]
        at, name = layer.attrs, layer.name
        if layer.op == "conv":
            int_graph = len(s) == 4
            w, b = array(f"{name}.weight", "int8", 4), array(f"{name}.bias", "int32", 1)
            (kh, kw), (sh, sw), (ph, pw) = w.shape[2:], at["stride"], at["pad"]
            if not int_graph or w.shape[1] * at["groups"] != s[1] or w.shape[0] % at["groups"] or b.shape[0] != \
                    w.shape[0] or s[2] + 2 * ph < kh or s[3] + 2 * pw < kw:
                raise ExportError(f"layer {name}: weights {list(w.shape)} do not fit its input {list(s)}; "
                                  "re-export the model")
            shapes[name] = (s[0], w.shape[0], (s[2] + 2 * ph - kh) // sh + 1, (s[3] + 2 * pw - kw) // sw + 1)
        elif layer.op == "add":
            if shapes[layer.inputs[1]] != s:
                raise ExportError(f"layer {name} adds tensors of shapes {list(s)} and "
                                  f"{list(shapes[layer.inputs[1]])}; re-export the model")
            shapes[name] = s
        elif layer.op == "maxpool":
            (kh, kw), (sh, sw), (ph, pw) = at["kernel"], at["stride"], at["pad"]
            if len(s) != 4 or s[2] + 2 * ph < kh or s[3] + 2 * pw < kw:
                raise ExportError(f"layer {name}: pooling window larger than its input; re-export the model")
            shapes[name] = (s[0], s[1], (s[2] + 2 * ph - kh) // sh + 1, (s[3] + 2 * pw - kw) // sw + 1)
        elif layer.op == "avgpool":
            if len(s) != 4:
                raise ExportError(f"layer {name} pools a {len(s)}-D tensor; re-export the model")
            shapes[name] = (s[0], s[1], 1, 1)
        elif layer.op == "flatten":
            shapes[name] = (s[0], int(np.prod(s[1:])))
        elif layer.op == "linear":
            w, b = array(f"{name}.weight", "float32", 2), array(f"{name}.bias", "float32", 1)
            if int(np.prod(s[1:])) != w.shape[1] or b.shape[0] != w.shape[0]:
                raise ExportError(f"layer {name}: weights {list(w.shape)} do not fit its input {list(s)}; "
                                  "re-export the model")
            shapes[name] = (s[0], w.shape[0])
        else:
            shapes[name] = s
    return shapes


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -64 <= v <= 64


def _ints(v: Any, n: int, low: int = 1) -> bool:
    return isinstance(v, list) and len(v) == n and all(isinstance(x, int) and not isinstance(x, bool)
                                                       and low <= x <= 1 << 16 for x in v)


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


@dataclass
class Execution:
    """What :func:`execute` produced: the outputs (float32), every layer's tensor and seconds, and which
    of them ran on VTA (seconds from the VTA callable: modelled or measured there)."""

    outputs: list[np.ndarray]
    tensors: dict[str, Tensor]
    seconds: dict[str, float]

    def latency_s(self) -> float:
        return float(sum(self.seconds.values()))


VTACall = Callable[[Layer, np.ndarray], tuple[np.ndarray, float]]
"""Runs a VTA conv layer on a packed int8 input: (packed int8 output, seconds)."""


def quantize_input(x: np.ndarray, exp: int) -> np.ndarray:
    """float -> int8 at scale ``2**-exp`` (round half to even, saturating)."""
    return np.clip(np.rint(x.astype(np.float64) * 2.0 ** exp), -128, 127).astype(np.int8)


def execute(graph: Graph, arrays: dict[str, np.ndarray], x: np.ndarray, *, vta: VTACall | None = None,
            hw: Any = None, clock: Callable[[], float] = time.perf_counter) -> Execution:
    """Run ``graph`` on one float input ``x``: VTA convs through ``vta`` (``None``: in numpy, the int8
    reference), the rest here, each CPU layer timed by ``clock``."""
    if tuple(x.shape) != tuple(graph.input_shape):
        raise ExportError(f"the model takes an input of shape {list(graph.input_shape)}, got {list(x.shape)}")
    tensors = {INPUT: Tensor(quantize_input(x, graph.input_exp), graph.input_exp)}
    seconds: dict[str, float] = {}
    for layer in graph.layers:
        args = [tensors[n] for n in layer.inputs]
        if layer.device == "vta" and vta is not None:
            from toolkit.vta.reference import pack_input

            src = args[0]
            packed = src.data if src.packed else pack_input(src.data, hw)
            out, seconds[layer.name] = vta(layer, packed)
            tensors[layer.name] = Tensor(out, layer.attrs["exp"], packed=True)
            continue
        t0 = clock()
        tensors[layer.name] = _run_cpu(layer, [a if not a.packed else Tensor(a.nchw(hw), a.exp) for a in args],
                                       arrays, hw)
        seconds[layer.name] = clock() - t0
    outs = [np.ascontiguousarray(tensors[n].real(hw), dtype=np.float32) for n in graph.outputs]
    return Execution(outs, tensors, seconds)


def _run_cpu(layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
    a, op = layer.attrs, layer.op
    x = args[0]
    if op == "conv":
        w, b = arrays[f"{layer.name}.weight"], arrays[f"{layer.name}.bias"]
        acc = conv2d_int32(x.data, w, tuple(a["stride"]), tuple(a["pad"]), a["groups"])
        return Tensor(requantize(acc, b, a["shift"], relu=a["relu"], acc_bias=True), a["exp"])
    if op == "add":
        y = args[1]
        if x.exp is None or y.exp is None:
            out = x.real(hw) + y.real(hw)
            return Tensor(np.maximum(out, 0) if a["relu"] else out, None)
        top = max(x.exp, y.exp)
        s = (x.data.astype(np.int32) << (top - x.exp)) + (y.data.astype(np.int32) << (top - y.exp))
        r = top - a["exp"]
        if r > 0:
            s = (s + (1 << (r - 1))) >> r
        return Tensor(np.clip(s, 0 if a["relu"] else -128, 127).astype(np.int8), a["exp"])
    if op == "relu":
        return Tensor(np.maximum(x.data, 0).astype(x.data.dtype), x.exp)
    if op == "maxpool":
        return Tensor(maxpool(x.data, tuple(a["kernel"]), tuple(a["stride"]), tuple(a["pad"]),
                              -128 if x.exp is not None else -np.inf), x.exp)
    if op == "avgpool":
        return Tensor(x.real(hw).mean(axis=(2, 3), keepdims=True, dtype=np.float32), None)
    if op == "flatten":
        return Tensor(x.data.reshape(x.data.shape[0], -1), x.exp)
    if op == "linear":
        out = x.real(hw).reshape(x.data.shape[0], -1) @ arrays[f"{layer.name}.weight"].T
        return Tensor((out + arrays[f"{layer.name}.bias"]).astype(np.float32), None)
    raise ExportError(f"layer {layer.name}: unknown op {op}")


def conv2d_float(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: tuple[int, int], pad: tuple[int, int],
                 groups: int = 1) -> np.ndarray:
    """float32 NCHW x OIHW convolution plus bias (the float graph :mod:`toolkit.vta.quantize` calibrates on)."""
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    cols, oh, ow = im2col(x.astype(np.float32), kh, kw, stride, pad, 0.0)
    og = o // groups
    out = np.empty((n, o, oh * ow), np.float32)
    for g in range(groups):
        xs = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        out[:, g * og:(g + 1) * og] = np.einsum("ok,nkp->nop", w[g * og:(g + 1) * og].reshape(og, -1), xs,
                                                optimize=True)
    return out.reshape(n, o, oh, ow) + b.reshape(1, -1, 1, 1).astype(np.float32)


def maxpool(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int],
            fill: float) -> np.ndarray:
    """Max pooling (floor mode) with ``fill`` as the padding value."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    xp = np.full((n, c, h + 2 * ph, w + 2 * pw), fill, x.dtype)
    xp[:, :, ph:ph + h, pw:pw + w] = x
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
    return win.max(axis=(4, 5))


# -- a whole model in one .npz: what the board agent's edgetune.vta.run_model takes --------------------------
def to_package(graph: Graph, arrays: dict[str, np.ndarray], programs: dict[str, bytes],
               hardware: dict[str, Any]) -> dict[str, np.ndarray]:
    """The graph, its arrays, each VTA layer's program and the hardware config as plain arrays (``np.savez``)."""
    def text(obj: Any) -> np.ndarray:
        return np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)

    return {"graph": text(graph.to_json()), "hardware": text(hardware),
            **{f"array:{k}": v for k, v in arrays.items()},
            **{f"program:{k}": np.frombuffer(v, dtype=np.uint8) for k, v in programs.items()}}


def from_package(package: dict[str, np.ndarray]) -> tuple[Graph, dict[str, np.ndarray], dict[str, bytes], Any]:
    """(graph, arrays, programs, VTA config) of a package, every part checked."""
    from toolkit.vta.config import VTAConfig

    def text(key: str) -> Any:
        raw = package.get(key)
        if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
            raise ExportError(f"the model package has no {key}; re-export the model")
        try:
            return json.loads(raw.tobytes())
        except ValueError:
            raise ExportError(f"the model package's {key} is not JSON; re-export the model") from None

    graph = Graph.from_json(text("graph"), "the model package's graph")
    hw = VTAConfig.from_json(text("hardware"))
    arrays = {k.split(":", 1)[1]: v for k, v in package.items() if k.startswith("array:")}
    programs = {k.split(":", 1)[1]: v.tobytes() for k, v in package.items() if k.startswith("program:")}
    check_arrays(graph, arrays)
    missing = [layer.name for layer in graph.layers if layer.device == "vta" and layer.name not in programs]
    if missing:
        raise ExportError(f"the model package has no program for VTA layer {missing[0]}; re-export the model")
    return graph, arrays, programs, hw


ProgramCall = Callable[[bytes, dict[str, np.ndarray]], tuple[np.ndarray, float]]
"""Runs one VTA program on named packed inputs (``inp``, ``wgt``, ``bias``): (packed output, seconds)."""


def run_package(package: dict[str, np.ndarray], inputs: np.ndarray, run_program: ProgramCall
                ) -> tuple[list[list[np.ndarray]], list[dict[str, float]], list[dict[str, int]]]:
    """Every input of ``inputs`` (stacked on axis 0) through a packaged model, its VTA layers through
    ``run_program``: (outputs per input, seconds per layer per input, crc32 of every int8 tensor per input)."""
    from toolkit.vta.program import Program
    from toolkit.vta.reference import pack_bias, pack_weight

    graph, arrays, programs, hw = from_package(package)
    n = graph.input_shape[0]
    if inputs.ndim != 4 or tuple(inputs.shape[1:]) != tuple(graph.input_shape[1:]) or inputs.shape[0] % n:
        raise ExportError(f"the model takes inputs of shape {list(graph.input_shape)}, got {list(inputs.shape)}")
    packed = {}
    for layer in graph.layers:
        if layer.device == "vta":
            prog = Program.from_bytes(programs[layer.name])
            packed[layer.name] = (programs[layer.name], tuple(prog.regions["out"].shape), {
                "wgt": pack_weight(arrays[f"{layer.name}.weight"], hw),
                "bias": pack_bias(arrays[f"{layer.name}.bias"], hw, batch=n)})

    def on_vta(layer: Layer, x: np.ndarray) -> tuple[np.ndarray, float]:
        program, shape, named = packed[layer.name]
        out, seconds = run_program(program, {"inp": x, **named})
        return np.asarray(out).reshape(shape), seconds

    outputs, seconds, digests = [], [], []
    for i in range(0, inputs.shape[0], n):
        run = execute(graph, arrays, inputs[i:i + n], vta=on_vta, hw=hw)
        outputs.append(run.outputs)
        seconds.append(run.seconds)
        digests.append(tensor_digests(run, hw))
    return outputs, seconds, digests


def tensor_digests(run: Execution, hw: Any) -> dict[str, int]:
    """crc32 of every int8 tensor of a run (NCHW), by layer: what a board's run is checked against."""
    return {name: zlib.crc32(np.ascontiguousarray(t.nchw(hw)).tobytes()) for name, t in run.tensors.items()
            if t.exp is not None}
