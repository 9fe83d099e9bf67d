"""Deployable exports of tuned kernels, and running them on a board or the simulator.

:func:`export` takes the best valid record per workload of a tuning log, rebuilds it and writes
a folder a board can use without edgetune's compiler:

* CPU/GPU boards: one TVM shared library per workload (``kernels/<label>.so``), linked by the
  board profile's cross compiler, for ``tvm.runtime.load_module`` on the board;
* VTA boards: per workload the program file (``kernels/<label>.vtaprog``: instructions, micro-ops,
  DRAM layout), the raw ``.insns.bin``/``.uops.bin`` images and ``.json`` parameters (packing
  layouts, requantisation shift/bias/clip, DRAM region offsets);
* ``manifest.json`` (:class:`ExportManifest`), the tuning log (``tuning-log.jsonl``) and a README.

:func:`load_export` reads such a folder back (checking every file's sha256); :meth:`Export.run`
runs a kernel on a board over TVM RPC (``local``: a loopback tracker + server), on a VTA agent, or
on the in-process simulator (``vta-fsim``), and checks its output against the numpy reference.

>>> ex = export("demo-out/logs/vta-fsim/resnet18.C2.jsonl", "demo-out/export")  # doctest: +SKIP
>>> load_export("demo-out/export").run("vta-fsim").correct                        # doctest: +SKIP
True
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolkit import __version__
from toolkit.boards import Board, BoardProfile, Inventory, load_profile, resolve_board
from toolkit.errors import BoardError, EdgetuneError, LogError
from toolkit.tuning.records import Record, best_per_workload, read_log, tvm_version
from toolkit.tuning.metaschedule import TraceTemplate, is_trace_config
from toolkit.tuning.template import BuildError, Template
from toolkit.workloads import Conv2dWorkload, parse_workload

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
LOG_FILE = "tuning-log.jsonl"
README = "README.md"
KERNEL_DIR = "kernels"
VTA_CLIP = (0, 127)
"""Requantisation clip of edgetune's VTA conv2d: ``MIN 127`` then ``MAX 0``."""


class ExportError(EdgetuneError):
    """An export that cannot be written, read or run (bad log, wrong board type, corrupt folder)."""


# ---- manifest -----------------------------------------------------------------------------------
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
    edgetune: str = __version__
    tvm: str = field(default_factory=tvm_version)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
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
        if not kernels:
            raise ExportError(f"{where}: the export holds no kernel; re-export the folder")
        fields_ = {k: obj[k] for k in MANIFEST_KEYS if k != "kernels"}
        return cls(kernels=kernels, **fields_)


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


# ---- export -------------------------------------------------------------------------------------
def _log_board(task: dict[str, Any]) -> tuple[str, str, Any]:
    """(board, board type, target) of a log header's task (one task, or a network's tasks)."""
    first = task.get("tasks", [task])[0] if task.get("tasks") else task
    board = str(task.get("board") or first.get("board") or "")
    board_type = first.get("board_type")
    if not board_type:
        try:
            board_type = resolve_board(board).profile.name
        except BoardError:
            raise LogError(f"the log header names board {board!r} but no board type; pass --board TYPE") from None
    return board, str(board_type), first.get("target")


def _target_profile(board: str | Board | BoardProfile, inventory: Inventory | None) -> tuple[str, BoardProfile]:
    """(name, profile) of the board (name or board type) an export is made for."""
    if isinstance(board, BoardProfile):
        return board.name, board
    if isinstance(board, Board):
        return board.name, board.profile
    try:
        b = resolve_board(board, inventory)
        return b.name, b.profile
    except BoardError as exc:
        try:
            return board, load_profile(board)
        except BoardError:
            raise BoardError(f"{exc}; or give a board type") from None


