"""Options shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

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


def board_from(board: str, inventory: Path | None, vta_config: str | None = None) -> Board:
    """The board a command names (``--board``, ``--inventory``, ``--vta-config``)."""
    from toolkit.backends import board_for
    from toolkit.boards import Inventory

    return board_for(board, Inventory(inventory) if inventory else None, vta_config)
