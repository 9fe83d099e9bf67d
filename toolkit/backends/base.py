"""The backend interface: everything one hardware family needs, in one object.

A backend serves the board profiles of its families (``profile.family``). It gives a task its
template (and so its space), the default builder and runner of a board, how a network's layers
become tasks, what ``board check`` must also look for, and the family's part of an export:
writing a kernel's files, refusing a board it cannot run on, running a kernel and checking its
output. The tuning core never sees a family: it reaches the backend through ``Task.backend``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import numpy as np

from toolkit.boards import Board, BoardProfile
from toolkit.tuning.core.builder import LocalBuilder
from toolkit.tuning.core.runner import Runner
from toolkit.tuning.core.space import Config
from toolkit.errors import ConfigError, ExportError
from toolkit.tuning.core.template import Artifact, BuildError, Template
from toolkit.workloads import Conv2dWorkload
from toolkit.manifest import ConvPlan, ExportManifest, KernelEntry, ModelBuild
from toolkit.workloads.networks import Network, TaskPlan, plan_tasks

if TYPE_CHECKING:
    from toolkit.tuning.core.runner import MeasureOptions
    from toolkit.rpc.board_check import Finding
    from toolkit.tuning.models.transfer import TransferModel


def rebuild(template: Template, config: Config) -> Artifact:
    """Build an exported record's config again; :class:`ExportError` naming it when that fails."""
    try:
        return template.build(config)
    except BuildError as exc:
        raise ExportError(f"rebuilding {template.workload.label} config #{config.index} failed: {exc}") from None


@dataclass(frozen=True)
class Roofline:
    """A board's compute peak and memory bandwidth, and where they come from (a roofline's two roofs)."""

    peak_gflops: float
    bandwidth_gbs: float
    source: str
    elem_bytes: int = 4
    """Bytes of one tensor element the kernels move (the compulsory traffic of a task is counted in them)."""

    @property
    def ridge(self) -> float:
        """The arithmetic intensity (FLOP/byte) where the two roofs meet."""
        return self.peak_gflops / self.bandwidth_gbs

    def to_json(self) -> dict[str, Any]:
        return {"peak_gflops": self.peak_gflops, "bandwidth_gbs": self.bandwidth_gbs, "source": self.source,
                "ridge": self.ridge, "elem_bytes": self.elem_bytes}


