"""Whole-model exports: a PyTorch model compiled for a board, every conv it has a record for tuned.

:func:`export_model` traces the model, picks the best valid record of each conv shape from the logs given
(a network log, layer logs, or none), lets the board family's backend compile the whole model (the shapes
without a record get the template's fallback config) and writes a package: the compiled model, a library
of its conv kernels alone (for per-layer timing), the logs, ``manifest.json`` with a ``model`` section
(inputs, outputs, the model's source and digests, what every conv got) and a README.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.backends import backend_for
from toolkit.boards import Board, BoardProfile, Inventory
from toolkit.errors import ExportError
from toolkit.export.readme import model_readme
from toolkit.manifest import LOG_DIR, README, ConvPlan, ExportManifest, sha256_file
from toolkit.export.run import reference_outputs
from toolkit.backends.registry import tuned_profile
from toolkit.export.write import record_config, registered_board, staged, target_profile
from toolkit.tuning.journal import Record, best_per_workload, stream_log
from toolkit.workloads import Conv2dWorkload
from toolkit.workloads.extract import Extraction, extract
from toolkit.workloads.model_files import LoadedModel, load_model

MODEL_KIND = "model"


def export_model(model: Any, out_dir: str | Path, board: str | Board | BoardProfile, *,
                 logs: Sequence[str | Path] = (), input_shape: tuple[int, int, int, int] = (1, 3, 224, 224),
                 seed: int = 0, calibration: np.ndarray | None = None, inventory: Inventory | None = None,
                 force: bool = False, check: bool = True,
                 progress: Callable[[str], None] | None = None) -> ExportManifest:
    """Compile ``model`` for ``board`` with the best record of each conv shape in ``logs`` into ``out_dir``.

    ``model``: a built-in network (its weights drawn from ``seed``), a ``.pt2`` or TorchScript file,
    ``module:factory`` or an ``nn.Module``; ``input_shape`` its input. ``out_dir`` must be new or empty
    (``force`` replaces an earlier export). ``calibration``: inputs (stacked on axis 0) an int8 model (VTA) is
    quantised on; without them it is calibrated on synthetic inputs, and the manifest says so. With ``check``
    the built model runs once on a seeded input and is compared with PyTorch's output before anything is written
    (where this machine can run it; the manifest's ``check`` says what was done): a model that differs is an
    :class:`ExportError` naming the first op that differs. ``progress(what)`` is told what is being built.
    """
    name, profile = target_profile(board, inventory)
    backend = backend_for(profile)
    backend.check_model_target(profile)
    registered = board if isinstance(board, Board) else registered_board(name, inventory)
    best, log_files, elsewhere = _best_records(logs, profile)
    if progress is not None:
        progress("the model's graph (torch.export)")
    loaded = load_model(model, input_shape, seed=seed)
    extraction = extract(loaded, input_shape)
    plans, unused = plan_convs(extraction, backend, profile, best)
    outputs = _outputs(loaded, input_shape)

    def fill(stage: Path) -> ExportManifest:
        build = backend.compile_model(loaded.program, profile, plans, stage, calibration=calibration,
                                      progress=progress)
        checked = {"checked": False, "why": "--no-check"}
        if check:
            if progress is not None:
                progress("a run of the model to check it against PyTorch")
            x = np.random.default_rng(seed).standard_normal(input_shape).astype(np.float32)
            checked = backend.check_model_build(stage, loaded.program, profile, plans, x,
                                                reference_outputs(loaded, x), board=registered, on_step=progress)
        (stage / LOG_DIR).mkdir()
        copied = []
        for i, (log, _) in enumerate(log_files):
            rel = f"{LOG_DIR}/{i}-{log.name}"
            shutil.copyfile(log, stage / rel)
            copied.append({"file": rel, "sha256": sha256_file(log), "source": str(log)})
        section = {
            "files": build.files,
            "source": {**loaded.source, "seed": seed if loaded.source["kind"] == "builtin" else None},
            "inputs": [{"name": _input_name(loaded), "shape": list(input_shape), "dtype": "float32"}],
            "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs],
            **build.extra, "convs": [p.to_json() for p in plans], "unused_records": unused,
            "tuned_elsewhere": elsewhere, "check": checked,
            "skipped": [{"module": m, "why": why} for m, why in extraction.skipped]}
        tuned_on = _tuned_on(log_files)
        manifest = ExportManifest(
            kind=backend.model_kind, board=name, board_type=profile.name, family=profile.family, arch=profile.arch,
            target=json.loads(json.dumps(profile.target)), hardware=backend.hardware(profile),
            bitstream=backend.bitstream(profile), log={"files": copied}, tuned_on=tuned_on, kernels=[],
            model=section)
        (stage / README).write_text(model_readme(manifest, backend))
        return manifest

    return staged(Path(out_dir), force, fill)


def _best_records(logs: Sequence[str | Path], profile: BoardProfile
                  ) -> tuple[dict[str, tuple[Record, Path]], list[tuple[Path, Any]], list[dict[str, str]]]:
    """The best valid record per workload over ``logs`` (each with its log), refusing a log of another family;
    the logs (with their headers), and those tuned on other hardware of the family (log, what differs)."""
    backend = backend_for(profile)
    best: dict[str, tuple[Record, Path]] = {}
    files, elsewhere = [], []
    for log in map(Path, logs):
        header, records = stream_log(log)
        on = header.tuned_on()
        tuned_type, tuned_target, tuned = on.board_type, on.target, tuned_profile(on, log)
        if backend_for(tuned) is not backend:
            raise ExportError(f"{log} was tuned on a {tuned.family} board ({tuned_type}); a model for "
                              f"{profile.name} ({profile.family}) takes logs of {profile.family} boards: drop it "
                              "or tune the model on this board (`edgetune tune --model`)")
        backend.check_export_target(profile, tuned, profile.name, log)
        why = backend.tuned_elsewhere(profile, tuned_target if isinstance(tuned_target, dict) else {})
        if why:
            elsewhere.append({"log": log.name, "why": why})
        files.append((log, header))
        for key, rec in best_per_workload(records).items():
            if key not in best or rec.seconds < best[key][0].seconds:
                best[key] = (rec, log)
    return best, files, elsewhere


def plan_convs(extraction: Extraction, backend: Any, profile: BoardProfile,
               best: dict[str, tuple[Record, Path]]) -> tuple[list[ConvPlan], list[dict[str, Any]]]:
    """The plan of each conv of the model (graph order), and the tuned shapes the model does not have."""
    from toolkit.tuning.journal import workload_key

    plans = []
    used: set[str] = set()
    for node in extraction.convs:
        layer = node.layer
        why = node.reason if layer is None else backend.model_conv_refusal(layer, profile)
        if why:
            other = backend.model_other_schedule
            plans.append(ConvPlan(node.module, layer.workload if layer else None, other,
                                      f"{why}: " + ("TVM's default lowering" if other == "tvm" else "int8 on the CPU")))
            continue
        wl = backend.model_workload(layer, profile)
        key = workload_key(wl.to_dict())
        template = backend.template(wl, profile)
        if key in best:
            rec, log = best[key]
            if rec.template and rec.template.get("template") not in (None, template.name):
                raise ExportError(f"{log}: the record of {wl.spec()} is of template {rec.template.get('template')}, "
                                  f"the board's is {template.name}; tune the model on this board")
            config = record_config(template, rec, log)
            used.add(key)
            plans.append(ConvPlan(node.module, wl, "tuned", f"trial {rec.trial + 1} of {log.name}",
                                      {"log": log.name, "trial": rec.trial, "index": config.index,
                                       "config": config.values, "latency_s": rec.seconds, "tuner": rec.tuner},
                                      template, config))
        else:
            config = backend.model_default_config(template)
            if config is None:
                raise ExportError(f"{wl.spec()} has no record and the {template.name} template no fallback config; "
                                  "tune the model first (`edgetune tune --model`)")
            plans.append(ConvPlan(node.module, wl, "fallback", "no record: untuned config",
                                      None, template, config))
    if best and not used:
        shapes = ", ".join(Conv2dWorkload.from_dict(r.workload).spec() for r, _ in list(best.values())[:3])
        at = ",".join(map(str, extraction.network.input_shape))
        raise ExportError(f"none of the logs' tuned shapes ({shapes}{' ...' if len(best) > 3 else ''}) is a conv "
                          f"of this model at input shape {at}; give the --input-shape the logs were tuned for, or "
                          "the logs of this model (`edgetune tune --model` writes one)")
    unused = [{"workload": Conv2dWorkload.from_dict(r.workload).spec(), "log": log.name}
              for key, (r, log) in best.items() if key not in used]
    return plans, unused


def _outputs(loaded: LoadedModel, input_shape: tuple[int, ...]) -> list[np.ndarray]:
    """The model's outputs on zeros (their shapes and dtypes), computed by PyTorch."""
    return reference_outputs(loaded, np.zeros(input_shape, dtype=np.float32))


def _input_name(loaded: LoadedModel) -> str:
    inputs = loaded.program.graph_signature.user_inputs
    if len(inputs) != 1:
        raise ExportError(f"model {loaded.label} takes {len(inputs)} inputs; whole-model exports take models of "
                          "one input tensor")
    return str(inputs[0])


def _tuned_on(log_files: list[tuple[Path, Any]]) -> dict[str, Any]:
    """The boards the logs were tuned on (the first one's target)."""
    if not log_files:
        return {"board": None, "board_type": None, "target": None}
    boards = [header.tuned_on() for _, header in log_files]
    return {"board": ", ".join(dict.fromkeys(b.board for b in boards)),
            "board_type": ", ".join(dict.fromkeys(b.board_type for b in boards)), "target": boards[0].target}
