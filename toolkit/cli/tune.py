"""``edgetune tune`` (tune one workload on one board), ``tuners`` (what tuners exist) and ``import-autotvm``
(AutoTVM and TopHub logs as edgetune logs)."""

from __future__ import annotations

import json

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from toolkit import console
from toolkit.boards import Board
from toolkit.cli.app import app
from toolkit.cli.options import (BoardOpt, InputShapeOpt, InventoryOpt, JsonOpt, MinRepeatMsOpt, ModelOpt, NumberOpt,
                                 RepeatOpt, TimeoutOpt, TrackerOpt, TvmCompatOpt, VtaConfigOpt, WaitBoardOpt,
                                 board_from, check_folder)
from toolkit.errors import ConfigError
from toolkit.tuning.journal import read_log
from toolkit.tuning.models.transfer import transfer_model_from
from toolkit.tuning.session import TuneSummary, default_log_path, tune as run_tune
from toolkit.backends import backend_for, make_runner
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.core.space import ConfigSpace
from toolkit.tuning.tuners.base import DEFAULT_TUNER, make_tuner, tuner_class, tuner_names
from toolkit.workloads import parse_workload
from toolkit.backends import make_task


def parse_options(items: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; :class:`ConfigError` for an item without ``=``."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option {item!r} is not KEY=VALUE (e.g. --option plan_size=32)")
        out[key.strip()] = value.strip()
    return out


def transfer_options(source: str | None, tuner: str, board: Board) -> dict[str, Any]:
    """The tuner option ``--transfer SOURCE`` stands for: ``{}`` (the tuner's default), ``none``, ``pretrained``
    (:class:`ConfigError` where edgetune ships no model for the board) or a model fitted on logs / loaded."""
    if source is None:
        return {}
    if "transfer" not in tuner_class(tuner).options:
        raise ConfigError(f"tuner {tuner!r} does not learn from other tasks; --transfer needs ml2tuner, "
                          "ml2tuner+ or chameleon-ml2")
    if source == "none":
        return {"transfer": None}
    if source == "pretrained":
        if backend_for(board.profile).pretrained_transfer(board.profile) is None:
            raise ConfigError(f"edgetune ships no pretrained model for {board.name}; pass your own tuning logs "
                              "(--transfer edgetune-logs/)")
        return {"transfer": "pretrained"}
    _check_transfer_logs(source, board)
    return {"transfer": transfer_model_from(source)}


def _check_transfer_logs(source: str, board: Board) -> None:
    """Refuse tuning logs of another hardware family, or of another VTA hardware config, as ``--transfer`` data
    for ``board`` (their features mean other things there)."""
    from toolkit.export.write import log_board, tuned_profile_of
    from toolkit.tuning.journal import HEADER_KEY, read_log
    from toolkit.tuning.models.transfer import log_files

    backend = backend_for(board.profile)
    for log in log_files(source):
        try:
            with log.open("rb") as f:
                first = json.loads(f.readline(1 << 20) or b"null")
        except (OSError, ValueError, RecursionError):
            continue            # transfer_model_from says what is wrong with it
        if not (isinstance(first, dict) and HEADER_KEY in first):
            continue            # a saved transfer model: it records no board
        header = read_log(log)[0]
        _, board_type, _ = log_board(header.task)
        tuned = tuned_profile_of(board_type, header.task, log)
        if backend_for(tuned) is not backend:
            raise ConfigError(f"--transfer {log} was tuned on a {tuned.family} board ({board_type}); {board.name} is a "
                              f"{board.profile.family} board: pass logs tuned on {board.profile.family} boards")
        if backend.hardware(tuned) != backend.hardware(board.profile):
            raise ConfigError(f"--transfer {log} was tuned for VTA {tuned.vta.get('bitstream')} ({board_type}); "
                              f"{board.name} has {board.profile.vta.get('bitstream')}: pass logs tuned for it")


