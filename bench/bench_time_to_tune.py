"""How long a user waits to tune a whole network: ResNet-18 on the VTA simulator, Pynq and ZCU102 presets.

``.venv/bin/python -m bench.bench_time_to_tune`` (options: ``--settings``, ``--tuners``, ``--trials``, ``--seeds``,
``--report-only``; the exhaustive logs it replays are built first if missing, as ``bench.bench_ml2tuner`` builds them;
runs already in the results file with the same budget are kept, so an interrupted bench resumes, and so are the runs
of settings not named).

Each run is ``edgetune tune --model resnet18`` as a user starts it (:func:`toolkit.tuning.network.tune_network`, the
gradient scheduler, 32 trials per round), with the measurements **replayed** from exhaustive simulator logs. After
each round the bench notes the trials so far, every task's best, and the **board time** so far, modelled as in the
test-set headline: every config compiled once (its recorded compile time, measured or compiled only for its
features) + trials x the board's time per trial besides compiling (the emulated ZCU102 board's) + the tuners' own
seconds on this machine. A run ends at its budget or once every task is at its space's exact optimum.

``--local TRIALS`` runs the same flow on this machine's CPU instead (real builds, ``ml2tuner+`` and ``xgb``, one seed)
and adds it to the saved results. Writes ``bench/out/time_to_tune.json`` and the section "## Time to tune a whole
network" at the top of ``bench/archive.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from bench.bench_ml2tuner import build_cache, make_task
from bench.bench_testset import per_trial_board_s
from bench.testset_figures import parse_label
from toolkit import console
from toolkit.backends import network_tasks
from toolkit.harness import environment, save_checkpoint, write_doc_section
from toolkit.tuning.core.builder import Artifact
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Template
from toolkit.tuning.network import NetworkSummary, tune_network
from toolkit.tuning.replay import CachedRunner, MeasurementCache, ReplayBuilder
from toolkit.tuning.scheduler import make_scheduler
from toolkit.workloads.networks import get_network

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "time_to_tune.json"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Time to tune a whole network"
SETTINGS = ("pynq-own", "zcu102-tvm")
TUNERS = ("ml2tuner+", "ml2tuner", "xgb")
ROUND_TRIALS = 32


class _AtOptimum(Exception):
    """Every task of the network reached its optimum: the run ends there."""


class MeteredReplay(ReplayBuilder):
    """A replay builder that adds each config's recorded compile time to ``meter`` the first time it is compiled."""

    def __init__(self, cache: MeasurementCache, meter: dict[str, Any]) -> None:
        super().__init__(cache)
        self.meter = meter

    def build(self, template: Template, configs: Sequence[Config]) -> list[Artifact | MeasureResult]:
        out = super().build(template, configs)
        for c, o in zip(configs, out):
            key = (id(self.cache), c.index)
            if key not in self.meter["seen"]:
                self.meter["seen"].add(key)
                self.meter["compile_s"] += o.build_s
        return out


