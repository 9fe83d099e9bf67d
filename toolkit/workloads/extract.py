"""Conv2d workloads of a PyTorch model, found by tracing its graph.

A model is a ``torch.export`` archive (``.pt2``), a TorchScript file (anything else on disk,
converted with torch's ``TS2EPConverter``), an importable ``module:factory`` (``pkg.mod:make``
or ``path/to/file.py:make``; the factory returns an ``nn.Module`` and is exported with
``torch.export``), or an ``nn.Module``. The graph is run once through
``torch.fx.passes.shape_prop.ShapeProp`` on fake tensors (shapes only, no arithmetic) of the
given input shape; every
``aten.conv2d``/``aten.convolution`` node becomes a :class:`~toolkit.workloads.networks.ConvLayer`
(identical shapes merged, with the module paths that use them; groups and dilation are part of
the shape). Transposed convs, and convs whose ``"same"`` padding is asymmetric, are reported with
the reason they are not workloads.

Requantisation (``--scales``): VTA requantises an int32 accumulator with an arithmetic right
shift, so a layer with input scale ``s_in``, weight scale ``s_w`` and output scale ``s_out``
gets ``shift = round(-log2(s_in * s_w / s_out))``; the multiplier actually applied is
``2**-shift`` and :class:`Requant` reports its relative error (0 when the scales are powers
of two, as TVM's VTA quantisation makes them).

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1))
>>> ex = extract(model, (1, 3, 16, 16), name="tiny")
>>> [(layer.workload.spec(), layer.count) for layer in ex.network.layers][1]
('conv2d:N=1,H=16,W=16,CI=8,CO=8,K=3,S=1,P=1', 1)
>>> requant_shift(0.5, 0.25, 4.0).shift
5
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import WorkloadError
from toolkit.workloads.aten import conv_args, is_conv, module_of, padding_pair
from toolkit.workloads.model_files import LoadedModel, first_line, load_model, quiet_torch, refuse_plain_non_models
from toolkit.workloads.networks import ConvLayer, Network, merge_layers
from toolkit.workloads import Conv2dWorkload


@dataclass(frozen=True)
class Requant:
    """A layer's requantisation: scales in, the shift out, and how far ``2**-shift`` is from the exact multiplier."""

    s_in: float
    s_w: float
    s_out: float
    shift: int
    rel_error: float

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"s_in": self.s_in, "s_w": self.s_w, "s_out": self.s_out, "shift": self.shift,
                "rel_error": self.rel_error}


@dataclass(frozen=True)
class ConvNode:
    """One 2-D, non-transposed conv of the traced graph, in graph order: its module path and its layer
    (``None`` when it is no conv2d workload: ``reason`` says why)."""

    module: str
    layer: ConvLayer | None
    reason: str = ""


@dataclass
class Extraction:
    """What :func:`extract` found: the conv layers as a network, and convs that are not 2-D workloads."""

    network: Network
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (module, reason)
    convs: list[ConvNode] = field(default_factory=list)
    """Every 2-D conv of the graph in order, unmerged."""

    def to_dict(self) -> dict:
        """JSON-able form."""
        return self.network.to_dict() | {"skipped": [{"module": m, "reason": r} for m, r in self.skipped]}


def parse_input_shape(text: str) -> tuple[int, int, int, int]:
    """``"1,3,224,224"`` -> ``(1, 3, 224, 224)``; :class:`WorkloadError` unless four positive integers."""
    parts = [p.strip() for p in text.replace("x", ",").split(",")]
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise WorkloadError(f"input shape {text!r} must be four positive integers N,C,H,W, e.g. 1,3,224,224")
    n, c, h, w = (int(p) for p in parts)
    return n, c, h, w


def requant_shift(s_in: float, s_w: float, s_out: float) -> Requant:
    """The right shift that best approximates ``s_in * s_w / s_out`` (see the module docstring)."""
    if min(s_in, s_w, s_out) <= 0 or not all(map(math.isfinite, (s_in, s_w, s_out))):
        raise WorkloadError(f"scales must be positive finite numbers, got in={s_in}, w={s_w}, out={s_out}")
    multiplier = s_in * s_w / s_out
    shift = round(-math.log2(multiplier))
    if not -31 <= shift <= 31:
        raise WorkloadError(
            f"scales in={s_in}, w={s_w}, out={s_out} need a shift of {shift}: an int32 accumulator allows "
            "-31..31; check that the scales are per-tensor step sizes"
        )
    return Requant(s_in, s_w, s_out, shift, 2.0 ** -shift / multiplier - 1.0)


