"""``edgetune tune --model``: tune every conv of a network with a shared budget (called by ``toolkit.cli.tune``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from toolkit import console
from toolkit.boards import Board
from toolkit.workloads.extract import load_network, parse_input_shape
from toolkit.backends import backend_for, network_tasks
from toolkit.tuning.network import NetworkSummary, tune_network
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.scheduler import make_scheduler


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4f}" if math.isfinite(seconds) else "-"


def tune_model(*, model: str, board: Board, trials: int, tuner: str, tuner_options: dict[str, Any],
               scheduler: str, round_trials: int, input_shape: str, first_conv: str, log: Path | None,
               resume: bool, seed: int, template_options: dict[str, Any], measure: MeasureOptions,
               tracker: str | None, wait_s: float, json: bool) -> None:
    """Plan the network's tasks for ``board``, tune them (``measure``: how each config is timed, on the board
    reached through ``tracker``), print the per-task table and the total."""
    console.waiting(f"reading the convs of model {model} for input {input_shape} (seconds for a traced model)")
    net = load_network(model, parse_input_shape(input_shape))
    plan, tasks = network_tasks(net, board, first_conv=first_conv, **template_options)
    sched = make_scheduler(scheduler, seed=seed, trials_per_round=round_trials)
    log_path = log or Path("edgetune-logs") / board.name / f"{net.name}.jsonl"
    backend = backend_for(board.profile)
    builder, runner = backend.default_builder(board), backend.make_runner(board, tracker=tracker, wait_s=wait_s)
    runner.on_wait = console.warn
    with console.progress() as bar:
        bar_id = bar.add_task(f"{net.name} ({len(plan.tasks)} tasks, {scheduler})", total=trials, status="")

        def on_round(s: NetworkSummary) -> None:
            bar.update(bar_id, completed=s.trials, status=f"total {_ms(s.total_seconds)} ms")

        try:
            summary = tune_network(plan, tasks, tuner, trials, scheduler=sched, log=log_path, resume=resume,
                                   tuner_options=tuner_options, seed=seed, measure_with=lambda task: (builder, runner),
                                   measure_options=measure, callback=on_round)
        finally:
            runner.close()
            builder.close()
        on_round(summary)
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
                 f"{summary.resumed} resumed, {summary.wall_s:.1f} s); log {log_path}")
    missing = [t.name for t in summary.tasks if not math.isfinite(t.best_seconds)]
    if missing:
        console.warn(f"no valid config yet for {', '.join(missing)}: the total is unknown; tune more "
                     f"(--trials) with --resume")