def run(setting: str, tuner: str, seed: int, trials: int, board_s: float,
        options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One whole-network run (``options``: the tuner's, as ``--option``); its rounds as (trials, board seconds,
    every task's best seconds)."""
    probe = make_task(setting, "C2")
    plan, tasks = network_tasks(get_network("resnet18"), probe.board, **probe.template.options)
    caches = {t.workload: build_cache(setting, t.workload.name.split(".")[1])[1] for t in tasks}
    optima = [caches[t.workload].best().seconds for t in tasks]
    meter: dict[str, Any] = {"seen": set(), "compile_s": 0.0}
    rounds: list[list[Any]] = []

    def on_round(s: NetworkSummary) -> None:
        tuner_s = sum(o.summary.tuner_s for o in s.tasks)
        best = [o.best_seconds for o in s.tasks]
        rounds.append([s.trials, meter["compile_s"] + s.trials * board_s + tuner_s, best])
        if all(b <= opt * (1 + 1e-9) for b, opt in zip(best, optima)):
            raise _AtOptimum

    try:
        tune_network(plan, tasks, tuner, trials, seed=seed, tuner_options=options,
                     scheduler=make_scheduler("gradient", seed=seed, trials_per_round=ROUND_TRIALS),
                     measure_with=lambda t: (MeteredReplay(caches[t.workload], meter),
                                             CachedRunner(caches[t.workload])),
                     callback=on_round)
    except _AtOptimum:
        pass
    return {"setting": setting, "tuner": tuner, "seed": seed, "rounds": rounds,
            "tasks": [t.workload.name for t in tasks], "counts": [p.count for p in plan.tasks], "optima": optima}


def labelled(setting: str, label: str, seed: int, trials: int, board_s: float) -> dict[str, Any]:
    """:func:`run` for a tuner label, ``NAME[:KEY=VALUE...]`` (options as ``--option`` takes them), saved under it."""
    name, options = parse_label(label)
    return {**run(setting, name, seed, trials, board_s, options or None), "tuner": label}


def run_local(tuner: str, trials: int, seed: int = 0,
              progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """ResNet-18 on this machine's CPU (``local``): real builds and measurements over the loopback RPC server, as
    ``tune --model resnet18 -b local`` runs them; after each round (trials, wall seconds, network conv latency)."""
    from toolkit.backends import board_for

    plan, tasks = network_tasks(get_network("resnet18"), board_for("local"))
    curve: list[list[float]] = []
    t0 = time.perf_counter()

    def on_round(s: NetworkSummary) -> None:
        curve.append([s.trials, time.perf_counter() - t0, s.total_seconds])
        if progress is not None:
            progress(s.trials)

    tune_network(plan, tasks, tuner, trials, seed=seed,
                 scheduler=make_scheduler("gradient", seed=seed, trials_per_round=ROUND_TRIALS), callback=on_round)
    return {"tuner": tuner, "seed": seed, "tasks": len(tasks), "curve": curve}


def local_section(local: dict[str, Any]) -> list[str]:
    """The ``local`` table: each tuner's network conv latency after so many minutes of tuning."""
    runs = local["runs"]
    end = max(c[1] for r in runs for c in r["curve"]) / 60
    marks = [m for m in (2, 4, 6, 8, 10, 15, 20, 30) if m < end] + [math.ceil(end)]

    def at(r: dict[str, Any], minutes: float) -> str:
        done = [c for c in r["curve"] if c[1] <= minutes * 60 and math.isfinite(c[2])]
        return f"{done[-1][2] * 1e3:.1f} ms ({done[-1][0]})" if done else "-"

    lines = ["", "### ResNet-18 on `local` (real builds)", "",
             f"The same flow on this machine's CPU ({local['trials']} trials, {runs[0]['tasks']} conv tasks, one seed, "
             f"real TVM builds and measurements; command `{local['command']}`, {local['date']}). Each cell: the "
             "network's conv latency (sum of each task's best kernel x its count) after that many minutes of wall "
             "time, with the trials so far; the first rounds (one per task) come before the scheduler chooses. "
             "`local` ships no transfer model, so `ml2tuner+` starts cold here and learns across the network's tasks.",
             "", "| tuner | " + " | ".join(f"{m} min" for m in marks) + " |", "|---|" + "---|" * len(marks)]
    for r in runs:
        lines.append(f"| `{r['tuner']}` | " + " | ".join(at(r, m) for m in marks) + " |")
    return lines


def first_round(r: dict[str, Any], ok: Callable[[float, float], bool]) -> list[Any] | None:
    """The first round after which ``ok(best, optimum)`` holds for every task (``None``: never in the budget)."""
    return next((rd for rd in r["rounds"] if all(ok(b, o) for b, o in zip(rd[2], r["optima"]))), None)


def network_within(r: dict[str, Any], tol: float) -> list[Any] | None:
    """The first round whose network latency (sum of best x count) is within ``tol`` of the sum of optima."""
    opt = sum(o * c for o, c in zip(r["optima"], r["counts"]))
    return next((rd for rd in r["rounds"] if sum(b * c for b, c in zip(rd[2], r["counts"])) <= opt * (1 + tol)),
                None)


def figures(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median over seeds of board minutes and trials to each milestone, and how many runs reached it."""
    marks = {"network within 1 %": lambda r: network_within(r, 0.01),
             "every layer within 1 %": lambda r: first_round(r, lambda b, o: b <= o * 1.01),
             "every layer at its optimum": lambda r: first_round(r, lambda b, o: b <= o * (1 + 1e-9))}
    out: dict[str, Any] = {}
    for name, find in marks.items():
        hits = [find(r) for r in runs]
        got = [h for h in hits if h is not None]
        out[name] = {"reached": len(got), "runs": len(runs),
                     "minutes": float(np.median([h[1] / 60 for h in got])) if got else None,
                     "trials": float(np.median([h[0] for h in got])) if got else None}
    return out


def gap_at(r: dict[str, Any], seconds: float) -> float:
    """The network latency over the sum of optima, minus 1, after the last round ended by ``seconds`` of board time."""
    opt = sum(o * c for o, c in zip(r["optima"], r["counts"]))
    done = [rd for rd in r["rounds"] if rd[1] <= seconds]
    return sum(b * c for b, c in zip(done[-1][2], r["counts"])) / opt - 1 if done else float("inf")


def _when(f: dict[str, Any]) -> str:
    return "never" if not f["reached"] else f"after {f['minutes']:.0f} min" + (
        "" if f["reached"] == f["runs"] else f" in {f['reached']} of {f['runs']} runs")


def _left_behind(runs: list[dict[str, Any]]) -> str:
    """The tasks of which some ``xgb`` run ends more than 1 % above the optimum, with the worst ratio."""
    worst: dict[str, float] = {}
    for r in runs:
        if r["tuner"] == "xgb" and r["rounds"]:
            for task, b, o in zip(r["tasks"], r["rounds"][-1][2], r["optima"]):
                if b > o * 1.01:
                    worst[task] = max(worst.get(task, 0.0), b / o)
    return ", ".join(f"{t} (up to {v:.2f}x)" for t, v in sorted(worst.items())) or "none"


def _reading(setting: str, runs: list[dict[str, Any]], default: str) -> str:
    """One clause per setting: the default's every-layer optimum against xgb's network within 1 %."""
    mine = figures([r for r in runs if r["tuner"] == default])["every layer at its optimum"]
    xgb = figures([r for r in runs if r["tuner"] == "xgb"])
    return (f"on {setting}, `{default}` has every layer at its exact optimum {_when(mine)} of board time, `xgb` the "
            f"network within 1 % {_when(xgb['network within 1 %'])} and every layer within 1 % "
            f"{_when(xgb['every layer within 1 %'])}")


def section(saved: dict[str, Any]) -> str:
    board_s, src = saved["board_s"], saved["board_src"]
    runs = saved["runs"]
    settings = list(dict.fromkeys(r["setting"] for r in runs))
    tuners = list(dict.fromkeys(r["tuner"] for r in runs))
    default = tuners[0]
    lines = [SECTION, "",
             "ResNet-18's ten VTA conv tasks (C2-C11) tuned as `edgetune tune --model resnet18` does (gradient "
             f"scheduler, {ROUND_TRIALS} trials per round, one budget of {saved['trials']} trials), measurements "
             "replayed from exhaustive simulator logs. Board time is modelled: every config compiled once (its "
             "recorded "
             f"compile time) + trials x {board_s:.2f} s ({src}) + the tuners' own seconds here. Median over "
             f"{saved['seeds']} seeds of the runs that got there (how many did, where not all).", "",
             f"Command: `{saved['command']}`. Machine: {saved['environment']['machine']}; "
             f"{saved['environment']['date']}.", "",
             "| preset, space | tuner | network within 1 % of its optimum | every layer within 1 % | "
             f"every layer at its exact optimum | network over its optimum when `{default}` has every layer at it |",
             "|---|---|---|---|---|---|"]
    for setting in settings:
        mine = {t: [r for r in runs if r["setting"] == setting and r["tuner"] == t] for t in tuners}
        at = figures(mine[default])["every layer at its optimum"]
        for tuner in tuners:
            fig = figures(mine[tuner])
            cells = []
            for mark in ("network within 1 %", "every layer within 1 %", "every layer at its optimum"):
                f = fig[mark]
                cells.append(f"not in {saved['trials']} trials" if not f["reached"] else
                             f"{f['minutes']:.0f} min, {f['trials']:.0f} trials"
                             + ("" if f["reached"] == f["runs"] else f" ({f['reached']} of {f['runs']} runs)"))
            gap = (f"{100 * float(np.median([gap_at(r, at['minutes'] * 60) for r in mine[tuner]])):+.1f} % "
                   f"(at {at['minutes']:.0f} min)" if at["minutes"] is not None else "-")
            lines.append(f"| {setting} | `{tuner}` | " + " | ".join(cells) + f" | {gap} |")
    lines += ["", "Reading: " + "; ".join(_reading(setting, [r for r in runs if r["setting"] == setting], default)
                                         for setting in settings) + ". "
              f"The layers `xgb` leaves more than 1 % above their optimum at the end: {_left_behind(runs)}; the "
              "gradient "
              "scheduler spends trials where they cut the network's latency most, and these weigh little (section "
              "\"Whole-network tuning\")."]
    lines += ["", "`ml2tuner+` (the default) starts from the transfer model edgetune ships for the preset, which was "
              "trained on these very layers (the development set): its figures are what a user tuning ResNet-18 gets, "
              "not a held-out result (the test-set headline below is one). `ml2tuner` starts cold and learns across "
              "the "
              "network's tasks as it tunes (whole-network transfer); `xgb` is AutoTVM's tuner, without transfer.", ""]
    if saved.get("local"):
        lines += local_section(saved["local"]) + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_time_to_tune", description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, from {SETTINGS}")
    ap.add_argument("--tuners", default=",".join(TUNERS),
                    help="comma-separated tuner labels, NAME[:KEY=VALUE...] (KEY=VALUE: a tuner option)")
    ap.add_argument("--trials", type=int, default=3000, help="the network's budget")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--report-only", action="store_true", help="rewrite the doc section from the saved results")
    ap.add_argument("--local", type=int, metavar="TRIALS",
                    help="instead: ResNet-18 on `local` with real builds, ml2tuner+ and xgb, one seed, TRIALS each")
    raw = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(raw)
    if args.report_only:
        write_doc_section(DOC, SECTION, section(json.loads(OUT.read_text())))
        return 0
    if args.local:
        saved = json.loads(OUT.read_text())
        command = ".venv/bin/python -m bench.bench_time_to_tune " + " ".join(shlex.quote(a) for a in raw)
        saved["local"] = {"command": command, "date": environment(command)["date"], "trials": args.local,
                          "runs": []}
        with console.progress() as bar:
            for tuner in ("ml2tuner+", "xgb"):
                tid = bar.add_task(f"ResNet-18 on local, {tuner}", total=args.local, status="")
                saved["local"]["runs"].append(run_local(tuner, args.local,
                                                        progress=lambda n, tid=tid: bar.update(tid, completed=n)))
        save_checkpoint(OUT, saved, default=float, indent=None)
        write_doc_section(DOC, SECTION, section(saved))
        return 0
    board_s, src = per_trial_board_s()
    settings = [s for s in args.settings.split(",") if s]
    tuners = [t for t in args.tuners.split(",") if t]
    command = ".venv/bin/python -m bench.bench_time_to_tune " + " ".join(shlex.quote(a) for a in raw)
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    done = {(r["setting"], r["tuner"], r["seed"]): r for r in old.get("runs", [])} \
        if old.get("trials") == args.trials and old.get("board_s") == board_s else {}
    runs: list[dict[str, Any]] = [r for r in done.values() if r["setting"] not in settings]   # other settings kept
    saved = {"command": command, "environment": environment(command), "trials": args.trials, "seeds": args.seeds,
             "board_s": board_s, "board_src": src, "runs": runs,
             **({"local": old["local"]} if old.get("local") else {})}   # the local runs are kept
    with console.progress() as bar:
        tid = bar.add_task("whole-network runs", total=len(settings) * len(tuners) * args.seeds, status="")
        for setting in settings:
            for seed in range(args.seeds):
                for tuner in tuners:
                    bar.update(tid, status=f"{setting} {tuner} seed {seed}")
                    runs.append(done.get((setting, tuner, seed))
                                or labelled(setting, tuner, seed, args.trials, board_s))
                    save_checkpoint(OUT, saved, default=float, indent=None)   # resumable: finished runs are kept
                    bar.advance(tid)
    write_doc_section(DOC, SECTION, section(saved))
    console.info(section(saved))
    return 0


if __name__ == "__main__":
    sys.exit(main())
