"""Chameleon (``chameleon``, ``rl``, ``sa-as``) against AutoTVM (``xgb``) on vta-fsim, ResNet-18 C2-C11.

Every tuner runs through :func:`toolkit.tuning.session.tune` with :class:`ReplayBuilder` /
:class:`CachedRunner`: the measurements are **replayed** from an exhaustive simulator cache per layer
(a ``grid`` tuning log of every config), so many seeds are affordable; a missing cache is built first
with the real simulator (``--cache-dir``, default ``bench/out/tuning-cache``, shared with
``bench/bench_tuning.py``).

Metrics, per layer, over seeds (same seeds for every tuner):
- *trials to xgb's best*: the first trial whose best latency is within 1% of ``xgb``'s best after
  ``--budget`` trials of the same seed (for ``xgb`` itself: when it first got within 1% of its final
  best); a run that never gets there counts as ``--budget`` and is reported as censored;
- *best latency at the budget*, relative to ``xgb`` (mean over seeds);
- *search steps per round*: cost-model queries (configs scored) per cost-model fit;
- *tuner wall time per round*: time inside ``propose``/``update`` per fit.

    .venv/bin/python bench/bench_chameleon.py --seeds 5 --write-docs
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.harness import cpu_name, geomean, trials_to_match, write_doc_section

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [f"C{i}" for i in range(2, 12)]
TUNERS = ["xgb", "chameleon", "chameleon+", "rl", "sa-as"]
TARGETS = {"reach_speedup": 3.0, "worst_layer_rel_xgb": 1.01, "query_ratio": 2.0, "tuner_s_per_round": 5.0}
"""The issue's targets: >= 3x fewer trials to xgb's best (geomean), no layer > 1% slower than xgb and a
geomean below 1, >= 2x fewer cost-model queries per round than SA, <= 5 s of tuner time per round."""
SECTION = "## Chameleon"


def cache_path(cache_dir: Path, layer: str) -> Path:
    """The exhaustive cache of a layer (shared with ``bench/bench_tuning.py``)."""
    return cache_dir / f"{layer}.jsonl"


def make_task(layer: str):
    from toolkit.backends import board_for, make_task as backend_task
    from toolkit.workloads import parse_workload

    return backend_task(parse_workload(f"resnet18.{layer}"), board_for("vta-fsim"))


def ensure_cache(layer: str, cache_dir: Path, build: bool = True) -> str | None:
    """Build the exhaustive cache of ``layer`` with the simulator (:func:`toolkit.harness.exhaustive_cache`: a grid
    run, resumed; a stale cache is set aside and measured again). Returns a status line, or None when the cache is
    incomplete and ``build`` is off."""
    from toolkit.harness import exhaustive_cache
    from toolkit.tuning.replay import MeasurementCache

    path = cache_path(cache_dir, layer)
    task = make_task(layer)
    if not build and (not path.exists() or len(MeasurementCache.from_log(path)) < task.space.size):
        return None
    t0 = time.perf_counter()
    exhaustive_cache(task, path)
    return f"{layer}: {task.space.size} configs cached ({time.perf_counter() - t0:.0f} s)"


def run_one(job: tuple[str, str, int, int, dict[str, Any], str]) -> dict[str, Any]:
    """Tune one (layer, tuner, seed) from the cache (:func:`toolkit.harness.run_one`); returns its best-so-far
    curve and counters."""
    layer, label, seed, budget, options, cache_dir = job
    tuner_name, label_options = parse_label(label)
    from toolkit.harness import run_one as bench_run
    from toolkit.tuning.replay import CachedRunner, MeasurementCache, ReplayBuilder
    from toolkit.tuning.tuners import make_tuner

    cache = MeasurementCache.from_log(cache_path(Path(cache_dir), layer))
    tuner = make_tuner(tuner_name, seed=seed, **{**label_options, **options})
    run = bench_run(make_task(layer), tuner, budget, label=label, builder=ReplayBuilder(cache),
                    runner=CachedRunner(cache))
    best = cache.best()
    return {"layer": layer, "tuner": label, "seed": seed, "budget": budget, "options": options,
            "history": [h if h is not None else math.inf for h in run.history], "tuner_s": run.tuner_s,
            "cpu_s": run.cpu_s, "stats": run.stats,
            "optimum_s": best.seconds if best else None}


def parse_label(label: str) -> tuple[str, dict[str, Any]]:
    """``"chameleon:reduction=sample,k_rule=stop"`` -> the tuner name and its options (values parsed as JSON
    where they parse, else kept as strings)."""
    name, _, rest = label.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return name, options


def run_key(layer: str, tuner: str, seed: int, budget: int, options: dict[str, Any]) -> str:
    return json.dumps([layer, tuner, seed, budget, options], sort_keys=True)


def summarise(runs: list[dict[str, Any]], tuners: list[str], layers: list[str], budget: int) -> dict[str, Any]:
    """Per-layer and geomean metrics of every tuner against ``xgb``."""
    by = {(r["layer"], r["tuner"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    out: dict[str, Any] = {"layers": {}, "geomean": {}}
    for layer in layers:
        row: dict[str, Any] = {}
        for t in tuners:
            reach, censored, best_rel, q_round, s_round, c_round = [], 0, [], [], [], []
            for s in seeds:
                base, run = by[(layer, "xgb", s)], by[(layer, t, s)]
                target = base["history"][budget - 1] * 1.01
                n = trials_to_match(run["history"], target, tolerance=0.0)
                if n is None:
                    censored += 1
                reach.append(n or budget)
                best_rel.append(run["history"][budget - 1] / base["history"][budget - 1])
                fits = max(run["stats"].get("fits", 0.0), 1.0)
                q_round.append(run["stats"].get("model_queries", 0.0) / fits)
                s_round.append(run["tuner_s"] / fits)
                c_round.append(run.get("cpu_s", math.nan) / fits)
            row[t] = {"trials_to_xgb_best": float(np.mean(reach)), "censored": censored,
                      "best_rel_xgb": float(np.mean(best_rel)), "queries_per_round": float(np.mean(q_round)),
                      "tuner_s_per_round": float(np.mean(s_round)), "cpu_s_per_round": float(np.mean(c_round)),
                      "best_rel_optimum": float(np.mean([by[(layer, t, s)]["history"][budget - 1]
                                                         / by[(layer, t, s)]["optimum_s"] for s in seeds]))}
        for t in tuners:
            row[t]["reach_speedup"] = row["xgb"]["trials_to_xgb_best"] / row[t]["trials_to_xgb_best"]
            row[t]["query_ratio"] = row["xgb"]["queries_per_round"] / max(row[t]["queries_per_round"], 1e-9)
        out["layers"][layer] = row
    for t in tuners:
        rows = [out["layers"][lay][t] for lay in layers]
        out["geomean"][t] = {
            "reach_speedup": geomean([r["reach_speedup"] for r in rows]),
            "best_rel_xgb": geomean([r["best_rel_xgb"] for r in rows]),
            "worst_layer_rel_xgb": max(r["best_rel_xgb"] for r in rows),
            "query_ratio": geomean([r["query_ratio"] for r in rows]),
            "tuner_s_per_round_max": max(r["tuner_s_per_round"] for r in rows),
            "cpu_s_per_round_max": float(np.nanmax([r["cpu_s_per_round"] for r in rows]))
            if any(math.isfinite(r["cpu_s_per_round"]) for r in rows) else math.nan,
            "censored": sum(r["censored"] for r in rows),
        }
    return out


def markdown(summary: dict[str, Any], tuners: list[str], layers: list[str], args: argparse.Namespace) -> str:
    """The ``## Chameleon`` section of bench/archive.md."""
    lines = [
        SECTION, "",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}; date "
        f"{dt.date.today().isoformat()}; load average {os.getloadavg()[0]:.1f} at the end (the machine is "
        "shared: wall times are inflated, CPU times are each run's own process time).",
        f"Command: `{'nice -n ' + str(os.nice(0)) + ' ' if os.nice(0) else ''}"
        f".venv/bin/python bench/bench_chameleon.py --seeds {args.seeds} --budget {args.budget}"
        f"{' --layers ' + ','.join(layers) if layers != LAYERS else ''}"
        f"{' --tuners ' + repr(args.tuners) if args.tuners != ' '.join(TUNERS) else ''}"
        f"{' --options ' + repr(args.options) if args.options != '{}' else ''} --write-docs`",
        "",
        f"vta-fsim, ResNet-18 {layers[0]}-{layers[-1]}, {args.seeds} seeds, budget {args.budget} trials, batch 8. "
        "Measurements are **replayed** from exhaustive simulator caches (every config of each layer "
        "measured once with the simulator), so every tuner sees identical measurements.",
        "",
        *([f"`chameleon+` is `chameleon` with {plus_changes()} (docs/tuners.md); every other option is the "
           "reference's.", ""] if "chameleon+" in tuners else []),
        "Per layer: trials for each tuner's best-so-far to get within 1% of `xgb`'s best at the budget "
        "(same seed; mean over seeds; `*` = some runs never got there, counted as the budget) and best "
        "latency at the budget relative to `xgb` (< 1 is faster).",
        "",
        "| layer | " + " | ".join(f"{t} trials" for t in tuners) + " | " + " | ".join(
            f"{t} lat/xgb" for t in tuners[1:]) + " |",
        "|---" * (2 * len(tuners)) + "|",
    ]
    for layer in layers:
        row = summary["layers"][layer]
        cells = [f"{row[t]['trials_to_xgb_best']:.0f}{'*' if row[t]['censored'] else ''}" for t in tuners]
        cells += [f"{row[t]['best_rel_xgb']:.3f}" for t in tuners[1:]]
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    lines += ["", "| tuner | trials-to-xgb-best speedup (geomean) | latency/xgb geomean | worst layer | "
              "censored runs | queries/round | query ratio vs xgb (SA) | tuner wall s/round (max layer) | "
              "tuner CPU s/round (max layer) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for t in tuners:
        g = summary["geomean"][t]
        qpr = geomean([summary["layers"][lay][t]["queries_per_round"] for lay in layers])
        lines.append(f"| {t} | {g['reach_speedup']:.2f}x | {g['best_rel_xgb']:.3f} | {g['worst_layer_rel_xgb']:.3f} | "
                     f"{g['censored']} | {qpr:.0f} | {g['query_ratio']:.2f}x | {g['tuner_s_per_round_max']:.2f} | "
                     f"{g['cpu_s_per_round_max']:.2f} |")
    lines += ["", "Targets, per tuner against `xgb`:", ""]
    for t in tuners[1:]:
        lines.append(f"- `{t}`: " + "; ".join(target_verdicts(summary["geomean"][t])) + ".")
    return "\n".join(lines) + "\n"


def plus_changes() -> str:
    """What ``chameleon+`` sets, as ``name=value`` pairs."""
    from toolkit.tuning.tuners.chameleon import PLUS_DEFAULTS

    return ", ".join(f"`{k}={v}`" for k, v in PLUS_DEFAULTS.items())


def target_verdicts(g: dict[str, Any]) -> list[str]:
    """One "met"/"missed" phrase per target, with the numbers, from a tuner's geomean row."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    cpu = g["cpu_s_per_round_max"]
    lat, worst = g["best_rel_xgb"], g["worst_layer_rel_xgb"]
    lat_ok = lat < 1 and worst <= TARGETS["worst_layer_rel_xgb"]
    return [
        f"trials to xgb's best: speedup {g['reach_speedup']:.2f}x (target >= {TARGETS['reach_speedup']:.0f}x "
        f"fewer trials): {verdict(g['reach_speedup'] >= TARGETS['reach_speedup'])}",
        f"latency geomean {lat:.4f} of xgb's, worst layer {worst:.4f} (target < 1 and <= "
        f"{TARGETS['worst_layer_rel_xgb']:.2f}): {verdict(lat_ok)}"
        + (f" ({(1 - lat) * 100:.2f}% better)" if lat_ok else ""),
        f"cost-model queries per round {g['query_ratio']:.2f}x fewer than SA (target >= "
        f"{TARGETS['query_ratio']:.0f}x): {verdict(g['query_ratio'] >= TARGETS['query_ratio'])}",
        f"tuner CPU per round {cpu:.2f} s at most (target <= {TARGETS['tuner_s_per_round']:.0f} s): "
        f"{verdict(cpu <= TARGETS['tuner_s_per_round'])}",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budget", type=int, default=400)
    p.add_argument("--layers", default=",".join(LAYERS))
    p.add_argument("--tuners", default=" ".join(TUNERS),
                   help='space-separated tuners, each optionally with options: '
                        '"chameleon:reduction=sample,k_rule=stop"')
    p.add_argument("--options", default="{}", help='JSON {"tuner": {option: value}} applied to that tuner')
    p.add_argument("--cache-dir", default=str(ROOT / "bench" / "out" / "tuning-cache"))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--runs", default=str(ROOT / "bench" / "out" / "chameleon-runs.jsonl"),
                   help="one JSON line per finished run; runs already there are reused (resumable)")
    p.add_argument("--skip-incomplete", action="store_true", help="skip layers whose cache is incomplete")
    p.add_argument("--cache-only", action="store_true", help="only build the exhaustive caches")
    p.add_argument("--write-docs", action="store_true", help="write the section of bench/archive.md")
    args = p.parse_args(argv)
    layers, tuners = args.layers.split(","), args.tuners.split()
    if tuners[0] != "xgb":
        tuners = ["xgb"] + [t for t in tuners if t != "xgb"]
    options = json.loads(args.options)
    ready = []
    for layer in layers:
        status = ensure_cache(layer, Path(args.cache_dir), build=not args.skip_incomplete)
        print(status or f"{layer}: cache incomplete, skipped", flush=True)
        if status:
            ready.append(layer)
    layers = ready
    if args.cache_only:
        return 0
    runs_path = Path(args.runs)
    done = {}
    if runs_path.exists():
        for line in runs_path.read_text().splitlines():
            r = json.loads(line)
            done[run_key(r["layer"], r["tuner"], r["seed"], r["budget"], r["options"])] = r
    jobs = [(lay, t, s, args.budget, options.get(t, {}), args.cache_dir)
            for lay in layers for s in range(args.seeds) for t in tuners]
    todo = [j for j in jobs if run_key(*j[:5]) not in done]
    runs_path.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool, runs_path.open("a") as sink:
        for i, r in enumerate(pool.map(run_one, todo), 1):
            done[run_key(r["layer"], r["tuner"], r["seed"], r["budget"], r["options"])] = r
            sink.write(json.dumps(r) + "\n")
            sink.flush()
            print(f"[{i}/{len(todo)}] {r['layer']} {r['tuner']} seed {r['seed']}: "
                  f"best {r['history'][-1] * 1e3:.3f} ms, tuner {r['tuner_s']:.1f} s", flush=True)
    runs = [done[run_key(*j[:5])] for j in jobs]
    summary = summarise(runs, tuners, layers, args.budget)
    text = markdown(summary, tuners, layers, args)
    print(text)
    (runs_path.parent / "chameleon-summary.json").write_text(json.dumps({"args": vars(args), "summary": summary},
                                                                         indent=1))
    if args.write_docs:
        write_doc_section(ROOT / "bench" / "archive.md", SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
