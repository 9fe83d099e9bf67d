"""Whole models on VTA boards: a PyTorch model quantised to an int8 graph whose convs are VTA programs.

:func:`compile_vta_model` reads the model's float graph (:func:`toolkit.vta.from_torch.float_graph`),
calibrates and quantises it, folds residual adds into their convs (:func:`toolkit.vta.quantize.fuse_residuals`),
compiles every conv VTA can run (a conv of few input channels as its space-to-depth rewrite) with its
requantisation (bias at the accumulator scale, the layer's shift, ReLU or not, the residual) under its tuned config
or, untuned, the largest tiles that fit (:func:`default_config`), and every max pooling of a non-negative input
(:mod:`toolkit.vta.pooling`), and writes the package: ``graph.json`` (the int8 graph),
``weights.npz`` (int8 weights, int32 biases, the float32 classifier; no pickles) and
``programs/vta<k>.vtaprog``, one program per run of consecutive VTA layers (:mod:`toolkit.vta.merge`: one kernel
call, one DRAM arena that keeps the activations between layers). :func:`run_vta_model` loads a package back
(every array and program checked) and runs it: on ``vta-fsim`` in this process (VTA layers in the simulator, the
other layers in numpy), on a VTA board in one call of its agent (:func:`run_vta_model_on_agent`: VTA layers on
its device, the other layers in numpy on the board), each inference checked bit for bit against the graph's
int8 reference.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from toolkit.boards import Board, BoardProfile
from toolkit.errors import ExportError
from toolkit.manifest import ConvPlan, ModelBuild
from toolkit.tuning.core.space import Config
from toolkit.vta.config import VTAConfig, get_preset
from toolkit.vta.graph import Graph, Layer, check_arrays, execute, tensor_digests
from toolkit.vta.ops import CONVS, OPS, PER_CHANNEL
from toolkit.workloads import Conv2dWorkload

GRAPH = "graph.json"
WEIGHTS = "weights.npz"
PROGRAMS = "programs"
CALIBRATION_SEED = 0
CALIBRATION_SYNTHETIC = 16
"""Inputs drawn (standard normal, seed :data:`CALIBRATION_SEED`) to calibrate on when none are given."""


def default_config(wl: Conv2dWorkload, hw: VTAConfig, **epilogue: Any) -> Config:
    """The untuned config of a model conv: one thread, the largest output tile (then output-channel tile,
    then input-channel tile) whose program compiles with the model's ``epilogue`` (:func:`epilogue`)."""
    from toolkit.backends.vta.space import vta_conv2d_space
    from toolkit.vta.compiler import compile_conv2d
    from toolkit.vta.errors import VTAError

    space = vta_conv2d_space(wl, hw)
    candidates = []
    for i in range(len(space)):
        c = space.get(i)
        v = c.values
        if v["oc_nthread"] == 1 and v["h_nthread"] == 1:
            candidates.append((-(v["tile_h"][-1] * v["tile_w"][-1]), -v["tile_co"][-1], -v["tile_ci"][-1],
                               -v["tile_b"][-1], i, c))
    for *_, c in sorted(candidates, key=lambda t: t[:5]):
        try:
            compile_conv2d(wl, c.values, hw, **epilogue)
            return c
        except VTAError:
            continue
    raise ExportError(f"{wl.spec()}: no config of VTA {hw.bitstream} runs this conv; keep it on the CPU")


def epilogue(layer: Layer) -> dict[str, Any]:
    """A VTA conv layer's requantisation as :func:`~toolkit.vta.compiler.compile_conv2d` takes it: the bias at the
    accumulator scale, the layer's shift (or its channels' shifts) and ReLU, and a residual's scale and shift for a
    ``conv_add``."""
    from toolkit.vta.compiler import Residual

    a = layer.attrs
    per_channel = a["shift"] == PER_CHANNEL
    out: dict[str, Any] = {"bias": True, "acc_bias": True, "shift": 0 if per_channel else a["shift"],
                           "channel_shift": per_channel, "relu": a["relu"]}
    if layer.op == "conv_add":
        out["residual"] = Residual(a["scale"], a["post_shift"])
    return out


