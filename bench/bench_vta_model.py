"""ResNet-18 as an int8 model on VTA (Pynq and ZCU102 hardware configs, the simulator's timing model): AutoTVM's
first config (TVM's fallback) beside edgetune's untuned default (the largest tiles that fit) and a tuned export.

    .venv/bin/python -m bench.bench_vta_model [--trials-per-task 32] [--write-docs] [--previous RESULTS_JSON]

For each VTA preset (``pynq``: board ``vta-fsim``; ``zcu102``: ``vta-fsim --vta-config zcu102``), batch 1,
224x224, seeded random weights, calibrated on 16 synthetic inputs:

* **TVM fallback**: every VTA conv compiled with AutoTVM's config 0 (what TVM's VTA flow runs for a conv without a
  tophub or log record) and the model's epilogue, its time from the simulator's timing model;
* **edgetune untuned**: ``export --model`` with no log, then ``run`` on five inputs (convs, residual adds and max
  pooling on VTA in the simulator, the first conv's space-to-depth, global pooling and the classifier in numpy on
  this host), checked bit for bit and against PyTorch;
* **edgetune tuned**: ``tune --model`` with the default tuner, ``--trials-per-task`` trials per VTA conv shape (the
  log under ``bench/out/vta_model/``, reused when present), then ``export --model --log`` and ``run``.

VTA times are the simulator's modelled device seconds (calibrated to the Pynq, docs/vta.md); the CPU layers'
times are measured on this x86 host, not on the board's ARM cores. Writes ``bench/out/vta_model/results.json`` and,
with ``--write-docs``, the section "## Whole models on VTA" of ``bench/archive.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "vta_model"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Whole models on VTA (ResNet-18, int8)"
SHAPE = (1, 3, 224, 224)
PRESETS = {"pynq": "pynq-z1", "zcu102": "zcu102"}
RUNS = 5
"""Inputs each export runs (seeded standard normal): the CPU time is the median over them."""


def _tune(preset: str, trials: int) -> tuple[Path, float, int]:
    """``tune --model resnet18`` on the simulator of ``preset``: (log, wall seconds, trials), resumed when present."""
    from toolkit.backends import network_tasks
    from toolkit.boards import resolve_board
    from toolkit.backends.vta.backend import with_vta_preset
    from toolkit.tuning.network import tune_network
    from toolkit.tuning.scheduler import make_scheduler
    from toolkit.tuning.tuners.base import DEFAULT_TUNER
    from toolkit.workloads.extract import load_network

    board = with_vta_preset(resolve_board("vta-fsim"), preset)
    plan, tasks = network_tasks(load_network("resnet18", SHAPE), board)
    budget = trials * len(plan.tasks)
    log, done = OUT / f"resnet18-{preset}.jsonl", OUT / f"resnet18-{preset}-tune.json"
    if done.exists():
        return log, json.loads(done.read_text())["wall_s"], budget
    log.unlink(missing_ok=True)
    started = time.perf_counter()
    tune_network(plan, tasks, DEFAULT_TUNER, budget, log=log,
                 scheduler=make_scheduler("gradient", seed=0, trials_per_round=8))
    wall = time.perf_counter() - started
    done.write_text(json.dumps({"wall_s": wall, "trials": budget}))
    return log, wall, budget


def _fallback_ms(export: Path) -> float:
    """Modelled ms of the export's VTA convs, each compiled with AutoTVM's config 0 and the model's epilogue."""
    from toolkit.backends.vta.space import vta_conv2d_space
    from toolkit.export import load_export
    from toolkit.vta.compiler import compile_conv2d
    from toolkit.vta.config import VTAConfig
    from toolkit.vta.errors import VTAError
    from toolkit.vta.graph import Graph
    from toolkit.vta.sim import simulate
    from toolkit.workloads import parse_spec

    ex = load_export(export)
    hw = VTAConfig.from_json(ex.manifest.hardware)
    graph = Graph.from_json(json.loads((export / "graph.json").read_text()))
    total = 0.0
    for conv in ex.manifest.model["convs"]:
        if conv["schedule"] == "cpu":
            continue
        wl, a = parse_spec(conv["workload"]), graph.layer(conv["kernel"]).attrs
        space = vta_conv2d_space(wl, hw)
        for i in range(len(space)):    # config 0, or the first after it that the model's epilogue fits
            try:
                compiled = compile_conv2d(wl, space.get(i).values, hw, bias=True, acc_bias=True, shift=a["shift"],
                                          relu=a["relu"])
                break
            except VTAError:
                continue
        total += simulate(compiled.program, timing_only=True).seconds
    return total * 1e3


