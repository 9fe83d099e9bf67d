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
import shlex
import sys
from pathlib import Path

import numpy as np

from bench.bench_testset import board_for
from bench.ml2tuner_report import LAYERS, SECTION, SETTINGS, TUNERS, section, summarise
from toolkit import console, harness
from toolkit.backends import make_task as backend_task
from toolkit.harness import exhaustive_cache, save_checkpoint, write_doc_section
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