def _maxpool_program(q: Any, layer: Layer, hw: VTAConfig) -> tuple[Any, str]:
    """Max pooling ``layer``'s VTA program, or ``None`` and why it stays on the CPU: VTA pools a non-negative int8
    input (made by a ReLU, or pooled from such a tensor) whose batch and channels fill its blocks."""
    from toolkit.vta.errors import VTAError
    from toolkit.vta.pooling import Pooling, compile_maxpool

    shape, src = q.shapes[layer.inputs[0]], layer.inputs[0]
    prev = next((x for x in q.graph.layers if x.name == src), None)
    while prev is not None and prev.op == "maxpool":
        prev = next((x for x in q.graph.layers if x.name == prev.inputs[0]), None)
    if prev is None or q.exps.get(src) is None or not (prev.op == "relu" or prev.attrs.get("relu") is True):
        return None, "its input may be negative (VTA pools from zero, with zero padding)"
    if shape[0] % hw.batch or shape[1] % hw.block_in:
        return None, f"its batch or channels ({shape[0]}, {shape[1]}) do not fill VTA's blocks"
    a = layer.attrs
    try:
        return compile_maxpool(Pooling(shape, tuple(a["kernel"]), tuple(a["stride"]), tuple(a["pad"])), hw), ""
    except VTAError as exc:
        return None, f"no VTA program fits it ({exc})"


def _write_segments(folder: Path, files: dict[str, str], graph: Graph, arrays: dict[str, np.ndarray],
                    programs: dict[str, Any]) -> dict[str, str]:
    """Merge each run of consecutive VTA layers' programs into one (:mod:`toolkit.vta.merge`: one kernel call, one
    DRAM arena, activations left in it), write and list it; each layer's program file in the package."""
    from toolkit.vta.merge import merge_segment
    from toolkit.vta.segments import vta_segments

    where = {}
    for segment in vta_segments(graph):
        constants = {layer.name: OPS[layer.op].vta_arrays(layer, arrays) for layer in segment.layers}
        rel = f"{PROGRAMS}/{segment.name}.vtaprog"
        (folder / rel).write_bytes(merge_segment(segment, programs, constants).to_bytes())
        files[f"program:{segment.name}"] = rel
        where.update(dict.fromkeys(segment.produced, rel))
    return where


