"""MetaSchedule vs edgetune on the ``local`` CPU: best GFLOPS at equal trials, and wall time.

``TVM_NUM_THREADS=1 .venv/bin/python -m bench.bench_metaschedule --trials 200 --seeds 3`` (options:
``--layers C2,C5,C8``, ``--tuner xgb``, ``--baseline-dir DIR``, ``--no-doc``).

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
Writes the section "## MetaSchedule vs edgetune (local CPU)" of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "metaschedule"
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## MetaSchedule vs edgetune (local CPU)"
LAYERS = ("C2", "C5", "C8")


def options():
    from toolkit.tuning.runner import MeasureOptions

    return MeasureOptions(number=1, repeat=3, min_repeat_ms=20, check=False)


def run_one(layer: str, tuner_name: str, seed: int, trials: int) -> Path:
    """Tune ``resnet18.<layer>`` on ``local`` with ``tuner_name`` (resumes an existing log)."""
    from toolkit.boards import resolve_board
    from toolkit.tuning.loop import tune
    from toolkit.tuning.task import Task
    from toolkit.tuning.tuners.base import make_tuner
    from toolkit.workloads import parse_workload

    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"{tuner_name}-{layer}-s{seed}.jsonl"
    task = Task.create(parse_workload(f"resnet18.{layer}"), resolve_board("local"))
    s = tune(task, make_tuner(tuner_name, seed=seed), trials, log=log, resume=True, measure_options=options(),
             callback=lambda s, _: print(f"  {tuner_name} {layer} s{seed}: {s.trials}/{trials} "
                                         f"{s.best_gops:.1f} GFLOPS", flush=True))
    print(f"{tuner_name} {layer} seed {seed}: {s.best_gops:.2f} GFLOPS in {s.wall_s:.0f} s", flush=True)
    return log


def read_run(log: Path, trials: int) -> dict:
    """Best GFLOPS over the first ``trials`` records, the trials counted, valid ones and wall seconds."""
    from toolkit.tuning.records import read_log
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
    from toolkit.tuning.bench import environment

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


def write_section(text: str) -> None:
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    doc = pattern.sub(lambda _: text, doc) if pattern.search(doc) else doc.rstrip("\n") + "\n\n" + text
    DOC.write_text(doc)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--layers", type=lambda s: s.split(","), default=list(LAYERS))
    p.add_argument("--tuner", default="xgb", help="edgetune's tuner to compare with")
    p.add_argument("--baseline-dir", type=Path, default=None,
                   help="reuse <dir>/<layer>.jsonl logs of --tuner (seed 0) instead of tuning it again")
    p.add_argument("--note", dest="notes", action="append", default=[], help="a line added under the table")
    p.add_argument("--no-doc", action="store_true", help="print the section instead of writing docs/benchmarks.md")
    args = p.parse_args(argv)
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
                write_section(text)
    print(render(rows, args, started, load))


if __name__ == "__main__":
    main()
