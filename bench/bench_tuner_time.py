"""The tuners' own time per trial on a quiet machine: the recommended tuners on the test-set layers where the
test-set benchmark measured them slowest.

``.venv/bin/python -m bench.bench_tuner_time`` runs ``xgb``, ``ml2tuner``, ``ml2tuner+`` (the shipped transfer
model) and ``chameleon-ml2`` on each ``--layers`` entry (``SETTING/LAYER``, replayed from exhaustive simulator
logs as bench_testset does), ``--trials`` trials and ``--seeds`` seeds, one run at a time, and writes per tuner its
seconds per trial (wall and CPU, mean and worst layer) and where they go (the tuner's ``stats()``: model fits,
search, compiles) to ``bench/out/tuner-time.json`` and bench/archive.md. Run it alone: the test-set benchmark ran
its parts side by side, so its wall seconds include waiting for the CPU; CPU seconds do not.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

from toolkit.harness import BenchResult, run_bench, save_checkpoint, write_doc_section

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "bench" / "out" / "tuner-time.json"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Tuner time per trial (quiet machine)"
LAYERS = "pynq/mobilenet_v1.L5,pynq/yolov3_tiny.L4,pynq/resnet50.L2,zcu102/resnet50.L2,zcu102/resnet50.L6"
"""The layers where the test-set benchmark measured ``chameleon-ml2`` slowest (per trial) on each preset."""
TUNERS = ("xgb", "ml2tuner", "ml2tuner:transfer=pretrained", "chameleon-ml2")
PARTS = ("fit_s", "v_fit_s", "search_s", "compile_s")
LIMIT_S = 0.1
"""The tuner's seconds per trial that every recommended tuner should stay under."""


def run(layers: list[str], trials: int, seeds: int) -> BenchResult:
    from bench.bench_testset import CACHE, DEV_CACHE, REFERENCE, SETTINGS, board_for, variants
    from toolkit import console
    from toolkit.workloads import parse_workload

    command = " ".join(["python -m bench.bench_tuner_time", *sys.argv[1:]])
    runs: list[Any] = []
    result = None
    imports_s = warm_up()
    with console.progress() as bar:
        tid = bar.add_task("tuner time", total=len(layers) * seeds * len(TUNERS), status="")

        def progress(what: str, done: int, total: int, offset: int) -> None:
            if what.startswith("cache "):   # building a layer's exhaustive log: its own count
                bar.update(tid, status=f"{what} {done}/{total}")
            else:
                bar.update(tid, completed=offset + done, status=what)

        for i, item in enumerate(layers):
            setting, _, layer = item.partition("/")
            if setting not in SETTINGS or not layer:
                raise SystemExit(f"--layers entry {item!r} is not SETTING/LAYER with SETTING one of {sorted(SETTINGS)}")
            s = SETTINGS[setting]
            offset = i * seeds * len(TUNERS)
            part = run_bench(board_for(s["preset"]), [parse_workload(layer)], list(TUNERS), trials, seeds,
                             reference=REFERENCE, template_options=s["options"], cache_dirs=[CACHE, DEV_CACHE],
                             command=command, variants=variants(TUNERS, s["preset"]),
                             progress=lambda what, done, total: progress(what, done, total, offset))
            for r in part.runs:
                r.workload = f"{setting}/{r.workload}"
            runs += part.runs
            result = part
    assert result is not None
    result.runs = runs
    result.settings.update(layers=layers, imports_s=imports_s)
    save_checkpoint(RESULT, result.to_json(), indent=None)
    return result


def warm_up() -> float:
    """Import what the tuners import on first use (XGBoost, scikit-learn, PyTorch's optimizers, which load
    ``torch._dynamo``), so no run's time holds them; the seconds that took."""
    import importlib
    import time

    started = time.perf_counter()
    for name in ("xgboost", "sklearn.cluster"):
        importlib.import_module(name)
    import torch

    torch.optim.Adam(torch.nn.Linear(1, 1).parameters())
    return time.perf_counter() - started