def _trials_in(path: Path) -> int:
    """Trials a log holds (0 when there is none yet); a truncated last line or a repeated record is warned about
    once, when the run takes the log over."""
    import warnings

    from toolkit.tuning.journal import DuplicateRecordWarning, TruncatedLogWarning

    if not path.is_file() or path.stat().st_size == 0:
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedLogWarning)
        warnings.simplefilter("ignore", DuplicateRecordWarning)
        return len(read_log(path)[1])


def _fmt_seconds(s: float | None) -> str:
    return "-" if s is None or not math.isfinite(s) else f"{s * 1e3:.4f} ms"


def _fmt_config(s: TuneSummary) -> str:
    if not s.best_config:
        return "-"
    if s.best_index is None:   # a driver's config (a MetaSchedule trace): too long for a table
        return f"{s.best_config.get('kind', 'schedule')} trace of trial {s.best_trial} (in the log)"
    return f"#{s.best_index} {ConfigSpace.format(s.best_config)}"


def _status(s: TuneSummary) -> str:
    return (f"valid {s.valid} invalid {s.invalid}  best {_fmt_seconds(s.best_seconds)} "
            f"{s.best_gops:.2f} GOPS")


@app.command("tune", rich_help_panel="Tune")
def tune(
    trials: Annotated[Optional[int], typer.Option(
        "--trials", "-n", min=1, help="Trials in all, a resumed log's included (AutoTVM's n_trial).")] = None,
    more: Annotated[Optional[int], typer.Option(
        "--more", min=1, help="Continue the log with this many trials beyond the ones it holds (implies --resume).")]
    = None,
    workload: Annotated[Optional[str], typer.Option(
        "--workload", "-w", help="Workload: a named layer (resnet18.C2) or a spec.")] = None,
    board: BoardOpt = "vta-fsim",
    tuner: Annotated[str, typer.Option("--tuner", "-t", help="Tuner name; see `edgetune tuners`.")] = DEFAULT_TUNER,
    log: Annotated[Optional[Path], typer.Option(help="Tuning log (default edgetune-logs/<board>/<workload>.jsonl).")]
    = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an existing log; measured configs are skipped.")]
    = False,
    seed: Annotated[int, typer.Option(min=0, help="Random seed of the tuner.")] = 0,
    early_stopping: Annotated[Optional[int], typer.Option(
        "--early-stopping", min=1, help="Stop after this many trials without a better config.")] = None,
    option: Annotated[Optional[list[str]], typer.Option(
        "--option", "-o", help="Tuner option KEY=VALUE; repeat for several (see `edgetune tuners`).")] = None,
    tvm_compat: TvmCompatOpt = False,
    vta_config: VtaConfigOpt = None,
    check: Annotated[bool, typer.Option(
        "--check/--no-check", help="Check each config's output against the reference (slower).")] = False,
    number: NumberOpt = 1,
    repeat: RepeatOpt = 3,
    min_repeat_ms: MinRepeatMsOpt = 0.0,
    timeout: TimeoutOpt = 30.0,
    time_budget: Annotated[Optional[float], typer.Option(
        "--time-budget", min=1, help="Stop starting new trials after this many seconds (the log keeps them all).",
        rich_help_panel="Measurement")] = None,
    tracker: TrackerOpt = None,
    wait_board: WaitBoardOpt = 120.0,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
    transfer: Annotated[Optional[str], typer.Option(
        "--transfer", metavar="LOGS_OR_MODEL", help="Start from what other tuning learned: a tuning log, a folder "
        "of logs, a transfer model file, 'pretrained' (the model edgetune ships for the board) or 'none'. Default: "
        "the tuner's own (see `edgetune tuners NAME`).")] = None,
    model: ModelOpt = None,
    scheduler: Annotated[str, typer.Option(
        help="--model: task scheduler, gradient (Ansor) or round-robin.", rich_help_panel="Whole network")]
    = "gradient",
    round_trials: Annotated[int, typer.Option(
        "--round-trials", min=1, help="--model: trials per scheduler round.", rich_help_panel="Whole network")] = 32,
    input_shape: InputShapeOpt = "1,3,224,224",
    first_conv: Annotated[str, typer.Option(
        "--first-conv", help="--model on VTA: 'cpu' leaves the first conv on the CPU (as TVM), 'pad' pads it to "
                             "16 channels.", rich_help_panel="Whole network")] = "cpu",
) -> None:
    """Tune one conv2d workload (or, with --model, a whole network) on one board; every trial is logged.

    ``--trials N`` is the budget in all: resuming a log of 32 trials with ``-n 40`` tunes 8 more, with
    ``-n 10`` none. ``--more N`` tunes N more than the log holds.
    """
    if (workload is None) == (model is None):
        raise ConfigError("give --workload (one layer) or --model (a whole network), exactly one of them")
    if (trials is None) == (more is None):
        raise ConfigError("give --trials N (the budget in all) or --more N (trials beyond the log's), one of them")
    brd = board_from(board, inventory, vta_config)
    if tvm_compat and "tvm_compat" not in backend_for(brd.profile).template_options:
        raise ConfigError(f"--tvm-compat applies to VTA boards; {brd.name} is a {brd.profile.family} board")
    template_options = {"tvm_compat": True} if tvm_compat else {}
    if more is not None:
        resume = True
    measure = MeasureOptions(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, timeout_s=timeout,
                             check=check)
    if model is not None:
        from toolkit.cli.tune_network import tune_model

        refused = [flag for flag, value in (("--more", more), ("--early-stopping", early_stopping),
                                            ("--time-budget", time_budget)) if value is not None]
        if refused:
            raise ConfigError(f"{', '.join(refused)} apply to one workload; give --model with --trials N (the budget "
                              "in all, shared by the tasks)")
        return tune_model(model=model, board=brd, trials=trials, tuner=tuner,
                          tuner_options={**parse_options(option), **transfer_options(transfer, tuner, brd)},
                          scheduler=scheduler, round_trials=round_trials, input_shape=input_shape,
                          first_conv=first_conv, log=log, resume=resume, seed=seed,
                          template_options=template_options, measure=measure, tracker=tracker, wait_s=wait_board,
                          json=json)
    wl = parse_workload(workload)
    tuner_obj = make_tuner(tuner, seed=seed, **{**parse_options(option), **transfer_options(transfer, tuner, brd)})
    task = make_task(wl, brd, **template_options)
    log_path = log or default_log_path(task)
    held = _trials_in(log_path) if resume else 0
    if more is not None:
        trials = held + more
    assert trials is not None
    runner = make_runner(brd, tracker=tracker, wait_s=wait_board)
    runner.on_wait = console.warn
    with console.progress() as bar:
        bar_id = bar.add_task(f"{tuner} {wl.label}", total=trials, status="")

        def on_batch(summary: TuneSummary, results) -> None:
            bar.update(bar_id, completed=summary.trials, status=_status(summary))

        try:
            summary = run_tune(task, tuner_obj, trials, log=log_path, resume=resume, early_stopping=early_stopping,
                               runner=runner, callback=on_batch, time_budget_s=time_budget, measure_options=measure)
        finally:
            runner.close()
        bar.update(bar_id, completed=summary.trials, status=_status(summary))
    if held >= trials:
        console.warn(f"{log_path} already holds {held} trials and --trials {trials} counts them: nothing was tuned; "
                     f"pass --more N to tune N more")
    if json:
        console.print_json({**summary.to_json(), "log": str(log_path)})
        return
    rows = [
        ("workload", f"{summary.workload} ({wl.spec()})"), ("board", summary.board), ("tuner", summary.tuner),
        ("trials", f"{summary.trials} ({summary.resumed} resumed, stopped: {summary.stopped})"),
        ("valid / invalid", f"{summary.valid} / {summary.invalid}"),
        ("errors", ", ".join(f"{k} {v}" for k, v in sorted(summary.errors.items())) or "-"),
        ("best latency", _fmt_seconds(summary.best_seconds)), ("best GOPS", f"{summary.best_gops:.3f}"),
        ("best config", _fmt_config(summary)),
        ("wall / tuner time", f"{summary.wall_s:.1f} s / {summary.tuner_s:.1f} s"), ("log", str(log_path)),
    ]
    console.table("tuning summary", ["", "value"], rows)
    if summary.valid == 0:
        console.warn(f"no valid config in {summary.trials} trials; see the errors in {log_path}")