def compile_vta_model(program: Any, profile: BoardProfile, plans: Sequence[ConvPlan], folder: Path, *,
                      calibration: np.ndarray | None = None, progress: Any = None) -> ModelBuild:
    """Quantise ``program`` on ``calibration`` (``None``: :data:`CALIBRATION_SYNTHETIC` synthetic inputs) and
    write the package into ``folder``; the ``plans`` (graph order; no template: the CPU) say which convs VTA runs
    and with which config (a model none of whose convs VTA runs is refused). Each plan's ``kernel`` becomes its
    layer's name in the int8 graph."""
    from toolkit.vta.compiler import compile_conv2d
    from toolkit.vta.errors import VTAError
    from toolkit.vta.from_torch import float_graph
    from toolkit.vta.quantize import conv_workload, fuse_residuals, quantize, rewrite_space_to_depth, vta_refusal

    hw = get_preset(profile.vta["preset"])
    placeholder = next(n for n in program.graph.nodes if n.op == "placeholder"
                       and n.name in [str(i) for i in program.graph_signature.user_inputs])
    input_shape = tuple(int(d) for d in placeholder.meta["val"].shape)
    if progress is not None:
        progress("the int8 graph (calibration)")
    fm = float_graph(program, input_shape)
    if calibration is None:
        calib = np.random.default_rng(CALIBRATION_SEED).standard_normal(
            (CALIBRATION_SYNTHETIC * input_shape[0], *input_shape[1:])).astype(np.float32)
        calib_info = {"source": "synthetic", "inputs": CALIBRATION_SYNTHETIC, "seed": CALIBRATION_SEED,
                      "note": "standard-normal inputs: exponents fit to them, not to real data; pass --calibrate "
                              "with inputs like the model's for a faithful int8 model"}
    else:
        calib = np.asarray(calibration, dtype=np.float32)
        calib_info = {"source": "given", "inputs": int(calib.shape[0] // max(1, input_shape[0])),
                      "sha256": _digest(calib)}
    q = quantize(fm, calib)
    unfused = fuse_residuals(q)
    conv_layers = [layer for layer in q.graph.layers if layer.op in CONVS]
    if len(conv_layers) != len(plans):
        raise ExportError(f"the model's graph has {len(conv_layers)} convs where its trace found {len(plans)}; "
                          "VTA exports take models of plain 2-D convs")
    if all(plan.template is None for plan in plans):
        why = [f"{layer.name}: {vta_refusal(conv_workload(q, layer), hw) or 'not plain'}"
               for layer in conv_layers]
        raise ExportError(f"no conv of the model can run on VTA ({'; '.join(why[:3])}{' ...' if len(why) > 3 else ''}"
                          "); export it for a CPU board (-b local)")
    (folder / PROGRAMS).mkdir()
    files = {"model": GRAPH, "weights": WEIGHTS}
    layers_info: list[dict[str, Any]] = []
    programs: dict[str, Any] = {}
    for layer, plan in zip(conv_layers, plans):
        wl, config = conv_workload(q, layer), plan.config
        plan.kernel = layer.name
        if plan.template is None:
            layers_info.append({"layer": layer.name, "op": layer.op, "device": "cpu", "why": OPS[layer.op].cpu_why})
            continue
        if plan.workload not in (None, wl):      # the space-to-depth rewrite the plan chose
            s2d = rewrite_space_to_depth(q, layer, plan.workload)
            to = plan.workload
            how = (f"{wl.ci} channels padded to {to.ci}" if wl.sh == 1 else
                   f"{wl.ci} channels on {wl.h}x{wl.w}, stride {wl.sh}, become {to.ci} on {to.h}x{to.w}, stride 1")
            layers_info.append({"layer": s2d.name, "op": s2d.op, "device": "cpu", "why": (
                f"{OPS[s2d.op].cpu_why}: {layer.name}'s {how}; VTA computes {to.macs / wl.macs:.2f}x the conv's "
                "multiply-adds")})
            wl = conv_workload(q, layer)
        OPS[layer.op].to_vta(layer, q.arrays, hw, batch=q.shapes[layer.inputs[0]][0])
        if progress is not None:
            progress(f"VTA program of {layer.name}")
        ep = epilogue(layer)
        why = ""
        try:
            compiled = compile_conv2d(wl, config.values, hw, **ep)
        except VTAError as exc:
            config = default_config(wl, hw, **ep)
            fits = "the bias and residual" if "residual" in ep else "the bias"
            why = f"config #{config.index} (largest tiles that fit): the tuned one does not fit {fits} ({exc})"
            compiled = compile_conv2d(wl, config.values, hw, **ep)
        programs[layer.name] = compiled.program
        layers_info.append({"layer": layer.name, "op": layer.op, "device": "vta", "config_index": config.index,
                            "config": config.values, "note": why,
                            "instructions": len(compiled.program.insns),
                            **({"why": "the residual add, inside its conv's program"} if "residual" in ep else {})})
    pool_why = {}
    for layer in (x for x in q.graph.layers if x.op == "maxpool"):
        program, pool_why[layer.name] = _maxpool_program(q, layer, hw)
        if program is not None:
            OPS["maxpool"].to_vta(layer, q.arrays, hw, batch=q.shapes[layer.inputs[0]][0])
            programs[layer.name] = program
            layers_info.append({"layer": layer.name, "op": "maxpool", "device": "vta",
                                "instructions": len(program.insns),
                                "why": "ALU MAX over the window (its input is non-negative: pooling from zero, with "
                                       "zero padding, is exact)"})
    listed = {i["layer"] for i in layers_info}
    layers_info += [{"layer": layer.name, "op": layer.op, "device": "cpu",
                     "why": unfused.get(layer.name) or pool_why.get(layer.name) or OPS[layer.op].cpu_why}
                    for layer in q.graph.layers
                    if layer.op not in CONVS and layer.name not in listed]
    where = _write_segments(folder, files, q.graph, q.arrays, programs)
    for info in layers_info:
        if info["layer"] in where:
            info["program"] = where[info["layer"]]
    (folder / GRAPH).write_text(json.dumps(q.graph.to_json(), indent=1) + "\n")
    buf = io.BytesIO()
    np.savez(buf, **q.arrays)
    (folder / WEIGHTS).write_bytes(buf.getvalue())
    on_vta = sum(1 for i in layers_info if i["op"] in CONVS and i["device"] == "vta")
    pools = sum(1 for i in layers_info if i["op"] == "maxpool" and i["device"] == "vta")
    extra = {"calibration": calib_info, "vta_layers": layers_info,
             "params": f"int8 weights and int32 biases in {WEIGHTS} (a VTA layer's packed in VTA's layout); {on_vta} "
                       f"of {len(conv_layers)} convs and {pools} max pooling layers run on VTA, each run of "
                       f"consecutive VTA layers one program in {PROGRAMS}/ (one kernel call, one DRAM arena); the "
                       "other layers run in numpy on the board's CPU"}
    return ModelBuild(files, extra)


@dataclass
class VTAModel:
    """A loaded package: the graph, its arrays, each VTA segment's program (and its file's bytes) by segment name,
    and each VTA layer's packed constant arrays by layer."""

    graph: Graph
    arrays: dict[str, np.ndarray]
    hw: VTAConfig
    programs: dict[str, Any]
    packed: dict[str, dict[str, np.ndarray]]
    raw: dict[str, bytes]


def load_vta_model(folder: Path, model: dict[str, Any], hardware: dict[str, Any]) -> VTAModel:
    """Read a package back; :class:`ExportError` naming what is wrong (the files are hashed already)."""
    from toolkit.vta.config import VTAConfig
    from toolkit.vta.errors import VTAError
    from toolkit.vta.graph import check_regions
    from toolkit.vta.program import Program
    from toolkit.vta.segments import arena_inputs, vta_segments

    files = model["files"]
    where = str(folder / files["model"])
    try:
        graph = Graph.from_json(json.loads((folder / files["model"]).read_text()), where)
    except (ValueError, UnicodeDecodeError):
        raise ExportError(f"{where} is not JSON; re-export the model") from None
    hw = VTAConfig.from_json(hardware)
    arrays = _load_arrays(folder / files.get("weights", WEIGHTS))
    programs: dict[str, Any] = {}
    raw: dict[str, bytes] = {}
    packed: dict[str, dict[str, np.ndarray]] = {}
    check_arrays(graph, arrays)
    for segment in vta_segments(graph):
        rel = files.get(f"program:{segment.name}")
        if rel is None:
            raise ExportError(f"{where}: VTA layers {segment.layers[0].name}..{segment.layers[-1].name} have no "
                              f"program file ({segment.name}); re-export the model")
        try:
            raw[segment.name] = (folder / rel).read_bytes()
            prog = Program.from_bytes(raw[segment.name])
        except VTAError as exc:
            raise ExportError(f"{rel}: {exc}") from None
        if prog.hw.to_json() != hw.to_json():
            raise ExportError(f"{rel} is built for VTA {prog.hw.bitstream}, the export for {hw.bitstream}; "
                              "re-export the model")
        for layer in segment.layers:
            packed[layer.name] = OPS[layer.op].vta_arrays(layer, arrays)
        check_regions(prog, arena_inputs(segment, {}, packed), rel)
        programs[segment.name] = prog
    return VTAModel(graph, arrays, hw, programs, packed, raw)


def _load_arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ExportError(f"{path} is not a numpy .npz of plain arrays ({str(exc)[:80]}); re-export the model") \
            from None


@dataclass
class VTAModelRun:
    """Inferences of a VTA model: outputs per input, latency per inference (VTA layers' seconds from the
    device: modelled by the simulator, measured on an FPGA; the rest measured here), per-layer seconds of
    the last inference, and whether every tensor equalled the int8 reference."""

    outputs: list[list[np.ndarray]]
    costs: list[float]
    layers: list[dict[str, Any]]
    bit_exact: bool
    mismatch: str = ""


def run_vta_model(vm: VTAModel, inputs: Sequence[np.ndarray]) -> VTAModelRun:
    """Run every input through ``vm`` in this process, its VTA layers in the simulator (seconds modelled), each
    tensor compared with the int8 reference."""
    from toolkit.vta.errors import VTAError
    from toolkit.vta.segments import Segment, arena_inputs, arena_outputs
    from toolkit.vta.sim import simulate

    def on_vta(segment: Segment, external: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
        try:
            res = simulate(vm.programs[segment.name], arena_inputs(segment, external, vm.packed))
        except VTAError as exc:
            raise ExportError(f"VTA layers {segment.layers[0].name}..{segment.layers[-1].name} failed in the "
                              f"simulator: {exc}") from None
        return arena_outputs(segment, res.outputs or {}), float(res.seconds)

    outputs, costs, last = [], [], None
    bit_exact, mismatch = True, ""
    for x in inputs:
        run = execute(vm.graph, vm.arrays, x, vta=on_vta, hw=vm.hw)
        if bit_exact:
            bad = _first_difference(tensor_digests(run, vm.hw), tensor_digests(execute(vm.graph, vm.arrays, x),
                                                                                  vm.hw), vm)
            bit_exact, mismatch = bad is None, bad or ""
        outputs.append(run.outputs)
        costs.append(run.latency_s())
        last = run.seconds
    return VTAModelRun(outputs, costs, _layers(vm, last or {}), bit_exact, mismatch)


def run_vta_model_on_agent(vm: VTAModel, inputs: Sequence[np.ndarray], runner: Any, board: Board,
                           timeout_s: float) -> VTAModelRun:
    """Run every input through ``vm`` on a VTA board in one call of its agent's ``edgetune.vta.run_model``
    (VTA layers on the board's device, the rest in numpy on the board); each int8 tensor's crc32 compared with
    the reference run here."""
    from toolkit.errors import BoardError
    from toolkit.vta.graph import to_package

    buf = io.BytesIO()
    np.savez(buf, **to_package(vm.graph, vm.arrays, vm.raw, vm.hw.to_json()))
    try:
        out = runner.call("edgetune.vta.run_model", buf.getvalue(), {"x": np.concatenate(list(inputs))},
                          timeout_s=timeout_s)
    except TimeoutError as exc:
        raise BoardError(f"running the model on board {board.name} failed: {exc}; check `edgetune board status` "
                         "(or give a longer --timeout)") from None
    if "__error__" in out:
        raise ExportError(f"the model failed on board {board.name}: {_text(out['__error__'])}")
    names = json.loads(_text(out["__layers__"]))
    digests = json.loads(_text(out["__digests__"]))
    seconds = out["__seconds__"]
    outputs = [[out[f"out{i}_{k}"] for k in range(len(vm.graph.outputs))] for i in range(len(inputs))]
    bit_exact, mismatch = True, ""
    for x, got in zip(inputs, digests):
        bad = _first_difference({k: int(v) for k, v in got.items()},
                                tensor_digests(execute(vm.graph, vm.arrays, x), vm.hw), vm)
        if bad is not None:
            bit_exact, mismatch = False, bad
            break
    return VTAModelRun(outputs, [float(np.sum(row)) for row in seconds],
                       _layers(vm, dict(zip(names, map(float, seconds[-1])))), bit_exact, mismatch)


def _layers(vm: VTAModel, seconds: dict[str, float]) -> list[dict[str, Any]]:
    """Per layer: op, device, seconds; a VTA layer names its segment, whose one program's time is its first
    layer's."""
    from toolkit.vta.segments import vta_segments

    segment = {layer.name: s.name for s in vta_segments(vm.graph) for layer in s.layers}
    return [{"layer": layer.name, "op": layer.op, "device": layer.device, "seconds": seconds.get(layer.name, 0.0),
             **({"segment": segment[layer.name]} if layer.name in segment else {})} for layer in vm.graph.layers]


def _text(a: np.ndarray) -> str:
    return bytes(np.asarray(a, dtype=np.uint8)).decode(errors="replace")


def _first_difference(got: dict[str, int], want: dict[str, int], vm: VTAModel) -> str | None:
    """The first layer whose int8 tensor (crc32) differs from the reference's, said in words."""
    for layer in vm.graph.layers:
        if got.get(layer.name) != want.get(layer.name):
            return f"layer {layer.name} ({layer.device}) differs from the int8 reference"
    return None


def agreement(outputs: list[list[np.ndarray]], reference: list[list[np.ndarray]]) -> dict[str, Any]:
    """Top-1 agreement and cosine similarity of the first output against the float model's, over the inputs."""
    top1, cosines = [], []
    for got, want in zip(outputs, reference):
        g, w = got[0].reshape(got[0].shape[0], -1).astype(np.float64), want[0].reshape(want[0].shape[0], -1)
        top1.extend((g.argmax(1) == w.argmax(1)).tolist())
        for gi, wi in zip(g, w):
            denom = float(np.linalg.norm(gi) * np.linalg.norm(wi))
            cosines.append(float(gi @ wi) / denom if denom else float(np.array_equal(gi, wi)))
    return {"top1_agreement": float(np.mean(top1)), "cosine_min": min(cosines), "cosine_mean": float(np.mean(cosines)),
            "samples": len(top1)}


def _digest(a: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
