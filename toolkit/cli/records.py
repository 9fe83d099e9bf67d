"""``edgetune import-autotvm``: AutoTVM and TopHub logs as edgetune logs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolkit import console
from toolkit.backends import backend_for
from toolkit.backends.vta.backend import with_vta_preset
from toolkit.boards import Inventory, resolve_board
from toolkit.cli.app import app
from toolkit.cli.options import InventoryOpt, JsonOpt, check_folder


@app.command("import-autotvm", rich_help_panel="Tune")
def import_autotvm(
    log: Annotated[Path, typer.Argument(help="An AutoTVM log or a TopHub file (one JSON record per line).")],
    board: Annotated[str, typer.Option("--board", "-b", help="The board the records are for (its VTA model "
                                                             "must be the records').")] = "vta-fsim",
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the edgetune logs, one per workload (an "
                                                          "existing log of a workload is continued).")]
    = Path("edgetune-logs/imported"),
    vta_config: Annotated[str | None, typer.Option(
        "--vta-config", help="VTA simulator: take the records of another hardware preset (pynq, zcu102, ...).")]
    = None,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
) -> None:
    """Import AutoTVM/TopHub records of TVM's VTA conv2d template into edgetune logs (TVM-compatible space):
    resume them with `tune --tvm-compat --resume`, export them, or give them to a tuner as history."""
    brd = with_vta_preset(resolve_board(board, Inventory(inventory) if inventory else None), vta_config)
    check_folder(out, "--out")
    summary = backend_for(brd.profile).import_autotvm(log, brd, out)
    if json:
        console.print_json({"logs": {k: str(v) for k, v in summary.logs.items()}, "records": summary.records,
                            "skipped": summary.skipped})
        return
    console.table(f"{log} -> {out} (board {brd.name})", ["workload", "records", "log"],
                  [(spec, summary.records.get(spec, 0), path) for spec, path in summary.logs.items()])
    for why, n in summary.skipped.items():
        console.info(f"left out: {n} x {why}")
    if not summary.logs:
        console.warn(f"no record of {log} is for {brd.name}'s VTA model; see `left out` above")