def _epilogue_effect(export: Path, log: Path | None) -> dict[str, Any]:
    """What the model's requantisation (bias at the accumulator scale, its shift, ReLU or not, the residual add where
    one folds into the conv) costs beside TVM's test epilogue (shift 8, no bias, ReLU) under the same configs:
    modelled time of the export's VTA convs, and how many valid records of ``log`` stop fitting once the bias
    takes accumulator room."""
    from toolkit.backends.vta.model import epilogue
    from toolkit.export import load_export
    from toolkit.tuning.journal import read_log
    from toolkit.vta.compiler import check_config, compile_conv2d
    from toolkit.vta.config import VTAConfig
    from toolkit.vta.errors import VTAError
    from toolkit.vta.graph import Graph
    from toolkit.vta.ops import CONVS
    from toolkit.vta.sim import simulate
    from toolkit.workloads import Conv2dWorkload, parse_spec

    ex = load_export(export)
    hw = VTAConfig.from_json(ex.manifest.hardware)
    graph = Graph.from_json(json.loads((export / "graph.json").read_text()))
    plain = model = 0.0
    for layer in ex.manifest.model["vta_layers"]:
        if layer["device"] != "vta" or layer["op"] not in CONVS:
            continue
        conv = next(c for c in ex.manifest.model["convs"] if c["kernel"] == layer["layer"])
        wl, ep = parse_spec(conv["workload"]), epilogue(graph.layer(layer["layer"]))
        plain += simulate(compile_conv2d(wl, layer["config"], hw).program, timing_only=True).seconds
        model += simulate(compile_conv2d(wl, layer["config"], hw, **ep).program, timing_only=True).seconds
    valid = unfit = 0
    if log is not None:
        for rec in read_log(log)[1]:
            if rec.valid:
                valid += 1
                try:
                    check_config(Conv2dWorkload.from_dict(rec.workload), rec.config, hw, bias=True)
                except VTAError:
                    unfit += 1
    return {"plain_ms": plain * 1e3, "model_ms": model * 1e3, "valid_records": valid, "unfit_with_bias": unfit}


def _export_and_run(preset: str, log: Path | None, name: str) -> dict[str, Any]:
    from toolkit.backends.vta.backend import with_vta_preset
    from toolkit.boards import resolve_board
    from toolkit.export import load_export
    from toolkit.export.model import export_model

    out = OUT / name
    started = time.perf_counter()
    export_model("resnet18", out, PRESETS[preset], logs=[log] if log else [], input_shape=SHAPE, force=True)
    export_s = time.perf_counter() - started
    x = np.random.default_rng(1).standard_normal((RUNS, *SHAPE[1:])).astype(np.float32)
    run = load_export(out).run_model(with_vta_preset(resolve_board("vta-fsim"), preset), x, check=True,
                                     per_layer=True)
    d = run.details
    by_op: dict[str, float] = {}
    for layer in d["layers"]:
        if layer["device"] == "cpu":
            by_op[layer["op"]] = by_op.get(layer["op"], 0.0) + layer["ms"]
    return {"export": str(out.relative_to(ROOT)), "export_s": export_s, "latency_ms": run.latency_s * 1e3,
            "vta_ms": d["vta_ms"], "cpu_ms": run.latency_s * 1e3 - d["vta_ms"], "bit_exact": d["bit_exact"],
            "cpu_work": d["cpu_work"], "cpu_ms_by_op": by_op,
            "correct": run.correct,
            "cosine": d["pytorch"]["cosine_min"], "top1": d["pytorch"]["top1_agreement"],
            "schedules": [c["schedule"] for c in load_export(out).manifest.model["convs"]],
            "fell_back": sum(bool(v.get("note")) for v in load_export(out).manifest.model["vta_layers"])}


