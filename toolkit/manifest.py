"""The export manifest (``manifest.json``): what an export folder holds, each file's sha256, and the
checks applied when reading it back."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import ExportError
from toolkit.tuning.journal import tvm_version
from toolkit.version import __version__
from toolkit.workloads import Conv2dWorkload

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
LOG_FILE = "tuning-log.jsonl"
LOG_DIR = "logs"
"""Where a model export keeps the tuning logs its kernels came from."""
README = "README.md"
KERNEL_DIR = "kernels"


# ---- manifest -----------------------------------------------------------------------------------
@dataclass
class ConvPlan:
    """What one conv of a model gets (graph order), from extraction to the built package and its manifest entry.

    Planned once (:func:`toolkit.export.model.plan_convs`): the conv's ``module`` path and ``workload``, its
    ``schedule`` (``tuned``: a record's config; ``fallback``: the template's untuned config; ``tvm``: TVM's own
    lowering; ``cpu``: int8 in numpy on the board's CPU, VTA models) and ``why``, the ``record`` and the
    ``template`` and ``config`` an edgetune kernel is built from (``template`` ``None``: no edgetune kernel).
    The backend's build fills in ``kernel`` (the kernel's function, or the VTA layer, that computes it) and
    ``epilogue`` (what that kernel also computes, in order: ``bias``, ``residual``, ``relu``)."""

    module: str
    workload: Conv2dWorkload | None
    schedule: str
    why: str = ""
    record: dict[str, Any] | None = None
    template: Any = None
    config: Any = None
    kernel: str | None = None
    epilogue: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The conv's entry in the manifest's ``model.convs``."""
        return {"module": self.module, "workload": self.workload.spec() if self.workload else None,
                "schedule": self.schedule, "why": self.why, "kernel": self.kernel, "epilogue": self.epilogue,
                "record": self.record}


@dataclass
class ModelBuild:
    """What a backend's whole-model build wrote: its ``files`` by role (``model``, ``kernels``, ``weights``,
    ``program:<layer>``) and the ``extra`` keys of the manifest's ``model`` section (e.g. ``params``,
    ``calibration``)."""

    files: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class KernelEntry:
    """One exported workload: its best record, its files (role -> path in the folder) and signature."""

    label: str
    workload: dict[str, Any]
    config: dict[str, Any]
    index: int | None
    latency_s: float
    tuner: str
    template: dict[str, Any]
    files: dict[str, str]
    signature: dict[str, Any]

    @property
    def conv2d(self) -> Conv2dWorkload:
        return Conv2dWorkload.from_dict(self.workload)


KERNEL_KEYS: dict[str, type | tuple[type, ...]] = {
    "label": str, "workload": dict, "config": dict, "index": (int, type(None)), "latency_s": (int, float),
    "tuner": str, "template": dict, "files": dict, "signature": dict}
MANIFEST_KEYS: dict[str, type | tuple[type, ...]] = {
    "schema": int, "kind": str, "board": str, "board_type": str, "family": str, "arch": str, "target": dict,
    "hardware": (dict, type(None)), "bitstream": (str, type(None)), "edgetune": str, "tvm": str,
    "created": str, "log": dict, "tuned_on": dict, "kernels": list, "files": dict}
"""Required keys of ``manifest.json`` and of each of its ``kernels``, with their JSON types."""