def _tuned_profile(board_type: str, task: dict[str, Any], log: Path) -> BoardProfile:
    """The profile a log was tuned with: its board type, with the VTA preset its header's hardware names
    (``edgetune tune --vta-config zcu102`` on ``vta-fsim`` logs the zcu102 config)."""
    from toolkit.vta.config import preset_name

    profile = load_profile(board_type)
    first = task.get("tasks", [task])[0] if task.get("tasks") else task
    hw = first.get("hw")
    if profile.family != "vta" or not isinstance(hw, dict) or hw == _vta_hw(profile):
        return profile
    preset = preset_name(hw)
    if preset is not None:
        return dataclasses.replace(profile, vta={**profile.vta, "preset": preset})
    raise ExportError(f"{log} was tuned for a VTA config that matches no known preset; tune again with this "
                      f"edgetune version")


def _vta_hw(profile: BoardProfile) -> dict[str, Any]:
    from toolkit.vta.config import get_preset

    return get_preset(profile.vta["preset"]).to_json()


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_")


def _select(records: list[Record], workloads: Sequence[str | Conv2dWorkload] | None, log: Path) -> list[Record]:
    """Best valid record per workload (in first-seen order), optionally only ``workloads``."""
    if not records:
        raise ExportError(f"tuning log {log} has no records (only its header); tune first, then export")
    best = best_per_workload(records)
    if not best:
        errors: dict[str, int] = {}
        for r in records:
            errors[r.error or "no_cost"] = errors.get(r.error or "no_cost", 0) + 1
        why = ", ".join(f"{n} {e}" for e, n in sorted(errors.items()))
        raise ExportError(f"tuning log {log} has no valid record ({len(records)} trials, all failed: {why}); "
                          "nothing to export: tune longer or fix the board")
    if not workloads:
        return list(best.values())
    picked = []
    for spec in workloads:
        wl = spec if isinstance(spec, Conv2dWorkload) else parse_workload(spec)
        hit = next((r for r in best.values() if Conv2dWorkload.from_dict(r.workload) == wl), None)
        if hit is None:
            known = ", ".join(Conv2dWorkload.from_dict(r.workload).label for r in best.values())
            raise ExportError(f"tuning log {log} has no valid record of workload {wl.label}; it has: {known}")
        picked.append(hit)
    return picked


def _template(record: Record, profile: BoardProfile) -> Template:
    from toolkit.templates import template_for

    options = {k: v for k, v in (record.template or {}).items() if k != "template"}
    return template_for(Conv2dWorkload.from_dict(record.workload), profile, **options)


def _config(template: Template, record: Record, log: Path) -> Any:
    """The record's config as a point of ``template``'s space (its values must match the index)."""
    from toolkit.tuning.space import Config

    space = template.space()
    try:
        index = record.index if record.index is not None else space.index_of(record.config)
        config = space.get(index)
    except (EdgetuneError, IndexError, ValueError) as exc:
        raise ExportError(f"{log}: the best config of {template.workload.label} is not in the "
                          f"{template.name} space ({exc}); was it tuned with another edgetune version?") from None
    if json.dumps(config.values, sort_keys=True) != json.dumps(record.config, sort_keys=True):
        raise ExportError(f"{log}: config #{index} of {template.workload.label} differs from the template's; "
                          "the log comes from another edgetune version: tune again")
    return Config(index, config.values)


def _cpu_signature(template: Template) -> dict[str, Any]:
    wl = template.workload
    wlayout = getattr(template, "weight_layout", "OIHW")
    wshape = [wl.ci, wl.kh, wl.kw, wl.co] if wlayout == "IHWO" else [wl.co, wl.ci, wl.kh, wl.kw]
    return {"function": "main", "device": "cuda" if template.profile.family == "cuda" else "cpu",
            "args": [{"name": "data", "shape": [wl.n, wl.ci, wl.h, wl.w], "dtype": "float32", "layout": "NCHW"},
                     {"name": "weight", "shape": wshape, "dtype": "float32", "layout": wlayout},
                     {"name": "conv", "shape": [wl.n, wl.co, wl.oh, wl.ow], "dtype": "float32", "layout": "NCHW",
                      "output": True}],
            "padding": [wl.ph, wl.pw], "stride": [wl.sh, wl.sw]}