def _emulated(export: Path) -> dict[str, Any]:
    """Run ``export`` (a ZCU102 export) on an emulated ZCU102 (aarch64 under qemu-user, the agent with the
    simulated device, reached over SSH), as ``edgetune run`` does it: one agent call per run."""
    from toolkit.testing import emulated_board as emu

    if emu.skip_reason():
        return {"skipped": emu.skip_reason()}
    image = emu.build_image(say=lambda m: print(m, file=sys.stderr, flush=True))
    with emu.provisioned(image, "zcu", "zcu102", "--executor", "fsim", timeout_s=3600) as cli:
        started = time.perf_counter()
        run = json.loads(cli("run", export, "--board", "zcu", "--check", "--json", "--timeout", "600").stdout)
        wall = time.perf_counter() - started
    d = run["details"]
    return {"vta_ms": d["vta_ms"], "cpu_ms": d["cpu_ms"], "latency_ms": run["latency_ms"],
            "bit_exact": d["bit_exact"], "correct": run["correct"], "wall_s": wall}


TARGETS = {"pynq_ms": 100.0, "macs": 0.01, "elementwise": 0.05}
"""What a whole model on VTA aims at: ResNet-18 on the Pynq preset end to end in at most 100 ms of modelled time,
at most 1 % of its multiply-adds and 5 % of its elementwise operations left to the board's CPU."""


def _share(v: dict[str, Any]) -> str:
    w = v.get("cpu_work")
    return "-" if w is None else " / ".join(f"{w[k]['cpu'] / w[k]['total']:.1%}" for k in ("macs", "elementwise"))


def _cpu_by_op(results: dict[str, Any]) -> list[str]:
    """Where the CPU time goes (the last input of each export), against the targets."""
    lines = []
    for preset, r in results["presets"].items():
        for variant in ("untuned", "tuned"):
            v = r.get(variant) or {}
            if v.get("cpu_ms_by_op"):
                lines.append(f"- {preset}, {variant}: " + ", ".join(f"{op} {ms:.1f} ms" for op, ms in
                                                                   sorted(v["cpu_ms_by_op"].items(),
                                                                          key=lambda kv: -kv[1])))
    if not lines:
        return []
    return ["", "Anchors: TVM's VTA flow ran ResNet-18 on a Pynq-Z1 in 0.42 s per image (ReQuEST at ASPLOS'18, the "
            "first conv and the classifier on the CPU); the physical floor of the Pynq preset is about 3.6 G ops at "
            "51.2 G ops/s, 70 ms. The previous rows are an earlier run's, as its results.json kept them "
            "(`--previous`).", "",
            f"Targets: at most {TARGETS['pynq_ms']:.0f} ms end to end on the Pynq preset (modelled VTA time plus "
            f"the board's CPU), at most {TARGETS['macs']:.0%} of the multiply-adds and "
            f"{TARGETS['elementwise']:.0%} of the elementwise operations left to the CPU (counted per op: a conv's "
            "multiply-adds and requantisation, an add's, a pooling window's comparisons). The CPU time by op, on this "
            "host:", "", *lines]