def _summary(cls: type) -> str:
    """The first paragraph of a tuner's docstring, on one line."""
    return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())


@app.command("tuners", rich_help_panel="Tune")
def tuners(
    name: Annotated[Optional[str], typer.Argument(help="One tuner: its options in full.")] = None,
    json: JsonOpt = False,
) -> None:
    """List the tuners (one line each), or one tuner's options (`edgetune tuners xgb`)."""
    classes = {n: tuner_class(n) for n in ([name] if name else tuner_names())}
    if name is None and not json:
        rows = [(n, _summary(cls), ", ".join(cls.options) or "-") for n, cls in classes.items()]
        console.table("tuners (one tuner's options in full: `edgetune tuners NAME`)", ["tuner", "what", "options"],
                      rows)
        return
    data = {
        n: {"doc": _summary(cls),
            "options": {k: {"default": o.default, "type": o.type.__name__, "doc": o.doc,
                            **({"choices": list(o.choices)} if o.choices else {}),
                            **({"low": o.low} if o.low is not None else {}),
                            **({"high": o.high} if o.high is not None else {})}
                        for k, o in cls.options.items()}}
        for n, cls in classes.items()
    }
    if json:
        console.print_json(data)
        return
    for name, d in data.items():
        rows = [(k, o["type"], o["default"], o["doc"] + (f" (one of {o['choices']})" if "choices" in o else ""))
                for k, o in d["options"].items()] or [("(no options)", "", "", "")]
        console.table(f"{name}: {d['doc']}", ["option", "type", "default", "description"], rows)


