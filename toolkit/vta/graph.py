"""An int8 layer graph for VTA boards: a quantised model's layers, run in numpy with its convs on VTA.

A :class:`Graph` is plain data (``graph.json`` plus an ``.npz`` of arrays in an export): layers in
execution order, each naming its inputs. Tensors between layers are int8 with a per-tensor power-of-two
scale (``value = q * 2**-exp``) until the first layer that leaves the integers (global average pooling,
the classifier), then float32. Each op (``conv``, ``conv_add``: a conv and the residual add after it, ``add``,
``relu``, ``maxpool``, ``avgpool``, ``flatten``, ``linear``) is one entry of :data:`toolkit.vta.ops.OPS`: its
attributes, checks and int8 reference. Consecutive VTA layers run as one program the export holds, their
activations packed in its DRAM arena.

:func:`execute` runs a graph: with ``vta=None`` every conv runs in numpy (the int8 reference), else each run of
consecutive VTA layers (a :class:`~toolkit.vta.segments.Segment`, one program) calls ``vta(segment,
packed_inputs)`` once. Board-side code needs only numpy and this package.

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
from toolkit.vta.ops import OPS, Tensor
from toolkit.vta.segments import Segment, arena_inputs, arena_outputs, vta_segments

INPUT = "input"
MAX_LAYERS = 10_000


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
            need(isinstance(op, str) and op in OPS, f"layer {name} has an unknown op {str(op)[:40]!r}")
            spec = OPS[op]
            need(isinstance(inputs, list) and len(inputs) == spec.arity
                 and all(isinstance(n, str) and n in seen for n in inputs),
                 f"layer {name} must take {'two' if spec.arity == 2 else 'one'} earlier layer(s) as inputs")
            device = lo.get("device", "cpu")
            need(device in spec.devices, f"layer {name} has a bad device")
            attrs = lo.get("attrs", {})
            need(isinstance(attrs, dict), f"layer {name} attrs must be an object")
            for key, kind in spec.attrs.items():
                need(_of_kind(attrs.get(key), kind), f"layer {name} attribute {key} is missing or malformed")
            wrong = spec.check(attrs)
            need(wrong is None, f"layer {name} has {wrong}")
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
    for layer in graph.layers:
        shapes[layer.name] = OPS[layer.op].shape(layer, [shapes[n] for n in layer.inputs], arrays)
    return shapes


def work_on_cpu(graph: Graph, arrays: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
    """Multiply-adds and elementwise operations of the whole graph and of its layers on the CPU (each op's
    :meth:`~toolkit.vta.ops.Op.work`): how much a VTA export leaves to the board's processor."""
    shapes = check_arrays(graph, arrays)
    out = {"macs": {"total": 0, "cpu": 0}, "elementwise": {"total": 0, "cpu": 0}}
    for layer in graph.layers:
        macs, elementwise = OPS[layer.op].work(layer, [shapes[n] for n in layer.inputs], shapes[layer.name], arrays)
        for key, n in (("macs", macs), ("elementwise", elementwise)):
            out[key]["total"] += n
            out[key]["cpu"] += n if layer.device == "cpu" else 0
    return out


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -64 <= v <= 64


def _ints(v: Any, n: int, low: int = 1) -> bool:
    return isinstance(v, list) and len(v) == n and all(isinstance(x, int) and not isinstance(x, bool)
                                                       and low <= x <= 1 << 16 for x in v)


def _of_kind(v: Any, kind: str) -> bool:
    """Whether an attribute value is of its :data:`toolkit.vta.ops.Op.attrs` kind."""
    return {"bool": isinstance(v, bool), "int": _int(v), "pair": _ints(v, 2), "pad": _ints(v, 2, low=0)}[kind]


@dataclass
class Execution:
    """What :func:`execute` produced: the outputs (float32), every layer's tensor and seconds, and which
    of them ran on VTA (seconds from the VTA callable: modelled or measured there)."""

    outputs: list[np.ndarray]
    tensors: dict[str, Tensor]
    seconds: dict[str, float]

    def latency_s(self) -> float:
        return float(sum(self.seconds.values()))


