"""Whole models on the ``local`` CPU: edgetune's export (untuned and tuned) beside torch, TVM's default Relax build
and MetaSchedule at the same trial budget, at one thread and at every thread.

    .venv/bin/python -m bench.bench_model [--models resnet18,mobilenet_v1] [--trials-per-task 32] [--write-docs]
    .venv/bin/python -m bench.bench_model --edge [--trials-per-task 8] [--write-docs]

``--edge``: the edge models (MobileNet-v2, MobileNet-v3-Small: depthwise convs, ReLU6, Hardswish, SE gates) and
ResNet-18, in ``bench/out/edge/`` and the section "## Edge models on local" of ``bench/archive.md``;
``--tuner`` and ``--no-metaschedule`` pick the tuner and leave MetaSchedule out (its evolutionary search
spends minutes per round on 2 cores).

For each built-in model (seeded random weights, batch 1, 224x224):

* **edgetune tuned**: ``tune --model`` on ``local`` with the default tuner, ``--trials-per-task`` trials per conv
  shape in all (Ansor's gradient scheduler shares them), then ``export --model`` with that log;
* **edgetune untuned**: ``export --model`` with no log (every plain conv gets the template's fallback config);
* **edgetune untuned, epilogues apart**: the same kernels, but what follows each conv (bias, residual add, ReLU)
  left to TVM's fused elementwise kernels instead of computed in the conv kernel (the export's default);
* **TVM Relax default**: the same Relax module (weights bound, batch-norm folded) through ``tvm.compile``;
* **MetaSchedule**: ``tune_relax`` of that module's conv2d tasks (depthwise ones included; the other operators keep
  TVM's default lowering, as in edgetune's export) with the same total number of trials, the best schedules applied
  by ``MetaScheduleApplyDatabase``;
* **torch eager**: the PyTorch model itself.

Tuning and the builds run once (logs and libraries under ``bench/out/model/``, reused when present: delete them to
tune again); the libraries are then timed in a fresh process per thread count (``TVM_NUM_THREADS``,
``torch.set_num_threads``): the median of 5 timed runs of at least 200 ms each. Writes
``bench/out/model/results.json`` and, with ``--write-docs``, the section "## Whole models on local" of
``bench/archive.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "model"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Whole models on local (ResNet-18, MobileNet-v1)"
EDGE = ("mobilenet_v2,mobilenet_v3_small,resnet18", ROOT / "bench" / "out" / "edge", DOC,
        "## Edge models on local (MobileNet-v2, MobileNet-v3-Small, ResNet-18)")
"""``--edge``: its models, output folder, document and section."""
SHAPE = (1, 3, 224, 224)
VARIANTS = ("torch", "relax-default", "metaschedule", "edgetune-untuned-apart", "edgetune-untuned", "edgetune-tuned")


def _tune(model: str, trials: int, tuner: str) -> tuple[Path, float, int, str]:
    """``tune --model`` on ``local`` with ``tuner``; (log, wall seconds, trials, tuner), resumed when present."""
    from toolkit.backends import network_tasks
    from toolkit.boards import resolve_board
    from toolkit.tuning.network import tune_network
    from toolkit.tuning.scheduler import make_scheduler
    from toolkit.workloads.extract import load_network

    board = resolve_board("local")
    plan, tasks = network_tasks(load_network(model, SHAPE), board)
    budget = trials * len(plan.tasks)
    log, done = OUT / f"{model}.jsonl", OUT / f"{model}-tune.json"
    if done.exists():
        return log, json.loads(done.read_text())["wall_s"], budget, tuner
    log.unlink(missing_ok=True)
    started = time.perf_counter()
    tune_network(plan, tasks, tuner, budget, log=log,
                 scheduler=make_scheduler("gradient", seed=0, trials_per_round=8))
    wall = time.perf_counter() - started
    done.write_text(json.dumps({"wall_s": wall, "trials": budget, "tuner": tuner}))
    return log, wall, budget, tuner


def _metaschedule(model: str, budget: int) -> tuple[Path, float]:
    """MetaSchedule's ``tune_relax`` of the whole model with ``budget`` trials; (library, wall seconds)."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from toolkit.backends.tvm.metaschedule import ms_target
    from toolkit.backends.tvm.model import relax_module
    from toolkit.boards import load_profile
    from toolkit.workloads.model_files import load_model

    lib = OUT / f"{model}-metaschedule.so"
    if lib.exists():
        return lib, json.loads((OUT / f"{model}-metaschedule.json").read_text())["wall_s"]
    target = ms_target(load_profile("local"))
    with target:   # the fused functions compile_relax will look up: conv2d with its bias, add and ReLU
        mod = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                        relax.transform.FoldConstant(), relax.transform.FuseOps(),
                                        relax.transform.FuseTIR()])(relax_module(load_model(model, SHAPE).program))
    started = time.perf_counter()
    work = OUT / f"{model}-metaschedule-work"
    database = ms.relax_integration.tune_relax(mod, {}, target, str(work), max_trials_global=budget,
                                               num_trials_per_iter=16, op_names=["conv2d"], seed=0)
    with target, database, tvm.transform.PassContext(opt_level=3):   # each tuned function's best schedule
        mod = relax.transform.MetaScheduleApplyDatabase()(mod)
    executable = tvm.compile(mod, target=target)
    wall = time.perf_counter() - started
    executable.export_library(str(lib))
    (OUT / f"{model}-metaschedule.json").write_text(json.dumps({"wall_s": wall, "trials": budget}))
    return lib, wall


