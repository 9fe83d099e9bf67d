"""MetaSchedule vs edgetune on the ``local`` CPU: best GFLOPS at equal trials, and wall time.

From an ``edgetune bench`` JSON that ran ``metaschedule`` beside edgetune's tuners (the headline's
``local`` setting, ``python -m bench.headline --settings local``)::

    .venv/bin/python -m bench.bench_metaschedule --from-json bench/out/headline/local.json \
        --tuner xgb,chameleon,ml2tuner --load-log bench/out/metaschedule/headline-local.log  # repeatable

Or tuning here, tuner by tuner: ``TVM_NUM_THREADS=1 .venv/bin/python -m bench.bench_metaschedule
--trials 200 --seeds 3`` (options: ``--layers C2,C5,C8``, ``--tuner xgb``, ``--baseline-dir DIR``,
``--no-doc``).

For each ResNet-18 layer and seed, both tuners solve the same workload (the CPU template's ``te``
compute) on the ``local`` board, measured through the same loopback TVM RPC tracker + server with
the same timing (``number=1, repeat=3, min_repeat_ms=20``) and the same trial budget:

* edgetune's tuner (``--tuner``, default ``xgb``) on the ``cpu-conv2d`` template via ``tune()``;
* ``metaschedule`` (MetaSchedule's evolutionary search + XGBoost, ``tune_tir``) via the same
  ``tune()`` call (it is a driver, see ``docs/tuners.md``).

``--baseline-dir`` reuses edgetune logs of that tuner (``<dir>/<layer>.jsonl``, seed 0 only;
their first ``--trials`` records) instead of tuning again. Logs go to
``bench/out/metaschedule/<tuner>-<layer>-s<seed>.jsonl``; the numbers are read back from them
(best over the first ``--trials`` records; wall = last record's timestamp - the log's creation).
Writes the section "## MetaSchedule vs edgetune (local CPU)" of ``bench/archive.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import statistics
from pathlib import Path

from toolkit.harness import write_doc_section

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "metaschedule"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## MetaSchedule vs edgetune (local CPU)"
LAYERS = ("C2", "C5", "C8")


def options():
    from toolkit.tuning.core.runner import MeasureOptions

    return MeasureOptions(number=1, repeat=3, min_repeat_ms=20)


def run_one(layer: str, tuner_name: str, seed: int, trials: int) -> Path:
    """Tune ``resnet18.<layer>`` on ``local`` with ``tuner_name`` (resumes an existing log)."""
    from toolkit.boards import resolve_board
    from toolkit.tuning.session import tune
    from toolkit.backends import make_task
    from toolkit.tuning.tuners.base import make_tuner
    from toolkit.workloads import parse_workload

    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"{tuner_name}-{layer}-s{seed}.jsonl"
    task = make_task(parse_workload(f"resnet18.{layer}"), resolve_board("local"))
    s = tune(task, make_tuner(tuner_name, seed=seed), trials, log=log, resume=True, measure_options=options(),
             callback=lambda s, _: print(f"  {tuner_name} {layer} s{seed}: {s.trials}/{trials} "
                                         f"{s.best_gops:.1f} GFLOPS", flush=True))
    print(f"{tuner_name} {layer} seed {seed}: {s.best_gops:.2f} GFLOPS in {s.wall_s:.0f} s", flush=True)
    return log


def read_run(log: Path, trials: int) -> dict:
    """Best GFLOPS over the first ``trials`` records, the trials counted, valid ones and wall seconds."""
    from toolkit.tuning.journal import read_log
    from toolkit.workloads import Conv2dWorkload

    header, records = read_log(log)
    records = records[:trials]
    flops = Conv2dWorkload.from_dict(header.task["workload"]).flops
    valid = [r for r in records if r.valid]
    best = min((r.seconds for r in valid), default=float("inf"))
    wall = (records[-1].timestamp - header.created) if records else 0.0
    return {"log": str(log.relative_to(ROOT) if log.is_relative_to(ROOT) else log), "trials": len(records),
            "valid": len(valid), "gflops": flops / best / 1e9 if valid else 0.0, "wall_s": wall}


def render(rows: list[dict], args: argparse.Namespace, started: str, load: str) -> str:
    from toolkit.harness import environment

    env = environment()
    lines = [
        SECTION, "",
        f"Machine: {env['machine']}; shared with other jobs (load average {load} at the start). "
        f"Command: `TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS', '(unset)')} .venv/bin/python -m "
        f"bench.bench_metaschedule --trials {args.trials} --seeds {args.seeds} --layers {','.join(args.layers)}"
        + (f" --baseline-dir {args.baseline_dir}" if args.baseline_dir else "") + f"`. Date: {started}. "
        f"apache-tvm {env['tvm']}. float32 NCHW, batch 1.", "",
        f"Both solve the CPU template's `te` conv2d on `local`, measured through the same loopback TVM RPC "
        f"tracker + server (`number=1, repeat=3, min_repeat_ms=20`), {args.trials} trials each. "
        f"edgetune: `{args.tuner}` on `cpu-conv2d`; MetaSchedule: `tune_tir` (evolutionary + XGBoost, its "
        f"RPCRunner on the same tracker/key) via the `metaschedule` driver. GFLOPS = 2*MACs / best latency. "
        f"Wall = log creation to the last counted record.", "",
        f"| layer | seed | {args.tuner} GFLOPS | metaschedule GFLOPS | MS / {args.tuner} | {args.tuner} wall | "
        f"metaschedule wall | MS wall / {args.tuner} | trials (valid) {args.tuner} / MS |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b, m = r["base"], r["ms"]
        lines.append(
            f"| {r['layer']} | {r['seed']} | {b['gflops']:.1f} | {m['gflops']:.1f} | "
            f"{m['gflops'] / b['gflops']:.2f}x | {b['wall_s'] / 60:.1f} min | {m['wall_s'] / 60:.1f} min | "
            f"{m['wall_s'] / b['wall_s']:.2f} | {b['trials']} ({b['valid']}) / {m['trials']} ({m['valid']}) |")
    if rows:
        ratio = statistics.geometric_mean([r["ms"]["gflops"] / r["base"]["gflops"] for r in rows])
        wall = statistics.geometric_mean([r["ms"]["wall_s"] / r["base"]["wall_s"] for r in rows])
        lines += ["", f"Geometric mean: MetaSchedule reaches {ratio:.2f}x edgetune's GFLOPS in {wall:.2f}x its "
                      "wall time (target: > 1x GFLOPS on every layer at <= 0.33x wall)."]
    lines += ["", *args.notes, ""]
    return "\n".join(lines)


def match_trial(history: list, target: float | None) -> int | None:
    """First trial (1-based) whose best-so-far is within 1 % of ``target`` seconds; ``None`` if never.

    >>> match_trial([None, 3.0, 1.005, 1.0], 1.0)
    3
    """
    if target is None:
        return None
    return next((i + 1 for i, h in enumerate(history) if h is not None and h <= target * 1.01), None)


def render_json(path: Path, tuners: list[str], load: str, heading: str = SECTION) -> str:
    """The section from an ``edgetune bench`` JSON holding ``metaschedule`` and edgetune tuners' runs.

    Every tuner in ``tuners`` is compared with ``metaschedule`` on the same layer and seed."""
    from toolkit.harness import BenchResult
    from toolkit.workloads import parse_workload

    res = BenchResult.load(path)
    env, settings = res.environment, res.settings
    runs = {(r.workload, r.seed, r.tuner): r for r in res.runs}
    blocks = sorted({(w, s) for (w, s, t) in runs if t == "metaschedule"},
                    key=lambda b: (int(b[0].split(".C")[-1]) if ".C" in b[0] else 0, b[1]))
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    lines = [
        heading, "",
        f"Machine: {env['machine']}; apache-tvm {env['tvm']}, float32 NCHW, batch 1, `TVM_NUM_THREADS=1`. "
        f"Date: {env['date']}. 1/5/15-min load averages: {load}.", "",
        f"Command (under `flock /tmp/edgetune-timed.lock`): `{env['command']}` (= `python -m bench.headline "
        f"--settings local`); JSON: `{rel}`. Every tuner runs on every layer with every seed, "
        f"{settings['trials']} trials each, taking turns inside each layer/seed block, through one loopback "
        f"TVM RPC tracker + server, with the same `MeasureOptions` (`number=1, repeat=3, min_repeat_ms=0`, "
        f"no output check) and the same 10 s build timeout; what differs between the tuners (RPC sessions, "
        f"batches) is in `docs/tuners.md` (metaschedule). GFLOPS = 2*MACs / best latency measured during "
        f"tuning. Wall = the whole `tune()` call. *trials to MS's best*: the first trial whose best-so-far is "
        f"within 1 % of MetaSchedule's final best (and *MS trials to its best* the other way round).", "",
        "| layer | seed | tuner | GFLOPS | vs MS | trials to MS's best | MS trials to its best | wall | wall / MS "
        "| invalid |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, dict[str, list[tuple[float, float]]]] = {t: {} for t in tuners}
    for w, seed in blocks:
        m = runs[(w, seed, "metaschedule")]
        flops = parse_workload(w).flops
        mg = flops / m.best() / 1e9
        layer = w.split(".")[-1]
        lines.append(f"| {layer} | {seed} | metaschedule | {mg:.1f} | 1.00x | - | - | {m.wall_s / 60:.1f} min | "
                     f"1.00 | {m.invalid} |")
        for t in tuners:
            e = runs.get((w, seed, t))
            if e is None:
                continue
            eg = flops / e.best() / 1e9
            ratios[t].setdefault(layer, []).append((eg / mg, e.wall_s / m.wall_s))
            te, tm = match_trial(e.history, m.best_seconds), match_trial(m.history, e.best_seconds)
            lines.append(f"| {layer} | {seed} | {t} | {eg:.1f} | {eg / mg:.2f}x | {te if te else 'never'} | "
                         f"{tm if tm else 'never'} | {e.wall_s / 60:.1f} min | {e.wall_s / m.wall_s:.2f} | "
                         f"{e.invalid} |")
    lines += ["", "| tuner | layer | seeds | GFLOPS / MS (geomean) | seeds higher than MS | wall / MS (geomean) | "
                  "GFLOPS target | wall target (<= 0.33) |", "|---|---|---|---|---|---|---|---|"]
    overall = []
    for t in tuners:
        for layer, vals in ratios[t].items():
            g = statistics.geometric_mean([v[0] for v in vals])
            wall = statistics.geometric_mean([v[1] for v in vals])
            wins = sum(v[0] > 1 for v in vals)
            lines.append(f"| {t} | {layer} | {len(vals)} | {g:.2f}x | {wins} of {len(vals)} | {wall:.2f} | "
                         f"{'met' if wins == len(vals) else 'missed'} | {'met' if wall <= 1 / 3 else 'missed'} |")
        allv = [v for vals in ratios[t].values() for v in vals]
        if allv:
            overall.append(f"`{t}` {statistics.geometric_mean([v[0] for v in allv]):.2f}x MetaSchedule's GFLOPS in "
                           f"{statistics.geometric_mean([v[1] for v in allv]):.2f}x its wall time "
                           f"({sum(v[0] > 1 for v in allv)} of {len(allv)} runs higher)")
    lines += ["", "Geometric means over all layer/seed pairs: " + "; ".join(overall) +
              ". Target: > 1x GFLOPS on every layer and <= 0.33x wall."]
    return "\n".join(lines) + "\n"


def load_from_logs(logs: list[Path]) -> str:
    """The 1/5/15-min load averages at the start and the end of each run log (its first and last ``uptime``)."""
    parts = []
    for log in logs:
        found = re.findall(r"load average: ([\d.]+), ([\d.]+), ([\d.]+)", log.read_text())
        before = "/".join(found[0]) if found else "?"
        after = "/".join(found[-1]) if found else "?"
        parts.append(f"`{log.name}` {before} at the start, {after} at the end")
    return "; ".join(parts) or "not recorded"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--layers", type=lambda s: s.split(","), default=list(LAYERS))
    p.add_argument("--tuner", default="xgb", help="edgetune's tuner to compare with (--from-json: comma-separated)")
    p.add_argument("--baseline-dir", type=Path, default=None,
                   help="reuse <dir>/<layer>.jsonl logs of --tuner (seed 0) instead of tuning it again")
    p.add_argument("--note", dest="notes", action="append", default=[], help="a line added under the table")
    p.add_argument("--no-doc", action="store_true", help="print the section instead of writing bench/archive.md")
    p.add_argument("--from-json", type=Path, action="append", default=[],
                   help="write the section from this edgetune bench JSON (no tuning); repeatable: each further "
                        "JSON gets a subsection")
    p.add_argument("--load-log", type=Path, action="append", default=[],
                   help="with --from-json: each JSON's run log (in the same order), for its first and last "
                        "'load average'")
    p.add_argument("--notes-file", type=Path, help="with --from-json: markdown added under the tables")
    args = p.parse_args(argv)
    if args.from_json:
        logs = args.load_log + [None] * len(args.from_json)
        parts = [render_json(js, args.tuner.split(","), load_from_logs([log] if log else []),
                             SECTION if i == 0 else f"### Also: `{js.name}`")
                 for i, (js, log) in enumerate(zip(args.from_json, logs))]
        text = "\n".join(parts)
        if args.notes_file:
            text += "\n" + args.notes_file.read_text().rstrip("\n") + "\n"
        if args.no_doc:
            print(text)
        else:
            write_doc_section(DOC, SECTION, text + "\n")
        return
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = f"{os.getloadavg()[0]:.1f}"
    rows = []
    for layer in args.layers:
        for seed in range(args.seeds):
            reuse = args.baseline_dir / f"{layer}.jsonl" if args.baseline_dir and seed == 0 else None
            base_log = reuse if reuse and reuse.exists() else run_one(layer, args.tuner, seed, args.trials)
            ms_log = run_one(layer, "metaschedule", seed, args.trials)
            rows.append({"layer": layer, "seed": seed, "base": read_run(base_log, args.trials),
                         "ms": read_run(ms_log, args.trials)})
            text = render(rows, args, started, load)
            if not args.no_doc:
                write_doc_section(DOC, SECTION, text)
    print(render(rows, args, started, load))


if __name__ == "__main__":
    main()