class Backend(abc.ABC):
    """One hardware family's template, builder, runners, network plan, board checks and export.

    Lifecycle: the registry (:func:`toolkit.backends.backend_for`) creates one instance per
    family on first use; methods are called with the board or profile they concern and keep no
    per-task state.
    """

    name: ClassVar[str] = ""
    """Registry name of the backend (``vta``, ``tvm``)."""
    export_kind: ClassVar[str] = ""
    """``kind`` written in an export's manifest (``vta-program``, ``tvm-library``)."""
    output_name: ClassVar[str] = ""
    """Name of a kernel's output in :meth:`run_kernel`'s outputs."""
    model_kind: ClassVar[str] = ""
    """``kind`` written in a whole-model export's manifest (empty: this family exports no whole models yet)."""
    kernels_noun: ClassVar[str] = ""
    """What an export of this family holds, for messages (``VTA programs``)."""
    readme_run_also: ClassVar[str] = ""
    readme: ClassVar[str] = ""
    quantised_models: ClassVar[bool] = False
    """Whether the family's whole models run quantised (then judged by their own reference, the float model's
    agreement reported, and failing only below an :class:`Agreement` asked for)."""
    """The module of the family's README sections (``kernel_usage(manifest, backend)``, ``model_usage(...)``):
    text lives beside the family, not in its backend object."""
    """Which other boards can run an export, for its README."""
    template_options: ClassVar[tuple[str, ...]] = ()
    """Options this family's template takes (``tvm_compat``, ``bias`` on VTA)."""
    first_conv_on_cpu: ClassVar[bool] = False
    """A network's first conv stays on the host CPU (VTA's flow: 3 input channels)."""

    # -- tuning -------------------------------------------------------------------------------------
    @abc.abstractmethod
    def template(self, workload: Conv2dWorkload, profile: BoardProfile, **options: Any) -> Template:
        """The conv2d template of ``workload`` on ``profile`` with template ``options``."""

    @abc.abstractmethod
    def default_builder(self, board: Board) -> LocalBuilder:
        """The builder a tuning run uses on ``board`` unless given one."""

    @abc.abstractmethod
    def make_runner(self, board: Board, *, tracker: tuple[str, int] | str | None = None, wait_s: float = 120.0,
                    **options: Any) -> Runner:
        """The runner that measures on ``board``: ``tracker`` (default: where the board was provisioned) and
        ``wait_s`` (how long a lost board may take to come back) apply to boards measured over RPC and are
        ignored by in-process runners."""

    def with_preset(self, board: Board, preset: str | None) -> Board:
        """``board`` modelling another hardware preset (``--vta-config``); families without presets refuse one."""
        if preset is None:
            return board
        raise ConfigError(f"--vta-config applies to VTA boards; {board.name!r} is a {board.profile.family} board")

    def plan_network(self, network: Network, first_conv: str = "s2d") -> TaskPlan:
        """The tasks of ``network`` on this family (by default every plain conv layer as it is)."""
        return plan_tasks(network, first_conv=first_conv)

    def explore_space(self, workload: Conv2dWorkload, profile: BoardProfile, *, exhaustive: bool,
                      on_step: Any = None) -> dict[str, Any] | None:
        """Reports on the space (valid configs; with ``exhaustive`` the optimum) by name, where checking
        a config is cheap enough to check them all; ``None`` where only the size is known up front."""
        return None

    def board_findings(self, profile: BoardProfile, facts: dict[str, str], name: str) -> list[Finding]:
        """Family-specific findings of ``board check`` from the board's probed ``facts``."""
        return []

    def import_autotvm(self, path: Path, board: Board, out_dir: Path) -> Any:
        """Turn an AutoTVM/TopHub log into edgetune logs for ``board`` (one per workload) in ``out_dir``;
        only families whose template has AutoTVM's knobs can."""
        raise ConfigError(f"AutoTVM logs are imported for VTA boards (TVM's conv2d_packed.vta template has "
                          f"edgetune's knobs); {board.name} is a {board.profile.family} board, whose AutoTVM "
                          "templates have other knobs")

    def pretrained_transfer(self, profile: BoardProfile) -> TransferModel | None:
        """The transfer model edgetune ships for boards of ``profile`` (trained on the development set);
        ``None`` where it ships none."""
        return None

    def roofline(self, profile: BoardProfile, hw: dict[str, Any] | None = None) -> Roofline | None:
        """The board's roofs: its profile's ``[roofline]`` table (``None`` where the profile has none). ``hw``:
        the hardware config a log was tuned for, where the family has one."""
        table = profile.roofline
        if not table.get("peak_gflops") or not table.get("bandwidth_gbs"):
            return None
        return Roofline(float(table["peak_gflops"]), float(table["bandwidth_gbs"]),
                        str(table.get("source", f"boards/{profile.name}.toml")),
                        np.dtype(profile.limits.get("dtype", "float32")).itemsize)

    def preset(self, profile: BoardProfile) -> str | None:
        """The name of the hardware preset ``profile`` models (a VTA config; ``None``: the target says it all)."""
        return None

    # -- export -------------------------------------------------------------------------------------
    def hardware(self, profile: BoardProfile) -> dict[str, Any] | None:
        """The hardware config an export for ``profile`` records (``None``: the target says it all)."""
        return None

    def bitstream(self, profile: BoardProfile) -> str | None:
        """The FPGA bitstream an export for ``profile`` needs (``None``: no FPGA)."""
        return None

    def tuned_profile(self, profile: BoardProfile, hw: Any, log: Path) -> BoardProfile:
        """The profile a log was tuned with, given the hardware its header records."""
        return profile

    def check_export_target(self, profile: BoardProfile, tuned: BoardProfile, name: str, log: Path) -> None:
        """Refuse exporting a log tuned with ``tuned`` for ``profile`` when this family cannot."""

    def tuned_elsewhere(self, profile: BoardProfile, tuned_target: dict[str, Any]) -> str | None:
        """What differs between the hardware records tuned for ``tuned_target`` were measured on and ``profile``'s,
        where it can make other configs the fastest (``None``: nothing, the default)."""
        return None

    def record_template(self, template: Template, config: dict[str, Any]) -> Template | None:
        """A template that rebuilds a record whose config is not a point of ``template``'s space (another
        tool's schedule, such as a MetaSchedule trace); ``None`` when it is one."""
        return None

    @abc.abstractmethod
    def write_kernel(self, template: Template, config: Config, folder: Path, stem: str
                     ) -> tuple[dict[str, str], dict[str, Any]]:
        """Build ``config`` into ``folder`` (paths ``kernels/<stem>.*``); (files by role, signature)."""

    @abc.abstractmethod
    def export_summary(self, manifest: ExportManifest) -> str:
        """What an export runs on, in a few words (``VTA 1x16_i8w8a32_15_15_18_17``, ``cpu, x86_64``)."""

    @abc.abstractmethod
    def check_export_board(self, manifest: ExportManifest, board: Board) -> None:
        """Refuse a board of this family that cannot run the export (architecture, GPU, hardware)."""

    @abc.abstractmethod
    def input_specs(self, kernel: KernelEntry) -> list[tuple[str, dict[str, Any]]]:
        """(name, {shape, dtype, layout}) of each input a kernel takes, in order."""

    @abc.abstractmethod
    def run_kernel(self, folder: Path, kernel: KernelEntry, board: Board, inputs: Sequence[np.ndarray],
                   repeat: int, runner: Runner) -> tuple[dict[str, np.ndarray], float]:
        """Run an exported kernel on ``board`` through ``runner`` (:meth:`make_runner`'s, as tuning measures with;
        one serves every kernel of a run): (outputs by name, mean seconds)."""

    @abc.abstractmethod
    def compare(self, got: np.ndarray, expected: np.ndarray) -> tuple[bool, str]:
        """Whether an output matches the reference, and a one-line verdict."""

    # -- whole models ------------------------------------------------------------------------------
    model_other_schedule: ClassVar[str] = "tvm"
    """What a model conv edgetune has no kernel for gets: ``tvm`` (TVM's own lowering) or ``cpu`` (numpy)."""

    def check_model_target(self, profile: BoardProfile) -> None:
        """Refuse a board this family cannot compile whole models for (:class:`ExportError` saying what to do)."""
        raise ExportError(f"whole-model exports are built for TVM and VTA boards; {profile.name} is a "
                          f"{profile.family} board: export its tuned kernels with `edgetune export --log LOG`")

    def model_conv_refusal(self, layer: Any, profile: BoardProfile) -> str | None:
        """Why a conv of a model (a :class:`~toolkit.workloads.networks.ConvLayer`) gets no edgetune kernel on
        ``profile`` (``None``: it gets one; by default every conv does)."""
        return None

    def model_workload(self, layer: Any, profile: BoardProfile) -> Conv2dWorkload:
        """The workload a model conv's kernel computes (by default the conv's own)."""
        return layer.workload

    def model_default_config(self, template: Template) -> Config | None:
        """The config of a model conv without a record (``None``: the model must be tuned first)."""
        return template.fallback_config()

    def compile_model(self, program: Any, profile: BoardProfile, plans: Sequence[ConvPlan], folder: Path, *,
                      calibration: np.ndarray | None = None, progress: Any = None) -> ModelBuild:
        """Compile a ``torch.export`` program for ``profile`` into ``folder``, each conv as its plan says (graph
        order; a plan without a template: :attr:`model_other_schedule`), filling in each plan's ``kernel`` and
        ``epilogue``; ``calibration``: inputs to quantise on, for families that run int8 models."""
        raise ExportError(f"the {self.name} backend compiles no whole models")

    def check_model_build(self, folder: Path, program: Any, profile: BoardProfile, plans: Sequence[ConvPlan],
                          x: np.ndarray, reference: list[np.ndarray], *, board: Board | None = None,
                          on_step: Any = None) -> dict[str, Any]:
        """The model built into ``folder`` run on ``x`` and compared with PyTorch's ``reference`` outputs before it
        is exported: the check's record for the manifest (``checked``, and its ``verdict`` or ``why`` not);
        :class:`ExportError` when it differs. ``board``: the registered board the export is for, where the family
        can run the check when this machine cannot."""
        return {"checked": False, "why": f"the {self.name} backend checks its models when they run"}

    def run_model(self, folder: Path, manifest: ExportManifest, board: Board, inputs: Sequence[np.ndarray],
                  options: MeasureOptions, *, tracker: tuple[str, int] | str | None = None, on_wait: Any = None,
                  per_layer: bool = False) -> ModelTiming:
        """Run an exported model on ``board`` (one session for the whole run): the outputs of each input, the
        latency of one inference measured as tuning measures (``options``) and, with ``per_layer``, each
        edgetune kernel's time."""
        raise ExportError(f"the {self.name} backend runs no whole models")

    def check_model(self, timing: ModelTiming, reference: list[list[np.ndarray]] | None,
                    agreement: Agreement | None = None) -> tuple[bool | None, str]:
        """The verdict on a model run: its outputs against PyTorch's on the same inputs (``reference``; ``None``:
        not checked). ``agreement``: the least agreement with the float model a quantised model must show (only
        families that run a quantised model take it)."""
        from toolkit.tuning.core.check import compare_model_outputs

        return (None, "") if reference is None else compare_model_outputs(timing.outputs, reference)


@dataclass(frozen=True)
class Agreement:
    """The least agreement with the float model a run of a quantised model must show to pass (``None``: reported,
    never failing): cosine similarity of every output, and the share of inputs whose top-1 class agrees."""

    min_cosine: float | None = None
    min_top1: float | None = None

    @property
    def asked(self) -> bool:
        return self.min_cosine is not None or self.min_top1 is not None


@dataclass
class ModelTiming:
    """What :meth:`Backend.run_model` measured: outputs per input, the timed runs (seconds per inference) and
    each kernel's seconds by function name (``per_layer`` only)."""

    outputs: list[list[np.ndarray]]
    costs: list[float]
    kernels: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    """Family-specific facts of the run (a VTA model: bit-exactness, VTA and CPU time, every layer's time)."""