def _default(model: str) -> Path:
    """TVM's default Relax build of the model (weights bound, batch-norm folded)."""
    import tvm

    from toolkit.backends.tvm.model import relax_module
    from toolkit.boards import load_profile
    from toolkit.workloads.model_files import load_model

    lib = OUT / f"{model}-relax-default.so"
    if not lib.exists():
        target = load_profile("local").tvm_target()
        tvm.compile(relax_module(load_model(model, SHAPE).program), target=target).export_library(str(lib))
    return lib


def _export(model: str, log: Path | None) -> Path:
    from toolkit.export.model import export_model

    out = OUT / f"{model}-{'tuned' if log else 'untuned'}"
    if not (out / "manifest.json").exists():
        export_model(model, out, "local", logs=[log] if log else [], input_shape=SHAPE, force=True)
    return out / "model.so"


def _untuned_apart(model: str) -> Path:
    """The untuned export's model library built with each conv's epilogue left to TVM (``fuse=False``)."""
    from toolkit.backends import backend_for
    from toolkit.backends.tvm.model import compile_model
    from toolkit.boards import load_profile
    from toolkit.export.model import plan_convs
    from toolkit.workloads.extract import extract
    from toolkit.workloads.model_files import load_model

    lib = OUT / f"{model}-untuned-apart.so"
    if not lib.exists():
        profile = load_profile("local")
        loaded = load_model(model, SHAPE)
        plans, _ = plan_convs(extract(loaded, SHAPE), backend_for(profile), profile, {})
        lib.write_bytes(compile_model(loaded.program, profile, plans, fuse=False).library)
    return lib


def _measure(model: str, libraries: dict[str, str], threads: int) -> dict[str, float]:
    """Milliseconds per inference of each library and of torch, in this process (``TVM_NUM_THREADS`` set by the
    caller): the median of 5 runs of at least 200 ms."""
    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from toolkit.workloads.zoo import zoo_model

    torch.set_num_threads(threads)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    out: dict[str, float] = {}
    net = zoo_model(model, 0)
    with torch.no_grad():
        xt = torch.from_numpy(x)
        net(xt)
        runs = []
        for _ in range(5):
            n, started = 0, time.perf_counter()
            while time.perf_counter() - started < 0.2:
                net(xt)
                n += 1
            runs.append((time.perf_counter() - started) / n)
        out["torch"] = float(np.median(runs)) * 1e3
        want = net(xt).numpy()
    dev = tvm.cpu()
    for name, path in libraries.items():
        vm = relax.VirtualMachine(tvm.runtime.load_module(path), dev)
        arg = tvm.runtime.tensor(x, dev)
        got = vm["main"](arg).numpy()
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err < 1e-3, f"{name} differs from torch: relative error {err}"
        result = vm.time_evaluator("main", dev, number=1, repeat=5, min_repeat_ms=200)(arg)
        out[name] = float(np.median(result.results)) * 1e3
    return out


def _measured(results: dict[str, Any]) -> list[str]:
    """The variants the results hold (runs from before a variant existed lack it)."""
    return [v for v in VARIANTS if any(v in ms for r in results["models"].values() for ms in r["ms"].values())]


