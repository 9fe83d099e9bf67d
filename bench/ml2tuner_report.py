"""The ML2Tuner benchmark's report: per-setting figures from the saved runs, and the section of the archive.

:mod:`bench.bench_ml2tuner` runs the benchmark and saves ``runs[tuner][seed]`` per layer; everything here
reads those results (or a headline bench's JSON) and writes no file.
"""

from __future__ import annotations

import math
import platform
from pathlib import Path
from typing import Sequence

import numpy as np

from toolkit.harness import cpu_name, trials_to_match

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## ML2Tuner"
LAYERS = [f"C{i}" for i in range(2, 12)]
SETTINGS = ("pynq-tvm", "pynq-own", "zcu102-tvm", "zcu102-own")
TUNERS = ("xgb", "ml2tuner", "chameleon", "chameleon-ml2")

def run_pairs(layers: dict, names: Sequence[str]) -> set[tuple[str, str]]:
    """The (layer, seed) pairs on which every tuner of ``names`` ran."""
    return {(x, k) for x, lr in layers.items()
            if all(n in lr["runs"] for n in names) for k in lr["runs"][names[0]]
            if all(k in lr["runs"][n] for n in names)}


def reach(run: dict, xgb: dict) -> int | None:
    """Trials ``run`` took to reach ``xgb``'s best (``xgb``: its run on the same layer and seed); None: never."""
    return trials_to_match(run["history"], min(xgb["history"]), tolerance=1e-9)


def summarise(results: dict, pairs: dict[str, set] | None = None) -> dict:
    """Per setting and tuner, over its runs paired with ``xgb``'s (same layer and seed; restricted to
    ``pairs[setting]`` when given): mean invalid trials, reduction vs xgb, trials to reach xgb's best
    (over the budget and over xgb's own), runs that never reached it, CPU seconds per run."""
    table: dict[str, dict] = {}
    for setting, layers in results.items():
        rows: dict[str, dict] = {}
        for name in TUNERS:
            inv_red, reach_budget, reach_xgb, missed, inv, cpu = [], [], [], 0, [], []
            for layer, lr in layers.items():
                if name not in lr["runs"] or "xgb" not in lr["runs"]:
                    continue
                xs, ts = lr["runs"]["xgb"], lr["runs"][name]
                seeds = [k for k in ts if k in xs and (pairs is None or (layer, k) in pairs[setting])]
                if not seeds:
                    continue
                inv_x = np.mean([xs[k]["invalid"] for k in seeds])
                inv_t = np.mean([ts[k]["invalid"] for k in seeds])
                inv.append(inv_t)
                cpu += [ts[k].get("cpu_s", ts[k]["wall_s"]) for k in seeds]
                if inv_x > 0:
                    inv_red.append(1 - inv_t / inv_x)
                for k in seeds:
                    x, t = xs[k], ts[k]
                    n_t, n_x = reach(t, x), reach(x, x)
                    if n_t is None:
                        missed += 1
                        n_t = len(x["history"])
                    reach_budget.append(n_t / len(x["history"]))
                    reach_xgb.append(n_t / n_x)
            if not reach_budget:
                continue
            rows[name] = {"invalid": float(np.mean(inv)),  # reduction: NaN where xgb made no invalid trial
                          "invalid_reduction": float(np.mean(inv_red)) if inv_red else math.nan,
                          "reach_over_budget": float(np.mean(reach_budget)),
                          "reach_over_budget_median": float(np.median(reach_budget)),
                          "reach_over_xgb": float(np.mean(reach_xgb)),
                          "reach_over_xgb_median": float(np.median(reach_xgb)), "missed": missed,
                          "runs": len(reach_budget), "cpu_s": float(np.mean(cpu))}
        table[setting] = rows
    return table


def rmse_summary(layers: dict) -> dict[str, float]:
    """Mean RMSE per model over layers and seeds, and the mean of per-run A/P ratios."""
    runs = [f for lr in layers.values() for f in lr.get("rmse", {}).values()]
    if not runs:
        return {}
    out = {k: float(np.mean([f[k] for f in runs])) for k in ("P", "P_recipe", "A", "A_trees")}
    out["ratio_runs"] = float(np.mean([f["A"] / f["P"] for f in runs]))
    out["runs"] = float(len(runs))
    return out


def _coverage(layers: dict) -> dict[str, tuple[list[str], int]]:
    """Per tuner: the layers it ran on and its smallest number of seeds over them."""
    out: dict[str, tuple[list[str], int]] = {}
    for name in TUNERS:
        ran = [x for x in LAYERS if x in layers and name in layers[x]["runs"]]
        if ran:
            out[name] = (ran, min(len(layers[x]["runs"][name]) for x in ran))
    return out


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _reduction(row: dict, verdict: bool = True) -> str:
    """A tuner's share of invalid trials fewer than xgb's; ``-`` where xgb made none (nothing to reduce)."""
    red = row["invalid_reduction"]
    if math.isnan(red):
        return "- (xgb made none)"
    return f"{red:.1%}" + (f" {_verdict(red >= 0.75)}" if verdict else "")