def report() -> str:
    res = BenchResult.load(RESULT)
    env = res.environment
    lines = [SECTION, "",
             "The tuners' own seconds per trial (proposing and learning; the board's time and the replayed "
             "measurements excluded), each run alone on this machine, on the test-set layers where the test-set "
             "benchmark measured `chameleon-ml2` slowest. Replayed from exhaustive simulator logs; "
             f"{res.settings['trials']} trials (the whole budget, as a user's run), {res.settings['seeds']} seeds. "
             "*Wall*: what "
             "a user waits; *CPU*: this process's CPU seconds (XGBoost and PyTorch may use both cores). The parts "
             "are the tuner's `stats()` (model fits, validity-model fits, search, compiles for features), in wall "
             "seconds per trial; the rest is ranking, clustering and bookkeeping. Not in the table: the one-off "
             f"imports of XGBoost, scikit-learn and PyTorch's optimizer that a process's first run pays "
             f"({res.settings['imports_s']:.1f} s here, done before the first run).", "",
             f"Command: `{env['command']}`. Machine: {env['machine']}; {env['date']}.", "",
             HEADER, "|---|---|---|---|---|---|---|---|", *rows(res.runs)]
    over = [("VTA", slow(res.runs))]
    from bench.bench_cpu_transfer import RESULT as CPU_RESULT, newest

    cpu_result = newest(CPU_RESULT)         # bench_cpu_transfer's live runs on ``local``, beside the replayed ones
    if cpu_result is not None:
        cpu = BenchResult.load(cpu_result)
        lines += ["", "On `local` (live: real TVM builds, the tuner's compiles are TIR lowerings in the builder's two "
                      "worker processes), from the runs of \"Transfer on a CPU board\" above "
                      f"(`{cpu.environment['command']}`, {cpu.environment['date']}; "
                      f"{cpu.settings['trials']} trials, {cpu.settings['seeds']} seeds):", "",
                  HEADER, "|---|---|---|---|---|---|---|---|", *rows(cpu.runs)]
        over.append(("`local`", slow(cpu.runs)))
    lines += ["", f"Over {LIMIT_S} s per trial (mean): " + "; ".join(
        f"{where}: {', '.join(names) if names else 'none'}" for where, names in over) + ". The test-set tables' "
        "tuner seconds come from runs that shared the two cores with another part of that benchmark, so they are up "
        "to three times these."]
    return "\n".join(lines) + "\n"


HEADER = ("| tuner | wall s / trial (mean) | worst layer | CPU s / trial (mean) | fits | validity fits | search "
          "| compiles |")


def by_tuner(runs: list[Any], tuners: Sequence[str] | None = None) -> list[tuple[str, list[Any], int]]:
    """(tuner, its runs with trials, their trials) for each tuner of ``tuners`` (default: those in ``runs``, in
    order) that has runs."""
    out = []
    for tuner in tuners if tuners is not None else list(dict.fromkeys(r.tuner for r in runs)):
        mine = [r for r in runs if r.tuner == tuner and r.trials]
        if mine:
            out.append((tuner, mine, sum(r.trials for r in mine)))
    return out


def slow(runs: list[Any], tuners: Sequence[str] | None = None) -> list[str]:
    """The tuners whose mean seconds per trial over ``runs`` exceed :data:`LIMIT_S`, as table labels."""
    return [f"`{label_of(t)}`" for t, mine, trials in by_tuner(runs, tuners)
            if sum(r.tuner_s for r in mine) / trials > LIMIT_S]


def label_of(tuner: str) -> str:
    """The name a table shows: ``ml2tuner+`` for ``ml2tuner`` with the shipped model."""
    return "ml2tuner+" if tuner == "ml2tuner:transfer=pretrained" else tuner


def rows(runs: list[Any], tuners: Sequence[str] | None = None) -> list[str]:
    """One table row per tuner that has runs: seconds per trial over all its trials, the layer with the largest
    mean over seeds, CPU seconds, and the parts (:data:`PARTS`) per trial."""
    out = []
    for tuner, mine, trials in by_tuner(runs, tuners):
        layers = sorted({r.workload for r in mine})
        per_layer = {w: statistics.mean(r.tuner_s / r.trials for r in mine if r.workload == w) for w in layers}
        worst = max(per_layer, key=per_layer.__getitem__)
        parts = [sum(r.stats.get(k, 0.0) for r in mine) / trials for k in PARTS]
        out.append(f"| `{label_of(tuner)}` | {sum(r.tuner_s for r in mine) / trials:.3f} | "
                   f"{per_layer[worst]:.3f} ({worst}) | {sum(r.cpu_s for r in mine) / trials:.3f} | "
                   + " | ".join(f"{p:.3f}" for p in parts) + " |")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=LAYERS,
                    help="SETTING/LAYER entries, comma-separated (SETTING: pynq, zcu102)")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    if not args.report_only:
        run([x for x in args.layers.split(",") if x], args.trials, args.seeds)
    write_doc_section(DOC, SECTION, report())


if __name__ == "__main__":
    main()
