"""ML2Tuner benchmarks: ``ml2tuner`` and ``chameleon-ml2`` next to ``xgb`` (and ``chameleon``) on vta-fsim.

``.venv/bin/python -m bench.bench_ml2tuner`` (options: ``--settings``, ``--layers``, ``--seeds``,
``--trials``, ``--tuners``, ``--rerun``, ``--rmse``, ``--caches-only``, ``--report-only``, ``--no-doc``).
Results merge into ``bench/out/ml2tuner/<setting>.json`` per (layer, tuner, seed), so the plan can be
run in parts (one tuner or setting at a time) and the report written from whatever has run.

Settings: the simulator with the ``pynq`` preset and with the ``zcu102`` preset (ML2Tuner's enlarged
buffers), each with the template's TVM-compatible validity mode (``tvm_compat=True``: only the
schedules TVM v0.18 could build and run are valid; the invalid-heavy space the paper tuned in) and
edgetune's own space (``own``).

1. Each (setting, layer) space is measured once exhaustively on the simulator (a ``grid`` tuning log
   under ``bench/out/``; the pynq/own logs of ``bench.bench_tuning`` are reused). Tuning runs then
   **replay** these recorded simulator measurements (:mod:`toolkit.tuning.replay`): a trial returns
   the recorded latency or error, and ``compile_features`` returns the recorded compile-time features
   (simulator counters stripped) or the recorded build error, as compiling would.
2. Every tuner runs ``--trials`` trials per (setting, layer, seed) through :func:`toolkit.tuning.session.tune`.
3. Figures (per setting, averaged over layers): invalid trials relative to ``xgb``; trials a tuner
   needs to reach ``xgb``'s best at the full budget (same seed); ModelA's RMSE / ModelP's RMSE on
   held-out records (regression models trained on random valid configs, tested on the rest).

Writes the section "## ML2Tuner" of ``bench/archive.md`` from the saved results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import math
import platform
import shlex
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from bench.bench_testset import board_for
from toolkit import console, harness
from toolkit.backends import make_task as backend_task
from toolkit.harness import cpu_name, exhaustive_cache, save_checkpoint, trials_to_match, write_doc_section
from toolkit.tuning.models.advanced import AdvancedCostModel, time_columns
from toolkit.tuning.models.cost import XGBCostModel
from toolkit.tuning.replay import (CachedRunner, MeasurementCache, ReplayBuilder, compile_features_of,
                                   current_compile_features)
from toolkit.tuning.core.task import Task
from toolkit.tuning.tuners.base import make_tuner
from toolkit.workloads import parse_workload

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
STARTED = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
"""When this process started: the date of its command in the results files."""
CORE_CACHE = OUT / "tuning-cache"          # bench.bench_tuning's exhaustive pynq/own logs
DOC = ROOT / "bench" / "archive.md"
SECTION = "## ML2Tuner"
LAYERS = [f"C{i}" for i in range(2, 12)]
SETTINGS = ("pynq-tvm", "pynq-own", "zcu102-tvm", "zcu102-own")
TUNERS = ("xgb", "ml2tuner", "chameleon", "chameleon-ml2")


def make_task(setting: str, layer: str) -> Task:
    preset, mode = setting.split("-")
    return backend_task(parse_workload(f"resnet18.{layer}"), board_for(preset), tvm_compat=(mode == "tvm"))


def cache_path(setting: str, layer: str) -> Path:
    if setting == "pynq-own":
        return CORE_CACHE / f"{layer}.jsonl"
    return OUT / "ml2-cache" / setting / f"{layer}.jsonl"


def build_cache(setting: str, layer: str) -> tuple[Task, MeasurementCache]:
    """Measure every config of the (setting, layer) space on the simulator, resuming a partial log (a stale
    one is set aside)."""
    task = make_task(setting, layer)
    path = cache_path(setting, layer)
    path.parent.mkdir(parents=True, exist_ok=True)
    with console.progress(transient=True) as bar:
        tid = bar.add_task(f"exhaustive {setting} {layer}", total=task.space.size, status="")
        cache = exhaustive_cache(task, path, lambda done, _: bar.update(tid, completed=done))
    return task, cache


# -- tuning runs ------------------------------------------------------------------------------------
def run_one(task: Task, cache: MeasurementCache, tuner_name: str, seed: int, trials: int) -> dict:
    """One replayed tuning run (:func:`toolkit.harness.run_one`) as this bench stores it: best-so-far history,
    invalid trials, wall and CPU seconds, tuner stats and options."""
    tuner = make_tuner(tuner_name, seed=seed)
    run = harness.run_one(task, tuner, trials, builder=ReplayBuilder(cache), runner=CachedRunner(cache))
    return {"history": [h if h is not None else float("inf") for h in run.history], "invalid": run.invalid,
            "trials": run.trials, "wall_s": run.wall_s, "cpu_s": run.cpu_s, "stats": run.stats,
            "params": {k: v for k, v in tuner.params.items() if isinstance(v, (int, float, str, bool))}}


# -- ModelA vs ModelP on held-out records --------------------------------------------------------------
def rmse_figures(task: Task, cache: MeasurementCache, seed: int, n_train: int = 200) -> dict[str, float]:
    """RMSE of normalised throughput on held-out valid records, one random split per ``seed``.

    ``min(n_train, half)`` of the valid configs train, the rest are held out. Models: ``P`` the
    tuner's ModelP recipe (:class:`XGBCostModel`, ``loss="reg"``) on knob features; ``A`` ModelA
    (:class:`AdvancedCostModel`) on knob + compile features; ``P_recipe`` ModelA's recipe on knob
    features only (control: same boosting, no compile features); ``A_trees`` ModelA without its
    time model (control: compile features as plain tree inputs, the earlier ModelA).
    """
    valid = [r for r in cache.by_index.values() if r.valid]
    order = np.random.default_rng(seed).permutation(len(valid))
    n_train = min(n_train, len(valid) // 2)
    tr, te = [valid[i] for i in order[:n_train]], [valid[i] for i in order[n_train:]]
    feats = {r.index: current_compile_features(task.template, compile_features_of(r.features)) for r in valid}
    keys = sorted(feats[valid[0].index])
    y_max = max(task.flops / r.seconds for r in valid)
    n_knob = task.space.features([valid[0].index]).shape[1]

    def xy(recs):
        kf = task.space.features([r.index for r in recs])
        hf = np.array([[feats[r.index].get(k, np.nan) for k in keys] for r in recs])
        return kf, np.hstack([kf, hf]), np.array([task.flops / r.seconds for r in recs]) / y_max

    kp_tr, ka_tr, y_tr = xy(tr)
    kp_te, ka_te, y_te = xy(te)
    models = {
        "P": (XGBCostModel(loss="reg", seed=seed), kp_tr, kp_te),
        "P_recipe": (AdvancedCostModel(seed=seed), kp_tr, kp_te),
        "A": (AdvancedCostModel(**time_columns(keys, n_knob), seed=seed), ka_tr, ka_te),
        "A_trees": (AdvancedCostModel(seed=seed), ka_tr, ka_te),
    }
    out = {}
    for name, (m, X_tr, X_te) in models.items():
        m.fit(X_tr, y_tr)
        out[name] = float(np.sqrt(np.mean((m.predict(X_te) * m.y_max_ - y_te) ** 2)))
    out["n_train"], out["n_test"] = float(len(tr)), float(len(te))
    return out


# -- report ---------------------------------------------------------------------------------------------
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


HEADLINE = {"pynq-own": OUT / "headline" / "pynq.json", "zcu102-tvm": OUT / "headline" / "zcu102.json"}
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


def results_path(setting: str) -> Path:
    return OUT / "ml2tuner" / f"{setting}.json"


def load_saved(setting: str) -> dict | None:
    """The saved results of ``setting`` in the current format (None when absent or of an older format)."""
    path = results_path(setting)
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    return saved if "commands" in saved else None


def save_runs(setting: str, trials: int, command: str, layer: str, meta: dict, runs: dict, rmse: dict) -> dict:
    """Merge one layer's new runs / RMSE figures into the setting's results file, under a lock (several
    bench processes may work on one setting, e.g. on different tuners or layers); returns the merged file."""
    path = results_path(setting)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = load_saved(setting) or {"setting": setting, "layers": {}, "commands": [], "trials": trials}
        entry = {"cmd": command, "date": STARTED}   # once per invocation: a rerun of the same command is dated
        if entry not in out["commands"]:
            out["commands"].append(entry)
        lr = out["layers"].setdefault(layer, {"runs": {}, "rmse": {}})
        lr.update(meta)
        for name, by_seed in runs.items():
            lr["runs"].setdefault(name, {}).update(by_seed)
        lr["rmse"].update(rmse)
        save_checkpoint(path, out, default=float, indent=None)
    return out


def run_setting(setting: str, args, command: str) -> None:
    """Caches, runs and RMSE figures of one setting, merged into ``bench/out/ml2tuner/<setting>.json``
    after every run (an interrupted bench keeps what finished). Runs already saved are kept unless
    ``--rerun`` names their tuner; RMSE figures are recomputed with ``--rmse``."""
    saved = load_saved(setting)
    if saved is not None and saved["trials"] != args.trials:
        raise SystemExit(f"{results_path(setting)} holds {saved['trials']}-trial runs; move it away to run "
                         f"{args.trials} trials")
    for layer in args.layers:
        task, cache = build_cache(setting, layer)
        if args.caches_only:
            continue
        done = ((load_saved(setting) or {}).get("layers", {}).get(layer, {}))
        meta = {"optimum": cache.best().seconds, "size": task.space.size,
                "n_valid": sum(r.valid for r in cache.by_index.values())}
        for seed in range(args.seeds):
            if str(seed) not in done.get("rmse", {}) or args.rmse:
                save_runs(setting, args.trials, command, layer, meta, {}, {str(seed): rmse_figures(task, cache, seed)})
        for name in args.tuners:
            for seed in range(args.seeds):
                if str(seed) not in done.get("runs", {}).get(name, {}) or name in args.rerun:
                    save_runs(setting, args.trials, command, layer, meta,
                              {name: {str(seed): run_one(task, cache, name, seed, args.trials)}}, {})
        lr = (load_saved(setting) or {}).get("layers", {}).get(layer, {})
        console.info(f"{setting} {layer}: " + "; ".join(
            f"{n} inv {np.mean([r['invalid'] for r in lr['runs'][n].values()]):.0f} best "
            f"{np.median([min(r['history']) for r in lr['runs'][n].values()]) / cache.best().seconds:.3f} "
            f"{np.mean([r['cpu_s'] for r in lr['runs'][n].values()]):.1f} CPU s"
            for n in args.tuners if n in lr.get("runs", {})))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_ml2tuner", description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, from {SETTINGS}")
    ap.add_argument("--layers", default=",".join(LAYERS), help="comma-separated ResNet-18 layers (C2..C11)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (runs already saved are kept)")
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--tuners", default=",".join(TUNERS), help="comma-separated, from " + ",".join(TUNERS))
    ap.add_argument("--rerun", default="", help="comma-separated tuners whose saved runs are replaced")
    ap.add_argument("--rmse", action="store_true", help="recompute the saved ModelA/ModelP RMSE figures")
    ap.add_argument("--caches-only", action="store_true", help="only build the exhaustive caches")
    ap.add_argument("--report-only", action="store_true",
                    help="only write the doc section from the saved per-setting results")
    ap.add_argument("--no-doc", action="store_true", help="do not write bench/archive.md")
    raw = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(raw)
    args.layers = [x.strip() for x in args.layers.split(",") if x.strip()]
    args.tuners = [x.strip() for x in args.tuners.split(",") if x.strip()]
    args.rerun = {x.strip() for x in args.rerun.split(",") if x.strip()}
    settings = [x.strip() for x in args.settings.split(",") if x.strip()]
    unknown = [x for x in args.tuners if x not in TUNERS] + [x for x in settings if x not in SETTINGS]
    if unknown:
        raise SystemExit(f"unknown tuner(s)/setting(s) {unknown}; choose from {TUNERS} and {SETTINGS}")
    command = ".venv/bin/python -m bench.bench_ml2tuner " + " ".join(shlex.quote(a) for a in raw)

    if not args.report_only:
        for setting in settings:
            run_setting(setting, args, command)
    if args.caches_only or args.no_doc:
        return
    saved = {s: v for s in SETTINGS if (v := load_saved(s)) is not None and v["layers"]}
    table = summarise({s: v["layers"] for s, v in saved.items()})
    for setting, rows in table.items():
        for name, r in rows.items():
            console.info(f"{setting} {name}: {json.dumps(r)}")
    write_doc_section(DOC, SECTION, section({s: saved[s] for s in table}, table))


if __name__ == "__main__":
    main()