def section(saved: dict, table: dict) -> str:
    cpu = cpu_name()
    lines = [SECTION, "", f"Machine: {platform.node()} ({cpu}, 2 cores shared with other jobs, runs under "
             f"`nice`, beside other replays, so wall time was up to ~10x the CPU time listed), Python "
             f"{platform.python_version()}. Commands (in order; several ran in parallel on different "
             f"settings/layers, merging into one results file per setting) and dates:", ""]
    listed = []
    for v in saved.values():   # a command that ran several settings is listed once
        listed += [c for c in v["commands"] if c not in listed]
    lines += [f"- `{c['cmd']}` ({c['date']})" for c in sorted(listed, key=lambda c: c["date"])]
    lines += ["", "Report: `.venv/bin/python -m bench.bench_ml2tuner --report-only`.", "",
              "### What ran", "", "| setting | valid share | tuner | layers | seeds | CPU s / run (mean) |",
              "|---|---|---|---|---|---|"]
    cut = []
    for s, v in saved.items():
        n_valid = sum(lr["n_valid"] for lr in v["layers"].values())
        n_all = sum(lr["size"] for lr in v["layers"].values())
        for name, (ran, seeds) in _coverage(v["layers"]).items():
            c = table[s].get(name, {}).get("cpu_s", float("nan"))
            by_n: dict[int, list[str]] = {}
            for x in ran:
                by_n.setdefault(len(v["layers"][x]["runs"][name]), []).append(x)
            seed_txt = "; ".join(f"{k} on {'all' if len(xs) == len(ran) else ','.join(xs)}"
                                 for k, xs in sorted(by_n.items(), reverse=True))
            lines.append(f"| {s} | {n_valid / max(n_all, 1):.1%} | `{name}` | "
                         f"{'C2-C11' if ran == LAYERS else ','.join(ran)} | {seed_txt} | {c:.1f} |")
            if ran != LAYERS or seeds < 5:
                few = [x for x in ran if len(v["layers"][x]["runs"][name]) < 5]
                parts = ([] if ran == LAYERS else [f"layers {','.join(ran)} only"]) + \
                        ([] if not few else [f"fewer than 5 seeds on {','.join(few)} (see the table)"])
                cut.append(f"{s} `{name}`: " + ", ".join(parts))
        missing = [n for n in TUNERS if n not in _coverage(v["layers"])]
        if missing:
            cut.append(f"{s}: " + ", ".join(f"`{n}`" for n in missing) + " not in these results")
    missing_settings = [s for s in SETTINGS if s not in saved]
    cut += [f"{s}: not run" for s in missing_settings]
    lines += ["", "**Cut from the plan (4 settings x C2-C11 x 5 seeds x 4 tuners x 400 trials):** "
              + ("; ".join(cut) if cut else "nothing") + ".", "",
              "Replayed measurements: every space was measured once exhaustively on vta-fsim (timing model) and "
              "the runs replay those records (`toolkit.tuning.replay`); compile-time features and build errors "
              "are replayed too (what `compile_features` returns: the recorded compile features, simulator "
              "counters stripped, completed with the `time.*` terms the compiler derives from them). `tvm` = "
              "template option `tvm_compat=True` (only schedules TVM v0.18 can build and run are valid), `own` "
              "= edgetune's own lowering. Trials = configs sent to build+measure; ml2tuner's feature "
              "compilations are not trials (their count is listed). On edgetune's VTA compiler invalid configs "
              "fail at compile time, so the feature compilations screen them all before any trial; when a "
              "space has fewer valid configs than the budget, ml2tuner stops early (exhausted) after measuring "
              "all of them. \"Trials to reach xgb's best\": first trial at which a tuner's best latency is <= "
              "the best `xgb` found in the full budget with the same seed, divided by the budget (paper: "
              "12.3% of the samples a TVM-like approach needs; the target reads the baseline's samples as its "
              "400-trial budget) and by the trial at which `xgb` itself first got there (the stricter reading, "
              "which the paper does not settle; on it no tuner here reaches 12% (see the column)).", "",
              "### Tuning runs", "",
              "| setting | tuner | invalid trials (mean/run) | fewer invalid than xgb | trials to reach xgb's best "
              "/ budget (mean, median) | / xgb's own trials (mean, median) | never reached | compiles for "
              "features (mean/run) |", "|---|---|---|---|---|---|---|---|"]
    lines[-2] = lines[-2].replace("| never reached |", "| never reached (runs) |")
    for setting, rows in table.items():
        layers = saved[setting]["layers"]
        for name, r in rows.items():
            comp = np.mean([np.mean([run["stats"].get("compiled", 0.0) for run in lr["runs"][name].values()])
                            for lr in layers.values() if name in lr["runs"]])
            red = "-" if name == "xgb" else _reduction(r, verdict=False)
            lines.append(
                f"| {setting} | `{name}` | {r['invalid']:.1f} | {red} | "
                f"{r['reach_over_budget']:.1%}, {r['reach_over_budget_median']:.1%} | "
                f"{r['reach_over_xgb']:.1%}, {r['reach_over_xgb_median']:.1%} | {r['missed']}/{r['runs']} | "
                f"{comp:.0f} |")
    lines += ["", "### ModelA vs ModelP", "",
              "RMSE of normalised throughput on held-out valid records: per layer and seed, min(200, half) of "
              "the layer's valid configs at random train, the rest are held out; mean over layers and seeds. "
              "ModelP = the tuner's cost model (`XGBCostModel`, AutoTVM recipe, `loss=reg`) on knob features. "
              "ModelA = `AdvancedCostModel` on knob + compile features: a non-negative least-squares time "
              "model on the compiler's additive `time.*` terms (bus beats per memory type and for instruction "
              "fetch, DMA rows, padding writes, instructions, GEMM+ALU cycles; separate weights without / "
              "with virtual threads), whose residual XGBoost learns (AutoTVM's booster parameters; early "
              "stopping on a held-out fifth). Controls: ModelA's recipe on knob features only (`P, A's "
              "recipe`) and ModelA without its time model (`A, trees only`, the compile features as plain "
              "tree inputs: the earlier ModelA).", "",
              "| setting | runs | RMSE ModelP | RMSE P, A's recipe | RMSE A, trees only | RMSE ModelA | "
              "ratio of means A/P (target <= 0.9) | mean of per-run ratios |", "|---|---|---|---|---|---|---|---|"]
    for setting, v in saved.items():
        r = rmse_summary(v["layers"])
        if r:
            lines.append(f"| {setting} | {r['runs']:.0f} | {r['P']:.4f} | {r['P_recipe']:.4f} | {r['A_trees']:.4f} "
                         f"| {r['A']:.4f} | **{r['A'] / r['P']:.3f}** | {r['ratio_runs']:.3f} |")
    lines += ["", "Per layer, A/P (ratio of mean RMSEs over seeds):", "",
              "| setting | " + " | ".join(LAYERS) + " |", "|---|" + "---|" * len(LAYERS)]
    for setting, v in saved.items():
        cells = []
        for x in LAYERS:
            fs = list(v["layers"].get(x, {}).get("rmse", {}).values())
            cells.append(f"{np.mean([f['A'] for f in fs]) / np.mean([f['P'] for f in fs]):.2f}" if fs else "-")
        lines.append(f"| {setting} | " + " | ".join(cells) + " |")
    lines += ["", "### Targets", "", "| setting | tuner | invalid trials >= 75% fewer than xgb | trials to reach "
              "xgb's best <= 12% of the budget (mean) | ModelA/ModelP RMSE <= 0.9 |", "|---|---|---|---|---|"]
    for setting, rows in table.items():
        r = rmse_summary(saved[setting]["layers"])
        ratio = r["A"] / r["P"] if r else float("nan")
        for name in ("ml2tuner", "chameleon-ml2"):
            if name in rows:
                t = rows[name]
                lines.append(f"| {setting} | `{name}` | {_reduction(t)} | {t['reach_over_budget']:.1%} "
                             f"{_verdict(t['reach_over_budget'] <= 0.12)} | {ratio:.3f} {_verdict(ratio <= 0.9)} |")
    parents = parents_table({s: saved[s]["layers"] for s in table})
    if len(parents) > 2:
        lines += ["", "`chameleon-ml2` against its parents, on the (layer, seed) runs all three (and `xgb`) share "
                  "(trials to reach xgb's best / budget, mean; invalid trials per run):", "", *parents]
    else:
        lines += ["", "`chameleon-ml2` is compared with its parents on the headline runs (next section: every "
                  "tuner, 5 seeds, the same replay)."]
    lines += headline_section() + ["", ""]
    return "\n".join(lines)


