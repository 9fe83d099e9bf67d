"""The test-set benchmark: tuners on conv layers no default was chosen on, measured by what luck cannot win.

``.venv/bin/python -m bench.bench_testset`` runs every tuner on every layer of a split
(:mod:`toolkit.workloads.splits`; ``--split test`` by default, ``--split development`` to choose defaults)
with ``--seeds`` seeds and ``--trials`` trials each, in both VTA settings of the headline (the simulator with
the Pynq preset in edgetune's own space; with the ZCU102 preset in the TVM-compatible space), replaying every
measurement from an exhaustive simulator log of the layer's space (built first where missing, resumably, in
``bench/out/testset-cache/``; ``--caches-only`` builds them and stops). Runs are saved after each one in
``bench/out/testset/<split>-<setting>.json`` and an interrupted run resumes. ``--report-only`` rewrites the
docs section from the saved runs.

Tuner labels: a tuner name, or ``NAME:transfer=pretrained``: that tuner starting from the transfer model edgetune ships
for the setting's preset (:mod:`toolkit.backends.vta.pretrained`, trained on the development set only).

Figures, per setting and tuner, from each run's best-so-far history (:mod:`toolkit.tuning.metrics`):
trials to the space's exact optimum (geometric mean over layer x seed; a run that never reaches it counts
with the whole budget) and its ratio to ``xgb``'s; median trials to within 0.5 % and 1 % of the optimum;
mean regret (best / optimum - 1) over the budget and at trials 10, 25, 50, 100; the paired difference
against ``xgb`` of log2(trials to the optimum) with its standard error; tuner seconds per trial; and the
modelled time to the optimum on a board (below).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from toolkit.boards import Board
from toolkit.harness import BenchResult, BenchRun, geomean, run_bench, save_checkpoint, write_doc_section
from toolkit.tuning.metrics import mean_regret, paired_difference, regret, regret_at, trials_to_optimum

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "testset"
CACHE = ROOT / "bench" / "out" / "testset-cache"
DEV_CACHE = ROOT / "bench" / "out" / "headline-cache"
IMG = ROOT / "docs" / "img"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Headline: the test set"
EMULATED = ROOT / "bench" / "out" / "emulated.json"

SETTINGS: dict[str, dict[str, Any]] = {
    "pynq": {"title": "VTA simulator, Pynq preset, edgetune's space", "preset": "pynq", "options": {}},
    "zcu102": {"title": "VTA simulator, ZCU102 preset (ML2Tuner's enlarged VTA), TVM-compatible space",
               "preset": "zcu102", "options": {"tvm_compat": True}},
}
TUNERS = "xgb,ml2tuner,ml2tuner:transfer=pretrained,chameleon-ml2:transfer=pretrained"
REFERENCE = "xgb"
CHECKPOINTS = (10, 25, 50, 100)


def board_for(preset: str) -> Board:
    """The simulator board with the VTA hardware preset ``preset`` (``vta-fsim`` itself for its own, ``pynq``)."""
    from toolkit.backends import board_for as backend_board

    return backend_board("vta-fsim", preset=None if preset == "pynq" else preset)


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


def variants(labels: Sequence[str], preset: str, model: Any = None) -> dict[str, tuple[str, dict[str, Any]]]:
    """Labels -> (tuner name, options): ``transfer=pretrained`` is the preset's shipped model (or ``model`` when
    given: the leave-one-layer-out model of a development layer); a label without ``transfer`` of a tuner that
    can transfer starts cold (``transfer=None``), whatever that tuner's default."""
    from toolkit.backends.vta.pretrained import load_pretrained
    from toolkit.tuning.tuners.base import tuner_class

    out = {}
    for label in labels:
        name, options = parse_label(label)
        opts: dict[str, Any] = dict(options)
        if transfers(label):
            opts["transfer"] = model if model is not None else load_pretrained(preset)
            if opts["transfer"] is None:
                sys.exit(f"no pretrained model for {preset}; build them with make pretrained")
        elif "transfer" in tuner_class(name).options:
            opts["transfer"] = None
        if opts or name != label:
            out[label] = (name, opts)
    return out


