"""``edgetune space``: the schedule space of a workload on a board (size, valid configs, optimum)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from toolkit import console
from toolkit.boards import resolve_board
from toolkit.cli.app import app
from toolkit.cli.options import JsonOpt
from toolkit.backends import make_task
from toolkit.errors import ConfigError
from toolkit.workloads import parse_workload


@app.command("space", rich_help_panel="Tune")
def space_cmd(
    workload: Annotated[str, typer.Option("--workload", "-w", help="A workload spec or a named layer (resnet18.C2).")],
    board: Annotated[str, typer.Option("--board", help="The board whose space to show.")] = "vta-fsim",
    exhaustive: Annotated[bool, typer.Option("--exhaustive", help="Compile and simulate every valid config and "
                                                                  "report the optimum of edgetune's and of the "
                                                                  "TVM-compatible space.")] = False,
    tvm_compat: Annotated[bool, typer.Option("--tvm-compat", help="Count only configs TVM v0.18 can build.")] = False,
    json: JsonOpt = False,
) -> None:
    """Size and valid configs of a workload's schedule space (with --exhaustive: the optimum)."""
    wl = parse_workload(workload)
    b = resolve_board(board)
    task = make_task(wl, b, **({"tvm_compat": True} if tvm_compat else {}))
    space = task.space
    with console.progress(transient=True) as bar:
        tid = bar.add_task("compile + simulate" if exhaustive else "check", total=space.size, status=wl.label)
        reports = task.backend.explore_space(wl, b.profile, exhaustive=exhaustive, on_step=lambda i: bar.advance(tid))
    if reports is None:
        if exhaustive:
            raise ConfigError(f"--exhaustive builds and measures every config; on {board} ({b.profile.family}) "
                              f"that is {space.size:,} builds: tune it instead (edgetune tune -b {board})")
        if not json:
            console.info(f"{space.size:,} configs, not checked one by one here (too many, or each needs a real "
                         "build); the table shows the space")
        if json:
            console.print_json({"workload": wl.label, "board": board, "size": space.size, "valid": None,
                                "tvm_compat": tvm_compat, "errors": {}})
            return
        console.table(f"{wl.label} on {board}", ["space", "size", "knobs"],
                      [(task.template.name, space.size, ", ".join(k.name for k in space.knobs))])
        return
    chosen = reports["tvm" if tvm_compat else "edgetune"]
    if json:
        d: dict[str, Any] = {"workload": wl.label, "board": board, "size": chosen.size, "valid": chosen.valid,
                             "tvm_compat": tvm_compat, "errors": chosen.errors}
        if exhaustive:
            d["optimum"] = chosen.to_dict()["optimum"]
            d["spaces"] = {k: r.to_dict() for k, r in reports.items()}
        console.print_json(d)
        return
    rows = []
    for name, r in reports.items():
        if not exhaustive and name != ("tvm" if tvm_compat else "edgetune"):
            continue
        best = "" if r.best_seconds is None else \
            f"{r.best_seconds * 1e3:.3f} ms ({r.best_cycles:,} cycles) #{r.best_index}"
        rows.append((name, r.size, r.valid, best))
    console.table(f"{wl.label} on {board}", ["space", "size", "valid", "optimum"], rows)
    for name, r in reports.items():
        if exhaustive and r.best_config is not None:
            console.info(f"{name} optimum: {r.best_config}")