def _markdown(results: dict[str, Any], command: str) -> str:
    env = results["environment"]
    lines = [SECTION, "",
             f"Machine: {env['machine']}; {env['date']}; edgetune {env['edgetune']}, TVM {env['tvm']}, torch "
             f"{env['libraries'].get('torch')}. Command: `{command}`. Batch 1, 224x224, seeded random weights; "
             "milliseconds per inference (median of 5 timed runs of at least 200 ms, each library timed in a fresh "
             "process per thread count); every build's output checked against torch (relative error < 1e-3).", ""]
    if SECTION == EDGE[3]:   # every model's tuned export against torch first: the results page shows this table
        lines += ["| model | threads | torch | relax-default | edgetune-untuned | edgetune-tuned | tuned vs torch |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {model} | {t} | {m['torch']:.2f} | {m['relax-default']:.2f} | {m['edgetune-untuned']:.2f} | "
                  f"{m['edgetune-tuned']:.2f} | {m['torch'] / m['edgetune-tuned']:.2f}x |"
                  for model, r in results["models"].items() for t, m in r["ms"].items()]
        lines.append("")
    for model, r in results["models"].items():
        ms_run = r.get("metaschedule_wall_s") is not None
        rerun = f" (run {r['date']}: `{r['command']}`)" if r.get("command", command) != command else ""
        lines += [f"**{model}**{rerun}: edgetune tuned with `{r['tuner']}`, {r['budget']} trials "
                  f"({r['trials_per_task']} per "
                  f"conv shape, {r['tasks']} shapes, the template's fallback config first) in "
                  f"{r['tune_wall_s'] / 60:.1f} min; " + (
                      f"MetaSchedule the same {r['budget']} trials over the model's conv2d tasks in "
                      f"{r['metaschedule_wall_s'] / 60:.1f} min." if ms_run else "MetaSchedule not run."), "",
                  "| threads | " + " | ".join(_measured(results)) + " | tuned vs torch |"
                  + (" tuned vs MetaSchedule |" if ms_run else ""),
                  "|---" * (len(_measured(results)) + 2 + ms_run) + "|"]
        for threads, ms_ in r["ms"].items():
            cells = [f"{ms_[v]:.2f}" if v in ms_ else "-" for v in _measured(results)]
            lines.append(f"| {threads} | " + " | ".join(cells) + f" | {ms_['torch'] / ms_['edgetune-tuned']:.2f}x |"
                         + (f" {ms_['metaschedule'] / ms_['edgetune-tuned']:.2f}x |" if ms_run else ""))
        lines.append("")
    if SECTION == EDGE[3]:
        lines += ["Targets: the tuned export at least 1.2x torch's speed at one thread and at least equal at two: " +
                  "; ".join(f"{model} {r['ms']['1']['torch'] / r['ms']['1']['edgetune-tuned']:.2f}x at 1, "
                            f"{r['ms']['2']['torch'] / r['ms']['2']['edgetune-tuned']:.2f}x at 2"
                            for model, r in results["models"].items() if {"1", "2"} <= set(r["ms"])) + ".", ""]
    r18 = results["models"].get("resnet18", {}).get("ms", {}).get("1")
    if r18 and "metaschedule" in r18:
        lines += [f"Targets (ResNet-18, one thread): the tuned export at least as fast as torch: "
                  f"{r18['torch'] / r18['edgetune-tuned']:.2f}x torch's speed; faster than MetaSchedule at the same "
                  f"budget: {r18['metaschedule'] / r18['edgetune-tuned']:.1f}x; the untuned export within 1.3x of "
                  f"torch's time: {r18['edgetune-untuned'] / r18['torch']:.2f}x. MetaSchedule's 16 trials per conv "
                  "task (one round of its evolutionary search) are far below what it needs (its own examples use "
                  "thousands per model): at this budget several of its conv tasks keep slow schedules. TVM's default "
                  "Relax build leaves every conv unscheduled.", ""]
    lines += ["Speed-ups above 1 mean edgetune's tuned export is faster. The kernels were tuned through the `local` "
              "board's RPC server, which runs TVM's default thread count (on this 2-vCPU machine TVM counts one "
              "physical core: one thread); the same configs run at every thread count here. The fallback config is "
              "trial 0 of every task, so a tuned kernel is never slower than the untuned one as tuned (at one "
              "thread); at two threads a config tuned at one can lose to it. Depthwise, grouped and dilated convs get "
              "edgetune's kernels in the edgetune columns (TVM's "
              "default lowering in the others).", ""]
    if "edgetune-untuned-apart" in _measured(results):
        lines += ["`edgetune-untuned-apart` is the untuned export with each conv's epilogue (its bias or folded "
                  "batch-norm, the residual add, ReLU) left to TVM, which fuses those operators into elementwise "
                  "kernels of their own (single-threaded by TVM's default CPU pipeline) that read and write the "
                  "conv's output once more; `edgetune-untuned` computes them in the conv kernel as each output leaves "
                  "the accumulator (the export's default).", ""]
    lines += ["CUDA: not run. No GPU was lent to the session that ran this benchmark; whole-model exports for a "
              "Jetson build (each kernel's CUDA source checked against the board's limits) but have not run on a GPU.",
              ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="default: resnet18,mobilenet_v1 (--edge: its three); with "
                        "--edge, the results of the edge models not given are kept")
    parser.add_argument("--edge", action="store_true", help="the edge models, in their own folder and section")
    parser.add_argument("--tuner", default=None, help="the tuner (default: edgetune's default tuner)")
    parser.add_argument("--no-metaschedule", action="store_true")
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--doc-only", action="store_true", help="rewrite the docs section from results.json")
    parser.add_argument("--measure", help=argparse.SUPPRESS)   # internal: MODEL:THREADS:JSON of libraries
    args = parser.parse_args()
    if args.measure:
        model, threads, libs = args.measure.split(":", 2)
        print(json.dumps(_measure(model, json.loads(libs), int(threads))))
        return
    from toolkit.harness import environment, write_doc_section
    from toolkit.tuning.tuners.base import DEFAULT_TUNER

    global OUT, DOC, SECTION
    if args.edge:
        models, OUT, DOC, SECTION = EDGE
        args.models = args.models or models
    if args.doc_only:
        results = json.loads((OUT / "results.json").read_text())
        write_doc_section(DOC, SECTION, _markdown(results, results["environment"]["command"]))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    command = "python -m bench.bench_model " + " ".join(sys.argv[1:])
    args.models = args.models or "resnet18,mobilenet_v1"
    results: dict[str, Any] = {"environment": environment(command), "models": {}}
    if args.edge and (OUT / "results.json").exists():    # the models not run again keep their results
        results["models"] = json.loads((OUT / "results.json").read_text())["models"]
    for model in args.models.split(","):
        log, tune_wall, budget, tuner = _tune(model, args.trials_per_task, args.tuner or DEFAULT_TUNER)
        print(f"{model}: tuned {budget} trials in {tune_wall:.0f} s", flush=True)
        libs = {"relax-default": str(_default(model))}
        ms_wall = None
        if not args.no_metaschedule:
            ms_lib, ms_wall = _metaschedule(model, budget)
            print(f"{model}: MetaSchedule {budget} trials in {ms_wall:.0f} s", flush=True)
            libs["metaschedule"] = str(ms_lib)
        libs |= {"edgetune-untuned-apart": str(_untuned_apart(model)), "edgetune-untuned": str(_export(model, None)),
                 "edgetune-tuned": str(_export(model, log))}
        per_threads = {}
        for threads in args.threads.split(","):
            env = {**os.environ, "TVM_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
            proc = subprocess.run([sys.executable, "-m", "bench.bench_model", "--measure",
                                   f"{model}:{threads}:{json.dumps(libs)}"], env=env, cwd=ROOT, check=True,
                                  capture_output=True, text=True)
            per_threads[threads] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{model} @ {threads} threads: {per_threads[threads]}", flush=True)
        from toolkit.workloads.extract import load_network

        results["models"][model] = {"command": command, "date": results["environment"]["date"],
                                    "tuner": tuner, "budget": budget, "trials_per_task": args.trials_per_task,
                                    "tasks": budget // args.trials_per_task, "tune_wall_s": tune_wall,
                                    "metaschedule_wall_s": ms_wall, "ms": per_threads,
                                    "convs": len(load_network(model).layers)}
    (OUT / "results.json").write_text(json.dumps(results, indent=1))
    if args.write_docs:
        write_doc_section(DOC, SECTION, _markdown(results, command))


if __name__ == "__main__":
    main()
