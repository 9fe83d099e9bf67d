"""What the first-round pool (``prior_pool``) costs a whole network: ResNet-18 tuned as ``bench.bench_time_to_tune``
tunes it (replayed, board time modelled the same way), ``ml2tuner+`` with each pool, until every task is at its
space's exact optimum.

    .venv/bin/python -m bench.explore.pool_network_explore --settings pynq-own,zcu102-tvm --pools 512,1024 --seeds 5

Prints, per setting and pool, each seed's trials and modelled board minutes, and their median and mean.
"""

from __future__ import annotations

import argparse
import statistics

from bench.bench_testset import per_trial_board_s
from bench.bench_time_to_tune import SETTINGS, run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--pools", default="512,1024")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=3000)
    args = ap.parse_args(argv)
    board_s, _ = per_trial_board_s()
    for setting in args.settings.split(","):
        for pool in (int(p) for p in args.pools.split(",")):
            ends = [run(setting, "ml2tuner+", seed, args.trials, board_s, {"prior_pool": pool})["rounds"][-1]
                    for seed in range(args.seeds)]
            minutes = [e[1] / 60 for e in ends]
            print(f"{setting} prior_pool={pool}: trials {[e[0] for e in ends]}, board min "
                  f"{[round(m, 1) for m in minutes]}, median {statistics.median(minutes):.1f}, "
                  f"mean {statistics.mean(minutes):.1f}", flush=True)


if __name__ == "__main__":
    main()
