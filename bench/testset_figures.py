"""The test-set benchmark's figures: tuner labels, each run's luck-free figures and the tables built from them.

Every figure comes from a run's best-so-far history against its layer's exact optimum
(:mod:`toolkit.tuning.metrics`); :mod:`bench.bench_testset` runs the benchmark and writes the report.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.harness import BenchResult, BenchRun, geomean
from toolkit.tuning.metrics import mean_regret, paired_difference, regret, regret_at, trials_to_optimum

REFERENCE = "xgb"
CHECKPOINTS = (10, 25, 50, 100)


def parse_label(label: str) -> tuple[str, dict[str, str]]:
    """``NAME[:KEY=VALUE...]`` -> (NAME, options as given).

    >>> parse_label("ml2tuner:prior_check=False:transfer=pretrained")
    ('ml2tuner', {'prior_check': 'False', 'transfer': 'pretrained'})
    """
    name, *items = label.split(":")
    return name, dict(item.partition("=")[::2] for item in items)


def transfers(label: str) -> bool:
    """Whether the label's tuner starts from the shipped (or held-out) transfer model."""
    return parse_label(label)[1].get("transfer") == "pretrained"


TRANSFER_ONLY = ("transfer", "prior_check", "prior_pool")
"""Options that act only with a transfer model: a tuner's cold self is its label without them."""


def cold_label(label: str) -> str:
    """The label of the same tuner without transfer (and without options that only act with one).

    >>> cold_label("ml2tuner:prior_check=False:round_order=explore_last:transfer=pretrained")
    'ml2tuner:round_order=explore_last'
    """
    name, options = parse_label(label)
    return ":".join([name, *(f"{k}={v}" for k, v in options.items() if k not in TRANSFER_ONLY)])


def padded(run_: BenchRun, budget: int) -> list[float | None]:
    """A run's best-so-far history over the whole budget: a run that stopped at the optimum holds it."""
    h = list(run_.history)
    return h + [h[-1]] * (budget - len(h)) if run_.stopped == "target" and h else h


def run_figures(run_: BenchRun, optimum: float, budget: int, board_s: float) -> dict[str, float]:
    """The luck-free figures of one run."""
    h = padded(run_, budget)
    t_opt = trials_to_optimum(h, optimum)
    counted = t_opt or budget
    # a run stopped at the optimum compiled and planned everything before measuring its last round; otherwise
    # charge the compiles and the tuner's time up to the optimum in proportion
    share = 1.0 if run_.stopped == "target" else counted / max(1, run_.trials)
    build = run_.build_s / max(1, run_.trials)
    extra = max(0, run_.compiled - run_.trials) * build      # compiled for features, never measured
    return {
        "t_opt": counted, "reached": t_opt is not None,
        "t_05": trials_to_optimum(h, optimum, 0.005) or budget, "t_1": trials_to_optimum(h, optimum, 0.01) or budget,
        "mean_regret": mean_regret(h, optimum, budget),
        **{f"r{k}": regret_at(h, optimum, k) for k in CHECKPOINTS},
        "tuner_s_per_trial": run_.tuner_s / max(1, run_.trials),
        "board_s_to_opt": counted * (build + board_s) + share * (extra + run_.tuner_s),
    }


def figures(result: BenchResult, board_s: float) -> dict[str, dict[str, Any]]:
    """Per tuner: aggregated figures, and paired differences against the reference."""
    budget = int(result.settings["trials"])
    opt = {k: v["optimum"] for k, v in result.workloads.items()}
    per = {(r.workload, r.seed, r.tuner): run_figures(r, opt[r.workload], budget, board_s)
           for r in result.runs if opt.get(r.workload)}
    tuners = list(dict.fromkeys(r.tuner for r in result.runs))
    keys = sorted({(w, s) for w, s, _ in per})
    out: dict[str, dict[str, Any]] = {}
    for t in tuners:
        rows = [per[(w, s, t)] for w, s in keys if (w, s, t) in per]
        ref = [per[(w, s, REFERENCE)] for w, s in keys if (w, s, t) in per and (w, s, REFERENCE) in per]
        mine = [per[(w, s, t)] for w, s in keys if (w, s, t) in per and (w, s, REFERENCE) in per]
        d = paired_difference([math.log2(m["t_opt"]) for m in mine], [math.log2(m["t_opt"]) for m in ref])
        dr = paired_difference([m["mean_regret"] for m in mine], [m["mean_regret"] for m in ref])
        out[t] = {
            "runs": len(rows), "reached": sum(r["reached"] for r in rows),
            "t_opt": geomean(r["t_opt"] for r in rows),
            "t_opt_vs_ref": (geomean(m["t_opt"] for m in mine) / geomean(m["t_opt"] for m in ref)) if ref else None,
            "log2_diff": d, "regret_diff": dr,
            "t_05_median": float(np.median([r["t_05"] for r in rows])),
            "t_1_median": float(np.median([r["t_1"] for r in rows])),
            "mean_regret": float(np.mean([r["mean_regret"] for r in rows])),
            **{f"r{k}": float(np.mean([r[f"r{k}"] for r in rows])) for k in CHECKPOINTS},
            "tuner_s_per_trial": float(np.mean([r["tuner_s_per_trial"] for r in rows])),
            "tuner_s_per_trial_worst_layer": max(float(np.mean([per[(w, s, t)]["tuner_s_per_trial"] for s in seeds]))
                                                 for w, seeds in _seeds_by_layer(per, t).items()),
            "board_s_to_opt": geomean(r["board_s_to_opt"] for r in rows),
        }
    return out