def _markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    lines = [SECTION, "",
             f"Machine: {env['machine']}; {env['date']}; edgetune {env['edgetune']}. Command: `{env['command']}`. "
             "ResNet-18 (built-in, seeded random weights), batch 1, 224x224, int8 with power-of-two scales (a "
             "conv's weights per output channel where that gains half a bit on average) calibrated on 16 synthetic "
             "inputs. VTA: the simulator's modelled device time (docs/vta.md) of the one program all 21 VTA layers "
             "make (one kernel call, one DRAM arena); "
             "CPU: the layers VTA does not run (the first conv's space-to-depth rearrangement, global pooling, the "
             "classifier; the 8 residual adds run inside their convs' VTA programs, max pooling on VTA too) "
             "in numpy, measured on this "
             "x86 host, not on the board's ARM cores. Every run is bit-exact with the int8 reference and checked "
             "against PyTorch (top-1, cosine).", "",
             "| VTA config | variant | VTA ms | CPU ms | latency ms | VTA speed-up vs TVM fallback | CPU share: "
             "multiply-adds / elementwise | cosine vs PyTorch | top-1 agrees |",
             "|---|---|---|---|---|---|---|---|---|"]
    for preset, r in results["presets"].items():
        fb = r["fallback_vta_ms"]
        lines.append(f"| {preset} | TVM fallback (AutoTVM config 0) | {fb:.1f} | - | - | 1.00x | - | - | - |")
        for variant in ("untuned", "tuned"):
            v = r.get(variant)
            if v is None:
                continue
            label = ("edgetune untuned (largest tiles)" if variant == "untuned" else
                     f"edgetune tuned ({r['trials']} trials, {r['tune_wall_s'] / 60:.1f} min)")
            lines.append(f"| {preset} | {label} | {v['vta_ms']:.1f} | {v['cpu_ms']:.1f} | {v['latency_ms']:.1f} | "
                         f"{fb / v['vta_ms']:.1f}x | {_share(v)} | {v['cosine']:.4f} | {v['top1']:.0%} |")
    for preset, r in results["presets"].items():
        e = r.get("emulated")
        if e and "skipped" not in e:
            lines.append(f"| {preset} | edgetune tuned, on an emulated ZCU102 (aarch64 under qemu-user) | "
                         f"{e['vta_ms']:.1f} | {e['cpu_ms']:.1f} | {e['latency_ms']:.1f} | - | - | - | - |")
    prev = results.get("previous")
    if prev:
        for preset, r in prev["presets"].items():
            for variant in ("untuned", "tuned"):
                v = r.get(variant)
                if v is not None:
                    lines.append(f"| {preset} | previous run ({prev['date']}): {variant} | {v['vta_ms']:.1f} | "
                                 f"{v['cpu_ms']:.1f} | {v['latency_ms']:.1f} | - | {_share(v)} | - | - |")
            e = r.get("emulated")
            if e and "skipped" not in e:
                lines.append(f"| {preset} | previous run ({prev['date']}): tuned, on an emulated ZCU102 | "
                             f"{e['vta_ms']:.1f} | {e['cpu_ms']:.1f} | {e['latency_ms']:.1f} | - | - | - | - |")
    fell = {p: r["tuned"]["fell_back"] for p, r in results["presets"].items() if r.get("tuned")}
    lines += ["", "All 20 of ResNet-18's convs run on VTA, the first (3 input channels, 7x7, stride 2) as its "
              "space-to-depth rewrite (16 channels on 115x115, 4x4, stride 1: 1.74x its multiply-adds). The tuned "
              "configs were tuned without the bias and compiled with it; one that leaves no accumulator room for "
              "the bias falls back to the untuned config (the manifest says which; here: "
              + ", ".join(f"{n} on {p}" for p, n in fell.items()) + "). The latency is the median over "
              f"{RUNS} inputs, the CPU column that minus the VTA time (the VTA time is the same for every input: "
              "a model).",
              ""]
    lines += _cpu_by_op(results) + [""]
    if any(r.get("emulated") for r in results["presets"].values()):
        lines += ["The emulated ZCU102 row runs the tuned export through `edgetune run --board` on an emulated board "
                  "(docs/boards.md): the whole model in one call of the board agent, its VTA layers in the agent's "
                  "simulated device (modelled time, the same as above), the CPU layers in numpy on aarch64 Python "
                  "under qemu-user. That CPU time is emulation time on this x86 machine, not a ZCU102's Cortex-A53 "
                  "time.", ""]
    for preset, r in results["presets"].items():
        e = r.get("epilogue")
        if e:
            lines += [f"Requantisation cost ({preset}, the tuned configs): the model's epilogue (bias added at the "
                      f"accumulator scale, each layer's shift, ReLU where the model has it, the residual add in the 8 "
                      f"convs it folds into) takes {e['model_ms']:.1f} "
                      f"ms of VTA time where TVM's test epilogue (shift 8, no bias, ReLU) takes {e['plain_ms']:.1f} ms "
                      f"({(e['model_ms'] / e['plain_ms'] - 1) * 100:+.1f} %); of the log's {e['valid_records']} valid "
                      f"records, {e['unfit_with_bias']} do not fit once the bias takes accumulator room.", ""]
    return "\n".join(lines)


