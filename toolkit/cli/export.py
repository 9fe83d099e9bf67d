"""``edgetune export`` (tuning logs -> a deployable folder: kernels, or a whole model) and ``edgetune run`` (run
an export on a board)."""

from __future__ import annotations

from collections import Counter

from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from toolkit import console
from toolkit.cli.app import app
from toolkit.cli.options import (BoardOpt, InputShapeOpt, InventoryOpt, JsonOpt, MinRepeatMsOpt, ModelOpt, NumberOpt,
                                 RepeatOpt, TimeoutOpt, TrackerOpt, VtaConfigOpt, board_from)
from toolkit.backends.base import Agreement
from toolkit.errors import ConfigError
from toolkit.export import export as do_export
from toolkit.export import load_export
from toolkit.export.last_run import record_run
from toolkit.export.model import export_model
from toolkit.export.run import Export, ModelRun
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.workloads.extract import parse_input_shape


RATIO_LIMIT = 100.0
"""A run this many times slower or faster than the manifest's latency is shown as a mismatch, not a ratio."""


def _ratio(seconds: float, expected: float | None) -> str:
    """``seconds`` against the manifest's latency: ``1.03x``, or, beyond :data:`RATIO_LIMIT`, what it means."""
    if not expected:
        return "-"
    ratio = seconds / expected
    if 1 / RATIO_LIMIT <= ratio <= RATIO_LIMIT:
        return f"{ratio:.2f}x"
    return f"over {RATIO_LIMIT:g}x apart: the manifest's latency is from another board or was edited"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4f} ms"


class _Building:
    """A transient progress line started by the first build (after every input was checked)."""

    def __init__(self) -> None:
        self.bar = console.progress(transient=True)
        self.task: int | None = None

    def __call__(self, what: str) -> None:
        if self.task is None:
            self.bar.start()
            self.task = self.bar.add_task("export", total=None, status="")
        self.bar.update(self.task, status=f"building {what}")

    def stop(self) -> None:
        if self.task is not None:
            self.bar.stop()


