"""CPU template vs torch: tune ResNet-18 layers on the ``local`` board, then race the best config.

``.venv/bin/python -m bench.bench_cpu_vs_torch --trials 500`` (options: ``--layers``, ``--threads``,
``--tuner``, ``--no-doc``); ``--kinds``: the depthwise, grouped and dilated layers of :data:`KINDS` instead,
into the section "## Conv kinds vs torch" of ``bench/archive.md``.

1. Each layer is tuned with the tuning core's ``tune()`` on the ``local`` board: real LLVM
   builds in worker processes, measured through a real TVM RPC tracker and server on loopback
   (``MeasureOptions(number=1, repeat=3, min_repeat_ms=20)``, output checked against numpy).
   Logs go to ``bench/out/cpu-vs-torch/<layer>.jsonl`` (resumed when run again).
2. The best config's library is loaded in this process and raced against
   ``torch.nn.functional.conv2d`` on the same float32 input, alternating rounds (both with
   ``--threads`` threads), median of the rounds.

Writes the section "## CPU template vs torch" of ``bench/archive.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from toolkit.harness import cpu_name, write_doc_section

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "cpu-vs-torch"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## CPU template vs torch"
LAYERS = ("C2", "C5", "C8")
KINDS = ("conv2d:H=112,W=112,CI=32,CO=32,K=3,S=1,P=1,G=32", "conv2d:H=112,W=112,CI=96,CO=96,K=3,S=2,P=1,G=96",
         "conv2d:H=14,W=14,CI=576,CO=576,K=3,S=1,P=1,G=576", "conv2d:H=14,W=14,CI=240,CO=240,K=5,S=1,P=2,G=240",
         "conv2d:H=28,W=28,CI=128,CO=128,K=3,S=1,P=1,G=32", "conv2d:H=28,W=28,CI=256,CO=256,K=3,S=1,P=2,D=2")
"""``--kinds``: MobileNet-v2's first, a strided and its last depthwise convs, MobileNet-v3-Small's 5x5 depthwise
conv, a ResNeXt-style grouped conv (32 groups) and a DeepLab-style dilated conv."""
KINDS_SECTION = "## Conv kinds vs torch (depthwise, grouped, dilated)"


def race(template, index: int, rounds: int, threads: int) -> dict[str, float]:
    """Median seconds per run of the tuned library and of torch on the same input."""
    import torch
    import tvm

    wl = template.workload
    config = template.space().get(index)
    art = template.build(config)
    data, weight = template.make_inputs(np.random.default_rng(0))
    ref = template.reference([data, weight])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "best.so")
        Path(path).write_bytes(art.payload)
        mod = tvm.runtime.load_module(path)
        dev = tvm.cpu()
        args = [tvm.runtime.tensor(x, dev) for x in (data, weight)]
        out = tvm.runtime.tensor(np.zeros(ref.shape, np.float32), dev)
        mod["main"](*args, out)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-3, atol=1e-3)
        timer = mod.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=200)

        torch.set_num_threads(threads)
        x = torch.from_numpy(data)
        w = torch.from_numpy(np.ascontiguousarray(template.weight_oihw(weight)))
        shape = {"stride": (wl.sh, wl.sw), "padding": (wl.ph, wl.pw), "dilation": (wl.dh, wl.dw), "groups": wl.g}
        expected = torch.nn.functional.conv2d(x, w, **shape)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-3, atol=1e-3)

        def torch_once() -> float:
            n, t0 = 0, time.perf_counter()
            with torch.inference_mode():
                while True:
                    torch.nn.functional.conv2d(x, w, **shape)
                    n += 1
                    el = time.perf_counter() - t0
                    if el >= 0.2:
                        return el / n

        torch_once()
        tvm_s, torch_s = [], []
        for _ in range(rounds):
            tvm_s.append(timer(*args, out).mean)
            torch_s.append(torch_once())
    return {"tvm_s": statistics.median(tvm_s), "torch_s": statistics.median(torch_s)}


def tune_layer(layer: str, trials: int, tuner_name: str, seed: int):
    from toolkit.boards import resolve_board
    from toolkit.tuning.session import tune
    from toolkit.tuning.core.builder import LocalBuilder
    from toolkit.tuning.core.runner import MeasureOptions
    from toolkit.backends import make_task
    from toolkit.tuning.tuners.base import make_tuner
    from toolkit.workloads import parse_workload

    task = make_task(parse_workload(layer if ":" in layer or "." in layer else f"resnet18.{layer}"),
                     resolve_board("local"))
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"{layer.replace('conv2d:', '').replace(',', '_').replace('=', '')}.jsonl"
    t0 = time.perf_counter()
    summary = tune(task, make_tuner(tuner_name, seed=seed), trials, log=log, resume=log.exists(),
                   builder=LocalBuilder(n_parallel=2, timeout_s=60),
                   measure_options=MeasureOptions(number=1, repeat=3, min_repeat_ms=20))
    return task, summary, time.perf_counter() - t0


def _isa() -> str:
    """The vector unit edgetune's CPU template sees on ``local``."""
    from toolkit.backends.tvm.cpu import vector_unit
    from toolkit.boards import load_profile

    return {16: "AVX-512", 8: "AVX2"}.get(vector_unit(load_profile("local"))[0], "NEON")