HEADLINE = {"pynq-own": ROOT / "bench" / "out" / "headline" / "pynq.json",
            "zcu102-tvm": ROOT / "bench" / "out" / "headline" / "zcu102.json"}
"""The headline benches (``bench.headline``) that ran these tuners on two of the settings."""


def headline_layers(path: Path) -> dict:
    """An ``edgetune bench`` JSON as this module's per-layer results (``runs[tuner][seed]``)."""
    from toolkit.harness import BenchResult

    layers: dict = {}
    for r in BenchResult.load(path).runs:
        if r.tuner in TUNERS:
            lr = layers.setdefault(r.workload.split(".")[-1], {"runs": {}})
            lr["runs"].setdefault(r.tuner, {})[str(r.seed)] = {
                "history": [h if h is not None else float("inf") for h in r.history], "invalid": r.invalid,
                "wall_s": r.wall_s, "cpu_s": r.tuner_s}
    return layers


def reach_difference(layers: dict, pairs: set[tuple[str, str]], a: str, b: str) -> tuple[float, float]:
    """Mean and standard error of ``a``'s minus ``b``'s trials to reach xgb's best / budget, paired by run."""
    diffs = []
    for layer, seed in pairs:
        runs = layers[layer]["runs"]
        xgb = runs["xgb"][seed]
        budget = len(xgb["history"])
        share = [(reach(runs[t][seed], xgb) or budget) / budget for t in (a, b)]
        diffs.append(share[0] - share[1])
    se = float(np.std(diffs, ddof=1) / np.sqrt(len(diffs))) if len(diffs) > 1 else float("nan")
    return float(np.mean(diffs)), se


