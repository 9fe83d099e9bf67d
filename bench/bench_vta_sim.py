"""VTA simulator and timing-model benchmarks.

``.venv/bin/python -m bench.bench_vta_sim`` (options: ``--repeat``, ``--refit``, ``--no-doc``).

1. Compile + timing-only simulation of ResNet-18 C2 under its TopHub config (median of ``--repeat``
   runs; target 20 ms), and the timing-only simulation alone.
2. Functional bit-exact simulation of C2 under the same config on random data vs the numpy
   reference (target 3 s).
3. Sweep: every config of ``vta_tvm018_resnet18_truth.jsonl`` that TVM v0.18 ran correctly is compiled
   and simulated timing-only; the seven counters must equal fsim's; cost per instruction is reported.
4. Calibration table: predicted vs measured Pynq time (vta.md 6.2) for the five calibration layers,
   on edgetune's compiled programs and on TVM v0.18's own programs (``tests/data``), each
   within 25%. ``--refit`` re-runs the fit that produced :data:`toolkit.vta.timing.PYNQ_CALIBRATED`
   (Nelder-Mead on the TVM programs of C2, C4, C5, C11; C8 is held out).

Writes the section "## VTA simulator and timing model" of ``bench/archive.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from toolkit.harness import cpu_name, write_doc_section
from toolkit import console
from toolkit.testing.shared_data import shared_data_dir
from toolkit.vta.compiler import compile_conv2d
from toolkit.vta.config import get_preset
from toolkit.vta.program import parse_tvm_dump
from toolkit.vta.reference import packed_reference, random_inputs
from toolkit.vta.sim import simulate
from toolkit.vta.timing import PYNQ_CALIBRATED, PYNQ_MEASUREMENTS, TimingParams
from toolkit.workloads import parse_workload

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "bench" / "archive.md"
SECTION = "## VTA simulator and timing model"
DUMPS = shared_data_dir() / "vta_tvm018_programs"
HW = get_preset("pynq")
CALIBRATION = PYNQ_MEASUREMENTS
TVM_DUMP = {"C2": "c2", "C4": "c4", "C5": "c5", "C11": "c11"}  # same configs as CALIBRATION
FIT = ("gemm_fill", "dma_latency", "wgt_efficiency", "launch_us")  # alu_fill tied to gemm_fill


def _median_ms(fn, repeat: int) -> tuple[float, float, float]:
    """(median wall ms, min wall ms, median CPU ms of this process): CPU time is immune to other jobs."""
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    return statistics.median(wall), min(wall), statistics.median(cpu)


def bench_speed(repeat: int) -> dict:
    wl, (cfg, _) = parse_workload("resnet18.C2"), CALIBRATION["C2"]
    compile_conv2d(wl, cfg, HW)  # warm-up (imports, caches)
    prog = compile_conv2d(wl, cfg, HW).program
    both = _median_ms(lambda: simulate(compile_conv2d(wl, cfg, HW).program, timing_only=True), repeat)
    sim_only = _median_ms(lambda: simulate(prog, timing_only=True), repeat)
    inputs = random_inputs(wl, HW, np.random.default_rng(0))
    t = time.perf_counter()
    res = simulate(prog, {"inp": inputs[0], "wgt": inputs[1]})
    functional_s = time.perf_counter() - t
    out = res.outputs["out"].reshape(packed_reference(wl, HW, inputs).shape)
    exact = bool(np.array_equal(out, packed_reference(wl, HW, inputs)))
    return {"insns": len(prog.insns), "load": os.getloadavg()[0], "compile_sim_ms": both, "sim_ms": sim_only,
            "functional_s": functional_s, "exact": exact}


def bench_sweep() -> dict:
    """Compile + timing-only simulate every TVM-verified config; compare counters with fsim's."""
    match = total = insns = 0
    cpu = 0.0
    worst = (0.0, 0)
    for line in (DUMPS.parent / "vta_tvm018_resnet18_truth.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if not rec.get("counters"):
            continue
        prog = compile_conv2d(parse_workload(rec["workload"]), rec["config"], HW).program
        c = time.process_time()
        res = simulate(prog, timing_only=True)
        dt_s = time.process_time() - c
        cpu += dt_s
        total += 1
        insns += len(prog.insns)
        match += all(res.counters[k] == v for k, v in rec["counters"].items())
        worst = max(worst, (dt_s, len(prog.insns)))
    return {"total": total, "match": match, "us_per_insn": 1e6 * cpu / max(insns, 1), "worst": worst}


def calibration_table(params: TimingParams) -> list[dict]:
    rows = []
    for layer, (cfg, measured) in CALIBRATION.items():
        prog = compile_conv2d(parse_workload(f"resnet18.{layer}"), cfg, HW).program
        ours = simulate(prog, timing_only=True, params=params)
        tvm = None
        if layer in TVM_DUMP:
            tvm_prog = parse_tvm_dump((DUMPS / f"{TVM_DUMP[layer]}.txt").read_text(), HW)
            tvm = simulate(tvm_prog, timing_only=True, params=params).seconds * 1e3
        rows.append({"layer": layer, "measured": measured, "ours": ours.seconds * 1e3, "tvm": tvm,
                     "cycles": ours.cycles, "bd": ours.breakdown, "fit": layer in TVM_DUMP})
    return rows


def refit() -> TimingParams:
    """Re-run the calibration fit (squared log error + 4 x worst squared log error, Nelder-Mead)."""
    from scipy.optimize import minimize

    progs = {k: parse_tvm_dump((DUMPS / f"{v}.txt").read_text(), HW) for k, v in TVM_DUMP.items()}

    def params_of(x) -> TimingParams:
        d = {k: float(v) for k, v in zip(FIT, x)}
        return dataclasses.replace(PYNQ_CALIBRATED, alu_fill=d["gemm_fill"], **d)

    def loss(x) -> float:
        if min(x) < 0 or not 0.05 <= x[2] <= 1:
            return 1e9
        p = params_of(x)
        e = np.array([np.log(simulate(pr, timing_only=True, params=p).seconds * 1e3 / CALIBRATION[k][1])
                      for k, pr in progs.items()])
        return float(np.sum(e ** 2) + 4 * np.max(np.abs(e)) ** 2)

    best = min((minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 400, "xatol": 1e-3, "fatol": 1e-7})
                for x0 in ([1, 30, 0.5, 100], [2, 60, 0.4, 300])), key=lambda r: r.fun)
    return params_of(best.x)


