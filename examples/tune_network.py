"""Tune every conv layer of ResNet-18 on the VTA simulator with one budget and a task scheduler.

    python examples/tune_network.py [--trials 88] [--out example-out]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import toolkit as et
from toolkit.tuning.scheduler import make_scheduler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=88)
    parser.add_argument("--out", type=Path, default=Path("example-out"))
    args = parser.parse_args()

    board = et.resolve_board("vta-fsim")
    plan, tasks = et.network_tasks(et.get_network("resnet18"), board)   # C1 (by space-to-depth)..C11
    log = args.out / "resnet18.jsonl"
    summary = et.tune_network(plan, tasks, "random", args.trials, log=log, resume=log.exists(),
                              scheduler=make_scheduler("gradient", seed=0, trials_per_round=8))
    for t in summary.tasks:
        best = f"{t.best_seconds * 1e3:.4f} ms" if t.trials and t.best_seconds < float("inf") else "-"
        print(f"{t.name:12s} x{t.count}  {t.trials:3d} trials  best {best}")
    print(f"network conv latency {summary.total_seconds * 1e3:.3f} ms after {summary.trials} trials")


if __name__ == "__main__":
    main()