def parents_table(layers_by_setting: dict[str, dict]) -> list[str]:
    """Per setting, ``chameleon-ml2`` against ``ml2tuner`` and ``chameleon`` on the runs all of them and ``xgb``
    share."""
    names = ("chameleon-ml2", "ml2tuner", "chameleon")
    lines = ["| setting | common runs | chameleon-ml2 | ml2tuner | chameleon "
             "| chameleon-ml2 - ml2tuner (paired, +- s.e.) | beats both |", "|---|---|---|---|---|---|---|"]
    for setting, layers in layers_by_setting.items():
        common = run_pairs(layers, (*names, "xgb"))
        if not common:
            if "chameleon-ml2" in summarise({setting: layers})[setting]:
                lines.append(f"| {setting} | 0 | - | - | - | - | not comparable (a parent was not run) |")
            continue
        rows = summarise({setting: layers}, {setting: common})[setting]
        c, parents = rows["chameleon-ml2"], [rows["ml2tuner"], rows["chameleon"]]
        faster = all(c["reach_over_budget"] < p["reach_over_budget"] for p in parents)
        cleaner = all(c["invalid"] <= p["invalid"] for p in parents)
        cells = [f"{rows[n]['reach_over_budget']:.1%}, {rows[n]['invalid']:.1f} inv" for n in names]
        diff, se = reach_difference(layers, common, "chameleon-ml2", "ml2tuner")
        cells.append(f"{100 * diff:+.1f} +- {100 * se:.1f} points")
        verdict = "yes" if faster and cleaner else "no"
        lines.append(f"| {setting} | {len(common)} | " + " | ".join(cells) + f" | {verdict}"
                     f" (faster: {faster}, fewer/equal invalid: {cleaner}) |")
    return lines


def headline_section() -> list[str]:
    """The targets again, from the headline's runs (every tuner, every seed it ran)."""
    found = {s: headline_layers(p) for s, p in HEADLINE.items() if p.exists()}
    if not found:
        return []
    table = summarise(found)
    lines = ["", "### The same targets from the headline runs", "",
             "The headline (`python -m bench.headline`, section \"Development set: tuners side by side "
             "(ResNet-18 C2-C11)\") ran all four tuners with the same seeds on pynq-own (`pynq.json`) and "
             "zcu102-tvm (`zcu102.json`), through "
             "`edgetune bench` (the same replay); its runs, read with this section's definitions:", "",
             "| setting | tuner | runs | invalid trials (mean/run) | fewer invalid than xgb (>= 75%) | trials to reach "
             "xgb's best / budget (mean, median; <= 12%) | / xgb's own (mean) | never reached |",
             "|---|---|---|---|---|---|---|---|"]
    for setting, rows in table.items():
        for name in TUNERS:
            if name in rows:
                t = rows[name]
                inv = "-" if name == "xgb" else _reduction(t)
                reach = (f"{t['reach_over_budget']:.1%}, {t['reach_over_budget_median']:.1%}"
                         + ("" if name == "xgb" else f" {_verdict(t['reach_over_budget'] <= 0.12)}"))
                lines.append(f"| {setting} | `{name}` | {t['runs']} | {t['invalid']:.1f} | {inv} | {reach} | "
                             f"{t['reach_over_xgb']:.1%} | {t['missed']} |")
    return lines + [""] + parents_table(found) + [
        "", "How `chameleon-ml2`'s round size, `v_pool` and `carry` (both tuners' defaults) and its ModelP's rank loss "
        "were chosen, with the variants measured against `ml2tuner`: bench/explore/notes.md, \"`chameleon-ml2`'s "
        "round\", \"What the compiler found stays in play\" and \"ModelP's loss in `chameleon-ml2`\"."]