def held_out_models(preset: str, workloads: Sequence[Any]) -> dict[str, Any]:
    """Per development layer, a transfer model fitted like the shipped one on the other development layers
    only (so ``transfer=pretrained`` never saw the layer it tunes)."""
    from bench.pretrain import development_records, train
    from toolkit.workloads.splits import development_set

    records = dict(zip([w.label for w in development_set()], development_records(preset, [DEV_CACHE])))
    return {w.label: train(preset, [r for label, r in records.items() if label != w.label]) for w in workloads}


def json_path(split: str, setting: str, part: str | None = None) -> Path:
    return OUT / f"{split}-{setting}{'-' + part if part else ''}.json"


def load_setting(split: str, setting: str) -> BenchResult | None:
    """Every saved part of a setting's runs as one result (a run present in several parts counts once)."""
    parts = sorted(OUT.glob(f"{split}-{setting}.json")) + sorted(OUT.glob(f"{split}-{setting}-*.json"))
    if not parts:
        return None
    results = [BenchResult.load(p) for p in parts]
    merged = BenchResult(results[0].environment, dict(results[0].settings), {}, [])
    seen: set[tuple[str, str, int]] = set()
    for r in results:
        merged.workloads.update(r.workloads)
        for run_ in r.runs:
            if (run_.workload, run_.tuner, run_.seed) not in seen:
                seen.add((run_.workload, run_.tuner, run_.seed))
                merged.runs.append(run_)
    if len(results) > 1:
        merged.environment = {**merged.environment,
                              "command": "; ".join(dict.fromkeys(r.environment["command"] for r in results))}
        merged.settings["seeds"] = max(int(r.settings["seeds"]) for r in results)
    return merged


def run(split: str, setting: str, labels: list[str], trials: int, seeds: int, layers: list[str] | None,
        caches_only: bool, part: str | None = None) -> None:
    from toolkit import console
    from toolkit.backends import make_task
    from toolkit.harness import ensure_cache
    from toolkit.workloads import parse_workload
    from toolkit.workloads.splits import development_set, test_set

    s = SETTINGS[setting]
    board = board_for(s["preset"])
    workloads = [parse_workload(x) for x in layers] if layers else (
        test_set() if split == "test" else development_set())
    dirs = [CACHE, DEV_CACHE] if split == "test" else [DEV_CACHE, CACHE]
    if caches_only:
        for wl in workloads:
            task = make_task(wl, board, **s["options"])
            ensure_cache(task, dirs)
            print(f"{setting} {wl.label}: {task.space.size} configs cached", flush=True)
        return
    path = json_path(split, setting, part)
    previous = BenchResult.load(path) if path.exists() else None
    command = "python -m bench.bench_testset " + " ".join(sys.argv[1:])

    def save(result: BenchResult) -> None:
        save_checkpoint(path, result.to_json(), indent=None)

    loo = split == "development" and any(transfers(x) for x in labels)
    models = held_out_models(s["preset"], workloads) if loo else {}
    blocks = [[wl] for wl in workloads] if loo else [workloads]
    result = previous
    with console.progress() as bar:
        tid = bar.add_task(f"{split} {setting}", total=len(workloads) * seeds * len(labels), status="")
        for bi, block in enumerate(blocks):
            offset = bi * seeds * len(labels)
            part_result = run_bench(board, block, labels, trials, seeds, reference=REFERENCE,
                                    template_options=s["options"], cache_dirs=dirs, command=command,
                                    progress=lambda what, done, total: bar.update(tid, completed=offset + done,
                                                                                  status=what),
                                    checkpoint=lambda r: save(merged(result, r)), previous=result,
                                    variants=variants(labels, s["preset"], models.get(block[0].label)),
                                    stop_at_optimum=True)
            result = merged(result, part_result)
            save(result)


def merged(old: BenchResult | None, new: BenchResult) -> BenchResult:
    """``new`` with the runs and layers of ``old`` it does not have (a rerun replaces a run)."""
    if old is None:
        return new
    have = {(r.workload, r.tuner, r.seed) for r in new.runs}
    out = BenchResult(new.environment, {**old.settings, **new.settings}, {**old.workloads, **new.workloads},
                      [r for r in old.runs if (r.workload, r.tuner, r.seed) not in have] + list(new.runs))
    out.settings["runs_planned"] = len(out.runs)
    return out


