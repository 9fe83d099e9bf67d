"""Tune one ResNet-18 layer on the built-in VTA simulator board, export the best config and run it.

    python examples/tune_one_layer.py [--trials 32] [--out example-out]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import toolkit as et


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("example-out"))
    args = parser.parse_args()

    task = et.make_task(et.parse_workload("resnet18.C11"), et.resolve_board("vta-fsim"))
    log = args.out / "c11.jsonl"
    summary = et.tune(task, et.make_tuner("xgb", seed=0), args.trials, log=log, resume=log.exists())
    print(f"{summary.workload}: best {summary.best_seconds * 1e3:.4f} ms after {summary.trials} trials "
          f"({summary.best_gops:.1f} GOPS), config {summary.best_config}")

    et.write_export(log, args.out / "export", force=True)
    result = et.load_export(args.out / "export").run("vta-fsim")
    print(f"exported kernel on {result.board}: {result.seconds * 1e3:.4f} ms, output {result.message}")


if __name__ == "__main__":
    main()