def _vta_params(program: Any, wl: Conv2dWorkload) -> dict[str, Any]:
    """Packing, requantisation and DRAM layout a caller needs to drive the program."""
    hw = program.hw
    b, bi, bo = hw.batch, hw.block_in, hw.block_out
    layouts = {"inp": f"NCHW{b}n{bi}c", "wgt": f"OIHW{bo}o{bi}i", "bias": f"NC11{b}n{bo}c", "out": f"NCHW{b}n{bo}c"}
    meaning = {"inp": "data NCHW int8, packed (N/B, C/BI, H, W, B, BI)",
               "wgt": "weight OIHW int8, packed (O/BO, I/BI, KH, KW, BO, BI)",
               "bias": "per-channel int32 bias, packed (N/B, CO/BO, 1, 1, B, BO)",
               "out": "output NCHW int8, packed (N/B, CO/BO, OH, OW, B, BO)",
               "uop": "micro-op image (written by the loader, not by the caller)"}
    return {
        "shift": int(program.meta.get("shift", 8)),
        "bias": bool(program.meta.get("bias", False)),
        "clip": list(VTA_CLIP),
        "formula": "out = clip(((conv_int32(inp, wgt) >> shift) + bias), 0, 127).astype(int8)",
        "stride": [wl.sh, wl.sw], "padding": [wl.ph, wl.pw],
        "regions": {r.name: {"offset": r.offset, "nbytes": r.nbytes, "shape": list(r.shape), "dtype": r.dtype,
                             "layout": layouts.get(r.name, "raw"), "meaning": meaning.get(r.name, "")}
                    for r in program.regions.values()},
        "dram_bytes": program.dram_bytes,
        "instructions": len(program.insns), "insn_bytes": hw.insn_bytes,
        "uops": len(program.uops), "uop_bytes": hw.uop_bytes,
        "hardware": hw.to_json(), "bitstream": hw.bitstream,
    }


