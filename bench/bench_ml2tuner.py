"""ML2Tuner benchmarks: ``ml2tuner`` and ``chameleon-ml2`` next to ``xgb`` (and ``chameleon``) on vta-fsim.

``.venv/bin/python -m bench.bench_ml2tuner`` (options: ``--settings``, ``--layers``, ``--seeds``,
``--trials``, ``--tuners``, ``--caches-only``, ``--no-doc``).

Settings: the simulator with the ``pynq`` preset and with the ``zcu102`` preset (ML2Tuner's enlarged
buffers), each with the template's TVM-compatible validity mode (``tvm_compat=True``: only the
schedules TVM v0.18 could build and run are valid; the invalid-heavy space the paper tuned in) and
edgetune's own space (``own``).

1. Each (setting, layer) space is measured once exhaustively on the simulator (a ``grid`` tuning log
   under ``bench/out/``; the pynq/own logs of ``bench.bench_tuning`` are reused). Tuning runs then
   **replay** these recorded simulator measurements (:mod:`toolkit.tuning.replay`): a trial returns
   the recorded latency or error, and ``compile_features`` returns the recorded compile-time features
   (simulator counters stripped) or the recorded build error, as compiling would.
2. Every tuner runs ``--trials`` trials per (setting, layer, seed) through :func:`toolkit.tuning.loop.tune`.
3. Figures (per setting, averaged over layers): invalid trials relative to ``xgb``; trials a tuner
   needs to reach ``xgb``'s best at the full budget (same seed); ModelA's RMSE / ModelP's RMSE on
   held-out records (regression models trained on random valid configs, tested on the rest).

Writes the section "## ML2Tuner" of ``docs/benchmarks.md`` and ``bench/out/ml2tuner/results.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import platform
import re
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from toolkit import console
from toolkit.boards import Board, resolve_board
from toolkit.tuning.cost_model import XGBCostModel
from toolkit.tuning.loop import tune
from toolkit.tuning.measure_result import MeasureResult
from toolkit.tuning.replay import CachedRunner, MeasurementCache, ReplayBuilder
from toolkit.tuning.runner import MeasureOptions
from toolkit.tuning.space import Config
from toolkit.tuning.task import Task
from toolkit.tuning.template import Artifact, Template
from toolkit.tuning.tuners.base import make_tuner
from toolkit.workloads import parse_workload

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
CORE_CACHE = OUT / "tuning-cache"          # bench.bench_tuning's exhaustive pynq/own logs
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## ML2Tuner"
LAYERS = [f"C{i}" for i in range(2, 12)]
SETTINGS = ("pynq-tvm", "pynq-own", "zcu102-tvm", "zcu102-own")
TUNERS = ("xgb", "ml2tuner", "chameleon", "chameleon-ml2")
MEASURE_ONLY = ("sim.",)
"""Feature prefixes a measurement adds (simulator counters); never compile-time features."""


def board_for(preset: str) -> Board:
    """The simulator board with the VTA hardware preset ``preset``."""
    base = resolve_board("vta-fsim")
    if base.profile.vta and base.profile.vta.get("preset") == preset:
        return base
    vta = {**(base.profile.vta or {}), "preset": preset}
    return Board(f"vta-fsim-{preset}", dataclasses.replace(base.profile, vta=vta))


def make_task(setting: str, layer: str) -> Task:
    preset, mode = setting.split("-")
    return Task.create(parse_workload(f"resnet18.{layer}"), board_for(preset), tvm_compat=(mode == "tvm"))


def cache_path(setting: str, layer: str) -> Path:
    if setting == "pynq-own":
        return CORE_CACHE / f"{layer}.jsonl"
    return OUT / "ml2-cache" / setting / f"{layer}.jsonl"


def build_cache(setting: str, layer: str) -> tuple[Task, MeasurementCache]:
    """Measure every config of the (setting, layer) space on the simulator, resuming a partial log."""
    task = make_task(setting, layer)
    path = cache_path(setting, layer)
    path.parent.mkdir(parents=True, exist_ok=True)
    with console.progress(transient=True) as bar:
        tid = bar.add_task(f"exhaustive {setting} {layer}", total=task.space.size, status="")
        tune(task, make_tuner("grid"), task.space.size, log=path, resume=True,
             measure_options=MeasureOptions(check=False),
             callback=lambda s, _: bar.update(tid, completed=s.trials, status=f"invalid {s.invalid}"))
    return task, MeasurementCache.from_log(path)


def compile_only(features: dict[str, float]) -> dict[str, float]:
    """The compile-time part of a recorded feature dict."""
    return {k: v for k, v in features.items() if not k.startswith(MEASURE_ONLY)}


class CompileReplayBuilder(ReplayBuilder):
    """:class:`ReplayBuilder` whose artifacts carry only compile-time features (what a build returns)."""

    def build(self, template: Template, configs: Sequence[Config]) -> list[Artifact | MeasureResult]:
        out = super().build(template, configs)
        for o in out:
            o.features = compile_only(o.features)
        return out


# -- tuning runs ------------------------------------------------------------------------------------
def run_one(task: Task, cache: MeasurementCache, tuner_name: str, seed: int, trials: int) -> dict:
    tuner = make_tuner(tuner_name, seed=seed)
    t0 = time.perf_counter()
    s = tune(task, tuner, min(trials, task.space.size), builder=CompileReplayBuilder(cache),
             runner=CachedRunner(cache))
    hist = [h if h is not None else float("inf") for h in s.history]
    return {"history": hist, "invalid": s.invalid, "trials": s.trials, "wall_s": time.perf_counter() - t0,
            "stats": {k: float(v) for k, v in tuner.stats().items()}}


def trials_to_reach(history: Sequence[float], target: float) -> int | None:
    """1-based trial at which ``history`` (best so far) first reaches ``target`` (None: never)."""
    for i, h in enumerate(history):
        if h <= target * (1 + 1e-9):
            return i + 1
    return None


# -- ModelA vs ModelP on held-out records --------------------------------------------------------------
def rmse_ratio(task: Task, cache: MeasurementCache, seed: int, n_train: int = 200) -> tuple[float, float]:
    """(RMSE of ModelP, RMSE of ModelA) on held-out valid records, both XGBoost regressions of
    throughput / max throughput; ModelP sees knob features, ModelA knob + compile features."""
    valid = [r for r in cache.by_index.values() if r.valid]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(valid))
    n_train = min(n_train, len(valid) // 2)
    tr, te = [valid[i] for i in order[:n_train]], [valid[i] for i in order[n_train:]]
    keys = sorted(compile_only(valid[0].features))
    y_max = max(task.flops / r.seconds for r in valid)

    def xy(recs):
        kf = task.space.features([r.index for r in recs])
        hf = np.array([[r.features.get(k, np.nan) for k in keys] for r in recs])
        y = np.array([task.flops / r.seconds for r in recs]) / y_max
        return kf, np.hstack([kf, hf]), y

    kp_tr, ka_tr, y_tr = xy(tr)
    kp_te, ka_te, y_te = xy(te)
    out = []
    for X_tr, X_te in ((kp_tr, kp_te), (ka_tr, ka_te)):
        m = XGBCostModel(loss="reg", seed=seed).fit(X_tr, y_tr)
        pred = m.predict(X_te) * m.y_max_
        out.append(float(np.sqrt(np.mean((pred - y_te) ** 2))))
    return out[0], out[1]


# -- report ---------------------------------------------------------------------------------------------
def summarise(results: dict, trials: int) -> dict:
    """Per setting and tuner: mean invalid trials, reduction vs xgb, trials to reach xgb's best."""
    table: dict[str, dict] = {}
    for setting, layers in results.items():
        rows: dict[str, dict] = {}
        for name in next(iter(layers.values()))["runs"]:
            inv_red, reach_budget, reach_xgb, missed, inv = [], [], [], 0, []
            for layer, r in layers.items():
                xs, ts = r["runs"]["xgb"], r["runs"][name]
                inv_x = np.mean([x["invalid"] for x in xs])
                inv_t = np.mean([t["invalid"] for t in ts])
                inv.append(inv_t)
                if inv_x > 0:
                    inv_red.append(1 - inv_t / inv_x)
                for x, t in zip(xs, ts):
                    target = min(x["history"])
                    n_t = trials_to_reach(t["history"], target)
                    n_x = trials_to_reach(x["history"], target)
                    if n_t is None:
                        missed += 1
                        n_t = len(x["history"])
                    reach_budget.append(n_t / len(x["history"]))
                    reach_xgb.append(n_t / n_x)
            rows[name] = {"invalid": float(np.mean(inv)), "invalid_reduction": float(np.mean(inv_red)),
                          "reach_over_budget": float(np.mean(reach_budget)),
                          "reach_over_budget_median": float(np.median(reach_budget)),
                          "reach_over_xgb": float(np.mean(reach_xgb)),
                          "reach_over_xgb_median": float(np.median(reach_xgb)), "missed": missed,
                          "runs": len(reach_budget)}
        table[setting] = rows
    return table


