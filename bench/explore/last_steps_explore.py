"""Where `ml2tuner+` spends its last trials: after its best is within 0.2 % of a layer's optimum, round by round,
which part of the tuner keeps the optimum from being measured.

    .venv/bin/python -m bench.explore.last_steps_explore --preset zcu102 --layers resnet50.L6,resnet50.L19 --seeds 10

Replays each layer's exhaustive log with the preset's shipped transfer model (the test set's layers: nothing
here is chosen, only counted). Before each round is measured it asks where the optimum (every config at the
optimum's time) stands:

- ``measured this round``: in the round's plan;
- ``compiled, not chosen``: compiled and not measured; printed with its rank by the ranking ModelA (or, before
  ModelA, the transfer model) gives all compiled, unmeasured configs, and whether ModelV or the post-compile
  validity check rejects it (a rejected config competes only for the round's exploration slots);
- ``never proposed``: not compiled: no round's candidates held it (every candidate is compiled, ModelV's rejects
  too, for the exploration slots), with whether ModelV would reject it.

ModelP's rank of the optimum over the whole space (what the explorer searches with) is printed as ``P``.

It also counts the space's configs within 0.2 % of the optimum, and whether each round's ranking ModelA had the
transferred estimate (``prior``) or the task's own features (``own``).
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import numpy as np

from bench.bench_testset import CACHE, DEV_CACHE, SETTINGS, board_for
from toolkit.backends import make_task
from toolkit.backends.vta.pretrained import load_pretrained
from toolkit.harness import CompileReplayBuilder, find_cache
from toolkit.tuning.replay import CachedRunner
from toolkit.tuning.session import tune
from toolkit.tuning.tuners.ml2tuner import ML2Tuner
from toolkit.workloads import parse_workload

NEAR = 0.002


class Watched(ML2Tuner):
    """`ml2tuner` that records, before each round, where the optimum stands."""

    name = "ml2tuner-watched"

    def watch(self, optimum: set[int], seconds: dict[int, float], best: float) -> None:
        self.optimum, self.seconds, self.best_s, self.log = optimum, seconds, best, []

    def _plan(self) -> list[int]:
        plan = super()._plan()
        done = [self.seconds[x] for x in self.xs if x in self.seconds]
        gap = min(done) / self.best_s - 1 if done else float("inf")
        if self.optimum & self.visited:
            return plan
        row: dict[str, Any] = {"trials": len(self.xs), "gap": gap,
                               "model": "own" if self.model_a is not None and self.model_a is self._a_pair.get("own")
                               else ("prior" if self.model_a is not None else "none")}
        if self.optimum & set(plan):
            row["state"] = "measured this round"
        else:
            left = [i for i in self.compiled.features if i not in self.visited]
            compiled = sorted(self.optimum & set(left))
            opt = compiled or sorted(self.optimum - self.compiled.failed)
            v_rejects = self.model_v is not None and not self.model_v.predict(self.model_features(opt)).any()
            if compiled:
                ranked = self._rank(left)
                row["rank"] = min(ranked.index(i) for i in compiled) + 1
                vh_rejects = self.model_vh is not None and not self.model_vh.predict(self._features_a(opt)).any()
                row["state"] = "compiled, not chosen" + (
                    ", ModelV rejects it" if v_rejects else ", the post-compile check rejects it" if vh_rejects else "")
            else:
                row["state"] = "never proposed" + (", ModelV would reject it" if v_rejects else "")
            if self.model is not None:
                scores = self.model.predict(self.model_features(np.arange(self.space.size)))
                row["p_rank"] = int(min((scores > scores[i]).sum() for i in opt)) + 1
        self.log.append(row)
        return plan


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="zcu102", choices=list(SETTINGS))
    ap.add_argument("--layers", required=True, help="comma- or semicolon-separated workloads")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--prior-pool", type=int, default=512, help="the first round's pool (ml2tuner's prior_pool)")
    args = ap.parse_args(argv)
    s = SETTINGS[args.preset]
    board, model = board_for(s["preset"]), load_pretrained(s["preset"])
    states: Counter[str] = Counter()
    models: Counter[str] = Counter()
    ranks: list[int] = []
    for label in args.layers.split(";" if ";" in args.layers else ","):
        task = make_task(parse_workload(label), board, **s["options"])
        cache = find_cache(task, [CACHE, DEV_CACHE])
        records = {i: cache.lookup(i) for i in range(task.space.size)}
        seconds = {i: r.seconds for i, r in records.items() if r.valid}
        best = min(seconds.values())
        optimum = {i for i, v in seconds.items() if v <= best}
        near = sum(v <= best * (1 + NEAR) for v in seconds.values())
        for seed in range(args.seeds):
            tuner = Watched(seed=seed, transfer=model, prior_pool=args.prior_pool)
            tuner.watch(optimum, seconds, best)
            summary = tune(task, tuner, args.trials, builder=CompileReplayBuilder.for_task(task, cache),
                           runner=CachedRunner(cache), target_seconds=best)
            tail = [r for r in tuner.log if r["gap"] <= NEAR]
            for r in tail:
                states[r["state"]] += 1
                models[r["model"]] += 1
                if "rank" in r:
                    ranks.append(r["rank"])
            print(f"{label} seed {seed}: {summary.trials} trials, {len(optimum)} at the optimum, {near} within "
                  f"0.2 %; rounds within 0.2 %: " + "; ".join(
                      f"t{r['trials']} {r['state']}" + (f" {r['rank']}" if "rank" in r else "")
                      + (f" (P {r['p_rank']})" if "p_rank" in r else "") + f" [{r['model']}]" for r in tail),
                  flush=True)
    total = sum(states.values())
    print(f"rounds planned with the best within 0.2 % and the optimum not yet measured: {total}")
    for state, n in states.most_common():
        print(f"  {state}: {n} ({n / max(total, 1):.0%})")
    print("  ranking ModelA: " + ", ".join(f"{k} {v}" for k, v in models.most_common()))
    if ranks:
        print(f"  ModelA's rank of the optimum where compiled: median {int(np.median(ranks))}, "
              f"quartiles {int(np.percentile(ranks, 25))}-{int(np.percentile(ranks, 75))}")


if __name__ == "__main__":
    main()