def _seeds_by_layer(per: dict[tuple[str, int, str], Any], tuner: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for w, s, t in per:
        if t == tuner:
            out.setdefault(w, []).append(s)
    return out


def plot(result: BenchResult, path: Path, title: str) -> None:
    """Mean regret vs trials (over layer x seed) per tuner, log-log, with the standard error as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budget = int(result.settings["trials"])
    opt = {k: v["optimum"] for k, v in result.workloads.items()}
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    x = np.arange(1, budget + 1)
    for i, t in enumerate(dict.fromkeys(r.tuner for r in result.runs)):
        curves = []
        for r in result.runs:
            if r.tuner == t and opt.get(r.workload):
                c = regret(padded(r, budget), opt[r.workload])
                curves.append(np.pad(c, (0, budget - len(c)), mode="edge") if len(c) < budget else c[:budget])
        arr = np.array(curves)
        mean, se = arr.mean(0), arr.std(0, ddof=1) / math.sqrt(len(arr)) if len(arr) > 1 else 0 * arr[0]
        layers = len({r.workload for r in result.runs if r.tuner == t and opt.get(r.workload)})
        ax.plot(x, mean, color=f"C{i}", lw=1.4, label=f"{t} ({len(arr)} runs, {layers} layers)")
        ax.fill_between(x, np.maximum(mean - se, 1e-6), mean + se, color=f"C{i}", alpha=0.15, lw=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, None)
    ax.set_xlabel("trials (log scale)")
    ax.set_ylabel("mean regret: best / optimum - 1 (log scale)")
    ax.set_title(f"{title}\nmean over each tuner's runs (its layers in brackets: compare like with like); "
                 "band: ±1 s.e.;\n"
                 "a trial before any valid config counts 10; "
                 "regret 0 (optimum found) is below the axis", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


FIRST_ROUND = 8
"""Configs a cold ``ml2tuner`` measures at random before its models exist (its ``plan_size``)."""


def cold_start(result: BenchResult) -> list[str]:
    """Where a cold tuner's trials to the optimum go, against the floor a random first round sets: a tuner that
    measures ``FIRST_ROUND`` random configs and then the optimum needs ``FIRST_ROUND + 1`` trials at most."""
    budget = int(result.settings["trials"])
    opt = {k: v["optimum"] for k, v in result.workloads.items()}
    t_opt = {(r.workload, r.seed, r.tuner): trials_to_optimum(padded(r, budget), opt[r.workload]) or budget
             for r in result.runs if opt.get(r.workload)}
    ref = {(w, s): n for (w, s, t), n in t_opt.items() if t == REFERENCE}
    if not ref:
        return []
    floor = geomean(min(FIRST_ROUND + 1, n) / n for n in ref.values())
    lines = ["", f"**Cold start.** A tuner that measured a random first round of {FIRST_ROUND} configs and then the "
             f"optimum would need {FIRST_ROUND + 1} trials: {floor:.3f}x of xgb's (geomean over these runs). So the "
             "random first round is not what holds the cold tuners above 0.15x (here "
             f"{0.15 * geomean(ref.values()):.0f} trials): their models, learning the space from their own first "
             "trials, are. Trials to the exact optimum of the cold tuners:", "",
             "| tuner | runs | geomean | median | within 16 / 32 / 64 trials | vs xgb |", "|---|---|---|---|---|---|"]
    for t in dict.fromkeys(r.tuner for r in result.runs):
        if t == REFERENCE or transfers(t):
            continue
        mine = [(n, ref[(w, s)]) for (w, s, tt), n in t_opt.items() if tt == t and (w, s) in ref]
        if not mine:
            continue
        ns = [n for n, _ in mine]
        within = " / ".join(f"{np.mean([n <= k for n in ns]):.0%}" for k in (16, 32, 64))
        lines.append(f"| {t} | {len(ns)} | {geomean(ns):.1f} | {np.median(ns):.0f} | {within} | "
                     f"{geomean(ns) / geomean(x for _, x in mine):.3f} |")
    return lines


CLOSE = (0.01, 0.005, 0.002)
"""How close to the optimum (relative) :func:`last_steps` counts the trials to, besides the exact optimum."""


def last_steps(result: BenchResult) -> list[str]:
    """Where the trials to the exact optimum go: trials to within each of :data:`CLOSE` of it and to it (geomean
    over layers and seeds), per tuner; what the last fraction of a percent costs."""
    budget = int(result.settings["trials"])
    opt = {k: v["optimum"] for k, v in result.workloads.items()}
    rows = []
    for t in dict.fromkeys(r.tuner for r in result.runs):
        mine = [(padded(r, budget), opt[r.workload]) for r in result.runs if r.tuner == t and opt.get(r.workload)]
        if mine:
            rows.append((t, len(mine), [geomean(trials_to_optimum(h, o, tol) or budget for h, o in mine)
                                        for tol in (*CLOSE, 0.0)]))
    if not rows:
        return []
    lines = ["", "**The last steps.** Trials to within 1 %, 0.5 % and 0.2 % of each layer's optimum and to the "
             "optimum itself (geomean over the runs: tuners with fewer runs ran on a subset of the layers). *Share "
             "after 0.2 %*: the part of the trials to the exact optimum spent once the best found was within 0.2 % "
             "of it, on differences five times smaller than the timing model's own error against the Pynq's "
             "measured times (0.6-1.1 %, \"VTA simulator and timing model\" below).", "",
             "| tuner | runs | to 1 % | to 0.5 % | to 0.2 % | exact | share after 0.2 % |",
             "|---|---|---|---|---|---|---|"]
    for t, n, (t1, t05, t02, t0) in rows:
        lines.append(f"| {t} | {n} | {t1:.1f} | {t05:.1f} | {t02:.1f} | {t0:.1f} | {1 - t02 / t0:.0%} |")
    return lines


NOISE_SE = 2.0
"""A per-layer paired difference counts as beyond noise when its mean is more than this many standard errors from 0."""


def transfer_check(result: BenchResult) -> list[str]:
    """Per layer, each transferring tuner against its cold self (same seeds): how many layers it is better or
    worse on beyond noise, by trials to the exact optimum (log2) and by mean regret, and its worst layer."""
    budget = int(result.settings["trials"])
    opt = {k: v["optimum"] for k, v in result.workloads.items()}
    per = {(r.workload, r.seed, r.tuner): (math.log2(trials_to_optimum(padded(r, budget), opt[r.workload]) or budget),
                                           mean_regret(padded(r, budget), opt[r.workload], budget))
           for r in result.runs if opt.get(r.workload)}
    tuners = list(dict.fromkeys(r.tuner for r in result.runs))
    rows = []
    for t in (t for t in tuners if transfers(t) and cold_label(t) in tuners):
        counts = {"log2": [0, 0], "regret": [0, 0]}
        worst: dict[str, tuple[float, float, str]] = {}
        n_layers = 0
        for w in result.workloads:
            pairs = [(per[w, s, t], per[w, s, cold_label(t)]) for s in range(int(result.settings["seeds"]))
                     if (w, s, t) in per and (w, s, cold_label(t)) in per]
            if len(pairs) < 2:
                continue
            n_layers += 1
            for j, key in enumerate(("log2", "regret")):
                d = paired_difference([a[j] for a, _ in pairs], [b[j] for _, b in pairs])
                counts[key][0] += d.mean < -NOISE_SE * d.se
                counts[key][1] += d.mean > NOISE_SE * d.se
                if key not in worst or d.mean > worst[key][0]:
                    worst[key] = (d.mean, d.se, w)
        if n_layers:
            rows.append(f"| {t} | {cold_label(t)} | {n_layers} | {counts['log2'][0]} / {counts['log2'][1]} | "
                        f"{worst['log2'][0]:+.2f} ± {worst['log2'][1]:.2f} ({worst['log2'][2]}) | "
                        f"{counts['regret'][0]} / {counts['regret'][1]} | "
                        f"{worst['regret'][0]:+.4f} ± {worst['regret'][1]:.4f} ({worst['regret'][2]}) |")
    if not rows:
        return []
    return ["", f"**Transfer against a cold start, layer by layer.** Each transferring tuner against the same tuner "
            f"started cold, paired by seed on each layer; *better / worse*: layers where the mean paired difference "
            f"is more than {NOISE_SE:g} standard errors below / above 0; *worst layer*: the largest mean difference "
            "(positive = transfer took more trials, or had more regret).", "",
            "| tuner | cold self | layers | log2(trials to optimum): better / worse | worst layer | "
            "mean regret: better / worse | worst layer |", "|---|---|---|---|---|---|---|", *rows]


def cell(v: Any, spec: str = ".3f") -> str:
    """A table cell: ``v`` formatted, ``-`` when missing or not finite."""
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)
