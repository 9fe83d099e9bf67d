"""The JSON behind each dashboard page, built from a :class:`~toolkit.dashboard.logview.LogView`, a bench result,
an export folder or the board inventory. Pure functions of what they read: the API tests call them directly."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from toolkit.dashboard.logview import MAX_INVALID_POINTS, MAX_POINTS, TOP_CONFIGS, LogView, TaskTrace, downsample
from toolkit.tuning.metrics import trials_to_optimum
from toolkit.tuning.records import workload_key
from toolkit.workloads import Conv2dWorkload

SIM_BYTES = ("sim.inp_load_nbytes", "sim.wgt_load_nbytes", "sim.acc_load_nbytes", "sim.uop_load_nbytes",
             "sim.out_store_nbytes")
"""The VTA simulator's DRAM traffic counters a record carries: a config's own bytes moved."""


def _workload(trace: TaskTrace) -> Conv2dWorkload | None:
    try:
        return Conv2dWorkload.from_dict(trace.workload)
    except Exception:  # noqa: BLE001 - shown without FLOP figures
        return None


def _compulsory_bytes(wl: Conv2dWorkload, elem: int) -> int:
    """Inputs, weights and outputs each moved once: the traffic no schedule avoids."""
    return elem * (wl.n * wl.ci * wl.h * wl.w + wl.co * wl.ci_per_group * wl.kh * wl.kw + wl.n * wl.co * wl.oh * wl.ow)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def task_detail(trace: TaskTrace, t0: float, roof: dict[str, Any] | None) -> dict[str, Any]:
    """One task's charts: the valid trials (downsampled, every best-so-far point kept), the best-so-far curve
    against trials and time, the invalid trials by error kind, the top configs and the roofline points."""
    valid = [i for i, s in enumerate(trace.seconds) if s is not None]
    position = {i: j for j, i in enumerate(valid)}
    keep = {position[i] for i in trace.best_points}
    shown = [valid[j] for j in downsample(len(valid), keep, MAX_POINTS)]
    bad = [i for i, s in enumerate(trace.seconds) if s is None]
    bad_shown = [bad[j] for j in downsample(len(bad), set(), MAX_INVALID_POINTS)]
    best_curve: list[tuple[int, float, float]] = []
    best = math.inf
    for i in valid:
        if trace.seconds[i] < best:     # type: ignore[operator]
            best = trace.seconds[i]     # type: ignore[assignment]
            best_curve.append((trace.trials[i], trace.times[i] - t0, best))
    wl = _workload(trace)
    flops = wl.flops if wl else None
    errors: dict[str, int] = {}
    for e in trace.errors:
        if e is not None:
            errors[e] = errors.get(e, 0) + 1
    top = sorted(valid, key=lambda i: trace.seconds[i])[:TOP_CONFIGS]   # type: ignore[arg-type, return-value]
    roofline = None
    if flops:
        compulsory = _compulsory_bytes(wl, roof["elem_bytes"] if roof else 4)      # type: ignore[arg-type]
        ai, perf = [], []
        for i in shown:
            feats = trace.records[i].features
            moved = sum(feats.get(k, 0.0) for k in SIM_BYTES) or compulsory
            ai.append(flops / moved)
            perf.append(flops / trace.seconds[i] / 1e9)   # type: ignore[operator]
        measured = bool(shown) and any(k in trace.records[shown[0]].features for k in SIM_BYTES)
        roofline = {"roof": roof, "ai": ai, "gflops": perf, "compulsory_ai": flops / compulsory,
                    "traffic": "measured" if measured else "compulsory"}
    return {
        "label": wl.label if wl else str(trace.workload.get("name", "?")),
        "spec": wl.spec() if wl else workload_key(trace.workload), "flops": flops,
        "trials": len(trace.trials), "valid": len(valid), "invalid": len(bad), "errors": errors,
        "best_s": _finite(trace.best),
        "points": {"trial": [trace.trials[i] for i in shown], "seconds": [trace.seconds[i] for i in shown],
                   "best": [i in trace.best_points for i in shown], "downsampled": len(shown) < len(valid)},
        "invalid_points": {"trial": [trace.trials[i] for i in bad_shown],
                           "error": [trace.errors[i] for i in bad_shown]},
        "best_curve": {"trial": [b[0] for b in best_curve], "elapsed_s": [b[1] for b in best_curve],
                       "seconds": [b[2] for b in best_curve]},
        "top": [{"trial": trace.trials[i], "index": trace.records[i].index, "seconds": trace.seconds[i],
                 "tuner": trace.records[i].tuner, "config": trace.records[i].config} for i in top],
        "roofline": roofline,
    }


def network_counts(name: str | None, traces: list[TaskTrace]) -> tuple[list[int], str]:
    """How often the network runs each task (from the built-in network's layers), and a note when unknown."""
    if not name:
        return [1] * len(traces), ""
    from toolkit.errors import WorkloadError
    from toolkit.workloads.networks import get_network

    try:
        layers = get_network(name).layers
    except WorkloadError:
        return [1] * len(traces), f"{name} is not a built-in network: each task counted once"
    counts = {}
    for layer in layers:
        key = workload_key(layer.workload.to_dict())
        counts[key] = counts.get(key, 0) + layer.count
    return [counts.get(workload_key(t.workload), 1) for t in traces], ""


def network_curve(view: LogView, counts: list[int]) -> dict[str, Any]:
    """The network's total (sum of each task's best times its count) after each record, once every task has a
    valid trial; records in file order (the scheduler's order)."""
    keys = view.order
    index = {k: i for i, k in enumerate(keys)}
    events = sorted(((t.times[j], t.trials[j], index[k], t.seconds[j]) for k, t in view.tasks.items()
                     for j in range(len(t.trials))), key=lambda e: e[0])
    best = [math.inf] * len(keys)
    xs, ts, ys = [], [], []
    t0 = view.first_time or 0.0
    for n, (when, _trial, task, s) in enumerate(events, start=1):
        if s is not None and s < best[task]:
            best[task] = s
            if all(math.isfinite(b) for b in best):
                xs.append(n)
                ts.append(when - t0)
                ys.append(sum(b * c for b, c in zip(best, counts)))
    return {"trials": xs, "elapsed_s": ts, "seconds": ys}


def run_detail(view: LogView, roof: dict[str, Any] | None) -> dict[str, Any]:
    """The run page: its card, every task's charts and, for a network, the total over time and the trials
    each task got."""
    traces = [view.tasks[k] for k in view.order]
    t0 = view.first_time or 0.0
    out = {**view.summary(), "task": view.header.task if view.header else None,
           "tuner_counts": view.tuners,
           "tasks": [task_detail(t, t0, roof) for t in traces]}
    if view.network() or len(traces) > 1:
        counts, note = network_counts(view.network(), traces)
        out["network_view"] = {"counts": counts, "note": note, "curve": network_curve(view, counts),
                               "trials_per_task": [len(t.trials) for t in traces]}
    return out


def compare(bench: dict[str, Any]) -> dict[str, Any]:
    """Tuners side by side from a bench result: per workload and tuner, the median best-so-far over seeds and
    its min-max band, the median best with its spread, and the trials each seed took to reach the optimum."""
    workloads: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for run in bench.get("runs", []):
        workloads.setdefault(str(run.get("workload")), {}).setdefault(str(run.get("tuner")), []).append(run)
    out = []
    for name, tuners in workloads.items():
        optimum = (bench.get("workloads", {}).get(name) or {}).get("optimum")
        rows = []
        for tuner, runs in tuners.items():
            curves = [[h if h is not None and math.isfinite(h) else None for h in r.get("history") or []]
                      for r in runs]     # a bench history is the best so far after each trial
            n = max((len(c) for c in curves), default=0)
            median, lo, hi = [], [], []
            for i in range(n):
                col = [c[min(i, len(c) - 1)] for c in curves if c and c[min(i, len(c) - 1)] is not None]
                median.append(statistics.median(col) if col else None)
                lo.append(min(col) if col else None)
                hi.append(max(col) if col else None)
            bests = [r["best_seconds"] for r in runs if r.get("best_seconds")]
            reach = [trials_to_optimum(c, optimum) for c in curves] if optimum else []
            rows.append({"tuner": tuner, "seeds": len(runs), "median": median, "low": lo, "high": hi,
                         "best_median_s": statistics.median(bests) if bests else None,
                         "best_min_s": min(bests) if bests else None, "best_max_s": max(bests) if bests else None,
                         "reached_optimum": sum(1 for x in reach if x is not None),
                         "trials_to_optimum_median": statistics.median([x for x in reach if x is not None])
                         if any(x is not None for x in reach) else None})
        out.append({"workload": name, "optimum_s": optimum, "tuners": rows})
    return {"settings": bench.get("settings", {}), "environment": bench.get("environment", {}), "workloads": out}


def export_detail(folder: Path) -> dict[str, Any]:
    """An export's manifest as its page shows it: its layers and what each got, and its last ``run``."""
    from toolkit.export.last_run import last_run
    from toolkit.export.run import read_manifest
    from toolkit.manifest import ExportManifest

    manifest = ExportManifest.from_json(read_manifest(folder), str(folder / "manifest.json"))
    if manifest.model:
        layers = [{"name": c.get("module"), "workload": c.get("workload"), "schedule": c.get("schedule"),
                   "why": c.get("why", ""), "epilogue": c.get("epilogue")}
                  for c in manifest.model.get("convs", [])]
    else:
        layers = [{"name": k.label, "workload": Conv2dWorkload.from_dict(k.workload).spec(), "schedule": "tuned",
                   "why": f"{k.tuner} config #{k.index}, {k.latency_s * 1e3:.4g} ms", "epilogue": None}
                  for k in manifest.kernels]
    return {"path": str(folder), "kind": manifest.kind, "board": manifest.board, "family": manifest.family,
            "runs_on": manifest.family.upper(), "created": manifest.created, "tuned_on": manifest.tuned_on,
            "layers": layers,
            "schedules": _count(layer["schedule"] for layer in layers), "last_run": last_run(folder),
            "log": str(folder / manifest.log["file"]) if manifest.log.get("file") else None}


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[str(x)] = out.get(str(x), 0) + 1
    return out
