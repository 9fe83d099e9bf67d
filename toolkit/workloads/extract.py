"""Conv2d workloads of a PyTorch model, found by tracing its graph.

A model is a ``torch.export`` archive (``.pt2``), a TorchScript file (anything else on disk,
converted with torch's ``TS2EPConverter``), an importable ``module:factory`` (``pkg.mod:make``
or ``path/to/file.py:make``; the factory returns an ``nn.Module`` and is exported with
``torch.export``), or an ``nn.Module``. The graph is run once through
``torch.fx.passes.shape_prop.ShapeProp`` on fake tensors (shapes only, no arithmetic) of the
given input shape; every
``aten.conv2d``/``aten.convolution`` node becomes a :class:`~toolkit.workloads.networks.ConvLayer`
(identical shapes merged, with the module paths that use them). Grouped, dilated and
transposed convs are reported with the reason they are not workloads.

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

import contextlib
import importlib
import importlib.util
import io
import json
import math
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from toolkit.errors import WorkloadError
from toolkit.workloads.aten import conv_args, is_conv, module_of, padding_pair
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
    """Every 2-D conv of the graph in order (grouped and dilated ones included, unmerged)."""

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
    _refuse_plain_non_models(model)
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
            with torch.no_grad(), _quiet_torch():
                ShapeProp(gm, fake_mode=FakeTensorMode(allow_non_fake_inputs=True)).propagate(example)
        except Exception as exc:  # noqa: BLE001 - any failure of the model on this input is the user's to fix
            raise WorkloadError(
                f"model {label} does not run on input shape {','.join(map(str, input_shape))}: "
                f"{_first_line(exc)}; pass the --input-shape it was exported for"
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
        workload = Conv2dWorkload(n, h, w, ci, w_shape[0], kh, kw, *conv["stride"], *pad)
        layers.append(ConvLayer(workload, 1, conv["groups"], tuple(conv["dilation"]), (module,)))
        convs.append(ConvNode(module, layers[-1]))
    if not layers and not skipped:
        raise WorkloadError(f"model {label} has no conv layers")
    net_name = name or label
    return Extraction(Network(net_name, input_shape, merge_layers(layers, prefix=net_name), label), skipped, convs)


@dataclass
class LoadedModel:
    """A PyTorch model traced whole: its ``torch.export`` program, a label and where it came from."""

    program: Any
    """The ``torch.export.ExportedProgram`` (weights included)."""
    label: str
    source: dict[str, Any]
    """``{"model": what the user gave, "kind": builtin|pt2|torchscript|factory|module, "sha256": the file's digest
    (a factory: its module's file), "weights_sha256": the digest of every weight and buffer, in order}``."""


def load_model(model: Any, input_shape: tuple[int, int, int, int], *, seed: int = 0) -> LoadedModel:
    """Trace ``model`` (a built-in name, a ``.pt2``/TorchScript path, ``module:factory`` or an ``nn.Module``)
    for ``input_shape``; built-in networks get weights drawn from ``seed``."""
    _refuse_plain_non_models(model)
    import torch

    from toolkit.workloads.zoo import ZOO, zoo_model

    device = next(model.parameters(), torch.zeros(0)).device if isinstance(model, torch.nn.Module) else "cpu"
    example = torch.zeros(input_shape, device=device)   # a module built on "meta" needs no weights
    text = None if isinstance(model, torch.nn.Module) else str(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # torch-internal deprecations, not the user's
        if text is None:
            label = type(model).__name__
            program, kind, digest = _export(model, example, label), "module", None
        elif text.strip().lower().replace("-", "_") in ZOO:
            label = text.strip().lower().replace("-", "_")
            program, kind, digest = _export(zoo_model(label, seed), example, label), "builtin", None
        else:
            program, label, kind, digest = _program(text, example)
    return LoadedModel(program, label, {"model": text or label, "kind": kind, "sha256": digest,
                                        "weights_sha256": _weights_digest(program)})


class UntrustedModelWarning(UserWarning):
    """A model file is being loaded: torch runs the Python pickled in it."""


@contextlib.contextmanager
def _quiet_torch() -> Iterator[None]:
    """torch's own log lines and the tracebacks it prints silenced: its failures end as one edgetune line."""
    import logging

    loggers = [logging.getLogger(name) for name in ("torch", "torch.export", "torch.fx", "torch._export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _warn_untrusted(path: Path) -> None:
    warnings.warn(f"loading {path} runs the Python code pickled in it (torch's format): load only model files "
                  "you trust", UntrustedModelWarning, stacklevel=3)


def _program(text: str, example: Any) -> tuple[Any, str, str, str | None]:
    """(exported program, label, kind, file sha256) of a model path or ``module:factory``."""
    import torch

    path = Path(text)
    if path.suffix == ".pt2":
        if not path.is_file():
            raise WorkloadError(f"model file {text} does not exist")
        _warn_untrusted(path)
        try:
            with _quiet_torch():
                return torch.export.load(str(path)), path.stem, "pt2", _file_digest(path)
        except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad archive
            raise WorkloadError(f"{text} is not a torch.export archive: {_first_line(exc)}; save the model with "
                                "torch.export.save") from None
    if path.is_file():
        _refuse_non_model(path)
        _warn_untrusted(path)
        return _torchscript(path, example), path.stem, "torchscript", _file_digest(path)
    if ":" in text:
        mod_name, _, attr = text.rpartition(":")
        module, file = _factory(mod_name, attr)
        return _export(module, example, attr), attr, "factory", _file_digest(Path(file)) if file else None
    raise WorkloadError(
        f"model {text!r} is neither a file, a built-in network nor module:factory; give a .pt2 "
        "(torch.export.save), a TorchScript file (torch.jit.save) or e.g. mypkg.models:make_net"
    )


def _refuse_plain_non_models(model: Any) -> None:
    """Refuse a model file that is plainly not one (a ``.pt2`` that is no zip archive or an empty one, a Python
    file, a ``torch.save`` checkpoint) before torch is imported: a bad file costs milliseconds, not seconds."""
    import zipfile

    if not isinstance(model, (str, Path)):
        return
    path = Path(model)
    if path.suffix != ".pt2":
        if path.is_file():
            _refuse_non_model(path)
        return
    if not path.is_file():
        raise WorkloadError(f"model file {model} does not exist")
    try:
        names = zipfile.ZipFile(path).namelist()
        why = "" if names else "an empty zip archive"
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        why = f"not a zip archive ({_first_line(exc)})"
    if why:
        raise WorkloadError(f"{model} is not a torch.export archive: {why}; save the model with torch.export.save")


def _refuse_non_model(path: Path) -> None:
    """A Python file without its factory, a file that is no zip archive (so no TorchScript file), or a ``torch.save``
    checkpoint (weights, not a graph), said as such."""
    import zipfile

    if path.suffix == ".py":
        raise WorkloadError(f"{path} is a Python file; name the function in it that builds the model: "
                            f"{path}:make_net (file.py:factory)")
    try:
        names = zipfile.ZipFile(path).namelist() if zipfile.is_zipfile(path) else None
        legacy = names is None and path.read_bytes()[:2] == b"\x80\x02"
    except (OSError, zipfile.BadZipFile):
        return
    if names is None and not legacy:      # torch.jit.save and torch.export.save both write zip archives
        raise WorkloadError(f"{path} is not a model file (not a zip archive: neither a torch.export archive nor a "
                            "TorchScript file); give a .pt2 (torch.export.save), a TorchScript file (torch.jit.save) "
                            "or file.py:factory")
    scripted = names is not None and any(n.endswith("constants.pkl") or "/code/" in n for n in names)
    if legacy or (names is not None and not scripted and any(n.endswith("data.pkl") for n in names)):
        raise WorkloadError(f"{path} is a torch.save checkpoint (a state_dict or a pickled module: weights, not a "
                            "graph edgetune can trace); save the model with torch.export.save(torch.export.export("
                            "model, (x,)), 'model.pt2') or pass file.py:factory")


def _file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _weights_digest(program: Any) -> str | None:
    """sha256 of the program's weights and buffers (names, shapes and bytes, in order); ``None`` on "meta"."""
    import hashlib

    h = hashlib.sha256()
    for name, tensor in program.state_dict.items():
        if tensor.device.type == "meta":
            return None
        h.update(f"{name}:{list(tensor.shape)}:{tensor.dtype};".encode())
        h.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def _export(module: Any, example: Any, label: str) -> Any:
    import torch

    module.eval()
    try:
        return torch.export.export(module, (example,), strict=False)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many types
        other = next(((name, type(m).__name__) for name, m in module.named_modules()
                      if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv3d))), None)
        if other is not None:      # the likely cause: a 1-D or 3-D conv given a 4-D NCHW input
            raise WorkloadError(f"{other[1]} is not supported: edgetune tunes 2-D convs, and {label}'s layer "
                                f"{other[0] or 'itself'} is a {other[1]} (torch.export: {_first_line(exc)})") from None
        shape = ",".join(map(str, example.shape))
        raise WorkloadError(f"torch.export cannot trace {label} on an input of shape {shape}: {_first_line(exc)}; "
                            "pass the --input-shape the model takes") from None


def _torchscript(path: Path, example: Any) -> Any:
    import torch
    from torch._export.converter import TS2EPConverter

    try:
        script = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(
            f"{path} is not a TorchScript file ({_first_line(exc)}); .pt2 files must end in .pt2"
        ) from None
    try:
        return TS2EPConverter(script, (example,)).convert()
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"cannot convert TorchScript {path} to a graph: {_first_line(exc)}") from None


def _factory(mod_name: str, attr: str) -> tuple[Any, str | None]:
    """The module ``mod_name:attr`` makes, and the file it was defined in (``None`` if unknown). A file's own
    folder (a module's: the working folder) is first on ``sys.path`` while it loads and builds the model, as
    ``python file.py`` would have it, so it imports its sibling modules."""
    import torch

    is_file = mod_name.endswith(".py")
    folder = str(Path(mod_name).resolve().parent if is_file else Path.cwd())
    sys.path.insert(0, folder)
    try:
        try:
            if is_file:
                spec = importlib.util.spec_from_file_location(Path(mod_name).stem, mod_name)
                if spec is None or spec.loader is None or not Path(mod_name).is_file():
                    raise ImportError(f"no file {mod_name}")
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
            else:
                mod = importlib.import_module(mod_name)
        except Exception as exc:  # noqa: BLE001 - user code may raise anything on import
            raise WorkloadError(f"cannot import {mod_name}: {_first_line(exc)}") from None
        obj = getattr(mod, attr, None)
        if obj is None:
            raise WorkloadError(f"{mod_name} has no attribute {attr!r}")
        if not isinstance(obj, torch.nn.Module):
            try:
                obj = obj()
            except Exception as exc:  # noqa: BLE001
                raise WorkloadError(f"{mod_name}:{attr}() failed: {_first_line(exc)}") from None
    finally:
        sys.path.remove(folder)
    if not isinstance(obj, torch.nn.Module):
        raise WorkloadError(f"{mod_name}:{attr} must be an nn.Module or return one, got {type(obj).__name__}")
    return obj, getattr(mod, "__file__", None)












def _first_line(exc: BaseException) -> str:
    """The first line of what went wrong: the underlying cause when torch wraps it (ShapeProp), never torch's
    pointer to warnings it printed (edgetune silences them)."""
    while exc.__cause__ is not None and str(exc).startswith("ShapeProp error"):
        exc = exc.__cause__
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return "its content cannot be read" if "check the warnings above" in line else line


def load_network(model: str, input_shape: tuple[int, int, int, int] | None = None) -> Network:
    """A built-in network by name (at another ``input_shape``: traced from its PyTorch model), else the
    network extracted from the PyTorch model ``model``."""
    from toolkit.workloads.networks import NETWORKS, get_network

    if model.strip().lower().replace("-", "_") in NETWORKS:
        net = get_network(model)
        if input_shape is None or tuple(input_shape) == tuple(net.input_shape):
            return net
    return extract(model, input_shape or (1, 3, 224, 224)).network
