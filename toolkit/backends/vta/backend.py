"""The VTA backend object: template, builder, runners, network plan, board checks and exports."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from toolkit.backends.base import Agreement, Backend, ModelTiming, Roofline, rebuild
from toolkit.backends.registry import backend_for, make_task
from toolkit.backends.vta.template import OPTIONS as VTA_TEMPLATE_OPTIONS
from toolkit.backends.vta.template import VTAConv2dTemplate
from toolkit.boards import Board, BoardProfile
from toolkit.errors import BoardError, ConfigError, ExportError
from toolkit.manifest import ConvPlan, ModelBuild
from toolkit.rpc.board_check import Finding
from toolkit.tuning.core.builder import LocalBuilder
from toolkit.tuning.core.check import check_output
from toolkit.tuning.core.runner import Runner
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Template
from toolkit.vta.config import get_preset, preset_name
from toolkit.workloads import Conv2dWorkload
from toolkit.workloads.networks import Network, TaskPlan, plan_tasks

if TYPE_CHECKING:
    from toolkit.manifest import ExportManifest, KernelEntry
    from toolkit.tuning.models.transfer import TransferModel

CHANNEL_BLOCK = 16
"""Channels of a network layer are padded to this block, as TVM's VTA ``graph_pack`` does."""

EXPLORE_MAX = 200_000
"""``edgetune space`` checks spaces up to this size config by config (a few minutes); larger ones show their size."""

VTA_CLIP = (0, 127)
"""Requantisation clip of edgetune's VTA conv2d: ``MIN 127`` then ``MAX 0``."""

INPUT_REGIONS = ("inp", "wgt", "bias")


def profile_hw(profile: BoardProfile) -> dict[str, Any]:
    """The VTA hardware config (``vta_config.json`` keys) of a VTA board profile."""
    if not profile.vta or "preset" not in profile.vta:
        raise ConfigError(f"board type {profile.name!r} has no [vta] preset; it cannot run VTA programs")
    return get_preset(profile.vta["preset"]).to_json()


def with_vta_preset(board: Board, preset: str | None) -> Board:
    """``board`` simulating another VTA hardware preset (``vta-fsim`` + ``zcu102`` -> ``vta-fsim-zcu102``).

    Only the profile's ``[vta] preset`` changes, so the simulator (in this process) models that config; a real
    FPGA board keeps the bitstream it has (:class:`ConfigError`), as does a non-VTA board.

    >>> from toolkit.boards import resolve_board
    >>> with_vta_preset(resolve_board("vta-fsim"), "zcu102").name
    'vta-fsim-zcu102'
    """
    return backend_for(board.profile).with_preset(board, preset)


def require_vta(board: Board) -> None:
    """Refuse a board that is not a VTA board with a hardware preset."""
    vta = board.profile.vta or {}
    if not isinstance(backend_for(board.profile), VTABackend) or "preset" not in vta:
        raise BoardError(f"board {board.name!r} is not a VTA board (family {board.profile.family!r}); "
                         "use vta-fsim or a Pynq/Ultra96/ZCU102 board")