def write_section(text: str) -> None:
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(doc):
        doc = pattern.sub(lambda _: text, doc)
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(doc)


def section(saved: dict, table: dict) -> str:
    cpu = platform.processor() or platform.machine()
    results = {s: v["layers"] for s, v in saved.items()}
    lines = [SECTION, "", f"Machine: {platform.node()} ({cpu}, 2 cores, shared with other jobs), Python "
             f"{platform.python_version()}. Commands and dates:", ""]
    for s, v in saved.items():
        lines.append(f"- `.venv/bin/python -m bench.bench_ml2tuner --settings {s} --layers "
                     f"{','.join(v['layer_names'])} --seeds {v['seeds']} --trials {v['trials']} --tuners "
                     f"{','.join(v['tuners'])}` ({v['date']})")
    missing = sorted({x for v in saved.values() for x in LAYERS if x not in v["layer_names"]},
                     key=LAYERS.index)
    lines += [
        "", "Report: `.venv/bin/python -m bench.bench_ml2tuner --report-only`.", "",
        f"**Reduced scope:** layers {', '.join(missing) or 'none'} were not run in every setting, and "
        f"seeds are as listed: the exhaustive simulator caches and the 3-4 tuners x seeds did not fit "
        f"the time on a shared 2-core machine. The smallest spaces were kept (cheapest to cache).", "",
        "Replayed measurements: every space was measured once exhaustively on vta-fsim (timing model) and "
        "the runs replay those records (`toolkit.tuning.replay`); compile-time features and build errors "
        "are replayed too (what `compile_features` would return). `tvm` = template option "
        "`tvm_compat=True` (only schedules TVM v0.18 can build and run are valid), `own` = edgetune's "
        "own lowering. Trials = configs sent to build+measure; ml2tuner's feature compilations are "
        "not trials (their count is listed). On edgetune's VTA compiler invalid configs fail at compile "
        "time, so the feature compilations screen them all before any trial; when a space has fewer "
        "valid configs than the budget, ml2tuner stops early (exhausted) after measuring all of them. "
        "\"Trials to reach xgb's best\": first trial at which a tuner's best latency is <= the best `xgb` "
        "found in the full budget with the same seed, divided by the budget (paper: 12.3%) and by the "
        "trial at which `xgb` itself first got there.", "",
        "| setting | valid share | tuner | invalid trials (mean/run) | fewer invalid than xgb | "
        "trials to reach xgb's best / budget (mean, median) | / xgb's own trials (mean, median) | "
        "never reached | compiles for features (mean/run) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for setting, rows in table.items():
        for name, r in rows.items():
            comp = np.mean([np.mean([run["stats"].get("compiled", 0.0) for run in lr["runs"][name]])
                            for lr in results[setting].values()])
            red = "-" if name == "xgb" else f"{r['invalid_reduction']:.1%}"
            lines.append(
                f"| {setting} | {saved[setting]['valid_share']:.1%} | `{name}` | {r['invalid']:.1f} | {red} | "
                f"{r['reach_over_budget']:.1%}, {r['reach_over_budget_median']:.1%} | "
                f"{r['reach_over_xgb']:.1%}, {r['reach_over_xgb_median']:.1%} | {r['missed']}/{r['runs']} | "
                f"{comp:.0f} |")
    lines += ["", "ModelA (knob + compile features) vs ModelP (knob features): RMSE of normalised throughput "
              "on held-out valid records (XGBoost regression, min(200, half) of a layer's valid configs at "
              "random for training, the rest held out; one split per seed; mean over layers and seeds).", "",
              "| setting | RMSE ModelP | RMSE ModelA | ratio of means A/P | mean of per-run ratios |",
              "|---|---|---|---|---|"]
    for setting, v in saved.items():
        if not v["rmse"]:
            continue
        p, a = v["rmse"]
        lines.append(f"| {setting} | {p:.4f} | {a:.4f} | **{a / p:.3f}** | {v.get('rmse_ratio', float('nan')):.3f} |")
    lines.append("")
    return "\n".join(lines)


def run_setting(setting: str, args) -> dict:
    """Caches, runs and RMSE figures of one setting; saved to ``bench/out/ml2tuner/<setting>.json``
    after every layer (so an interrupted run keeps its finished layers)."""
    out = {"setting": setting, "layers": {}, "valid_share": 0.0, "rmse": None, "seeds": args.seeds,
           "trials": args.trials, "tuners": args.tuners, "layer_names": [], "date": dt.date.today().isoformat()}
    pr, n_valid, n_all = [], 0, 0
    for layer in args.layers:
        task, cache = build_cache(setting, layer)
        n_valid += sum(r.valid for r in cache.by_index.values())
        n_all += len(cache)
        out["valid_share"] = n_valid / max(n_all, 1)
        if args.caches_only:
            continue
        runs = {name: [run_one(task, cache, name, seed, args.trials) for seed in range(args.seeds)]
                for name in args.tuners}
        pr += [rmse_ratio(task, cache, seed) for seed in range(args.seeds)]
        out["layers"][layer] = {"runs": runs, "optimum": cache.best().seconds, "size": task.space.size}
        out["layer_names"].append(layer)
        out["rmse"] = [float(np.mean([p for p, _ in pr])), float(np.mean([a for _, a in pr]))]
        out["rmse_ratio"] = float(np.mean([a / p for p, a in pr]))
        (OUT / "ml2tuner").mkdir(parents=True, exist_ok=True)
        (OUT / "ml2tuner" / f"{setting}.json").write_text(json.dumps(out, default=float))
        console.info(f"{setting} {layer}: " + "; ".join(
            f"{n} inv {np.mean([r['invalid'] for r in rs]):.0f} best "
            f"{np.median([min(r['history']) for r in rs]) / cache.best().seconds:.3f} "
            f"{np.mean([r['wall_s'] for r in rs]):.1f}s" for n, rs in runs.items()))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_ml2tuner", description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, from {SETTINGS}")
    ap.add_argument("--layers", default=",".join(LAYERS), help="comma-separated ResNet-18 layers (C2..C11)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--tuners", default=",".join(TUNERS), help="comma-separated; xgb must be among them")
    ap.add_argument("--caches-only", action="store_true", help="only build the exhaustive caches")
    ap.add_argument("--report-only", action="store_true",
                    help="only write the doc section from the saved per-setting results")
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    args = ap.parse_args(argv)
    args.layers = [x.strip() for x in args.layers.split(",") if x.strip()]
    args.tuners = [x.strip() for x in args.tuners.split(",") if x.strip()]
    settings = [x.strip() for x in args.settings.split(",") if x.strip()]

    for setting in settings:
        if not args.report_only:
            out = run_setting(setting, args)
            if args.caches_only:
                console.info(f"cache {setting}: {out['valid_share']:.1%} valid")
    if args.caches_only or args.no_doc:
        return
    saved = {s: json.loads((OUT / "ml2tuner" / f"{s}.json").read_text())
             for s in SETTINGS if (OUT / "ml2tuner" / f"{s}.json").exists()}
    results = {s: v["layers"] for s, v in saved.items()}
    table = summarise(results, args.trials)
    for setting, rows in table.items():
        for name, r in rows.items():
            console.info(f"{setting} {name}: {json.dumps(r)}")
    write_section(section(saved, table))


if __name__ == "__main__":
    main()
