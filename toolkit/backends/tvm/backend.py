"""The TVM backend object, for CPU (LLVM) and CUDA boards; ``device`` tells which."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from toolkit.backends.base import Backend, ModelTiming, rebuild
from toolkit.backends.tvm.cpu import BUILD_TIMEOUT_S, weight_shape
from toolkit.backends.tvm.model_check import flatten
from toolkit.boards import Board, BoardProfile
from toolkit.errors import ConfigError, ExportError
from toolkit.manifest import ConvPlan, ModelBuild
from toolkit.rpc.board_check import Finding
from toolkit.tuning.core.builder import LocalBuilder
from toolkit.tuning.core.check import check_output
from toolkit.tuning.core.runner import Runner
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Template
from toolkit.workloads import Conv2dWorkload

if TYPE_CHECKING:
    from toolkit.manifest import ExportManifest, KernelEntry
    from toolkit.tuning.core.runner import MeasureOptions

PRELOAD = ("tvm", "toolkit.backends.tvm.tir_features", "toolkit.backends.tvm.cpu")
"""Modules the builder's ``forkserver`` imports once, so that each build worker starts without importing TVM (~2 s)."""

DEVICES = ("cpu", "cuda")


def _norm_arch(arch: str) -> str:
    a = arch.lower()
    return {"arm64": "aarch64", "amd64": "x86_64", "armv7": "armv7l", "armhf": "armv7l"}.get(a, a)