class VTABackend(Backend):
    """VTA on an FPGA (through the board agent) or edgetune's simulator."""

    name = "vta"
    export_kind = "vta-program"
    kernels_noun = "VTA programs"
    output_name = "out"
    readme_run_also = " or any board with the same VTA hardware config"
    readme = "toolkit.backends.vta.readme"
    quantised_models = True
    template_options = tuple(VTA_TEMPLATE_OPTIONS)
    first_conv_on_cpu = True
    model_kind = "vta-model"
    model_other_schedule = "cpu"

    def with_preset(self, board: Board, preset: str | None) -> Board:
        """The simulator modelling ``preset``; an FPGA keeps its bitstream (:class:`ConfigError`)."""
        if preset is None or (board.profile.vta or {}).get("preset") == preset:
            return board
        if not board.profile.is_simulator:
            raise ConfigError(f"--vta-config simulates another VTA preset; {board.name!r} is an FPGA with its own "
                              f"bitstream: register a board of that type instead (edgetune board types)")
        get_preset(preset)
        vta = {**(board.profile.vta or {}), "preset": preset}
        return Board(f"{board.name}-{preset}", dataclasses.replace(board.profile, vta=vta))

    # -- tuning -------------------------------------------------------------------------------------
    def template(self, workload: Conv2dWorkload, profile: BoardProfile, **options: Any) -> Template:
        return VTAConv2dTemplate(workload, profile, **options)

    def default_builder(self, board: Board) -> LocalBuilder:
        """In-process: a VTA build takes milliseconds."""
        return LocalBuilder(n_parallel=0)

    def make_runner(self, board: Board, *, tracker: tuple[str, int] | str | None = None, wait_s: float = 120.0,
                    **options: Any) -> Runner:
        """The in-process simulator for the built-in ``vta-fsim``; the board agent over RPC for every
        registered board (an FPGA, or a provisioned simulator agent)."""
        if board.profile.executor == "fsim" and board.entry is None:
            from toolkit.backends.vta.sim_runner import SimRunner

            return SimRunner(**options)
        from toolkit.backends.vta.rpc_runner import VTARPCRunner

        return VTARPCRunner(board, tracker, wait_s=wait_s, **options)

    def plan_network(self, network: Network, first_conv: str = "s2d") -> TaskPlan:
        """Channels padded to :data:`CHANNEL_BLOCK`; a first conv of few input channels rewritten by space-to-depth
        (``first_conv="s2d"``), left on the CPU (``"cpu"``) or padded (``"pad"``)."""
        return plan_tasks(network, block=CHANNEL_BLOCK, first_conv=first_conv)

    def explore_space(self, workload: Conv2dWorkload, profile: BoardProfile, *, exhaustive: bool,
                      on_step: Any = None) -> dict[str, Any] | None:
        """Every config compiled (and with ``exhaustive`` simulated), for edgetune's and TVM's space; ``None``
        above :data:`EXPLORE_MAX` configs (about a millisecond each)."""
        from toolkit.backends.vta.space import explore, vta_conv2d_space

        if vta_conv2d_space(workload, get_preset(profile.vta["preset"])).size > EXPLORE_MAX:
            return None
        return explore(workload, get_preset(profile.vta["preset"]), exhaustive=exhaustive, on_step=on_step)

    def import_autotvm(self, path: Path, board: Board, out_dir: Path) -> Any:
        """TVM's ``conv2d_packed.vta`` records as logs in edgetune's TVM-compatible space."""
        from toolkit.backends.vta.autotvm import import_autotvm

        builder = self.default_builder(board)
        return import_autotvm(path, board, out_dir, make_task=make_task,
                              build=lambda task, configs: builder.build(task.template, configs))

    def board_findings(self, profile: BoardProfile, facts: dict[str, str], name: str) -> list[Finding]:
        if profile.executor != "fpga":
            return []
        out = [Finding("pynq package", facts.get("pynq") or "missing", bool(facts.get("pynq")),
                       "use the PYNQ image (v2.5+) or `pip install pynq` in the board's Python")]
        fm = facts.get("fpga_manager", "")
        out.append(Finding("fpga manager", f"{fm} ({facts.get('fpga_state', '')})" if fm else "missing", bool(fm),
                           "the kernel has no /sys/class/fpga_manager: use the PYNQ/Xilinx image for this board"))
        bit = facts.get("bitstream", "")
        out.append(Finding("bitstream", bit or "missing", bool(bit),
                           f"run `edgetune board provision {name}` (uploads and loads "
                           f"{(profile.vta or {}).get('bitstream')}.bit)"))
        sudo = facts.get("sudo", "no")
        needs = bool(profile.runtime.get("needs_sudo"))
        out.append(Finding("fpga access (sudo)", sudo, sudo != "no" or not needs,
                           "the FPGA and its DMA buffers need root: allow passwordless sudo for the agent "
                           "(`echo 'USER ALL=(ALL) NOPASSWD: ALL' | sudo tee /etc/sudoers.d/edgetune`)"))
        return out

    def pretrained_transfer(self, profile: BoardProfile) -> TransferModel | None:
        """The shipped transfer model of the board's VTA preset (:mod:`toolkit.backends.vta.pretrained`)."""
        from toolkit.backends.vta.pretrained import load_pretrained

        return load_pretrained(profile.vta["preset"]) if profile.vta and "preset" in profile.vta else None

    # -- export -------------------------------------------------------------------------------------
    def hardware(self, profile: BoardProfile) -> dict[str, Any] | None:
        return profile_hw(profile)

    def roofline(self, profile: BoardProfile, hw: dict[str, Any] | None = None) -> Roofline | None:
        """VTA's roofs from its hardware config: a GEMM of ``BATCH x BLOCK_IN x BLOCK_OUT`` multiply-adds and one
        bus word moved per cycle, at the board's clock."""
        from toolkit.vta.config import VTAConfig

        cfg = VTAConfig.from_json(hw) if hw else get_preset(profile.vta["preset"])
        ghz = cfg.clock_mhz / 1e3
        return Roofline(2 * cfg.macs_per_uop * ghz, cfg.bus_bytes * ghz,
                        f"VTA {cfg.bitstream}: {cfg.macs_per_uop} MACs and {cfg.bus_bytes} bytes per cycle at "
                        f"{cfg.clock_mhz:g} MHz", cfg.inp_width // 8)

    def preset(self, profile: BoardProfile) -> str | None:
        return (profile.vta or {}).get("preset")

    def bitstream(self, profile: BoardProfile) -> str | None:
        """The bitstream of the profile's VTA preset (``--vta-config zcu102`` on the simulator: ZCU102's)."""
        return get_preset(profile.vta["preset"]).bitstream

    def tuned_profile(self, profile: BoardProfile, hw: Any, log: Path) -> BoardProfile:
        """The profile with the VTA preset the log header's hardware names (``edgetune tune --vta-config
        zcu102`` on ``vta-fsim`` logs the zcu102 config)."""
        if not isinstance(hw, dict) or hw == profile_hw(profile):
            return profile
        preset = preset_name(hw)
        if preset is not None:
            return dataclasses.replace(profile, vta={**profile.vta, "preset": preset})
        raise ExportError(f"{log} was tuned for a VTA config that matches no known preset; tune again with this "
                          f"edgetune version")

    def check_export_target(self, profile: BoardProfile, tuned: BoardProfile, name: str, log: Path) -> None:
        if profile_hw(profile) != profile_hw(tuned):
            raise ExportError(f"{log} was tuned for VTA {tuned.vta['bitstream']} ({tuned.name}); {name} has "
                              f"{profile.vta['bitstream']}: tune on {name} first")

    def write_kernel(self, template: Template, config: Config, folder: Path, stem: str
                     ) -> tuple[dict[str, str], dict[str, Any]]:
        from toolkit.vta.isa import encode_insns
        from toolkit.vta.program import Program

        artifact = rebuild(template, config)
        program = Program.from_bytes(artifact.payload)
        files = {"program": f"{stem}.vtaprog", "insns": f"{stem}.insns.bin", "uops": f"{stem}.uops.bin",
                 "params": f"{stem}.json"}
        (folder / files["program"]).write_bytes(artifact.payload)
        (folder / files["insns"]).write_bytes(encode_insns(program.insns, program.hw))
        (folder / files["uops"]).write_bytes(program.uop_words().astype(f"<u{program.hw.uop_bytes}").tobytes())
        params = _program_params(program, template.workload)
        (folder / files["params"]).write_text(json.dumps(params, indent=2) + "\n")
        signature = {"inputs": [n for n in INPUT_REGIONS if n in program.regions], "output": "out",
                     **{n: {k: params["regions"][n][k] for k in ("shape", "dtype", "layout")}
                        for n in (*INPUT_REGIONS, "out") if n in program.regions}}
        return files, signature

    def export_summary(self, m: ExportManifest) -> str:
        return f"VTA {m.bitstream}"

    def check_export_board(self, m: ExportManifest, board: Board) -> None:
        p = board.profile
        what = f"this export is for {m.board_type} ({self.export_summary(m)})"
        needed = preset_name(m.hardware)
        if profile_hw(p) != m.hardware and p.is_simulator and needed:
            raise ExportError(f"this export is for the VTA config {needed}; board {board.name} simulates "
                              f"{p.vta.get('preset')}: pass --vta-config {needed}")
        if profile_hw(p) != m.hardware:
            raise ExportError(f"{what}; board {board.name} ({p.name}) has VTA {p.vta.get('bitstream')}, another "
                              f"hardware config: export a log tuned for {p.name}")

    def input_specs(self, kernel: KernelEntry) -> list[tuple[str, dict[str, Any]]]:
        return [(n, kernel.signature[n]) for n in kernel.signature["inputs"]]

    def run_kernel(self, folder: Path, kernel: KernelEntry, board: Board, inputs: Sequence[np.ndarray],
                   repeat: int, runner: Runner) -> tuple[dict[str, np.ndarray], float]:
        """The simulator in-process for ``vta-fsim``, else the board agent's ``edgetune.vta.run``."""
        from toolkit.vta.errors import VTAError
        from toolkit.vta.program import Program

        path = folder / kernel.files["program"]
        program = Program.load(path)
        named = dict(zip(kernel.signature["inputs"], inputs))
        shape = program.regions["out"].shape
        if board.profile.is_simulator:
            from toolkit.vta.sim import simulate

            try:
                res = simulate(program, named)
            except VTAError as exc:
                raise ExportError(f"{kernel.label} failed in the simulator: {exc}") from None
            return {"out": np.asarray(res.outputs["out"]).reshape(shape)}, float(res.seconds)
        from toolkit.backends.vta.rpc_runner import run_on_agent

        return run_on_agent(board, path.read_bytes(), named, shape, repeat, runner)

    def compare(self, got: np.ndarray, expected: np.ndarray) -> tuple[bool, str]:
        return check_output(got, expected, exact=True)

    # -- whole models (an int8 graph, its convs VTA programs: toolkit.backends.vta.model) ------------------
    def check_model_target(self, profile: BoardProfile) -> None:
        profile_hw(profile)

    def model_conv_refusal(self, layer: Any, profile: BoardProfile) -> str | None:
        """Grouped or dilated convs, and output channels or batch not multiples of VTA's blocks, stay on the CPU;
        input channels that are not get the space-to-depth rewrite (:meth:`model_workload`) where it applies."""
        from toolkit.vta.quantize import vta_refusal

        return vta_refusal(self.model_workload(layer, profile), get_preset(profile.vta["preset"]))

    def model_workload(self, layer: Any, profile: BoardProfile) -> Conv2dWorkload:
        """A conv whose input channels are not a multiple of VTA's block runs as its space-to-depth rewrite
        (:func:`~toolkit.workloads.networks.space_to_depth`: stride 1 or 2)."""
        from toolkit.workloads.networks import space_to_depth

        return space_to_depth(layer.workload, get_preset(profile.vta["preset"]).block_in) or layer.workload

    def model_default_config(self, template: Template) -> Config | None:
        """The largest tiles that fit (:func:`~toolkit.backends.vta.model.default_config`); AutoTVM's first
        config, TVM's VTA fallback, is hundreds of times slower on ResNet-18's layers."""
        from toolkit.backends.vta.model import default_config

        return default_config(template.workload, template.hw)

    def compile_model(self, program: Any, profile: BoardProfile, plans: Sequence[ConvPlan], folder: Path, *,
                      calibration: np.ndarray | None = None, progress: Any = None) -> ModelBuild:
        from toolkit.backends.vta.model import compile_vta_model

        return compile_vta_model(program, profile, plans, folder, calibration=calibration, progress=progress)

    def check_model_build(self, folder: Path, program: Any, profile: BoardProfile, plans: Sequence[ConvPlan],
                          x: np.ndarray, reference: list[np.ndarray], *, board: Board | None = None,
                          on_step: Any = None) -> dict[str, Any]:
        """An int8 model differs from the float one by design: `run` checks it bit-exact against its int8 reference
        (and reports its agreement with PyTorch's float model)."""
        return {"checked": False, "why": "an int8 model: `edgetune run` checks it bit-exact against its int8 "
                                         "reference and reports its agreement with the float model"}

    def run_model(self, folder: Path, manifest: ExportManifest, board: Board, inputs: Sequence[np.ndarray],
                  options: Any, *, tracker: tuple[str, int] | str | None = None, on_wait: Any = None,
                  per_layer: bool = False) -> ModelTiming:
        """Every input through the int8 graph: on ``vta-fsim`` here (VTA layers in the simulator), on a VTA board
        in one call of its agent (VTA layers on its device, the rest in numpy on the board); each inference's
        latency is the VTA layers' device seconds (modelled in the simulator) plus the CPU layers' seconds
        measured where they ran."""
        from toolkit.backends.vta.model import load_vta_model, run_vta_model, run_vta_model_on_agent
        from toolkit.vta.graph import work_on_cpu

        vm = load_vta_model(folder, manifest.model or {}, manifest.hardware or {})
        if board.profile.executor == "fsim" and board.entry is None:
            run, where, cpu_where = run_vta_model(vm, inputs), "modelled by the simulator", "measured here"
        else:
            runner = self.make_runner(board, tracker=tracker)
            runner.on_wait = on_wait
            try:
                run = run_vta_model_on_agent(vm, inputs, runner, board,
                                             timeout_s=options.timeout_s * max(1, len(inputs)) * 10 + 120)
            finally:
                runner.close()
            where = cpu_where = "measured on the board"
        vta_s = sum(r["seconds"] for r in run.layers if r["device"] == "vta")
        details = {"bit_exact": run.bit_exact, "mismatch": run.mismatch, "vta_ms": vta_s * 1e3,
                   "cpu_ms": (sum(r["seconds"] for r in run.layers) - vta_s) * 1e3,
                   "vta_seconds": where, "cpu_seconds": cpu_where, "ms_of": "the last input",
                   "cpu_work": work_on_cpu(vm.graph, vm.arrays),
                   "layers": [{**{k: v for k, v in r.items() if k != "seconds"}, "ms": r["seconds"] * 1e3}
                              for r in run.layers] if per_layer else []}
        kernels = {r["layer"]: r["ms"] / 1e3 for r in details["layers"] if r["op"] == "conv"}
        return ModelTiming(run.outputs, run.costs, kernels, details)

    def check_model(self, timing: ModelTiming, reference: list[list[np.ndarray]] | None,
                    agreement: Agreement | None = None) -> tuple[bool | None, str]:
        """Correct when bit-exact with the graph's int8 reference. Against PyTorch's float outputs (``reference``)
        the top-1 agreement and cosine similarity are reported, a quality of the quantisation: they fail the run
        only below the least ``agreement`` the user asked for."""
        from toolkit.backends.vta.model import agreement as measure_agreement

        exact = bool(timing.details.get("bit_exact"))
        verdict = "bit-exact with the int8 reference" if exact else timing.details.get("mismatch", "not bit-exact")
        if reference is None:
            return exact, verdict
        agree = measure_agreement(timing.outputs, reference)
        timing.details["pytorch"] = agree
        want = agreement or Agreement()
        low = []
        if want.min_cosine is not None and agree["cosine_min"] < want.min_cosine:
            low.append(f"cosine min {agree['cosine_min']:.4f} < --min-cosine {want.min_cosine}")
        if want.min_top1 is not None and agree["top1_agreement"] < want.min_top1:
            low.append(f"top-1 agreement {agree['top1_agreement']:.2%} < --min-top1 {want.min_top1:.2%}")
        quality = (f"against PyTorch (float32, reported): top-1 agrees on {agree['top1_agreement']:.1%} of "
                   f"{agree['samples']}, cosine min {agree['cosine_min']:.4f}")
        return exact and not low, "; ".join([verdict, quality, *low])


def _program_params(program: Any, wl: Conv2dWorkload) -> dict[str, Any]:
    """Packing, requantisation and DRAM layout a caller needs to drive the program."""
    hw = program.hw
    b, bi, bo = hw.batch, hw.block_in, hw.block_out
    layouts = {"inp": f"NCHW{b}n{bi}c", "wgt": f"OIHW{bo}o{bi}i", "bias": f"NC11{b}n{bo}c", "out": f"NCHW{b}n{bo}c"}
    meaning = {"inp": "data NCHW int8, packed (N/B, C/BI, H, W, B, BI)",
               "wgt": "weight OIHW int8, packed (O/BO, I/BI, KH, KW, BO, BI)",
               "bias": "per-channel int32 bias, packed (N/B, CO/BO, 1, 1, B, BO)",
               "out": "output NCHW int8, packed (N/B, CO/BO, OH, OW, B, BO)",
               "uop": "micro-op image (written by the loader, not by the caller)"}
    relu, acc_bias = bool(program.meta.get("relu", True)), bool(program.meta.get("acc_bias", False))
    clip = list(VTA_CLIP) if relu else [-128, VTA_CLIP[1]]
    rescale = "(conv_int32(inp, wgt) + bias) >> shift" if acc_bias else "(conv_int32(inp, wgt) >> shift) + bias"
    return {
        "shift": int(program.meta.get("shift", 8)),
        "bias": bool(program.meta.get("bias", False)),
        "clip": clip,
        "formula": f"out = clip({rescale}, {clip[0]}, {clip[1]}).astype(int8)",
        "stride": [wl.sh, wl.sw], "padding": [wl.ph, wl.pw],
        "regions": {r.name: {"offset": r.offset, "nbytes": r.nbytes, "shape": list(r.shape), "dtype": r.dtype,
                             "layout": layouts.get(r.name, "raw"), "meaning": meaning.get(r.name, "")}
                    for r in program.regions.values()},
        "dram_bytes": program.dram_bytes,
        "instructions": len(program.insns), "insn_bytes": hw.insn_bytes,
        "uops": len(program.uops), "uop_bytes": hw.uop_bytes,
        "hardware": hw.to_json(), "bitstream": hw.bitstream,
    }