def previous_run(path: Path) -> dict[str, Any] | None:
    """The figures of the run whose results are at ``path`` (its date and, per preset, each export's times, CPU work
    and emulated run), shown beside the new run's; ``None`` without one."""
    if not path.exists():
        return None
    old = json.loads(path.read_text())
    keep = ("vta_ms", "cpu_ms", "latency_ms", "cpu_work")
    return {"date": old["environment"]["date"], "presets": {
        preset: {k: {f: v[f] for f in keep if f in v} for k, v in r.items() if k in ("untuned", "tuned", "emulated")
                 and isinstance(v, dict)} for preset, r in old["presets"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="pynq,zcu102")
    parser.add_argument("--trials-per-task", type=int, default=32, help="0: no tuned export")
    parser.add_argument("--emulated", action="store_true",
                        help="also run the tuned ZCU102 export on an emulated ZCU102 (needs root, as make "
                             "test-emulated)")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--doc-only", action="store_true", help="rewrite the docs section from results.json")
    parser.add_argument("--previous", type=Path, default=None,
                        help="the results.json to show beside this run's (default: the one this run replaces)")
    args = parser.parse_args()
    from toolkit.harness import environment, write_doc_section

    if args.doc_only:
        results = json.loads((OUT / "results.json").read_text())
        if args.previous is not None:
            results["previous"] = previous_run(args.previous)
            (OUT / "results.json").write_text(json.dumps(results, indent=1))
        write_doc_section(DOC, SECTION, _markdown(results))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"environment": environment("python -m bench.bench_vta_model " + " ".join(sys.argv[1:])),
                               "presets": {}}
    for preset in args.presets.split(","):
        r: dict[str, Any] = {"untuned": _export_and_run(preset, None, f"resnet18-{preset}-untuned")}
        r["fallback_vta_ms"] = _fallback_ms(ROOT / r["untuned"]["export"])
        print(f"{preset}: fallback {r['fallback_vta_ms']:.1f} ms, untuned {r['untuned']}", flush=True)
        if args.trials_per_task:
            log, wall, budget = _tune(preset, args.trials_per_task)
            r.update(trials=budget, tune_wall_s=wall, tuned=_export_and_run(preset, log, f"resnet18-{preset}-tuned"))
            r["epilogue"] = _epilogue_effect(ROOT / r["tuned"]["export"], log)
            print(f"{preset}: tuned {r['tuned']}", flush=True)
        if args.emulated and preset == "zcu102" and r.get("tuned"):
            r["emulated"] = _emulated(ROOT / r["tuned"]["export"])
            print(f"{preset}: emulated board {r['emulated']}", flush=True)
        results["presets"][preset] = r
    results["previous"] = previous_run(args.previous or OUT / "results.json")
    (OUT / "results.json").write_text(json.dumps(results, indent=1))
    if args.write_docs:
        write_doc_section(DOC, SECTION, _markdown(results))


if __name__ == "__main__":
    main()
