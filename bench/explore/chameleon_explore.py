"""Quick experiments behind ``chameleon+`` (bench/archive.md, "## Chameleon"), on the replay caches.

``replay``: real tuners (labels as in ``bench_chameleon.py``: ``"chameleon+:rl_elite=0"``) for a short
budget; per layer, the mean trials until the best-so-far is within 1% of ``xgb``'s best after 400 trials
of the same seed (read from ``bench_chameleon.py``'s runs file; runs that never get there count as the
budget and are reported as censored), and the geomean of ``xgb``'s trials over that.

``ceiling``: an idealised model-based loop with no search error (what any search over this cost model
could do): XGBoost on the knob features scores the whole space after every batch, and the batch is the
best-predicted member of each k-means cluster of the top 64 (as ``representative=best``), best first.
Keywords: ``n_init``, ``batch`` (configs between refits), ``loss``, ``init``, ``draw`` (the loop runs with
seed ``seed + draw``, its initial configs and model seeds included, while the target stays the seed's
``xgb`` run: a new sample of the loop's own luck) and ``features`` (``knob``, or ``compile``: knob + the
recorded compile features, as the tuners' ``features=compile``).

    nice -n 10 .venv/bin/python -m bench.explore.chameleon_explore replay --layers C2,C4,C5,C6,C8,C10 \\
        --budget 160 chameleon+ "chameleon+:rl_elite=0"
    nice -n 10 .venv/bin/python -m bench.explore.chameleon_explore ceiling --seeds 5 \
        '{"loss": "rank"}' '{"loss": "reg"}'
    nice -n 10 .venv/bin/python -m bench.explore.chameleon_explore ceiling --seeds 5 --budget 400 \
        '{"batch": 1, "draw": 100}' '{"batch": 1, "features": "compile"}'
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_chameleon import LAYERS, ROOT, make_task, run_one
from toolkit.harness import geomean, trials_to_match


def xgb_reference(runs: Path) -> dict[tuple[str, int], tuple[float, int]]:
    """(layer, seed) -> (xgb's best at 400 trials + 1%, the trial xgb first got there)."""
    out = {}
    for line in runs.read_text().splitlines():
        r = json.loads(line)
        if r["tuner"] == "xgb" and r["budget"] == 400:
            target = r["history"][-1] * 1.01
            out[(r["layer"], r["seed"])] = (target, trials_to_match(r["history"], target, tolerance=0.0))
    return out


def report(rows: dict[str, dict[str, list[int | None]]], ref: dict, layers: list[str], seeds: list[int],
           budget: int) -> None:
    """Print mean trials per layer, the geomean speedup over xgb and the censored count."""
    xgb = [np.mean([ref[(lay, s)][1] for s in seeds]) for lay in layers]
    print("label".ljust(48), " ".join(lay.rjust(6) for lay in layers), " speedup censored")
    print("xgb".ljust(48), " ".join(f"{x:6.0f}" for x in xgb))
    for label, per_layer in rows.items():
        means = [np.mean([n or budget for n in per_layer[lay]]) for lay in layers]
        cens = sum(n is None for lay in layers for n in per_layer[lay])
        print(label.ljust(48), " ".join(f"{m:6.0f}" for m in means),
              f" {geomean([x / m for x, m in zip(xgb, means)]):.2f}x {cens:4d}")


def replay(args: argparse.Namespace, ref: dict, layers: list[str], seeds: list[int]) -> None:
    jobs = [(lay, label, s, args.budget, {}, args.cache_dir) for label in args.configs for lay in layers
            for s in seeds]
    rows: dict[str, dict[str, list[int | None]]] = {c: {lay: [] for lay in layers} for c in args.configs}
    with ProcessPoolExecutor(args.jobs) as pool:
        for r in pool.map(run_one, jobs):
            target = ref[(r["layer"], r["seed"])][0]
            rows[r["tuner"]][r["layer"]].append(trials_to_match(r["history"], target, tolerance=0.0))
    report(rows, ref, layers, seeds, args.budget)


def ceiling_run(space: Any, seconds: np.ndarray, target: float, seed: int, budget: int, n_init: int = 16,
                batch: int = 8, loss: str = "rank", init: str = "random", draw: int = 0,
                X: np.ndarray | None = None) -> int | None:
    """Trials until a config within ``target`` is measured, by the idealised loop (None: not within budget).
    ``X``: the model's features of every config (default: the knob features)."""
    from toolkit.tuning.models.cost import XGBCostModel
    from toolkit.tuning.search.sampling import cardinal_knobs, select_k, spread_sample

    seed += draw
    rng = np.random.default_rng(seed)
    X = space.features(np.arange(space.size)) if X is None else X
    y_all = np.where(np.isfinite(seconds), 1.0 / seconds, 0.0)
    measured = (spread_sample(space, n_init, rng) if init == "spread"
                else [int(i) for i in rng.choice(space.size, n_init, replace=False)])
    fits = 0
    while len(measured) < budget and seconds[measured].min() > target:
        model = XGBCostModel(loss=loss, seed=seed + fits, plan_size=64).fit(X[measured], y_all[measured])
        fits += 1
        pred = model.predict(X)
        pred[measured] = -np.inf
        cands = np.argsort(-pred, kind="stable")[:64]
        points = space.knob_indices_array(cands)[:, cardinal_knobs(space.dims, 2)].astype(np.float64)
        labels = select_k(points, rng).labels
        firsts = sorted(int(np.flatnonzero(labels == c)[0]) for c in np.unique(labels))
        measured += [int(cands[j]) for j in firsts][:batch]
    hits = [i for i, m in enumerate(measured[:budget]) if seconds[m] <= target]
    return hits[0] + 1 if hits else None


def compile_matrix(space: Any, records: list[Any]) -> np.ndarray:
    """Knob features + the recorded compile features (``sim.*`` counters stripped; NaN where the build
    failed) of every config: what ``features=compile`` gives the tuners."""
    from toolkit.tuning.replay import compile_features_of
    from toolkit.tuning.tuners.model_based import feature_matrix

    comp = feature_matrix([compile_features_of(r.features or {}) for r in records])
    return np.hstack([space.features(np.arange(space.size)), comp])


def ceiling(args: argparse.Namespace, ref: dict, layers: list[str], seeds: list[int]) -> None:
    from toolkit.tuning.replay import MeasurementCache

    rows: dict[str, dict[str, list[int | None]]] = {c: {lay: [] for lay in layers} for c in args.configs}
    for lay in layers:
        cache = MeasurementCache.from_log(Path(args.cache_dir) / f"{lay}.jsonl")
        space = make_task(lay).space
        records = [cache.lookup(i) for i in range(space.size)]
        seconds = np.array([r.seconds for r in records])
        for config in args.configs:
            kwargs = json.loads(config)
            X = compile_matrix(space, records) if kwargs.pop("features", "knob") == "compile" else None
            for s in seeds:
                rows[config][lay].append(ceiling_run(space, seconds, ref[(lay, s)][0], s, args.budget, X=X,
                                                     **kwargs))
    report(rows, ref, layers, seeds, args.budget)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("replay", "ceiling"))
    p.add_argument("configs", nargs="+", help="replay: tuner labels; ceiling: JSON keyword sets of the loop")
    p.add_argument("--layers", default=",".join(LAYERS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--budget", type=int, default=160)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cache-dir", default=str(ROOT / "bench" / "out" / "tuning-cache"))
    p.add_argument("--runs", default=str(ROOT / "bench" / "out" / "chameleon-runs.jsonl"),
                   help="bench_chameleon.py's runs file (xgb's 400-trial runs are the reference)")
    args = p.parse_args(argv)
    ref = xgb_reference(Path(args.runs))
    layers, seeds = args.layers.split(","), list(range(args.seeds))
    missing = sorted({(lay, s) for lay in layers for s in seeds} - set(ref))
    if missing:
        p.error(f"no 400-trial xgb run for {missing[:3]}...: run bench_chameleon.py with enough --seeds first")
    (replay if args.mode == "replay" else ceiling)(args, ref, layers, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