VTACall = Callable[[Segment, dict[str, np.ndarray]], tuple[dict[str, np.ndarray], float]]
"""Runs a segment of consecutive VTA layers (one program) on the packed int8 tensors it reads from outside it, by
name: (each layer's packed int8 output by layer name, seconds)."""


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
    segments = {s.layers[0].name: s for s in vta_segments(graph)} if vta is not None else {}
    for layer in graph.layers:
        args = [tensors[n] for n in layer.inputs]
        if layer.name in segments:
            from toolkit.vta.reference import pack_input

            segment = segments[layer.name]
            external = {n: tensors[n].data if tensors[n].packed else pack_input(tensors[n].data, hw)
                        for n in segment.external()}
            outs, took = vta(segment, external)
            for member in segment.layers:       # the segment's time is its first layer's
                seconds[member.name] = took if member is layer else 0.0
                exp = member.attrs["exp"] if "exp" in OPS[member.op].attrs else tensors[member.inputs[0]].exp
                tensors[member.name] = Tensor(outs[member.name], exp, packed=True)    # pooling keeps the scale
            continue
        if layer.name in tensors:               # made by its segment
            continue
        t0 = clock()
        tensors[layer.name] = OPS[layer.op].run(layer, [Tensor(a.nchw(hw), a.exp) if a.packed else a for a in args],
                                                arrays, hw)
        seconds[layer.name] = clock() - t0
    outs = [np.ascontiguousarray(tensors[n].real(hw), dtype=np.float32) for n in graph.outputs]
    return Execution(outs, tensors, seconds)


# -- a whole model in one .npz: what the board agent's edgetune.vta.run_model takes --------------------------
def to_package(graph: Graph, arrays: dict[str, np.ndarray], programs: dict[str, bytes],
               hardware: dict[str, Any]) -> dict[str, np.ndarray]:
    """The graph, its arrays, each VTA segment's program and the hardware config as plain arrays (``np.savez``)."""
    def text(obj: Any) -> np.ndarray:
        return np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)

    return {"graph": text(graph.to_json()), "hardware": text(hardware),
            **{f"array:{k}": v for k, v in arrays.items()},
            **{f"program:{k}": np.frombuffer(v, dtype=np.uint8) for k, v in programs.items()}}


def from_package(package: dict[str, np.ndarray]) -> tuple[Graph, dict[str, np.ndarray], dict[str, bytes], Any]:
    """(graph, arrays, programs by segment, VTA config) of a package, every part checked."""
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
    missing = [s for s in vta_segments(graph) if s.name not in programs]
    if missing:
        raise ExportError(f"the model package has no program for VTA layers {missing[0].layers[0].name}.."
                          f"{missing[0].layers[-1].name}; re-export the model")
    return graph, arrays, programs, hw


ProgramRun = Callable[[dict[str, np.ndarray]], tuple[dict[str, np.ndarray], float]]
"""Runs a loaded VTA program on the arrays of one inference (by region): (the regions it wrote, by name; seconds)."""
ProgramLoad = Callable[[bytes, dict[str, np.ndarray]], ProgramRun]
"""Loads one VTA program with its constant arrays (by region), once for every inference of a package run: the
weights are written to the device's memory once."""


def check_regions(program: Any, named: dict[str, np.ndarray], where: str) -> None:
    """Every array of ``named`` has the shape of ``program``'s region of its name (:class:`ExportError`)."""
    for region, arr in named.items():
        r = program.regions.get(region)
        if r is None or tuple(r.shape) != arr.shape:
            kind, _, layer = region.partition(":")
            what = f"layer {layer}'s {kind} region" if layer and kind not in ("in", "out") else f"{region} region"
            raise ExportError(f"{where}: its program's {what} is {list(r.shape) if r is not None else 'missing'}, "
                              f"its array {list(arr.shape)}; re-export the model")


def run_package(package: dict[str, np.ndarray], inputs: np.ndarray, load_program: ProgramLoad
                ) -> tuple[list[list[np.ndarray]], list[dict[str, float]], list[dict[str, int]]]:
    """Every input of ``inputs`` (stacked on axis 0) through a packaged model, each VTA segment's program loaded
    once by ``load_program``: (outputs per input, seconds per layer per input, crc32 of every int8 tensor per
    input)."""
    from toolkit.vta.program import Program

    graph, arrays, programs, hw = from_package(package)
    n = graph.input_shape[0]
    if inputs.ndim != 4 or tuple(inputs.shape[1:]) != tuple(graph.input_shape[1:]) or inputs.shape[0] % n:
        raise ExportError(f"the model takes inputs of shape {list(graph.input_shape)}, got {list(inputs.shape)}")
    constants = {}
    for segment in vta_segments(graph):     # weights and bias are stored packed: nothing is packed here
        prog = Program.from_bytes(programs[segment.name])
        constants[segment.name] = arena_inputs(segment, {}, {layer.name: OPS[layer.op].vta_arrays(layer, arrays)
                                                             for layer in segment.layers})
        check_regions(prog, constants[segment.name], f"VTA segment {segment.name}")
    loaded = {name: load_program(programs[name], arrays_) for name, arrays_ in constants.items()}

    def on_vta(segment: Segment, external: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
        outs, seconds = loaded[segment.name](arena_inputs(segment, external, {}))
        return arena_outputs(segment, outs), seconds

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