class TVMBackend(Backend):
    """TVM code generation for an LLVM CPU (``device="cpu"``) or an NVIDIA GPU (``device="cuda"``)."""

    name = "tvm"
    export_kind = "tvm-library"
    model_kind = "tvm-model"
    kernels_noun = "TVM libraries"
    output_name = "conv"
    readme = "toolkit.backends.tvm.readme"

    def __init__(self, device: str = "cpu") -> None:
        if device not in DEVICES:
            raise ConfigError(f"TVM backend device must be one of {DEVICES}, got {device!r}")
        self.device = device

    def __repr__(self) -> str:
        return f"TVMBackend(device={self.device!r})"

    # -- tuning -------------------------------------------------------------------------------------
    def template(self, workload: Conv2dWorkload, profile: BoardProfile, **options: Any) -> Template:
        return self._template_class()(workload, profile, **options)

    def _template_class(self) -> type:
        if self.device == "cuda":
            from toolkit.backends.tvm.cuda import CUDAConv2dTemplate
            return CUDAConv2dTemplate
        from toolkit.backends.tvm.cpu import CPUConv2dTemplate
        return CPUConv2dTemplate

    def default_builder(self, board: Board) -> LocalBuilder:
        """One worker per CPU (at most 4), :data:`BUILD_TIMEOUT_S` per build, TVM preloaded."""
        return LocalBuilder(n_parallel=max(1, min(4, os.cpu_count() or 1)), timeout_s=BUILD_TIMEOUT_S,
                            preload=PRELOAD)

    def make_runner(self, board: Board, *, tracker: tuple[str, int] | str | None = None, wait_s: float = 120.0,
                    **options: Any) -> Runner:
        """TVM RPC through the board's tracker (``local``: a loopback tracker and server)."""
        from toolkit.backends.tvm.rpc_runner import RPCRunner

        return RPCRunner(board, tracker=tracker, wait_s=wait_s, **options)

    def board_findings(self, profile: BoardProfile, facts: dict[str, str], name: str) -> list[Finding]:
        if self.device != "cuda":
            return []
        gpu = facts.get("gpu") or facts.get("nvhost") or ("tegra" if facts.get("tegrastats") else "")
        return [Finding("gpu", gpu or "missing", bool(gpu),
                        "no NVIDIA GPU found (/dev/nvhost*, nvidia-smi, tegrastats): flash JetPack/L4T")]

    # -- export -------------------------------------------------------------------------------------
    def record_template(self, template: Template, config: dict[str, Any]) -> Template | None:
        """MetaSchedule records carry a trace: it is applied to the template's workload and built."""
        from toolkit.backends.tvm.metaschedule import TraceTemplate, is_trace_config

        return TraceTemplate(template) if is_trace_config(config) else None

    def write_kernel(self, template: Template, config: Config, folder: Path, stem: str
                     ) -> tuple[dict[str, str], dict[str, Any]]:
        artifact = rebuild(template, config)
        rel = f"{stem}.so"
        (folder / rel).write_bytes(artifact.payload or Path(artifact.path or "").read_bytes())
        return {"library": rel}, self._signature(template)

    def _signature(self, template: Template) -> dict[str, Any]:
        wl = template.workload
        wlayout = getattr(template, "weight_layout", "OIHW")
        wshape = list(weight_shape(wl, wlayout))
        return {"function": "main", "device": self.device,
                "args": [{"name": "data", "shape": [wl.n, wl.ci, wl.h, wl.w], "dtype": "float32", "layout": "NCHW"},
                         {"name": "weight", "shape": wshape, "dtype": "float32", "layout": wlayout},
                         {"name": "conv", "shape": [wl.n, wl.co, wl.oh, wl.ow], "dtype": "float32",
                          "layout": "NCHW", "output": True}],
                "padding": [wl.ph, wl.pw], "stride": [wl.sh, wl.sw]} | (
                    {"groups": wl.g} if wl.g > 1 else {}) | (
                    {"dilation": [wl.dh, wl.dw]} if (wl.dh, wl.dw) != (1, 1) else {})

    def export_summary(self, m: ExportManifest) -> str:
        return f"{m.family}, {m.arch}"

    def _host(self, target: dict[str, Any]) -> dict[str, Any]:
        return target.get("host", target) if self.device == "cuda" else target

    def tuned_elsewhere(self, profile: BoardProfile, tuned_target: dict[str, Any]) -> str | None:
        """Another GPU (CUDA boards) or another CPU (CPU boards: a log of `local` tuned on another machine)."""
        if self.device == "cuda":
            theirs, mine = tuned_target.get("arch"), profile.target.get("arch")
            return f"GPU {theirs}, this board's is {mine}" if theirs and theirs != mine else None
        theirs, mine = tuned_target.get("mcpu"), profile.target.get("mcpu")
        return f"CPU {theirs}, this board's is {mine}" if theirs and theirs != mine else None

    def check_export_board(self, m: ExportManifest, board: Board) -> None:
        p = board.profile
        what = f"this export is for {m.board_type} ({self.export_summary(m)})"
        if _norm_arch(p.arch) != _norm_arch(m.arch):
            raise ExportError(f"{what}; board {board.name} ({p.name}) is {p.arch}: export for {board.name} with "
                              f"`edgetune export --board {board.name}`")
        host, built = self._host(p.target), self._host(m.target)
        if p.name == m.board_type and host.get("mcpu") != built.get("mcpu"):   # `local` on another machine
            raise ExportError(f"{what} built for CPU {built.get('mcpu')}; board {board.name} has CPU "
                              f"{host.get('mcpu')}: export the log again for it")
        if self.device == "cuda" and p.target.get("arch") != m.target.get("arch"):
            raise ExportError(f"{what}, GPU {m.target.get('arch')}; board {board.name} has GPU "
                              f"{p.target.get('arch')}: export for {board.name}")

    def input_specs(self, kernel: KernelEntry) -> list[tuple[str, dict[str, Any]]]:
        return [(a["name"], a) for a in kernel.signature["args"] if not a.get("output")]

    def run_kernel(self, folder: Path, kernel: KernelEntry, board: Board, inputs: Sequence[np.ndarray],
                   repeat: int, runner: Runner) -> tuple[dict[str, np.ndarray], float]:
        """Upload the library over TVM RPC, run it once for its output, then time it (:meth:`RPCRunner.execute`)."""
        from toolkit.tuning.core.template import Artifact

        out_spec = next(a for a in kernel.signature["args"] if a.get("output"))
        artifact = Artifact(index=-1, kind="tvm-library", path=str(folder / kernel.files["library"]))
        got, costs = runner.execute(artifact, list(inputs), np.zeros(out_spec["shape"], dtype=out_spec["dtype"]),
                                    self.device, repeat=max(1, repeat))
        return {"conv": got}, sum(costs) / len(costs)

    def compare(self, got: np.ndarray, expected: np.ndarray) -> tuple[bool, str]:
        return check_output(got, expected, exact=False)

    # -- whole models -------------------------------------------------------------------------------
    def check_model_target(self, profile: BoardProfile) -> None:
        """Every TVM board takes whole models (CPU boards through TVM's CPU pipeline, CUDA boards through its
        GPU pipeline)."""

    def compile_model(self, program: Any, profile: BoardProfile, plans: Sequence[ConvPlan], folder: Path, *,
                      calibration: np.ndarray | None = None, progress: Any = None) -> ModelBuild:
        """A Relax build in float32 (``calibration`` is refused: nothing is quantised)."""
        if calibration is not None:
            raise ExportError(f"--calibrate quantises int8 models for VTA boards; {profile.name} runs the model in "
                              "float32: drop --calibrate")
        from toolkit.backends.tvm.model import compile_model

        built = compile_model(program, profile, plans, progress=progress)
        (folder / "model.so").write_bytes(built.library)
        files = {"model": "model.so"}
        if built.kernels is not None:
            (folder / "kernels.so").write_bytes(built.kernels)
            files["kernels"] = "kernels.so"
        return ModelBuild(files, {"params": f"bound into {files['model']} as constants (conv weights already in "
                                            "the kernels' layout)"})

    def check_model_build(self, folder: Path, program: Any, profile: BoardProfile, plans: Sequence[ConvPlan],
                          x: np.ndarray, reference: list[np.ndarray], *, board: Board | None = None,
                          on_step: Any = None) -> dict[str, Any]:
        """Run here when this machine runs the board's code, else on ``board`` over RPC when it is a provisioned
        board (:mod:`toolkit.backends.tvm.model_check`)."""
        from toolkit.backends.tvm.model_check import check_build

        return check_build((folder / "model.so").read_bytes(), program, profile, plans, x, reference,
                           board=board, device=self.device, on_step=on_step)

    def run_model(self, folder: Path, manifest: ExportManifest, board: Board, inputs: Sequence[np.ndarray],
                  options: MeasureOptions, *, tracker: tuple[str, int] | str | None = None, on_wait: Any = None,
                  per_layer: bool = False) -> ModelTiming:
        """Upload the model over TVM RPC, run every input through the Relax VM on the board, then time one
        inference with ``time_evaluator`` (``options``: number, repeat, min_repeat_ms, timeout) in the same
        session; ``per_layer`` also times each edgetune kernel alone on random inputs of its shapes."""
        import uuid

        import tvm
        from tvm import relax

        from toolkit.backends.tvm.rpc_runner import RPCRunner

        model = manifest.model or {}
        runner = RPCRunner(board, tracker=tracker, session_timeout=options.timeout_s * max(1, len(inputs)) + 60)
        runner.on_wait = on_wait
        tag = uuid.uuid4().hex[:12]
        try:
            with runner.session(options.timeout_s) as (sess, at):
                at("upload")
                sess.upload(str(folder / model["files"]["model"]), f"edgetune-model-{tag}.so")
                at("load")
                dev = sess.device(self.device, 0)
                vm = relax.VirtualMachine(sess.load_module(f"edgetune-model-{tag}.so"), dev)
                at("run")
                outputs, args = [], None
                for x in inputs:
                    args = tvm.runtime.tensor(np.ascontiguousarray(x), dev)
                    outputs.append(flatten(vm["main"](args)))
                at("timing")
                timer = vm.time_evaluator("main", dev, number=options.number, repeat=options.repeat,
                                          min_repeat_ms=int(options.min_repeat_ms))
                costs = [float(c) for c in timer(args).results]
                kernels = self._time_kernels(sess, at, folder, model, dev, options, tag,
                                             self._template_class().weight_layout) if per_layer else {}
        finally:
            runner.close()
        return ModelTiming(outputs, costs, kernels)

    @staticmethod
    def _time_kernels(sess: Any, at: Any, folder: Path, model: dict[str, Any], dev: Any, options: MeasureOptions,
                      tag: str, weight_layout: str) -> dict[str, float]:
        """Each edgetune kernel of the model timed alone (random inputs of its shapes, the weight in
        ``weight_layout``), by function name."""
        import tvm

        from toolkit.workloads import parse_spec

        if "kernels" not in model["files"]:
            return {}
        at("upload kernels")
        sess.upload(str(folder / model["files"]["kernels"]), f"edgetune-kernels-{tag}.so")
        lib = sess.load_module(f"edgetune-kernels-{tag}.so")
        rng = np.random.default_rng(0)
        out: dict[str, float] = {}
        for conv in model["convs"]:
            name = conv.get("kernel")
            if not name or name in out:
                continue
            at(f"timing {name}")
            wl = parse_spec(conv["workload"])
            args = [tvm.runtime.tensor(rng.uniform(-1, 1, shape).astype("float32"), dev)
                    for shape in ((wl.n, wl.ci, wl.h, wl.w), weight_shape(wl, weight_layout))]
            args.append(tvm.runtime.tensor(np.zeros((wl.n, wl.co, wl.oh, wl.ow), "float32"), dev))
            timer = lib.time_evaluator(name, dev, number=options.number, repeat=options.repeat,
                                       min_repeat_ms=int(options.min_repeat_ms))
            out[name] = float(np.median(timer(*args).results))
        return out