@app.command("import-autotvm", rich_help_panel="Tune")
def import_autotvm(
    log: Annotated[Path, typer.Argument(help="An AutoTVM log or a TopHub file (one JSON record per line).")],
    board: BoardOpt = "vta-fsim",
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the edgetune logs, one per workload (an "
                                                          "existing log of a workload is continued).")]
    = Path("edgetune-logs/imported"),
    vta_config: VtaConfigOpt = None,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
) -> None:
    """Import AutoTVM/TopHub records of TVM's VTA conv2d template into edgetune logs (TVM-compatible space):
    resume them with `tune --tvm-compat --resume`, export them, or give them to a tuner as history."""
    brd = board_from(board, inventory, vta_config)
    check_folder(out, "--out")
    summary = backend_for(brd.profile).import_autotvm(log, brd, out)
    if not summary.logs:
        left = "; ".join(f"{n} x {why}" for why, n in summary.skipped.items()) or "it holds no record"
        raise ConfigError(f"nothing of {log} imports for {brd.name}'s VTA model ({left}); give a log of TVM's "
                          "conv2d_packed.vta template tuned for this hardware config")
    if json:
        console.print_json({"logs": {k: str(v) for k, v in summary.logs.items()}, "records": summary.records,
                            "skipped": summary.skipped})
        return
    console.table(f"{log} -> {out} (board {brd.name})", ["workload", "records", "log"],
                  [(spec, summary.records.get(spec, 0), path) for spec, path in summary.logs.items()])
    for why, n in summary.skipped.items():
        console.info(f"left out: {n} x {why}")