@app.command("export", rich_help_panel="Deploy")
def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="Export folder to create (must be new or empty).")],
    log: Annotated[Optional[list[Path]], typer.Option(
        "--log", "-l", help="Tuning log (JSONL). Kernels: the one log whose best configs are exported. --model: "
                            "logs whose records tune the model's convs (repeatable; none: every conv untuned).")]
    = None,
    model: ModelOpt = None,
    board: Annotated[Optional[str], typer.Option(
        "--board", "-b", help="Board name or board type to build for (default: the log's board type; --model: "
                              "required).")] = None,
    input_shape: InputShapeOpt = "1,3,224,224",
    seed: Annotated[int, typer.Option(min=0, help="--model of a built-in network: the seed of its weights.")] = 0,
    calibrate: Annotated[Optional[Path], typer.Option(
        "--calibrate", help="--model on a VTA board: a .npy of inputs like the model's (N of them stacked on axis "
                            "0) to quantise it on; without it, synthetic inputs (the manifest says so).")] = None,
    workload: Annotated[Optional[list[str]], typer.Option(
        "--workload", "-w", help="Kernels: export only this workload (name or spec); repeat for several.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an earlier export in --out.")] = False,
    check: Annotated[bool, typer.Option(
        "--check/--no-check", help="--model: run the built model once on a seeded input and compare it with "
                                   "PyTorch before writing anything (where this machine can run it).")] = True,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
) -> None:
    """Export the best valid record per workload of a log (one library or VTA program each), or, with --model, a
    whole PyTorch model compiled for a board with the tuned kernels of its convs."""
    from toolkit.boards import Inventory

    inv = Inventory(inventory) if inventory else None
    logs = list(log or [])
    building = _Building()
    try:
        if model is not None:
            if workload:
                raise ConfigError("--workload picks kernels of a log; with --model every conv of the model is built")
            if board is None:
                raise ConfigError("--model needs --board (the board to compile the model for, e.g. -b local)")
            calibration = _read_npy(calibrate, "--calibrate") if calibrate is not None else None
            manifest = export_model(model, out, board, logs=logs, input_shape=parse_input_shape(input_shape),
                                    seed=seed, calibration=calibration, inventory=inv, force=force,
                                    check=check, progress=building)
        else:
            if calibrate is not None:
                raise ConfigError("--calibrate quantises a whole model; give it with --model")
            if len(logs) != 1:
                raise ConfigError("give one --log to export its kernels (or --model MODEL to export a whole model)")
            manifest = do_export(logs[0], out, board=board, workloads=workload, inventory=inv, force=force,
                                 progress=building)
    finally:
        building.stop()
    if json:
        console.print_json({"out": str(out), **manifest.to_json()})
        return
    where = (f"{manifest.board} ({manifest.board_type}, {manifest.arch}"
             + (f", VTA {manifest.bitstream})" if manifest.bitstream else ")"))
    if manifest.model is not None:
        convs = manifest.model["convs"]
        console.table(f"model {manifest.model['source']['model']} exported to {out} for {where}",
                      ["conv", "workload", "schedule", "tuned latency", "from"],
                      [(c["module"], c["workload"] or "-", c["schedule"],
                        _ms((c["record"] or {}).get("latency_s")), c["why"]) for c in convs])
        others = Counter((v["op"], v["device"], v["why"]) for v in manifest.model.get("vta_layers", [])
                         if v["op"] != "conv")
        if others:
            console.table("the other layers", ["op", "layers", "runs on", "why"],
                          [(op, str(n), "VTA" if device == "vta" else "the board's CPU", why)
                           for (op, device, why), n in others.items()])
        counts = {k: sum(c["schedule"] == k for c in convs) for k in ("tuned", "fallback", "tvm", "cpu")}
        parts = [f"{counts['tuned']} convs tuned", f"{counts['fallback']} with the untuned fallback config",
                 f"{counts['tvm']} by TVM's default lowering", f"{counts['cpu']} int8 on the CPU"]
        console.info(", ".join(p for p in parts if not p.startswith("0 ") or "convs" in p or "fallback" in p)
                     + f"; manifest: {out / 'manifest.json'}; the command took {console.command_seconds():.1f} s")
        checked = manifest.model.get("check") or {}
        if checked.get("checked"):
            console.info(f"checked against PyTorch on a seeded input: {checked['verdict']}")
        elif checked:
            console.warn(f"not checked against PyTorch: {checked['why']}")
        calib = manifest.model.get("calibration") or {}
        if calib.get("source") == "synthetic":
            console.warn(f"calibrated on synthetic inputs: {calib['note']}")
        for other in manifest.model.get("tuned_elsewhere", []):
            console.warn(f"{other['log']} was tuned for {other['why']}: its configs were the fastest there, not "
                         "necessarily here; tune the model on this board (`edgetune tune --model`)")
        for unused in manifest.model["unused_records"]:
            console.info(f"not in the model: tuned shape {unused['workload']} ({unused['log']})")
        return
    console.table(f"exported to {out} for {where}", ["workload", "config", "tuned latency", "files"],
                  [(k.label, f"#{k.index}", _ms(k.latency_s), k.files.get("library") or k.files["program"])
                   for k in manifest.kernels])
    console.info(f"manifest: {out / 'manifest.json'} (log sha256 {manifest.log['sha256'][:16]}...); the command "
                 f"took {console.command_seconds():.1f} s")


