"""Quick experiments on ``chameleon-ml2``'s options, against ``ml2tuner`` from the headline runs.

Replays ``chameleon-ml2`` with the given options (and ``xgb``, the reference) on one headline setting
and prints, over the (layer, seed) runs, the geometric mean of trials-to-match / xgb's own
trials-to-match for the variant, for the headline's ``ml2tuner`` and for the headline's
``chameleon-ml2`` (defaults) on the same runs (< 1: faster than ``xgb``)::

    nice -n 10 .venv/bin/python -m bench.cml2_explore zcu102 '{"loss": "rank", "rl_elite": 0.5}' --seeds 2
"""

from __future__ import annotations

import argparse
import json

from toolkit.boards import resolve_board, with_vta_preset
from toolkit.tuning.bench import BenchResult, expand_workloads, geomean, run_bench

from bench.headline import CACHES, OUT, SETTINGS


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting", choices=("pynq", "zcu102"))
    ap.add_argument("options", help="chameleon-ml2 options as JSON")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--layers", default=",".join(SETTINGS["pynq"]["layers"]))
    args = ap.parse_args(argv)
    board = with_vta_preset(resolve_board("vta-fsim"), "zcu102" if args.setting == "zcu102" else None)
    wls = expand_workloads([f"resnet18.{x}" for x in args.layers.split(",")], board.profile.family)
    res = run_bench(board, wls, ["xgb", "chameleon-ml2"], SETTINGS[args.setting]["trials"], args.seeds,
                    template_options={"tvm_compat": True} if args.setting == "zcu102" else {}, cache_dirs=CACHES,
                    tuner_options={"chameleon-ml2": json.loads(args.options)})
    head = BenchResult.load(OUT / f"{args.setting}.json")
    ttm = {(r.tuner, r.workload, r.seed): r.trials_to_match or r.trials for r in head.runs}
    ratios: dict[str, list[float]] = {"variant": [], "ml2tuner": [], "chameleon-ml2": []}
    for r in res.runs:
        key = (r.workload, r.seed)
        ref = ttm.get(("xgb", *key))
        if r.tuner != "chameleon-ml2" or not ref or any((t, *key) not in ttm for t in ("ml2tuner", "chameleon-ml2")):
            continue
        ratios["variant"].append((r.trials_to_match or r.trials) / ref)
        for t in ("ml2tuner", "chameleon-ml2"):
            ratios[t].append(ttm[(t, *key)] / ref)
    print(json.dumps({"setting": args.setting, "options": json.loads(args.options), "runs": len(ratios["variant"]),
                      **{k: geomean(v) for k, v in ratios.items()}}))


if __name__ == "__main__":
    main()