def _section(speed: dict, sweep: dict, rows: list[dict], params: TimingParams, args) -> str:
    p = params
    lines = [
        SECTION, "",
        f"Machine: {cpu_name()}, 2 cores. Command: `.venv/bin/python -m bench.bench_vta_sim --repeat {args.repeat}`. "
        f"Date: {dt.date.today().isoformat()}. Load average {speed['load']:.1f} on the 2 cores during the run "
        "(other jobs share the machine): wall times are inflated by it, CPU times are this process's own.", "",
        "| measurement | result | target |", "|---|---|---|",
        f"| compile + timing-only sim, C2 TopHub config ({speed['insns']} insns): wall median / min, CPU median | "
        f"{speed['compile_sim_ms'][0]:.1f} / {speed['compile_sim_ms'][1]:.1f} / {speed['compile_sim_ms'][2]:.1f} ms "
        "| <= 20 ms median |",
        f"| timing-only sim alone, same program: wall median / min, CPU median | "
        f"{speed['sim_ms'][0]:.1f} / {speed['sim_ms'][1]:.1f} / {speed['sim_ms'][2]:.1f} ms | a few ms |",
        f"| functional sim of C2 on random data | {speed['functional_s']:.2f} s, "
        f"{'bit-exact' if speed['exact'] else 'MISMATCH'} vs numpy | <= 3 s, bit-exact |",
        f"| sweep: {sweep['total']} configs TVM v0.18 ran correctly (`vta_tvm018_resnet18_truth.jsonl`), compiled "
        f"and simulated timing-only | counters equal fsim's in {sweep['match']}/{sweep['total']}; "
        f"{sweep['us_per_insn']:.1f} us CPU per instruction; largest: {sweep['worst'][1]} insns in "
        f"{sweep['worst'][0]:.2f} s | all equal |", "",
        "Calibration (Pynq, 100 MHz, 64-bit bus; measured = TopHub `vta_v0.06` best time, vta.md 6.2). "
        "\"edgetune program\" = `compile_conv2d` output; \"TVM program\" = TVM v0.18's own instruction stream "
        "for the same config (`tests/data/vta_tvm018_programs`). The constants were fitted on the TVM "
        "programs of C2, C4, C5, C11; C8 (no TVM dump of its config) is held out.", "",
        "| layer | measured ms | predicted ms (edgetune program) | error | predicted ms (TVM program) | "
        "device cycles | load / compute / store busy (kcycles) | used in fit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        bd = r["bd"]
        tvm = f"{r['tvm']:.3f}" if r["tvm"] is not None else "-"
        lines.append(
            f"| {r['layer']} | {r['measured']:.3f} | {r['ours']:.3f} | {100 * (r['ours'] / r['measured'] - 1):+.1f}% "
            f"| {tvm} | {r['cycles']} | {bd['load_busy'] / 1e3:.0f} / {bd['compute_busy'] / 1e3:.0f} / "
            f"{bd['store_busy'] / 1e3:.0f} | {'yes' if r['fit'] else 'no (held out)'} |")
    worst = max(abs(r["ours"] / r["measured"] - 1) for r in rows)
    lines += [
        "", f"Worst error {100 * worst:.1f}% (limit 25%).", "",
        "Constants (`toolkit.vta.timing.PYNQ_CALIBRATED`): "
        f"gemm_fill = alu_fill = {p.gemm_fill:g} cycles per (iter_out, iter_in) iteration, "
        f"dma_latency = {p.dma_latency:g} cycles per DMA row, bus_efficiency = {p.bus_efficiency:g}, "
        f"wgt_efficiency = {p.wgt_efficiency:g} (WGT loads stream at {p.wgt_efficiency * 8:.1f} B/cycle), "
        f"insn_overhead = {p.insn_overhead:g} cycles per instruction (fixed, not fitted), "
        f"launch_us = {p.launch_us:g} us per kernel call, host_ns_per_insn = {p.host_ns_per_insn:g}.", "",
        "Reading: C2, C5, C8 are compute-bound (GEMM II=1 plus ALU II=2 leave no room for a pipeline fill: "
        "the fit puts it at 0); C11 is load-bound on its 2.36 MB of weights, which only fits with weight "
        "loads at about half the bus rate; C4 is bound by its 366 KB of strided input rows. Four fitted points "
        "and four constants make the fit tight by construction; the held-out C8 point is the real check.", "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_vta_sim", description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50, help="runs per timed measurement")
    ap.add_argument("--refit", action="store_true", help="re-run the calibration fit and report its constants")
    ap.add_argument("--no-doc", action="store_true", help="do not write bench/archive.md")
    args = ap.parse_args(argv)
    params = refit() if args.refit else PYNQ_CALIBRATED
    if args.refit:
        console.info(f"refitted: {params}")
    speed = bench_speed(args.repeat)
    sweep = bench_sweep()
    rows = calibration_table(params)
    console.table("VTA simulator speed", ["measurement", "wall median", "wall min", "CPU median"], [
        ["compile + timing-only sim C2 (ms)", *(f"{v:.2f}" for v in speed["compile_sim_ms"])],
        ["timing-only sim C2 (ms)", *(f"{v:.2f}" for v in speed["sim_ms"])],
        ["functional sim C2 (s)", f"{speed['functional_s']:.2f}", "exact" if speed["exact"] else "MISMATCH", ""],
    ])
    console.info(f"sweep: counters equal fsim's in {sweep['match']}/{sweep['total']} TVM-verified configs, "
                 f"{sweep['us_per_insn']:.1f} us CPU per instruction")
    console.table("Pynq calibration", ["layer", "measured ms", "predicted ms", "error", "TVM program ms"], [
        [r["layer"], f"{r['measured']:.3f}", f"{r['ours']:.3f}", f"{100 * (r['ours'] / r['measured'] - 1):+.1f}%",
         f"{r['tvm']:.3f}" if r["tvm"] is not None else "-"] for r in rows])
    if not args.no_doc:
        write_doc_section(DOC, SECTION, _section(speed, sweep, rows, params, args))
        console.info(f"wrote the section '{SECTION}' of {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