def parse_scales(text: str) -> dict[str, tuple[float, float, float]]:
    """``--scales``: ``S_IN,S_W,S_OUT`` for every layer, or a JSON file ``{"module": [s_in, s_w, s_out]}``.

    The key ``"*"`` in the file gives the scales of every module not named.
    """
    path = Path(text)
    if path.suffix == ".json" or path.is_file():
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise WorkloadError(f"cannot read scales file {text}: {exc}") from None
        if not isinstance(raw, dict):
            raise WorkloadError(f"scales file {text} must map module names (or \"*\") to [s_in, s_w, s_out]")
        return {k: _triple(v, f"{text}[{k}]") for k, v in raw.items()}
    return {"*": _triple(text.split(","), "--scales")}


def _triple(value: Any, where: str) -> tuple[float, float, float]:
    try:
        s_in, s_w, s_out = (float(v) for v in value)
    except (TypeError, ValueError):
        raise WorkloadError(f"{where} must be three numbers s_in,s_w,s_out, got {value!r}") from None
    return s_in, s_w, s_out


def requant_shifts(network: Network, scales: dict[str, tuple[float, float, float]]) -> dict[str, Requant]:
    """Each module's :class:`Requant`, from per-module scales or the ``"*"`` default."""
    out: dict[str, Requant] = {}
    for layer in network.layers:
        for module in layer.modules:
            triple = scales.get(module, scales.get("*"))
            if triple is not None:
                out[module] = requant_shift(*triple)
    missing = set(scales) - {"*"} - {m for layer in network.layers for m in layer.modules}
    if missing:
        raise WorkloadError(f"scales name unknown module(s) {sorted(missing)}; the conv modules are {sorted(out)}")
    return out


def extract(model: Any, input_shape: tuple[int, int, int, int], *, name: str | None = None) -> Extraction:
    """Trace ``model`` (a path, ``module:factory``, ``nn.Module`` or a :class:`LoadedModel`) and collect its
    conv layers."""
    refuse_plain_non_models(model)
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.shape_prop import ShapeProp

    device = next(model.parameters(), torch.zeros(0)).device if isinstance(model, torch.nn.Module) else "cpu"
    example = torch.zeros(input_shape, device=device)   # a module built on "meta" needs no weights
    loaded = model if isinstance(model, LoadedModel) else load_model(model, input_shape)
    gm, label = loaded.program.module(), loaded.label
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # torch-internal deprecations, not the user's
        try:
            with torch.no_grad(), quiet_torch():
                ShapeProp(gm, fake_mode=FakeTensorMode(allow_non_fake_inputs=True)).propagate(example)
        except Exception as exc:  # noqa: BLE001 - any failure of the model on this input is the user's to fix
            raise WorkloadError(
                f"model {label} does not run on input shape {','.join(map(str, input_shape))}: "
                f"{first_line(exc)}; pass the --input-shape it was exported for"
            ) from None
    layers: list[ConvLayer] = []
    skipped: list[tuple[str, str]] = []
    convs: list[ConvNode] = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or not is_conv(node.target):
            continue
        module = module_of(node)
        conv = conv_args(node)
        x_shape = tuple(node.args[0].meta["tensor_meta"].shape)
        w_shape = tuple(node.args[1].meta["tensor_meta"].shape)
        if len(x_shape) != 4:
            skipped.append((module, f"{len(x_shape) - 2}-D conv: only 2-D convs are workloads"))
            continue
        if conv["transposed"]:
            skipped.append((module, "transposed conv: not a conv2d workload"))
            continue
        kh, kw = w_shape[2], w_shape[3]
        pad = padding_pair(conv["padding"], conv["dilation"], (kh, kw), conv["stride"])
        if pad is None:
            skipped.append((module, f"asymmetric padding {conv['padding']!r}: not a conv2d workload"))
            convs.append(ConvNode(module, None, skipped[-1][1]))
            continue
        n, ci, h, w = x_shape
        (dh, dw), groups = conv["dilation"], int(conv["groups"])
        workload = Conv2dWorkload(n, h, w, ci, w_shape[0], kh, kw, *conv["stride"], *pad, g=groups, dh=dh, dw=dw)
        layers.append(ConvLayer(workload, 1, (module,)))
        convs.append(ConvNode(module, layers[-1]))
    if not layers and not skipped:
        raise WorkloadError(f"model {label} has no conv layers")
    net_name = name or label
    return Extraction(Network(net_name, input_shape, merge_layers(layers, prefix=net_name), label), skipped, convs)


def load_network(model: str, input_shape: tuple[int, int, int, int] | None = None) -> Network:
    """A built-in network by name (at another ``input_shape``: traced from its PyTorch model), else the
    network extracted from the PyTorch model ``model``."""
    from toolkit.workloads.networks import NETWORKS, get_network

    if model.strip().lower().replace("-", "_") in NETWORKS:
        net = get_network(model)
        if input_shape is None or tuple(input_shape) == tuple(net.input_shape):
            return net
    return extract(model, input_shape or (1, 3, 224, 224)).network