def render(rows: list[dict], args: argparse.Namespace, started: str, load: str, load_end: str) -> str:
    which = "--kinds" if args.kinds else f"--layers {','.join(args.layers)}"
    cmd = (f"`TVM_NUM_THREADS={args.threads} .venv/bin/python -m bench.bench_cpu_vs_torch --trials {args.trials} "
           f"{which} --threads {args.threads}`")
    lines = [
        KINDS_SECTION if args.kinds else SECTION, "",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores ({_isa()}), shared with other jobs (1-min load average {load} "
        f"at the start, {load_end} at the end). Command: {cmd}. Date: {started}. apache-tvm 0.27.0.post1, torch "
        f"{__import__('torch').__version__} (oneDNN). float32, batch 1, NCHW; {args.threads} thread(s) for both.",
        "",
        f"Search: `{args.tuner}` through the tuning core's `tune()` on the `local` board (LLVM builds in 2 worker "
        "processes, measured through a real TVM RPC tracker + server on loopback, every output checked against "
        "numpy). Race: the best config's library loaded in-process against `torch.nn.functional.conv2d` on the same "
        f"input, {args.rounds} alternating rounds of >= 200 ms each, medians. The kernel takes its weights in "
        "`IHWO` (transposed once, like a pre-packed constant); torch gets OIHW.",
        "",
        "| layer | trials (valid) | tune wall | best config (tile_co, tile_oh, tile_ow, tile_ci, vec, acc_rows, "
        "pack_weight) | "
        "edgetune ms | torch ms | edgetune GFLOP/s | torch GFLOP/s | throughput vs torch | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["config"]
        lines.append(
            f"| {r['layer']} | {r['trials']} ({r['valid']}) | {r['tune_s'] / 60:.1f} min | "
            f"{c['tile_co']}, {c['tile_oh']}, {c['tile_ow']}, {c['tile_ci']}, {c['vec']}, {c['acc_rows']}, "
            f"{c['pack_weight']} | "
            f"{r['tvm_s'] * 1e3:.3f} | {r['torch_s'] * 1e3:.3f} | {r['flops'] / r['tvm_s'] / 1e9:.1f} | "
            f"{r['flops'] / r['torch_s'] / 1e9:.1f} | {r['torch_s'] / r['tvm_s']:.2f}x | "
            f"{'>= 0.5x' if args.kinds else '>= 0.8x'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_cpu_vs_torch", description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                    default=list(LAYERS), help="comma-separated ResNet-18 layers")
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--tuner", default="xgb")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="threads for TVM (TVM_NUM_THREADS) and torch")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--kinds", action="store_true", help="the depthwise, grouped and dilated layers of KINDS")
    ap.add_argument("--no-doc", action="store_true", help="do not write bench/archive.md")
    args = ap.parse_args(argv)
    if args.kinds:
        args.layers = list(KINDS)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)   # inherited by the loopback RPC server
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = f"{os.getloadavg()[0]:.1f}"

    from toolkit.rpc.tracker import ensure_local_rpc

    _, _, stop = ensure_local_rpc("local")   # one tracker + server for every layer
    rows = []
    try:
        for layer in args.layers:
            task, summary, tune_s = tune_layer(layer, args.trials, args.tuner, args.seed)
            print(f"{layer}: {summary.trials} trials, {summary.valid} valid, best {summary.best_seconds * 1e3:.3f} ms "
                  f"({summary.best_gops:.1f} GFLOP/s) in {tune_s / 60:.1f} min", flush=True)
            times = race(task.template, summary.best_index, args.rounds, args.threads)
            row = {"layer": layer, "trials": summary.trials, "valid": summary.valid, "tune_s": tune_s,
                   "config": summary.best_config, "flops": task.flops, **times}
            print(f"{layer}: edgetune {times['tvm_s'] * 1e3:.3f} ms, torch {times['torch_s'] * 1e3:.3f} ms, "
                  f"{times['torch_s'] / times['tvm_s']:.2f}x torch", flush=True)
            rows.append(row)
    finally:
        stop()
    text = render(rows, args, started, load, f"{os.getloadavg()[0]:.1f}")
    print(text)
    if not args.no_doc:
        write_doc_section(DOC, KINDS_SECTION if args.kinds else SECTION, text)


if __name__ == "__main__":
    main()