@dataclass
class ExportManifest:
    """The content of ``manifest.json``. ``files`` maps every other file to its sha256."""

    kind: str                      # "tvm-library" | "vta-program"
    board: str                     # board (or board type) the export was made for
    board_type: str
    family: str
    arch: str
    target: dict[str, Any]
    hardware: dict[str, Any] | None
    bitstream: str | None
    log: dict[str, str]            # {"file", "sha256", "source"}
    tuned_on: dict[str, Any]       # {"board", "board_type", "target"} of the log
    kernels: list[KernelEntry]
    files: dict[str, str] = field(default_factory=dict)
    model: dict[str, Any] | None = None
    """A whole-model export's section (files by role, source, inputs, outputs, what each conv got); ``None``
    for a kernel export."""
    edgetune: str = __version__
    tvm: str = field(default_factory=tvm_version)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["model"] is None:
            del d["model"]
        return {"schema": d.pop("schema"), **d}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> ExportManifest:
        """Validate and parse; :class:`ExportError` naming the first bad key."""
        if not isinstance(obj, dict):
            raise ExportError(f"{where}: not a JSON object; re-export the folder")
        _check_keys(obj, MANIFEST_KEYS, where)
        if obj["schema"] != SCHEMA_VERSION:
            raise ExportError(f"{where}: export schema {obj['schema']} is not supported (this edgetune reads "
                              f"{SCHEMA_VERSION}); re-export with this edgetune")
        kernels = []
        for k, kern in enumerate(obj["kernels"]):
            if not isinstance(kern, dict):
                raise ExportError(f"{where}: kernels[{k}] is not an object; re-export the folder")
            _check_keys(kern, KERNEL_KEYS, f"{where}: kernels[{k}]")
            kernels.append(KernelEntry(**{key: kern[key] for key in KERNEL_KEYS}))
        model = obj.get("model")
        if model is not None:
            _check_model(model, where)
        elif not kernels:
            raise ExportError(f"{where}: the export holds no kernel; re-export the folder")
        fields_ = {k: obj[k] for k in MANIFEST_KEYS if k != "kernels"}
        for rel, digest in fields_["files"].items():
            if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
                raise ExportError(f"{where}: files[{rel!r}] is not a sha256; re-export the folder")
            check_relative(rel, where)
        for kern in kernels:
            for role, rel in kern.files.items():
                if not isinstance(rel, str) or rel not in fields_["files"]:
                    raise ExportError(f"{where}: kernel {kern.label} uses {role} file {rel!r}, which the manifest "
                                      "does not list and hash; re-export the folder")
        for role, rel in (model or {}).get("files", {}).items():
            if not isinstance(rel, str) or rel not in fields_["files"]:
                raise ExportError(f"{where}: the model's {role} file {rel!r} is not listed and hashed in the "
                                  "manifest; re-export the folder")
        return cls(kernels=kernels, model=model, **fields_)


MODEL_KEYS: dict[str, type | tuple[type, ...]] = {
    "files": dict, "source": dict, "inputs": list, "outputs": list, "convs": list}
"""Required keys of a whole-model export's ``model`` section."""


def _check_model(model: Any, where: str) -> None:
    """Refuse a ``model`` section of the wrong shape (a model export's files, inputs and outputs)."""
    if not isinstance(model, dict):
        raise ExportError(f"{where}: key 'model' is not an object; re-export the folder")
    _check_keys(model, MODEL_KEYS, f"{where}: model")
    if "model" not in model["files"]:
        raise ExportError(f"{where}: the model section names no compiled model file; re-export the folder")
    for kind in ("inputs", "outputs"):
        for i, spec in enumerate(model[kind]):
            ok = (isinstance(spec, dict) and isinstance(spec.get("shape"), list)
                  and all(isinstance(d, int) and not isinstance(d, bool) and 0 < d < 1 << 31 for d in spec["shape"])
                  and spec.get("dtype") in ("float32", "float16", "int8", "int32", "int64", "uint8", "bool"))
            if not ok:
                raise ExportError(f"{where}: model {kind}[{i}] is not a tensor description; re-export the folder")
    if len(model["inputs"]) != 1 or not model["outputs"]:
        raise ExportError(f"{where}: a model export takes one input and has outputs; re-export the folder")


_SHA256 = re.compile(r"[0-9a-f]{64}")

MAX_MANIFEST_BYTES = 16 << 20
"""The largest ``manifest.json`` read back."""
MAX_FILE_BYTES = 1 << 30
"""The largest file of an export that is hashed and loaded."""


def check_relative(rel: str, where: str) -> None:
    """Refuse a manifest path that could leave the folder: absolute, with ``..``, empty parts or backslashes."""
    parts = rel.split("/")
    if (not rel or rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts)
            or len(rel) > 255 or rel == MANIFEST):
        raise ExportError(f"{where}: file path {rel[:80]!r} is not a plain path inside the export; re-export "
                          "the folder")


def inside(folder: Path, rel: str, where: str) -> Path:
    """``folder / rel`` when it is a regular file inside ``folder`` reached without symlinks (else
    :class:`ExportError`)."""
    check_relative(rel, where)
    path = folder
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            raise ExportError(f"{where}: {rel} is (or lies under) a symlink; an export holds plain files only: "
                              "re-export the folder")
    if not path.is_file():
        raise ExportError(f"{folder}: {rel} listed in the manifest is missing; re-export the folder")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ExportError(f"{folder}: {rel} is larger than {MAX_FILE_BYTES >> 20} MiB; re-export the folder")
    return path


def _check_keys(obj: dict, keys: dict[str, Any], where: str) -> None:
    for key, typ in keys.items():
        if key not in obj:
            raise ExportError(f"{where}: missing key {key!r}; re-export the folder")
        if not isinstance(obj[key], typ) or isinstance(obj[key], bool) and typ is not bool:
            raise ExportError(f"{where}: key {key!r} has type {type(obj[key]).__name__}; re-export the folder")


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()