@app.command("run", rich_help_panel="Deploy")
def run(
    folder: Annotated[Path, typer.Argument(help="Export folder (written by `edgetune export`).")],
    board: BoardOpt,
    check: Annotated[Optional[bool], typer.Option(
        "--check/--no-check", help="Compare the output with the reference: kernels, numpy's (on by default); a "
                                   "model, PyTorch's when the model can be loaded here (exit 1 when it differs).")]
    = None,
    workload: Annotated[Optional[str], typer.Option(
        "--workload", "-w", help="Kernels: run only this workload (default: every kernel of the export).")] = None,
    input: Annotated[Optional[Path], typer.Option(
        "--input", "-i", help="Model: a .npy of one input, or N inputs stacked on axis 0 (default: one random "
                              "input).")] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", help="Model: write the outputs, stacked as the inputs were, to this .npy (outputs.npz when "
                         "the model has several).")] = None,
    per_layer: Annotated[bool, typer.Option(
        "--per-layer", help="Model: also time each conv's kernel alone, beside its tuned latency.")] = False,
    number: NumberOpt = 1,
    repeat: RepeatOpt = 3,
    min_repeat_ms: MinRepeatMsOpt = 0.0,
    timeout: TimeoutOpt = 120.0,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    min_cosine: Annotated[Optional[float], typer.Option(
        min=-1, max=1, help="Int8 models: fail the run when an output's cosine similarity to the float PyTorch "
                            "model's is below this (reported either way).")] = None,
    min_top1: Annotated[Optional[float], typer.Option(
        min=0, max=1, help="Int8 models: fail the run when fewer inputs than this share (0..1) get the float "
                           "model's top-1 class (reported either way).")] = None,
    tracker: TrackerOpt = None,
    vta_config: VtaConfigOpt = None,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
) -> None:
    """Run an export on a board (over RPC) or the VTA simulator: a whole model on given or random inputs, or
    each exported kernel; check the outputs and compare the latency with the tuned one."""
    with console.waiting(f"loading export {folder} for board {board} (its family's libraries: TVM, seconds)"):
        ex = load_export(folder)
        brd = board_from(board, inventory, vta_config)
        ex.check_board(brd)
    options = MeasureOptions(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, timeout_s=timeout)
    if ex.is_model:
        if workload is not None:
            raise ConfigError(f"{folder} holds a whole model: --workload picks a kernel of a kernel export")
        return _run_model(ex, brd, check, input, output, per_layer, options, seed, tracker, json,
                          Agreement(min_cosine, min_top1))
    if input is not None or output is not None or per_layer or min_cosine is not None or min_top1 is not None:
        raise ConfigError(f"{folder} holds conv kernels: --input, --output, --per-layer, --min-cosine and --min-top1 "
                          "are for model exports")
    labels = [ex.kernel(workload).label] if workload else [k.label for k in ex.kernels]
    results = []
    with ex.session(brd, tracker=tracker, on_wait=console.warn) as session, console.progress(transient=True) as bar:
        task = bar.add_task(f"run on {board}", total=len(labels), status="")
        for label in labels:
            bar.update(task, status=label)
            results.append(ex.run(brd, check=check is not False, workload=label, seed=seed, repeat=repeat,
                                  session=session))
            r = results[-1]
            console.say(f"{label}: {_ms(r.seconds)} (tuned {_ms(r.expected_seconds)})"
                         + ("" if r.correct is None else ", output " + ("correct" if r.correct else "WRONG")))
            bar.advance(task)
    record_run(folder, board, {"kernels": [r.to_json() for r in results]})
    if json:
        console.print_json({"export": str(folder), "tuned_on": ex.manifest.tuned_on["board"],
                            "results": [r.to_json() for r in results]})
    else:
        console.table(f"{folder} on {board} (tuned latency: measured on {ex.manifest.tuned_on['board']})",
                      ["workload", "latency", "tuned latency", "ratio", "output"],
                      [(r.workload, _ms(r.seconds), _ms(r.expected_seconds),
                        _ratio(r.seconds, r.expected_seconds),
                        "not checked" if r.correct is None else ("correct" if r.correct else "WRONG") +
                        f" ({r.message})") for r in results])
        console.info(f"the command took {console.command_seconds():.1f} s, start-up included")
    wrong = [r for r in results if r.correct is False]
    if wrong:
        console.error(f"{len(wrong)} kernel(s) gave a wrong output: {wrong[0].workload}: {wrong[0].message}")
        raise typer.Exit(1)


def _run_model(ex: Export, board, check: bool | None, input: Path | None, output: Path | None,  # noqa: ANN001
               per_layer: bool, options: MeasureOptions, seed: int, tracker: str | None, json: bool,
               agreement: Agreement) -> None:
    """``edgetune run`` of a whole-model export."""
    x = _read_npy(input) if input is not None else None
    inputs = ex.model_inputs(x, seed=seed)
    with console.progress(transient=True) as bar:
        bar.add_task(f"running the model on {board.name} ({len(inputs)} input(s), then {options.repeat} timed runs)",
                     total=None, status="")
        result = ex.run_model(board, np.concatenate(inputs), check=check, options=options, per_layer=per_layer,
                              tracker=tracker, on_wait=console.warn, agreement=agreement)
    if result.correct is None and result.message:   # on by default where the model loads here; said when not
        console.warn(f"output {result.message}")
    if output is not None:
        _write_outputs(output, result)
    record_run(ex.path, board.name, result.to_json())
    if json:
        console.print_json({"export": str(ex.path), **result.to_json(),
                            "output_file": str(output) if output is not None else None})
    else:
        _print_model_run(ex, result, options, output)
    if result.correct is False:
        console.error(f"the model's run failed its check: {result.message}")
        raise typer.Exit(1)


