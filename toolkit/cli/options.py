"""Options shared by several commands, declared once."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from toolkit import console
from toolkit.errors import ConfigError

if TYPE_CHECKING:
    from toolkit.boards import Board

InventoryOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--inventory",
        envvar="EDGETUNE_INVENTORY",
        show_envvar=True,
        help="Board inventory file (default: ~/.config/edgetune/inventory.toml).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
ClusterOpt = Annotated[Optional[str], typer.Option(
    "--cluster", envvar="EDGETUNE_CLUSTER", show_envvar=True, metavar="HOST:PORT",
    help="Build (and sweep exhaustive logs) on the Ray cluster whose head is at HOST:PORT (`edgetune cluster "
         "start`; this machine must be one of its nodes). Default: worker processes on this machine.")]


def check_folder(path: Path, flag: str) -> None:
    """Refuse a folder option that names a file, or lies under one (:class:`ConfigError` naming ``flag``)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"{flag} {path}: {probe} is a file, not a folder; choose another {flag}")

BoardOpt = Annotated[str, typer.Option("--board", "-b", help="Board: a registered name, or vta-fsim / local.")]
VtaConfigOpt = Annotated[Optional[str], typer.Option(
    "--vta-config", help="VTA simulator: model another hardware preset (pynq, ultra96, zcu102); logs record it and "
                         "exports follow it.")]
TvmCompatOpt = Annotated[bool, typer.Option(
    "--tvm-compat", help="VTA: TVM-compatible space: configs TVM v0.18's lowering cannot build count as invalid.")]
TrackerOpt = Annotated[Optional[str], typer.Option(
    "--tracker", help="RPC tracker HOST:PORT for boards reached over RPC (default: where the board was provisioned).")]
InputShapeOpt = Annotated[str, typer.Option("--input-shape", help="Input N,C,H,W of a PyTorch model.")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="A whole model: a built-in network (resnet18; see `edgetune workloads networks`; seeded "
                          "random weights) or a PyTorch model (.pt2, TorchScript, module:factory or file.py:factory).")]

_MEASURE = "Measurement"
NumberOpt = Annotated[int, typer.Option(min=1, help="Runs per measurement (TVM's time_evaluator number).",
                                        rich_help_panel=_MEASURE)]
RepeatOpt = Annotated[int, typer.Option(min=1, help="Measurements (their mean is a config's cost; a model's "
                                                    "latency is their median).", rich_help_panel=_MEASURE)]
MinRepeatMsOpt = Annotated[float, typer.Option(
    "--min-repeat-ms", min=0, help="Raise number so that one measurement lasts at least this long.",
    rich_help_panel=_MEASURE)]
TimeoutOpt = Annotated[float, typer.Option(min=0.1, help="Seconds one run may take on the board.",
                                           rich_help_panel=_MEASURE)]
WaitBoardOpt = Annotated[float, typer.Option(
    "--wait-board", min=1, metavar="SECONDS",
    help="Boards over RPC: how long a lost board may take to come back before the run stops (every finished trial "
         "stays in the log).", rich_help_panel=_MEASURE)]

CheckOpt = Annotated[bool, typer.Option(
    "--check/--no-check", help="Check each config's output against the reference (slower).", rich_help_panel=_MEASURE)]

TunerOpt = Annotated[str, typer.Option("--tuner", "-t", help="Tuner name; see `edgetune tuners`.")]
TunerOptionOpt = Annotated[Optional[list[str]], typer.Option(
    "--option", "-o", help="Tuner option KEY=VALUE; repeat for several (see `edgetune tuners`).")]
SeedOpt = Annotated[int, typer.Option(min=0, help="Random seed of the tuner.")]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue an existing log; measured configs are skipped.")]
TransferOpt = Annotated[Optional[str], typer.Option(
    "--transfer", metavar="LOGS_OR_MODEL", help="Start from what other tuning learned: a tuning log, a folder "
    "of logs, a transfer model file, 'pretrained' (the model edgetune ships for the board) or 'none'. Default: "
    "the tuner's own (see `edgetune tuners NAME`).")]

_NETWORK = "Whole network"
SchedulerOpt = Annotated[str, typer.Option(
    help="Whole network: task scheduler, gradient (Ansor) or round-robin.", rich_help_panel=_NETWORK)]
RoundTrialsOpt = Annotated[int, typer.Option(
    "--round-trials", min=1, help="Whole network: trials per scheduler round.", rich_help_panel=_NETWORK)]
BoardsOpt = Annotated[int, typer.Option(
    "--boards", min=1, help="Whole network: tune on this many boards of the type at once (boards behind the "
                            "tracker under the board's RPC key), one task per board at a time; one log.",
    rich_help_panel=_NETWORK)]
FirstConvOpt = Annotated[str, typer.Option(
    "--first-conv", help="Whole network on VTA: 's2d' rewrites a first conv of few input channels by "
                         "space-to-depth (as a model export runs it), 'cpu' leaves it on the CPU (as TVM), 'pad' pads "
                         "it to 16 channels.", rich_help_panel=_NETWORK)]


def parse_options(items: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; :class:`ConfigError` for an item without ``=``."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option {item!r} is not KEY=VALUE (e.g. --option plan_size=32)")
        out[key.strip()] = value.strip()
    return out


def board_from(board: str, inventory: Path | None, vta_config: str | None = None) -> Board:
    """The board a command names (``--board``, ``--inventory``, ``--vta-config``)."""
    from toolkit.backends import board_for
    from toolkit.boards import Inventory

    return board_for(board, Inventory(inventory) if inventory else None, vta_config)


def reaching(board: Board) -> contextlib.AbstractContextManager[None]:
    """While a command reaches ``board``'s RPC tracker (a built-in board starts its own), say so on a terminal;
    the simulator is reached in this process: nothing to say."""
    if board.profile.is_simulator:
        return contextlib.nullcontext()
    return console.waiting(f"reaching board {board.name} through its RPC tracker (a built-in board starts its own)")


def template_options(board: Board, tvm_compat: bool) -> dict[str, Any]:
    """The template options ``--tvm-compat`` stands for on ``board`` (refused where the family has no such space)."""
    from toolkit.backends import backend_for

    if tvm_compat and "tvm_compat" not in backend_for(board.profile).template_options:
        raise ConfigError(f"--tvm-compat applies to VTA boards; {board.name} is a {board.profile.family} board")
    return {"tvm_compat": True} if tvm_compat else {}
