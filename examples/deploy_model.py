"""Tune a small PyTorch model on this machine's CPU, export the whole model with its tuned kernels, run it.

    python examples/deploy_model.py [--trials 16] [--out example-out]

The model (conv + batch-norm + ReLU, a residual block, pooling, a classifier) is tuned as a network (one budget,
Ansor's task scheduler), compiled through Relax with the tuned conv kernels, run on the ``local`` board over
loopback TVM RPC and compared with PyTorch.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import nn

import toolkit as et
from toolkit.tuning.scheduler import make_scheduler
from toolkit.workloads.extract import extract


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.conv1 = nn.Conv2d(16, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.relu(x + self.conv2(torch.relu(self.conv1(x))))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("example-out"))
    args = parser.parse_args()

    torch.manual_seed(0)
    model = SmallNet().eval()
    shape = (1, 3, 16, 16)
    board = et.resolve_board("local")
    plan, tasks = et.network_tasks(extract(model, shape, name="smallnet").network, board)
    log = args.out / "smallnet.jsonl"
    summary = et.tune_network(plan, tasks, "xgb", args.trials, log=log, resume=log.exists(),
                              scheduler=make_scheduler("gradient", seed=0, trials_per_round=8))
    print(f"tuned {len(summary.tasks)} conv shapes in {summary.trials} trials")

    et.export_model(model, args.out / "export", board, logs=[log], input_shape=shape, force=True)
    exported = et.load_export(args.out / "export")
    for conv in exported.manifest.model["convs"]:
        print(f"{conv['module']:10s} {conv['schedule']:8s} {conv['why']}")

    x = np.random.default_rng(0).standard_normal((4, *shape[1:])).astype(np.float32)   # four inputs
    run = exported.run_model(board, x)
    got = run.stacked()[0]
    with torch.no_grad():
        want = torch.cat([model(torch.from_numpy(x[i:i + 1])) for i in range(len(x))]).numpy()
    error = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"latency {run.latency_s * 1e3:.3f} ms per inference; outputs {got.shape}, relative error {error:.1e}")


if __name__ == "__main__":
    main()
