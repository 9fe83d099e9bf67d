"""Loading a PyTorch model for tracing: a built-in network, a ``.pt2`` archive, a TorchScript file, a
``module:factory`` or ``file.py:factory``, or an ``nn.Module``, as one ``torch.export`` program
(:class:`LoadedModel`).

A file that is plainly no model (a ``.pt2`` that is no zip archive, a Python file without its factory, a
``torch.save`` checkpoint, anything that is no zip archive) is refused before torch is imported; loading a model
file warns (:class:`UntrustedModelWarning`) that torch runs the Python pickled in it; torch's own log lines and
printed tracebacks are silenced so that a failure ends as one line.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.errors import WorkloadError


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
    refuse_plain_non_models(model)
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
def quiet_torch() -> Iterator[None]:
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
            with quiet_torch():
                return torch.export.load(str(path)), path.stem, "pt2", _file_digest(path)
        except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad archive
            raise WorkloadError(f"{text} is not a torch.export archive: {first_line(exc)}; save the model with "
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


def refuse_plain_non_models(model: Any) -> None:
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
        why = f"not a zip archive ({first_line(exc)})"
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
                                f"{other[0] or 'itself'} is a {other[1]} (torch.export: {first_line(exc)})") from None
        shape = ",".join(map(str, example.shape))
        raise WorkloadError(f"torch.export cannot trace {label} on an input of shape {shape}: {first_line(exc)}; "
                            "pass the --input-shape the model takes") from None


def _torchscript(path: Path, example: Any) -> Any:
    import torch
    from torch._export.converter import TS2EPConverter

    try:
        script = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(
            f"{path} is not a TorchScript file ({first_line(exc)}); .pt2 files must end in .pt2"
        ) from None
    try:
        return TS2EPConverter(script, (example,)).convert()
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"cannot convert TorchScript {path} to a graph: {first_line(exc)}") from None


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
            raise WorkloadError(f"cannot import {mod_name}: {first_line(exc)}") from None
        obj = getattr(mod, attr, None)
        if obj is None:
            raise WorkloadError(f"{mod_name} has no attribute {attr!r}")
        if not isinstance(obj, torch.nn.Module):
            try:
                obj = obj()
            except Exception as exc:  # noqa: BLE001
                raise WorkloadError(f"{mod_name}:{attr}() failed: {first_line(exc)}") from None
    finally:
        sys.path.remove(folder)
    if not isinstance(obj, torch.nn.Module):
        raise WorkloadError(f"{mod_name}:{attr} must be an nn.Module or return one, got {type(obj).__name__}")
    return obj, getattr(mod, "__file__", None)












def first_line(exc: BaseException) -> str:
    """The first line of what went wrong: the underlying cause when torch wraps it (ShapeProp), never torch's
    pointer to warnings it printed (edgetune silences them)."""
    while exc.__cause__ is not None and str(exc).startswith("ShapeProp error"):
        exc = exc.__cause__
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return "its content cannot be read" if "check the warnings above" in line else line
