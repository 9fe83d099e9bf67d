"""How the transfer tuners' options were chosen: on the development set, each layer tuned with a transfer model
fitted on the other nine (leave one layer out), so no figure comes from a model that saw the layer.

    .venv/bin/python -m bench.explore.transfer_explore --layers C2,C4,C6,C8,C10 --seeds 3 --pools 256,1024

Prints, per (tuner, prior_pool): trials to the exact optimum (geomean, budget if never), runs at the optimum,
mean regret at trial 10, and the same for a cold start.
"""

from __future__ import annotations

import argparse

from toolkit.backends import board_for, make_task
from toolkit.backends.vta.pretrained import SETTINGS
from bench.pretrain import CACHE_DIRS, development_records
from toolkit.harness import CompileReplayBuilder, find_cache, geomean
from toolkit.tuning.metrics import regret_at, trials_to_optimum
from toolkit.tuning.models.transfer import TransferModel
from toolkit.tuning.replay import CachedRunner
from toolkit.tuning.session import tune
from toolkit.tuning.tuners.base import make_tuner
from toolkit.workloads.splits import development_set


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="pynq", choices=list(SETTINGS))
    ap.add_argument("--layers", default="C2,C4,C6,C8,C10")
    ap.add_argument("--tuners", default="ml2tuner,chameleon-ml2")
    ap.add_argument("--pools", default="256,1024")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=100)
    args = ap.parse_args(argv)
    board = board_for("vta-fsim", preset=args.preset)
    dev = development_set()
    records = development_records(args.preset)
    rows: dict[tuple[str, str], list[tuple[int, bool, float]]] = {}
    for layer in args.layers.split(","):
        i = next(j for j, w in enumerate(dev) if w.name == f"resnet18.{layer}")
        task = make_task(dev[i], board, **SETTINGS[args.preset])
        cache = find_cache(task, list(CACHE_DIRS))
        optimum = cache.best().seconds
        model = TransferModel(seed=0).fit([t for j, t in enumerate(records) if j != i])
        for name in args.tuners.split(","):
            for pool in ["cold", *args.pools.split(",")]:
                for seed in range(args.seeds):
                    opts = {} if pool == "cold" else {"transfer": model, "prior_pool": int(pool)}
                    s = tune(task, make_tuner(name, seed=seed, **opts), args.trials,
                             builder=CompileReplayBuilder.for_task(task, cache), runner=CachedRunner(cache),
                             target_seconds=optimum)
                    h = s.to_json()["history"]
                    t = trials_to_optimum(h, optimum)
                    rows.setdefault((name, pool), []).append((t or args.trials, t is not None,
                                                              regret_at(h, optimum, 10)))
                print(layer, name, pool, rows[(name, pool)][-args.seeds:], flush=True)
    for (name, pool), vals in rows.items():
        print(f"{name:14s} pool {pool:5s}: trials to optimum {geomean(v[0] for v in vals):6.1f}, "
              f"reached {sum(v[1] for v in vals)}/{len(vals)}, regret@10 {sum(v[2] for v in vals) / len(vals):.4f}")


if __name__ == "__main__":
    main()
