"""A model's VTA layers in segments: each run of consecutive VTA layers is one merged program over one DRAM arena
(:mod:`toolkit.vta.merge`), and this module names that arena's regions for the compiler, the loader and the
runners alike.

Region names: a layer's packed constant arrays ``REGION:LAYER`` (``wgt:blocks.0.conv1``, ``bias:...``); a tensor
made inside the segment ``out:TENSOR``, except the segment's last one, ``out``; a tensor made before it (on the
CPU, or by an earlier segment) ``in:TENSOR``. Board-side code: numpy and the op table only.

>>> from toolkit.vta.graph import Layer
>>> a, b = Layer("a", "conv", ["input"], "vta"), Layer("b", "conv_add", ["a", "input"], "vta")
>>> regions = arena_regions(Segment("vta0", [a, b]), {"a": {"wgt": None}, "b": {"wgt": None}})
>>> regions["b"] == {"inp": "out:a", "res": "in:input", "out": "out", "wgt": "wgt:b"}
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.vta.ops import OPS

if TYPE_CHECKING:
    from toolkit.vta.graph import Graph, Layer


@dataclass
class Segment:
    """Consecutive VTA layers of a graph, run as one program named :attr:`name` (``vta0``, ``vta1``, ...)."""

    name: str
    layers: list[Layer]

    @property
    def produced(self) -> set[str]:
        return {layer.name for layer in self.layers}

    def external(self) -> list[str]:
        """The tensors its layers read that it does not make, in order of first use."""
        made, out = self.produced, []
        for layer in self.layers:
            out += [n for n in layer.inputs if n not in made and n not in out]
        return out


def vta_segments(graph: Graph) -> list[Segment]:
    """The graph's runs of consecutive VTA layers, in order."""
    runs: list[list[Layer]] = []
    previous = False
    for layer in graph.layers:
        on_vta = layer.device == "vta"
        if on_vta and previous:
            runs[-1].append(layer)
        elif on_vta:
            runs.append([layer])
        previous = on_vta
    return [Segment(f"vta{k}", run) for k, run in enumerate(runs)]


def arena_regions(segment: Segment, constants: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Per layer of ``segment``, its program's regions -> the arena's (``constants``: each layer's packed arrays
    by region, as ``OPS[op].vta_arrays`` gives them)."""
    made, last = segment.produced, segment.layers[-1].name

    def tensor(name: str) -> str:
        return "out" if name == last else f"out:{name}" if name in made else f"in:{name}"

    return {layer.name: {**{r: tensor(t) for r, t in zip(OPS[layer.op].vta_inputs, layer.inputs)},
                         "out": tensor(layer.name), **{r: f"{r}:{layer.name}" for r in constants[layer.name]}}
            for layer in segment.layers}


def arena_inputs(segment: Segment, external: dict[str, np.ndarray],
                 constants: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays a segment's program takes: its packed ``external`` tensors and the ``constants`` given (each
    layer's, by layer)."""
    return {**{f"in:{name}": arr for name, arr in external.items()},
            **{f"{r}:{layer.name}": arr for layer in segment.layers
               for r, arr in constants.get(layer.name, {}).items()}}


def arena_outputs(segment: Segment, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each layer's packed output from the program's read-back regions."""
    last = segment.layers[-1].name
    return {layer.name: outputs["out" if layer.name == last else f"out:{layer.name}"] for layer in segment.layers}
