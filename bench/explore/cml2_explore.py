"""Quick experiments on ``ml2tuner``'s and ``chameleon-ml2``'s options, against the headline runs.

Replays the tuner with the given options (and ``xgb``, the reference) on one headline setting and
prints, over the (layer, seed) runs, two figures for the variant and for the headline's ``ml2tuner``
and ``chameleon-ml2`` (defaults) on the same runs:

- ``ratio``: geometric mean of trials-to-match (within 1 %) / xgb's own trials-to-match (< 1: faster
  than ``xgb``; the headline's figure);
- ``reach``: mean of trials to reach xgb's best (<=) / budget (the ML2Tuner section's figure, target 12 %)::

    nice -n 10 .venv/bin/python -m bench.explore.cml2_explore zcu102 '{"loss": "rank", "rl_elite": 0.5}' --seeds 2
    nice -n 10 .venv/bin/python -m bench.explore.cml2_explore pynq '{"plan_size": 8}' --tuner ml2tuner --seeds 5
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from toolkit.backends import board_for
from toolkit.harness import BenchResult, expand_workloads, geomean, run_bench, trials_to_match

from bench.headline import CACHES, OUT, SETTINGS

COMPARED = ("ml2tuner", "chameleon-ml2")


def _figures(run, xgb) -> tuple[float, float]:
    """(trials-to-match / xgb's, trials to reach xgb's final best / budget) of one run."""
    ratio = (run.trials_to_match or run.trials) / (xgb.trials_to_match or xgb.trials)
    hist = [h if h is not None else float("inf") for h in run.history]
    budget = len(xgb.history)
    return ratio, (trials_to_match(hist, xgb.best(), tolerance=1e-9) or budget) / budget


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting", choices=("pynq", "zcu102"))
    ap.add_argument("options", help="the tuner's options as JSON")
    ap.add_argument("--tuner", choices=COMPARED, default="chameleon-ml2")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--layers", default=",".join(SETTINGS["pynq"]["layers"]))
    ap.add_argument("--out", type=Path, help="also save the replayed runs (edgetune bench JSON)")
    args = ap.parse_args(argv)
    board = board_for("vta-fsim", preset="zcu102" if args.setting == "zcu102" else None)
    wls = expand_workloads([f"resnet18.{x}" for x in args.layers.split(",")])
    res = run_bench(board, wls, ["xgb", args.tuner], SETTINGS[args.setting]["trials"], args.seeds,
                    template_options={"tvm_compat": True} if args.setting == "zcu102" else {}, cache_dirs=CACHES,
                    tuner_options={args.tuner: json.loads(args.options)})
    if args.out:
        args.out.write_text(json.dumps(res.to_json(), indent=1))
    head = {(r.tuner, r.workload, r.seed): r for r in BenchResult.load(OUT / f"{args.setting}.json").runs}
    figs: dict[str, list[tuple[float, float]]] = {"variant": [], **{t: [] for t in COMPARED}}
    for r in res.runs:
        key = (r.workload, r.seed)
        xgb = head.get(("xgb", *key))
        if r.tuner != args.tuner or xgb is None or any((t, *key) not in head for t in COMPARED):
            continue
        figs["variant"].append(_figures(r, xgb))
        for t in COMPARED:
            figs[t].append(_figures(head[(t, *key)], xgb))
    print(json.dumps({"setting": args.setting, "tuner": args.tuner, "options": json.loads(args.options),
                      "runs": len(figs["variant"]),
                      **{k: {"ratio": round(geomean([a for a, _ in v]), 4),
                             "reach": round(float(np.mean([b for _, b in v])), 4)} for k, v in figs.items()}}))


if __name__ == "__main__":
    main()
