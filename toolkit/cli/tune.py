"""``edgetune tune`` (tune one workload on one board), ``tuners`` (what tuners exist) and ``import-autotvm``
(AutoTVM and TopHub logs as edgetune logs); ``tune-model`` (a whole network) lives in :mod:`.tune_network`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit import console
from toolkit.cli.app import app
from toolkit.cli.tune_network import tune_model_command
from toolkit.cli.options import (BoardOpt, BoardsOpt, CheckOpt, ClusterOpt, FirstConvOpt, InputShapeOpt, InventoryOpt,
                                 JsonOpt,
                                 MinRepeatMsOpt, ModelOpt, NumberOpt, RepeatOpt, ResumeOpt, RoundTrialsOpt,
                                 SchedulerOpt, SeedOpt, TimeoutOpt, TrackerOpt, TransferOpt, TunerOpt, TunerOptionOpt,
                                 TvmCompatOpt, VtaConfigOpt, WaitBoardOpt, board_from, check_folder,
                                 parse_options, reaching, template_options)
from toolkit.errors import ConfigError
from toolkit.tuning.session import TuneSummary, default_log_path, tune as run_tune
from toolkit.backends import backend_for, make_runner
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.core.space import ConfigSpace
from toolkit.tuning.tuners.base import DEFAULT_TUNER, make_tuner, tuner_class, tuner_names
from toolkit.workloads import parse_workload
from toolkit.backends import make_task
from toolkit.runs import budget, transfer_options
from toolkit.cluster.builder import make_builder
from toolkit.cluster.nodes import cluster_address


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
    tuner: TunerOpt = DEFAULT_TUNER,
    log: Annotated[Optional[Path], typer.Option(help="Tuning log (default edgetune-logs/<board>/<workload>.jsonl).")]
    = None,
    resume: ResumeOpt = False,
    seed: SeedOpt = 0,
    early_stopping: Annotated[Optional[int], typer.Option(
        "--early-stopping", min=1, help="Stop after this many trials without a better config.")] = None,
    option: TunerOptionOpt = None,
    tvm_compat: TvmCompatOpt = False,
    vta_config: VtaConfigOpt = None,
    check: CheckOpt = False,
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
    transfer: TransferOpt = None,
    model: ModelOpt = None,
    scheduler: SchedulerOpt = "gradient",
    round_trials: RoundTrialsOpt = 32,
    input_shape: InputShapeOpt = "1,3,224,224",
    first_conv: FirstConvOpt = "s2d",
    cluster: ClusterOpt = None,
    boards: BoardsOpt = 1,
) -> None:
    """Tune one conv2d workload (or, with --model, a whole network) on one board; every trial is logged.

    ``--trials N`` is the budget in all: resuming a log of 32 trials with ``-n 40`` tunes 8 more, with
    ``-n 10`` none. ``--more N`` tunes N more than the log holds.
    """
    if (workload is None) == (model is None):
        raise ConfigError("give --workload (one layer) or --model (a whole network), exactly one of them")
    if model is not None:   # `edgetune tune-model` with what a network run honours
        refused = [flag for flag, value in (("--more", more), ("--early-stopping", early_stopping),
                                            ("--time-budget", time_budget)) if value is not None]
        if refused:
            raise ConfigError(f"{', '.join(refused)} apply to one workload; give --model with --trials N (the budget "
                              "in all, shared by the tasks)")
        if trials is None:
            raise ConfigError("give --trials N (the budget in all, shared by the tasks)")
        return tune_model_command(model, trials, board=board, tuner=tuner, log=log, resume=resume, seed=seed,
                                  option=option, transfer=transfer, tvm_compat=tvm_compat, vta_config=vta_config,
                                  check=check, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                                  timeout=timeout, tracker=tracker, wait_board=wait_board, scheduler=scheduler,
                                  round_trials=round_trials, input_shape=input_shape, first_conv=first_conv,
                                  inventory=inventory, json=json, cluster=cluster, boards=boards)
    if boards > 1:
        raise ConfigError("--boards tunes a whole network's tasks on several boards at once; give --model")
    brd = board_from(board, inventory, vta_config)
    options = template_options(brd, tvm_compat)
    if more is not None:
        resume = True
    measure = MeasureOptions(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, timeout_s=timeout,
                             check=check)
    wl = parse_workload(workload)
    tuner_obj = make_tuner(tuner, seed=seed, **{**parse_options(option), **transfer_options(transfer, tuner, brd)})
    task = make_task(wl, brd, **options)
    log_path = log or default_log_path(task)
    trials, _ = budget(log_path if more is not None else None, trials, more)   # only --more reads the log first
    cluster = cluster_address(cluster)
    builder = make_builder(task.backend, brd, cluster) if cluster else None
    with reaching(brd):
        runner = make_runner(brd, tracker=tracker, wait_s=wait_board)
        runner.on_wait = console.warn
        try:
            runner.reach()          # before the tuner's first compile: a missing board fails at once
        except BaseException:
            runner.close()
            if builder is not None:
                builder.close()
            raise
    with console.progress() as bar:
        bar_id = bar.add_task(f"{tuner} {wl.label}", total=trials, status="")

        def on_batch(summary: TuneSummary, results) -> None:
            bar.update(bar_id, completed=summary.trials, status=_status(summary))

        try:
            summary = run_tune(task, tuner_obj, trials, log=log_path, resume=resume, early_stopping=early_stopping,
                               runner=runner, builder=builder, callback=on_batch, time_budget_s=time_budget,
                               measure_options=measure)
        finally:
            runner.close()
            if builder is not None:
                builder.close()
        bar.update(bar_id, completed=summary.trials, status=_status(summary))
    if summary.resumed >= trials:
        console.warn(f"{log_path} already holds {summary.resumed} trials and --trials {trials} counts them: nothing "
                     "was tuned; pass --more N to tune N more")
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
        ("wall / tuner time", f"{summary.wall_s:.1f} s / {summary.tuner_s:.1f} s (the command: "
                              f"{console.command_seconds():.1f} s, start-up included)"), ("log", str(log_path)),
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
        rows = [(n, _summary(cls), ", ".join(k for k, o in cls.options.items() if not o.experimental) or "-")
                for n, cls in classes.items()]
        console.table("tuners (one tuner's options in full: `edgetune tuners NAME`)", ["tuner", "what", "options"],
                      rows)
        return
    data = {
        n: {"doc": _summary(cls),
            "options": {k: {"default": o.default, "type": o.type.__name__, "doc": o.doc,
                            **({"choices": list(o.choices)} if o.choices else {}),
                            **({"low": o.low} if o.low is not None else {}),
                            **({"high": o.high} if o.high is not None else {}),
                            **({"experimental": True} if o.experimental else {})}
                        for k, o in cls.options.items()}}
        for n, cls in classes.items()
    }
    if json:
        console.print_json(data)
        return
    for name, d in data.items():
        rows = {flag: [(k, o["type"], o["default"], o["doc"] + (f" (one of {o['choices']})" if "choices" in o else ""))
                       for k, o in d["options"].items() if o.get("experimental", False) is flag]
                for flag in (False, True)}
        console.table(f"{name}: {d['doc']}", ["option", "type", "default", "description"],
                      rows[False] or [("(no options)", "", "", "")])
        if rows[True]:
            console.table(f"{name}: experimental options (research switches for ablations; the defaults are the "
                          "measured ones)", ["option", "type", "default", "description"], rows[True])


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