def _print_model_run(ex: Export, result: ModelRun, options: MeasureOptions, output: Path | None) -> None:
    lo, hi = min(result.costs), max(result.costs)
    d = result.details
    measured = (f"{options.repeat} runs of {options.number} (min {options.min_repeat_ms:g} ms each)" if not d else
                f"last input: VTA {d['vta_ms']:.4f} ms ({d['vta_seconds']}) + CPU {d['cpu_ms']:.4f} ms "
                f"({d['cpu_seconds']}, numpy)")
    rows = [("latency (median)", _ms(result.latency_s)), ("spread", f"{_ms(lo)} .. {_ms(hi)}"),
            ("measured", measured),
            *([("left to the CPU", ", ".join(f"{w['cpu'] / max(1, w['total']):.1%} of {w['total']:,} {what}"
                                            for what, w in (("multiply-adds", d["cpu_work"]["macs"]),
                                                            ("elementwise ops", d["cpu_work"]["elementwise"]))))]
              if d.get("cpu_work") else []),
            ("inputs run", str(len(result.outputs))),
            ("outputs", ", ".join(str(list(o.shape)) for o in result.stacked())),
            ("output", "not checked" if result.correct is None else
             ("correct" if result.correct else "WRONG") + f" ({result.message})")]
    if output is not None:
        rows.append(("written to", str(output)))
    rows.append(("the command", f"{console.command_seconds():.1f} s, start-up included"))
    console.table(f"model {ex.manifest.model['source']['model']} on {result.board}", ["", "value"], rows)
    if d.get("layers"):
        first: dict = {}
        for r in d["layers"]:
            first.setdefault(r.get("segment"), [r["layer"], 0])[1] += 1
        console.table("per layer (last input)", ["layer", "op", "device", "latency"],
                      [(r["layer"], r["op"], r["device"], _layer_ms(r, first)) for r in d["layers"]])
    elif result.per_layer:
        console.table("per conv (each kernel timed alone)",
                      ["conv", "workload", "schedule", "latency", "tuned latency"],
                      [(r["module"], r["workload"] or "-", r["schedule"], _ms(r["seconds"]), _ms(r["tuned_seconds"]))
                       for r in result.per_layer])


def _layer_ms(row: dict, first: dict) -> str:
    """A layer's latency; a VTA segment's layers run as one program, timed once, on its first layer's row."""
    segment = row.get("segment")
    if segment is None:
        return f"{row['ms']:.4f} ms"
    if first[segment][0] == row["layer"]:
        return f"{row['ms']:.4f} ms (all {first[segment][1]} layers of program {segment})"
    return f"in program {segment}"


def _read_npy(path: Path, option: str = "--input") -> np.ndarray:
    """A .npy array (never a pickle); :class:`ConfigError` naming the file when it is not one."""
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a folder; give a .npy file (numpy.save)")
    if not path.is_file():
        raise ConfigError(f"{option} {path} does not exist or is not a regular file; give a .npy file (numpy.save)")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        raise ConfigError(f"{option} {path} is not a .npy array ({str(exc)[:80]}); write it with numpy.save") \
            from None


def _write_outputs(path: Path, result: ModelRun) -> None:
    """The outputs, stacked as the inputs were: one .npy, or an .npz of output0, output1, ... for several."""
    outs = result.stacked()
    if path.is_dir():
        raise ConfigError(f"--output {path} is a folder; give a file name")
    if len(outs) == 1:
        np.save(path, outs[0])
    else:
        np.savez(path, **{f"output{i}": o for i, o in enumerate(outs)})
