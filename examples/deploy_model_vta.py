"""Train a small CNN on scikit-learn's digits, quantise it to int8 for VTA, run it on the simulator.

    python examples/deploy_model_vta.py [--out example-out]

The model (conv + batch-norm + ReLU three times, max pooling, global average pooling, a classifier) is trained
here for a few seconds, exported for the ``vta-fsim`` board calibrated on 100 held-out images (its convs become
VTA programs, the first one with its single channel padded to 16, and so does the max pooling), run on the test
images in the simulator, checked bit for bit against the int8 reference and compared with PyTorch's accuracy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

import toolkit as et


def train(x: np.ndarray, y: np.ndarray, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(15):
        for i in range(0, len(x), 64):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt[i:i + 64]), yt[i:i + 64]).backward()
            opt.step()
    return net.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("example-out"))
    args = parser.parse_args()

    digits = load_digits()
    x, y = (digits.images / 16.0).astype(np.float32)[:, None], digits.target
    order = np.random.default_rng(0).permutation(len(x))
    train_i, calib_i, test_i = order[:1200], order[1200:1300], order[1300:]
    model = train(x[train_i], y[train_i])
    with torch.no_grad():
        float_accuracy = float((model(torch.from_numpy(x[test_i])).argmax(1).numpy() == y[test_i]).mean())

    board = et.resolve_board("vta-fsim")
    et.export_model(model, args.out / "digits-vta", board, input_shape=(1, 1, 8, 8), calibration=x[calib_i],
                    force=True)
    exported = et.load_export(args.out / "digits-vta")
    for conv in exported.manifest.model["convs"]:
        print(f"conv {conv['module']:3s} {conv['schedule']:8s} {conv['why']}")

    run = exported.run_model(board, x[test_i])
    int8_accuracy = float((run.stacked()[0].argmax(1) == y[test_i]).mean())
    d = run.details
    print(f"accuracy on {len(test_i)} test images: float32 {float_accuracy:.2%}, int8 on VTA {int8_accuracy:.2%}")
    print(f"{'bit-exact' if d['bit_exact'] else 'NOT bit-exact'} with the int8 reference; latency "
          f"{run.latency_s * 1e3:.3f} ms per image (VTA {d['vta_ms']:.3f} ms {d['vta_seconds']}, "
          f"CPU {d['cpu_ms']:.3f} ms)")


if __name__ == "__main__":
    main()
