"""``python -m toolkit.demo --out DIR`` (``make demo``): a short tuning run on the VTA simulator.

Tunes resnet18.C2 on ``vta-fsim`` with the default tuner (``ml2tuner+``: ML2Tuner starting from the shipped
Pynq transfer model; ResNet-18 C2 is among the layers that model was trained on) for 128 trials,
writes the log to ``DIR/logs/`` and prints the summary, then exports the best config to
``DIR/export/`` and runs the export on the simulator (bit-exact check). Needs no board; ``edgetune dashboard DIR``
shows the run, its roofline and the export.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from toolkit import console
from toolkit.boards import resolve_board
from toolkit.tuning.session import TuneSummary, tune
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.core.space import ConfigSpace
from toolkit.tuning.tuners.base import DEFAULT_TUNER, make_tuner
from toolkit.workloads import parse_workload
from toolkit.backends import make_task


def run_tuning_demo(out: Path, trials: int = 128, workload: str = "resnet18.C2", seed: int = 0) -> TuneSummary:
    """Tune ``workload`` on the simulator with the default tuner; the log is ``out/logs/vta-fsim/<workload>.jsonl``."""
    task = make_task(parse_workload(workload), resolve_board("vta-fsim"))
    log = out / "logs" / "vta-fsim" / f"{task.workload.label}.jsonl"
    with console.progress() as bar:
        tid = bar.add_task(f"{DEFAULT_TUNER} {task.workload.label} on vta-fsim", total=trials, status="")
        summary = tune(task, make_tuner(DEFAULT_TUNER, seed=seed), trials, log=log, resume=True,
                       measure_options=MeasureOptions(),
                       callback=lambda s, _: bar.update(tid, completed=s.trials,
                                                        status=f"best {s.best_gops:.2f} GOPS"))
    best = f"{summary.best_seconds * 1e3:.4f} ms" if math.isfinite(summary.best_seconds) else "-"
    console.table(f"tuning demo: {task.workload.label} on vta-fsim ({task.space.size} configs)",
                  ["trials", "invalid", "best latency", "best GOPS"],
                  [(summary.trials, summary.invalid, best, f"{summary.best_gops:.2f}")])
    if summary.best_config:
        console.info(f"best config #{summary.best_index}: {ConfigSpace.format(summary.best_config)}")
    console.info(f"log: {log}")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m toolkit.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="output folder (logs, exports)")
    parser.add_argument("--trials", type=int, default=128, help="tuning trials (default 128)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = run_tuning_demo(args.out, args.trials)
    if summary.log and summary.valid:
        run_export_demo(Path(summary.log), args.out / "export")


def run_export_demo(log: Path, folder: Path) -> None:
    """Export the log's best config to ``folder`` (replacing an earlier demo export) and run it on vta-fsim."""
    from toolkit.export import export, load_export
    from toolkit.export.last_run import record_run

    manifest = export(log, folder, force=True)
    result = load_export(folder).run("vta-fsim")
    record_run(folder, "vta-fsim", {"kernels": [result.to_json()]})     # the dashboard's export page shows it
    console.table(f"export {folder} run on vta-fsim", ["workload", "latency", "tuned latency", "output"],
                  [(result.workload, f"{result.seconds * 1e3:.4f} ms", f"{result.expected_seconds * 1e3:.4f} ms",
                    "correct (bit-exact)" if result.correct else f"WRONG: {result.message}")])
    console.info(f"export: {folder} ({len(manifest.files)} files, manifest.json); "
                 f"run it again with `edgetune run {folder} --board vta-fsim`")
    if not result.correct:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