# -- figures ------------------------------------------------------------------------------------------
def per_trial_board_s() -> tuple[float, str]:
    """Seconds a trial costs on a board besides compiling: the emulated ZCU102 board's measured tune time
    per trial (``bench.bench_emulated``: SSH tunnel, RPC upload, the board's driver and device)."""
    try:
        flows = json.loads(EMULATED.read_text())["flows"]
        flow = next(f for f in flows if f["board"] == "zcu102")
        return float(flow["tune_s"]) / float(flow["trials"]), "the emulated ZCU102 board's tune time per trial"
    except (OSError, ValueError, KeyError, StopIteration):
        return 1.0, "an assumed 1 s per trial (bench/out/emulated.json not found)"


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


def _f(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def table(result: BenchResult, setting: str, split: str, board_s: float, board_src: str) -> str:
    s = SETTINGS[setting]
    fig = figures(result, board_s)
    env, st = result.environment, result.settings
    budget = st["trials"]
    png = (IMG if split == "test" else OUT) / f"testset_{split}-{setting}.png"
    plot(result, png, s["title"])
    lines = [f"### {s['title']} ({split} set)", "",
             f"- machine: {env['machine']}; date: {env['date']}",
             f"- command: `{env['command']}`",
             f"- {len(result.workloads)} layers x {st['seeds']} seeds x {budget} trials; replayed from exhaustive "
             f"simulator logs; reference `{REFERENCE}`; board time per trial besides compiling: {board_s:.2f} s "
             f"({board_src})", "",
             "| tuner | exact optimum: trials (geomean) | vs xgb | log2 diff vs xgb (± s.e.) | reached | "
             "to 0.5 % (median) | to 1 % (median) | mean regret | regret @10 / 25 / 50 / 100 | "
             "tuner s / trial (worst layer) | "
             "board time to optimum (geomean) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t, f in fig.items():
        d = f["log2_diff"]
        diff = "-" if t == REFERENCE or d.n == 0 else f"{d.mean:+.2f} ± {d.se:.2f}"
        lines.append(f"| {t} | {_f(f['t_opt'], '.1f')} | {_f(f['t_opt_vs_ref'])} | {diff} | "
                     f"{f['reached']}/{f['runs']} | {f['t_05_median']:.0f} | {f['t_1_median']:.0f} | "
                     f"{f['mean_regret']:.4f} | " + " / ".join(f"{f[f'r{k}']:.3f}" for k in CHECKPOINTS) +
                     f" | {f['tuner_s_per_trial']:.3f} ({f['tuner_s_per_trial_worst_layer']:.3f}) | "
                     f"{_f(f['board_s_to_opt'], '.0f')} s |")
    lines += cold_start(result)
    lines += last_steps(result)
    lines += transfer_check(result)
    lines += ["", f"![{split} set, {setting}: mean regret per trial](img/{png.name})", ""]
    return "\n".join(lines)


INTRO = f"""{SECTION}

The figures here are measured on the **test set** (`toolkit.workloads.splits.TEST`): 22 conv layers of
ResNet-50, VGG-16, MobileNet v1, YOLOv3-tiny and four synthetic shapes (3x3 and 1x1, strides 1 and 2, 14x14 to
56x56, 64 to 512 channels) that no default or option of edgetune's tuners was chosen on; those were chosen on
the **development set**, ResNet-18 C2-C11, whose figures follow in their own sections ("Development set: tuners
side by side" and after). The tables say how many of the 22 layers each setting ran. The shipped transfer models
(`:transfer=pretrained`) were trained on the development set only;
`ml2tuner:transfer=pretrained` is `ml2tuner+`, edgetune's default tuner; a label's options are the
tuner's options (`prior_check=False`: without the prior check, docs/tuners.md, section transfer).

Each run's figures come from its best-so-far history against the layer's exact optimum (every config of the
space measured once on the simulator), so no figure depends on another tuner's luck:

- **exact optimum: trials**: the first trial at the space's optimum, geometric mean over layer x seed (a run
  that never reaches it counts with the whole budget: a lower bound); **vs xgb**: that over xgb's;
  **log2 diff vs xgb**: mean of the paired (same layer, same seed) difference of log2(trials) with its standard
  error (-1 = half xgb's trials);
- **to 0.5 % / 1 %**: median trials until the best is within that of the optimum (budget if never);
- **mean regret**: best / optimum - 1 averaged over the trials of the budget (the area under the regret curve:
  rewards being good early; a trial before any valid config counts 10); **regret @k**: the mean over runs
  after k trials;
- **tuner s / trial**: the tuner's own time (models, search), on this machine; in brackets, the layer where it is
  highest (mean over seeds);
- **board time to optimum**: modelled for a board: trials to the optimum x (the trial's recorded compile time +
  the board's time per trial) + the configs compiled only for their features and the tuner's time (all of
  them for a run stopped at the optimum: they came before its last round; in proportion otherwise; geometric
  mean).

Regenerate with `.venv/bin/python -m bench.bench_testset` (hours on 2 cores; `--caches-only` first builds the
exhaustive logs, resumably; `--report-only` rewrites this section from `bench/out/testset/`).
"""


def report(split: str = "test") -> None:
    board_s, src = per_trial_board_s()
    parts = [INTRO]
    note = OUT / "note.md"
    if note.exists():
        parts.append(note.read_text())
    for setting in SETTINGS:
        result = load_setting(split, setting)
        if result is not None:
            parts.append(table(result, setting, split, board_s, src))
    parts += development_transfer()
    write_doc_section(DOC, SECTION, "\n".join(parts))


def development_transfer() -> list[str]:
    """The development set's transfer check (leave-one-layer-out models): where the prior check was shown."""
    lines = []
    for setting in SETTINGS:
        result = load_setting("development", setting)
        if result is None:
            continue
        fig = figures(result, 0.0)
        env = result.environment
        lines += ["", f"**{SETTINGS[setting]['title']}, development set** ({len(result.workloads)} layers x "
                  f"{result.settings['seeds']} seeds; each layer's `transfer=pretrained` model fitted on the other "
                  f"nine; {env['machine']}, {env['date']}; `{env['command']}`): trials to the exact optimum "
                  "(geomean) " + ", ".join(f"`{t}` {f['t_opt']:.1f} ({_f(f['t_opt_vs_ref'])}x xgb)"
                                           for t, f in fig.items()) + "."]
        lines += transfer_check(result)[2:]
    if lines:
        lines = ["", "### Transfer against a cold start on the development set", "",
                 "The same comparison with transfer models that never saw the layer they tune; the prior check's "
                 "threshold (docs/tuners.md, section transfer) was fixed beforehand, not tuned on either set."] + lines
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="test", choices=("test", "development"))
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    ap.add_argument("--tuners", default=TUNERS, help="comma-separated tuner labels (NAME or NAME:transfer=pretrained)")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--layers", help="workloads instead of the split's, comma- or semicolon-separated "
                    "(resnet50.L2,conv2d:H=14,W=14,...)")
    ap.add_argument("--caches-only", action="store_true", help="build the exhaustive logs and stop")
    ap.add_argument("--report-only", action="store_true", help="rewrite the docs section from the saved runs")
    ap.add_argument("--no-doc", action="store_true", help="do not rewrite bench/archive.md")
    ap.add_argument("--part", help="save the runs as <split>-<setting>-<part>.json (the report merges the parts)")
    ap.add_argument("--note", help="what this run cut (kept in bench/out/testset/note.md)")
    args = ap.parse_args(argv)
    if args.note is not None:
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "note.md").write_text(args.note.rstrip("\n") + "\n")
    if not args.report_only:
        labels = [t for t in args.tuners.split(",") if t]
        if REFERENCE not in labels:
            labels.insert(0, REFERENCE)
        for setting in args.settings.split(","):
            run(args.split, setting, labels, args.trials, args.seeds,
                re.split(r";|,(?=[a-z])", args.layers) if args.layers else None, args.caches_only, args.part)
    if args.caches_only:
        return
    if args.split == "test" and not args.no_doc:
        report(args.split)
    elif args.split != "test":   # development-set figures are printed, never the docs' headline
        board_s, src = per_trial_board_s()
        for setting in args.settings.split(","):
            result = load_setting(args.split, setting)
            if result is not None:
                print(table(result, setting, args.split, board_s, src))


if __name__ == "__main__":
    main()
