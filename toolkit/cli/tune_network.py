"""``edgetune tune-model`` (and ``tune --model``): tune every conv of a network with a shared budget."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from typing import Annotated, Optional

import typer

from toolkit import console
from toolkit.boards import Board
from toolkit.cli.app import app
from toolkit.cli.options import (BoardOpt, BoardsOpt, CheckOpt, ClusterOpt, FirstConvOpt, InputShapeOpt, InventoryOpt,
                                 JsonOpt, MinRepeatMsOpt, NumberOpt, RepeatOpt, ResumeOpt, RoundTrialsOpt, SchedulerOpt,
                                 SeedOpt, TimeoutOpt, TrackerOpt, TransferOpt, TunerOpt, TunerOptionOpt, TvmCompatOpt,
                                 VtaConfigOpt, WaitBoardOpt, board_from, parse_options, reaching, template_options)
from toolkit.errors import ConfigError
from toolkit.rpc.service import boards_under_key
from toolkit.runs import transfer_options
from toolkit.cluster.builder import make_builder
from toolkit.cluster.nodes import cluster_address
from toolkit.tuning.tuners.base import DEFAULT_TUNER
from toolkit.workloads.extract import load_network, parse_input_shape
from toolkit.backends import backend_for, network_tasks
from toolkit.tuning.network import NetworkSummary, tune_network
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.scheduler import make_scheduler


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4f}" if math.isfinite(seconds) else "-"


@app.command("tune-model", rich_help_panel="Tune")
def tune_model_command(
    model: Annotated[str, typer.Argument(
        help="A built-in network (resnet18; see `edgetune workloads networks`; seeded random weights) or a PyTorch "
             "model (.pt2, TorchScript, module:factory or file.py:factory).")],
    trials: Annotated[int, typer.Option("--trials", "-n", min=1, help="Trials in all, shared by the network's "
                                        "tasks (a resumed log's included).")],
    board: BoardOpt = "vta-fsim",
    tuner: TunerOpt = DEFAULT_TUNER,
    log: Annotated[Optional[Path], typer.Option(help="Tuning log (default edgetune-logs/<board>/<network>.jsonl).")]
    = None,
    resume: ResumeOpt = False,
    seed: SeedOpt = 0,
    option: TunerOptionOpt = None,
    transfer: TransferOpt = None,
    tvm_compat: TvmCompatOpt = False,
    vta_config: VtaConfigOpt = None,
    check: CheckOpt = False,
    number: NumberOpt = 1,
    repeat: RepeatOpt = 3,
    min_repeat_ms: MinRepeatMsOpt = 0.0,
    timeout: TimeoutOpt = 30.0,
    tracker: TrackerOpt = None,
    wait_board: WaitBoardOpt = 120.0,
    scheduler: SchedulerOpt = "gradient",
    round_trials: RoundTrialsOpt = 32,
    input_shape: InputShapeOpt = "1,3,224,224",
    first_conv: FirstConvOpt = "s2d",
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
    cluster: ClusterOpt = None,
    boards: BoardsOpt = 1,
) -> None:
    """Tune every conv2d of a whole network on one board with one budget and one log (Ansor's task scheduler).

    `edgetune tune-model resnet18 -b vta-fsim -n 512` tunes ResNet-18's convs; `tune --model` is the same.
    """
    brd = board_from(board, inventory, vta_config)
    tune_model(model=model, board=brd, trials=trials, tuner=tuner,
               tuner_options={**parse_options(option), **transfer_options(transfer, tuner, brd)},
               scheduler=scheduler, round_trials=round_trials, input_shape=input_shape, first_conv=first_conv,
               log=log, resume=resume, seed=seed, template_options=template_options(brd, tvm_compat),
               measure=MeasureOptions(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, timeout_s=timeout,
                                      check=check),
               tracker=tracker, wait_s=wait_board, json=json, cluster=cluster_address(cluster), boards=boards)


def tune_model(*, model: str, board: Board, trials: int, tuner: str, tuner_options: dict[str, Any],
               scheduler: str, round_trials: int, input_shape: str, first_conv: str, log: Path | None,
               resume: bool, seed: int, template_options: dict[str, Any], measure: MeasureOptions,
               tracker: str | None, wait_s: float, json: bool, cluster: str | None = None, boards: int = 1) -> None:
    """Plan the network's tasks for ``board``, tune them (``measure``: how each config is timed, on ``boards``
    boards of its type reached through ``tracker``; builds on the Ray cluster at ``cluster`` when given), print the
    per-task table and the total."""
    with console.waiting(f"reading the convs of model {model} for input {input_shape}"):
        net = load_network(model, parse_input_shape(input_shape))
    plan, tasks = network_tasks(net, board, first_conv=first_conv, **template_options)
    sched = make_scheduler(scheduler, seed=seed, trials_per_round=round_trials)
    log_path = log or Path("edgetune-logs") / board.name / f"{net.name}.jsonl"
    backend = backend_for(board.profile)
    if boards > 1 and not board.profile.is_simulator:
        if board.entry is None or not board.entry.host:
            raise ConfigError(f"--boards {boards}: the built-in board {board.name} is one board; register boards "
                              "of one type under one RPC key (`edgetune board add --rpc-key`) and tune one of them")
        found = boards_under_key(board.name, board.rpc_key, tracker)
        if found < boards:
            raise ConfigError(f"--boards {boards}: the tracker holds {found} board(s) under key {board.rpc_key!r}; "
                              "provision more boards of the type under that key or lower --boards")
    lanes = []
    try:
        with reaching(board):
            for _ in range(boards):
                lanes.append((make_builder(backend, board, cluster), backend.make_runner(board, tracker=tracker,
                                                                                          wait_s=wait_s)))
                lanes[-1][1].on_wait = console.warn
                lanes[-1][1].reach()
        with console.progress() as bar:
            bar_id = bar.add_task(f"{net.name} ({len(plan.tasks)} tasks, {scheduler})", total=trials, status="")

            def on_round(s: NetworkSummary) -> None:
                bar.update(bar_id, completed=s.trials, status=f"total {_ms(s.total_seconds)} ms")

            summary = tune_network(plan, tasks, tuner, trials, scheduler=sched, log=log_path, resume=resume,
                                   tuner_options=tuner_options, seed=seed, lanes=lanes, measure_options=measure,
                                   callback=on_round, on_lane_lost=lambda k, exc: console.warn(
                                       f"board {k + 1} of {boards} lost ({exc}); the others go on"))
            on_round(summary)
    finally:
        for builder, runner in lanes:
            runner.close()
            builder.close()
    if json:
        console.print_json(summary.to_json())
        return
    rows = [(t.name, t.spec, t.count, t.trials, _ms(t.best_seconds), _ms(t.weighted_seconds),
             f"{t.flops / t.best_seconds / 1e9:.2f}" if math.isfinite(t.best_seconds) else "-")
            for t in summary.tasks]
    rows.append(("total", "", sum(t.count for t in summary.tasks), summary.trials, "",
                 _ms(summary.total_seconds), ""))
    console.table(f"{net.name} on {board.name}: {summary.tuner}, {summary.scheduler} scheduler",
                  ["task", "spec", "count", "trials", "best ms", "best x count ms", "GOPS"], rows)
    for layer, why in summary.skipped:
        console.info(f"not tuned: {layer}: {why}")
    console.info(f"network conv latency {_ms(summary.total_seconds)} ms ({summary.trials} trials, "
                 f"{summary.resumed} resumed, {summary.wall_s:.1f} s; the command {console.command_seconds():.1f} s, "
                 f"start-up included); log {log_path}")
    missing = [t.name for t in summary.tasks if not math.isfinite(t.best_seconds)]
    if missing:
        console.warn(f"no valid config yet for {', '.join(missing)}: the total is unknown; tune more "
                     f"(--trials) with --resume")
