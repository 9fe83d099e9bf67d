"""Rebuild the transfer models edgetune ships (toolkit/backends/vta/pretrained/), from the development set only.

    .venv/bin/python -m bench.pretrain            # or: make pretrained (builds the exhaustive logs first, ~1 h)
    .venv/bin/python -m bench.pretrain --presets pynq --check   # leave-one-layer-out figures, writes nothing

``--check`` fits, for each development layer, a model on the other nine and reports how it ranks the
held-out layer's configs (the regret of its top 1 and top 8): the figures its options were chosen on.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from toolkit.backends import make_task
from toolkit.backends.vta.backend import with_vta_preset
from toolkit.backends.vta.pretrained import FOLDER, SETTINGS, model_path
from toolkit.harness import ensure_cache
from toolkit.boards import resolve_board
from toolkit.cluster import ENV_ADDRESS
from toolkit.tuning.replay import compile_features_of, current_compile_features
from toolkit.workloads.splits import development_set
from toolkit.tuning.models.transfer import TaskRecords, TransferModel

CACHE_DIRS = ("bench/out/headline-cache",)
"""Exhaustive simulator logs of the development layers are looked up (and built) here by default."""


def development_records(preset: str, cache_dirs: Sequence[str | Path] = CACHE_DIRS,
                        progress: Any = None, cluster: str | None = None) -> list[TaskRecords]:
    """Every valid config of each development layer on ``preset`` (compile features, seconds); missing exhaustive
    logs are swept on the Ray cluster at ``cluster`` when given."""
    board = with_vta_preset(resolve_board("vta-fsim"), preset)
    out = []
    for wl in development_set():
        task = make_task(wl, board, **SETTINGS[preset])
        cache = ensure_cache(task, list(cache_dirs), progress, cluster)
        out.append([(current_compile_features(task.template, compile_features_of(r.features)), r.seconds)
                    for r in cache.by_index.values() if r.valid])
    return out


def train(preset: str, tasks: Sequence[TaskRecords], **options: Any) -> TransferModel:
    """The model of ``preset`` from its development records."""
    what = "own space" if not SETTINGS[preset] else "TVM-compatible space"
    return TransferModel(seed=0, **options).fit(
        tasks, trained_on=f"VTA simulator, {preset} preset, {what}: ResNet-18 C2-C11 (development set), "
                          f"{sum(len(t) for t in tasks)} valid configs")


def top_regret(model: TransferModel, task: TaskRecords, k: int) -> float:
    """Best of the model's top ``k`` configs of ``task`` / the task's optimum - 1."""
    pred = model.predict_seconds([f for f, _ in task])
    secs = np.array([s for _, s in task])
    return float(secs[np.argsort(pred, kind="stable")[:k]].min() / secs.min() - 1)


def leave_one_out(tasks: Sequence[TaskRecords], **options: Any) -> list[tuple[float, float]]:
    """Per development layer: (top-1 regret, top-8 regret) of a model fitted on the other layers."""
    out = []
    for i, held in enumerate(tasks):
        model = TransferModel(seed=0, **options).fit([t for j, t in enumerate(tasks) if j != i])
        out.append((top_regret(model, held, 1), top_regret(model, held, 8)))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    ap.add_argument("--cache-dir", action="append", help=f"exhaustive logs (default {CACHE_DIRS[0]})")
    ap.add_argument("--check", action="store_true", help="report leave-one-layer-out figures, write nothing")
    ap.add_argument("--cluster", default=os.environ.get(ENV_ADDRESS), metavar="HOST:PORT",
                    help="sweep missing exhaustive logs on this Ray cluster (default $EDGETUNE_CLUSTER)")
    args = ap.parse_args(argv)
    FOLDER.mkdir(exist_ok=True)
    for preset in args.presets.split(","):
        tasks = development_records(preset, args.cache_dir or CACHE_DIRS, cluster=args.cluster)
        if args.check:
            for inputs in ("shares", "all"):
                loo = np.array(leave_one_out(tasks, inputs=inputs))
                print(f"{preset} inputs={inputs}: held-out top-1 regret geomean "
                      f"{math.exp(np.log1p(loo[:, 0]).mean()) - 1:.4f} (max {loo[:, 0].max():.4f}), "
                      f"top-8 {math.exp(np.log1p(loo[:, 1]).mean()) - 1:.4f} (max {loo[:, 1].max():.4f})",
                      flush=True)
            continue
        model = train(preset, tasks)
        model.save(model_path(preset))
        print(f"{model_path(preset).name}: {model.trained_on_} ({model_path(preset).stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