def _write_kernel(template: Template, config: Any, folder: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """Build one kernel into ``folder/kernels``; (files by role, signature)."""
    try:
        artifact = template.build(config)
    except BuildError as exc:
        raise ExportError(f"rebuilding {template.workload.label} config #{config.index} failed: {exc}") from None
    slug = _slug(template.workload.label)
    kdir = folder / KERNEL_DIR
    kdir.mkdir(exist_ok=True)
    if artifact.kind == "tvm-library":
        rel = f"{KERNEL_DIR}/{slug}.so"
        (folder / rel).write_bytes(artifact.payload or Path(artifact.path or "").read_bytes())
        return {"library": rel}, _cpu_signature(template)
    from toolkit.vta.isa import encode_insn
    from toolkit.vta.program import Program

    program = Program.from_bytes(artifact.payload)
    files = {"program": f"{KERNEL_DIR}/{slug}.vtaprog", "insns": f"{KERNEL_DIR}/{slug}.insns.bin",
             "uops": f"{KERNEL_DIR}/{slug}.uops.bin", "params": f"{KERNEL_DIR}/{slug}.json"}
    (folder / files["program"]).write_bytes(artifact.payload)
    (folder / files["insns"]).write_bytes(b"".join(encode_insn(i, program.hw) for i in program.insns))
    (folder / files["uops"]).write_bytes(program.uop_words().astype(f"<u{program.hw.uop_bytes}").tobytes())
    params = _vta_params(program, template.workload)
    (folder / files["params"]).write_text(json.dumps(params, indent=2) + "\n")
    signature = {"inputs": [n for n in ("inp", "wgt", "bias") if n in program.regions], "output": "out",
                 **{n: {k: params["regions"][n][k] for k in ("shape", "dtype", "layout")}
                    for n in ("inp", "wgt", "bias", "out") if n in program.regions}}
    return files, signature


def export(log: str | Path, out_dir: str | Path, board: str | Board | BoardProfile | None = None,
           workloads: Sequence[str | Conv2dWorkload] | None = None, *, inventory: Inventory | None = None,
           force: bool = False, progress: Callable[[str], None] | None = None) -> ExportManifest:
    """Export the best valid record per workload of ``log`` into ``out_dir``.

    ``board``: the board (registered name, ``local``/``vta-fsim``) or board type to build for;
    default: the log's board type. It must be of the log's family (and, for VTA, of its hardware
    config). ``workloads`` keeps only those. ``out_dir`` must be empty or absent (``force``
    replaces an earlier export there). ``progress(label)`` is called before each build.
    """
    log = Path(log)
    header, records = read_log(log)
    tuned_board, tuned_type, tuned_target = _log_board(header.task)
    tuned_profile = _tuned_profile(tuned_type, header.task, log)
    name, profile = (tuned_type, tuned_profile) if board is None else _target_profile(board, inventory)
    if profile.family != tuned_profile.family:
        raise ExportError(f"{log} was tuned on a {tuned_profile.family} board ({tuned_type}); it cannot be exported "
                          f"for {name} ({profile.family}): export for a {tuned_profile.family} board")
    hardware = _vta_hw(profile) if profile.family == "vta" else None
    if hardware is not None and hardware != _vta_hw(tuned_profile):
        raise ExportError(f"{log} was tuned for VTA {tuned_profile.vta['bitstream']} ({tuned_type}); {name} has "
                          f"{profile.vta['bitstream']}: tune on {name} first")
    picked = _select(records, workloads, log)

    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not (force and (out_dir / MANIFEST).is_file()):
        raise ExportError(f"export folder {out_dir} is not empty; choose a new --out folder"
                          + (" (--force replaces only an earlier export)" if force else " or pass --force"))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        kernels = []
        for rec in picked:
            template = _template(rec, profile)
            if progress is not None:
                progress(template.workload.label)
            if is_trace_config(rec.config):   # a MetaSchedule record: its trace is applied and built
                from toolkit.tuning.space import Config

                template, config = TraceTemplate(template), Config(-1, rec.config)
            else:
                config = _config(template, rec, log)
            files, signature = _write_kernel(template, config, stage)
            kernels.append(KernelEntry(label=template.workload.label, workload=rec.workload, config=config.values,
                                       index=config.index if config.index >= 0 else None, latency_s=rec.seconds,
                                       tuner=rec.tuner,
                                       template=template.describe(), files=files, signature=signature))
        shutil.copyfile(log, stage / LOG_FILE)
        manifest = ExportManifest(
            kind="vta-program" if profile.family == "vta" else "tvm-library", board=name, board_type=profile.name,
            family=profile.family, arch=profile.arch, target=_plain_target(profile), hardware=hardware,
            bitstream=profile.vta.get("bitstream") if profile.vta else None,
            log={"file": LOG_FILE, "sha256": sha256_file(log), "source": str(log)},
            tuned_on={"board": tuned_board, "board_type": tuned_type, "target": tuned_target}, kernels=kernels)
        (stage / README).write_text(readme(manifest))
        manifest.files = {str(p.relative_to(stage)): sha256_file(p) for p in sorted(stage.rglob("*")) if p.is_file()}
        (stage / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=2) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(stage, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return manifest


def _plain_target(profile: BoardProfile) -> dict[str, Any]:
    return json.loads(json.dumps(profile.target))


# ---- README -------------------------------------------------------------------------------------
def readme(m: ExportManifest) -> str:
    """The folder's README: what is in it and how to load and call it."""
    rows = "\n".join(f"| {k.label} | `{', '.join(k.files.values())}` | {k.latency_s * 1e3:.4f} ms |"
                     for k in m.kernels)
    k0 = m.kernels[0]
    head = (f"# edgetune export: {len(m.kernels)} conv2d kernel(s) for {m.board} ({m.board_type}, {m.arch})\n\n"
            f"Tuned on {m.tuned_on['board']} ({m.tuned_on['board_type']}); edgetune {m.edgetune}, TVM {m.tvm}. "
            f"`manifest.json` lists every file with its sha256; `{LOG_FILE}` is the tuning log it came from.\n\n"
            f"| workload | files | tuned latency |\n|---|---|---|\n{rows}\n\n"
            f"Run and check it: `edgetune run {{this folder}} --board BOARD` (a {m.board_type} board"
            + (" or any board with the same VTA hardware config" if m.family == "vta" else "") + ").\n\n")
    if m.family != "vta":
        args = k0.signature["args"]
        dev = "tvm.cuda(0)" if m.family == "cuda" else "tvm.cpu(0)"
        return head + (
            "## Calling a library on the board (needs only the TVM runtime)\n\n"
            "```python\nimport numpy as np, tvm\n"
            f"mod = tvm.runtime.load_module(\"{k0.files['library']}\")\n"
            f"dev = {dev}\n"
            f"data = tvm.runtime.tensor(np.zeros({tuple(args[0]['shape'])}, \"float32\"), dev)     # NCHW\n"
            f"weight = tvm.runtime.tensor(np.zeros({tuple(args[1]['shape'])}, \"float32\"), dev)   "
            f"# {args[1]['layout']}\n"
            f"out = tvm.runtime.tensor(np.zeros({tuple(args[2]['shape'])}, \"float32\"), dev)      # NCHW\n"
            "mod[\"main\"](data, weight, out)\n```\n\n"
            f"Weights are {args[1]['layout']} (`weight_oihw.transpose(1, 2, 3, 0)` for IHWO). "
            "Over RPC: `remote.upload(path)`, then `remote.load_module(name)`.\n")
    return head + (
        f"## Driving a VTA program ({m.bitstream})\n\n"
        "Per workload: `.vtaprog` (edgetune's program file: hardware config, DRAM layout, instructions, "
        "micro-ops, crc32), the raw instruction stream `.insns.bin` and micro-op image `.uops.bin` exactly as "
        "the FPGA reads them, and `.json` with the packing layouts, the requantisation (shift, bias, clip) and "
        "the byte offset of each DRAM region.\n\n"
        "```python\nfrom toolkit.vta.program import Program\nfrom toolkit.vta.sim import simulate\n"
        f"prog = Program.load(\"{k0.files['program']}\")\n"
        "res = simulate(prog, {\"inp\": packed_data, \"wgt\": packed_weight})  # or the board agent's edgetune.vta.run\n"
        "out = res.outputs[\"out\"].reshape(prog.regions[\"out\"].shape)\n```\n\n"
        "Pack with `toolkit.vta.reference.pack_input` / `pack_weight`, unpack with `unpack_output`. Without "
        "edgetune: place each input at its region offset in one DRAM buffer, the micro-ops at the `uop` region, "
        "and run the instruction stream; instruction DRAM addresses are in element units relative to it.\n")


# ---- loading and running ------------------------------------------------------------------------
@dataclass
class RunResult:
    """One kernel run: outputs by name, mean seconds, whether the output matched the reference."""

    workload: str
    board: str
    outputs: dict[str, np.ndarray]
    seconds: float
    correct: bool | None
    expected_seconds: float
    """The latency in the manifest (measured while tuning, on ``tuned_on``)."""
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "board": self.board, "seconds": self.seconds,
                "manifest_seconds": self.expected_seconds, "correct": self.correct, "message": self.message,
                "outputs": {k: list(v.shape) for k, v in self.outputs.items()}}


def load_export(path: str | Path) -> Export:
    """Read an export folder; :class:`ExportError` if the manifest is bad or a file's sha256 differs."""
    path = Path(path)
    mpath = path / MANIFEST
    try:
        obj = json.loads(mpath.read_text())
    except FileNotFoundError:
        raise ExportError(f"{path} is not an edgetune export (no {MANIFEST}); create one with `edgetune export`")\
            from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExportError(f"{mpath} is unreadable ({exc}); re-export the folder") from None
    manifest = ExportManifest.from_json(obj, str(mpath))
    for rel, digest in manifest.files.items():
        f = path / rel
        if not f.is_file():
            raise ExportError(f"{path}: {rel} listed in the manifest is missing; re-export the folder")
        if sha256_file(f) != digest:
            raise ExportError(f"{path}: {rel} does not match its sha256 in the manifest (modified or corrupt); "
                              "re-export the folder")
    return Export(path, manifest)


@dataclass
class Export:
    """An export folder read back by :func:`load_export`."""

    path: Path
    manifest: ExportManifest

    @property
    def kernels(self) -> list[KernelEntry]:
        return self.manifest.kernels

    def kernel(self, workload: str | Conv2dWorkload | None = None) -> KernelEntry:
        """The kernel of ``workload`` (label or spec); ``None`` when the export holds one."""
        if workload is None:
            if len(self.kernels) > 1:
                raise ExportError(f"{self.path} holds {len(self.kernels)} kernels; pick one with --workload "
                                  f"({', '.join(k.label for k in self.kernels)})")
            return self.kernels[0]
        for k in self.kernels:
            if isinstance(workload, str) and workload == k.label:
                return k
        wl = workload if isinstance(workload, Conv2dWorkload) else parse_workload(workload)
        for k in self.kernels:
            if k.conv2d == wl:
                return k
        raise ExportError(f"{self.path} has no kernel for {wl.label}; it has {', '.join(k.label for k in self.kernels)}")

    def check_board(self, board: Board) -> None:
        """Refuse a board this export cannot run on (other family, architecture, GPU or VTA hardware)."""
        m, p = self.manifest, board.profile
        what = f"this export is for {m.board_type} (" + (f"VTA {m.bitstream})" if m.family == "vta"
                                                         else f"{m.family}, {m.arch})")
        if p.family != m.family:
            kind = "VTA programs" if m.family == "vta" else "TVM libraries"
            raise ExportError(f"{what} and holds {kind}; board {board.name} is a {p.family} board ({p.name}): "
                              f"run it on a {m.family} board, or export the log for {board.name}")
        if m.family == "vta":
            from toolkit.vta.config import preset_name

            needed = preset_name(m.hardware)
            if _vta_hw(p) != m.hardware and p.is_simulator and needed:
                raise ExportError(f"this export is for the VTA config {needed}; board {board.name} simulates "
                                  f"{p.vta.get('preset')}: pass --vta-config {needed}")
            if _vta_hw(p) != m.hardware:
                raise ExportError(f"{what}; board {board.name} ({p.name}) has VTA {p.vta.get('bitstream')}, another "
                                  f"hardware config: export a log tuned for {p.name}")
            return
        if _norm_arch(p.arch) != _norm_arch(m.arch):
            raise ExportError(f"{what}; board {board.name} ({p.name}) is {p.arch}: export for {board.name} with "
                              f"`edgetune export --board {board.name}`")
        host = p.target.get("host", p.target) if m.family == "cuda" else p.target
        built = m.target.get("host", m.target) if m.family == "cuda" else m.target
        if p.name == m.board_type and host.get("mcpu") != built.get("mcpu"):   # `local` on another machine
            raise ExportError(f"{what} built for CPU {built.get('mcpu')}; board {board.name} has CPU "
                              f"{host.get('mcpu')}: export the log again for it")
        if m.family == "cuda" and p.target.get("arch") != m.target.get("arch"):
            raise ExportError(f"{what}, GPU {m.target.get('arch')}; board {board.name} has GPU "
                              f"{p.target.get('arch')}: export for {board.name}")

    def template(self, kernel: KernelEntry, profile: BoardProfile) -> Template:
        """The kernel's template on ``profile`` (inputs and numpy reference)."""
        from toolkit.templates import template_for

        options = {k: v for k, v in kernel.template.items() if k != "template"}
        return template_for(kernel.conv2d, profile, **options)

    def run(self, board: str | Board, inputs: Sequence[np.ndarray] | None = None, check: bool = True, *,
            workload: str | Conv2dWorkload | None = None, seed: int = 0, repeat: int = 3,
            tracker: tuple[str, int] | str | None = None, inventory: Inventory | None = None) -> RunResult:
        """Run one kernel on ``board`` (``inputs`` default: the template's random inputs of ``seed``).

        CPU/GPU boards go through TVM RPC (the built-in ``local`` through a loopback tracker and
        server); ``vta-fsim`` runs in-process; other VTA boards through their agent. ``check``
        compares the output with the numpy reference (bit-exact on VTA, 1e-3 on float32).
        """
        b = board if isinstance(board, Board) else resolve_board(board, inventory)
        self.check_board(b)
        kernel = self.kernel(workload)
        template = self.template(kernel, b.profile)
        if inputs is None:
            inputs = template.make_inputs(np.random.default_rng(seed))
        inputs = self._check_inputs(kernel, list(inputs))
        if self.manifest.family == "vta":
            outputs, seconds = self._run_vta(kernel, b, inputs, repeat, tracker)
        else:
            outputs, seconds = self._run_tvm(kernel, b, inputs, repeat, tracker)
        correct, message = None, ""
        if check:
            correct, message = _compare(outputs["out" if self.manifest.family == "vta" else "conv"],
                                        template.reference(inputs), exact=self.manifest.family == "vta")
        return RunResult(kernel.label, b.name, outputs, seconds, correct, kernel.latency_s, message)

    def run_all(self, board: str | Board, check: bool = True, **kwargs: Any) -> list[RunResult]:
        """:meth:`run` for every kernel."""
        return [self.run(board, check=check, workload=k.label, **kwargs) for k in self.kernels]

    def _check_inputs(self, kernel: KernelEntry, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self.manifest.family == "vta":
            specs = [(n, kernel.signature[n]) for n in kernel.signature["inputs"]]
        else:
            specs = [(a["name"], a) for a in kernel.signature["args"] if not a.get("output")]
        if len(inputs) != len(specs):
            raise ExportError(f"{kernel.label} takes {len(specs)} inputs ({', '.join(n for n, _ in specs)}), "
                              f"got {len(inputs)}")
        out = []
        for (name, spec), x in zip(specs, inputs):
            x = np.asarray(x)
            if list(x.shape) != list(spec["shape"]) or x.dtype != np.dtype(spec["dtype"]):
                raise ExportError(f"input {name} of {kernel.label} must be {spec['dtype']}{spec['shape']} "
                                  f"({spec['layout']}), got {x.dtype}{list(x.shape)}")
            out.append(np.ascontiguousarray(x))
        return out

    def _run_vta(self, kernel: KernelEntry, board: Board, inputs: list[np.ndarray], repeat: int,
                 tracker: tuple[str, int] | str | None) -> tuple[dict[str, np.ndarray], float]:
        from toolkit.vta.errors import VTAError
        from toolkit.vta.program import Program

        path = self.path / kernel.files["program"]
        program = Program.load(path)
        named = dict(zip(kernel.signature["inputs"], inputs))
        shape = program.regions["out"].shape
        if board.profile.is_simulator:
            from toolkit.vta.sim import simulate

            try:
                res = simulate(program, named)
            except VTAError as exc:
                raise ExportError(f"{kernel.label} failed in the simulator: {exc}") from None
            return {"out": np.asarray(res.outputs["out"]).reshape(shape)}, float(res.seconds)
        return _run_vta_agent(board, path.read_bytes(), named, shape, repeat, tracker)

    def _run_tvm(self, kernel: KernelEntry, board: Board, inputs: list[np.ndarray], repeat: int,
                 tracker: tuple[str, int] | str | None) -> tuple[dict[str, np.ndarray], float]:
        import tvm
        from tvm import rpc

        from toolkit.tuning.rpc_runner import board_tracker

        out_spec = next(a for a in kernel.signature["args"] if a.get("output"))
        (host, port), release = board_tracker(board, tracker)
        stage = "connect"
        try:
            sess = rpc.connect_tracker(host, port).request(board.rpc_key, priority=1, session_timeout=120,
                                                           max_retry=2)
            stage = "upload"
            name = f"edgetune-export-{os.getpid()}-{_slug(kernel.label)}.so"
            sess.upload(str(self.path / kernel.files["library"]), name)
            stage = "load"
            mod = sess.load_module(name)
            dev = sess.cuda(0) if self.manifest.family == "cuda" else sess.cpu(0)
            args = [tvm.runtime.tensor(x, dev) for x in inputs]
            out = tvm.runtime.tensor(np.zeros(out_spec["shape"], dtype=out_spec["dtype"]), dev)
            stage = "run"
            mod["main"](*args, out)
            got = out.numpy()
            timer = mod.time_evaluator("main", dev, number=1, repeat=max(1, repeat))
            costs = [float(c) for c in timer(*args, out).results]
        except Exception as exc:  # noqa: BLE001 - TVM raises plain errors for refused sessions, failed loads
            raise BoardError(f"{stage} on board {board.name} (key {board.rpc_key!r}, tracker {host}:{port}) "
                             f"failed: {_last_line(exc)}") from None
        finally:
            if release is not None:
                release()
        return {"conv": got}, sum(costs) / len(costs)


def _run_vta_agent(board: Board, program: bytes, named: dict[str, np.ndarray], shape: tuple, repeat: int,
                   tracker: tuple[str, int] | str | None) -> tuple[dict[str, np.ndarray], float]:
    """Run a program through the board agent's ``edgetune.vta.run`` (see :mod:`toolkit.rpc.agent`)."""
    from tvm import rpc

    from toolkit.rpc.provision import board_state
    from toolkit.rpc.service import tracker_address

    state = board_state(board.name) if tracker is None else None
    if isinstance(tracker, tuple):
        address = (tracker[0], int(tracker[1]))
    elif state:
        address = (state["tracker"][0], int(state["tracker"][1]))
    else:
        address = tracker_address(tracker)
    buf = io.BytesIO()
    np.savez(buf, **named)
    try:
        sess = rpc.connect_tracker(*address).request(board.rpc_key, priority=1, session_timeout=300)
        raw = sess.get_function("edgetune.vta.run")(program, buf.getvalue(), max(1, repeat))
    except Exception as exc:  # noqa: BLE001
        raise BoardError(f"running on board {board.name} (key {board.rpc_key!r}, tracker {address[0]}:"
                         f"{address[1]}) failed: {_last_line(exc)}; check `edgetune board status`") from None
    out = dict(np.load(io.BytesIO(bytes(raw)), allow_pickle=False))
    if "__error__" in out:
        msg = bytes(np.asarray(out["__error__"], dtype=np.uint8)).decode(errors="replace")
        raise ExportError(f"the program failed on board {board.name}: {msg}")
    seconds = [float(s) for s in out["__seconds__"].reshape(-1) if math.isfinite(s)]
    return {"out": out["out"].reshape(shape)}, sum(seconds) / max(1, len(seconds))


def _compare(got: np.ndarray, expected: np.ndarray, exact: bool) -> tuple[bool, str]:
    if got.shape != expected.shape:
        return False, f"output shape {list(got.shape)} != reference {list(expected.shape)}"
    ok = np.array_equal(got, expected) if exact else np.allclose(got, expected, rtol=1e-3, atol=1e-3)
    if ok:
        return True, "bit-exact" if exact else "within rtol 1e-3"
    bad = got != expected if exact else ~np.isclose(got, expected, rtol=1e-3, atol=1e-3)
    return False, f"{int(bad.sum())} of {bad.size} outputs differ from the reference"


def _norm_arch(arch: str) -> str:
    a = arch.lower()
    return {"arm64": "aarch64", "amd64": "x86_64", "armv7": "armv7l", "armhf": "armv7l"}.get(a, a)


def _last_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else type(exc).__name__))[:300]
