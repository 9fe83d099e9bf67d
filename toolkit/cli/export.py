"""``edgetune export`` (tuning log -> deployable folder) and ``edgetune run`` (run an export on a board)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolkit import console
from toolkit.backends.vta.backend import with_vta_preset
from toolkit.boards import Inventory, resolve_board
from toolkit.cli.app import app
from toolkit.cli.options import InventoryOpt, JsonOpt
from toolkit.export import export as do_export
from toolkit.export import load_export


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4f} ms"


@app.command("export", rich_help_panel="Deploy")
def export(
    log: Annotated[Path, typer.Option("--log", "-l", help="Tuning log (JSONL) to export the best configs of.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Export folder to create (must be new or empty).")],
    board: Annotated[str | None, typer.Option(
        "--board", "-b", help="Board name or board type to build for (default: the log's board type).")] = None,
    workload: Annotated[list[str] | None, typer.Option(
        "--workload", "-w", help="Export only this workload (name or spec); repeat for several.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an earlier export in --out.")] = False,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
) -> None:
    """Rebuild the best valid record per workload of a log into a deployable folder (libraries or VTA programs)."""
    inv = Inventory(inventory) if inventory else None
    bar = console.progress(transient=True)
    tasks: list = []

    def building(label: str) -> None:   # the bar starts with the first build, after the log was checked
        if not tasks:
            bar.start()
            tasks.append(bar.add_task("export", total=None, status=""))
        bar.update(tasks[0], status=f"building {label}")

    try:
        manifest = do_export(log, out, board=board, workloads=workload, inventory=inv, force=force,
                             progress=building)
    finally:
        if tasks:
            bar.stop()
    if json:
        console.print_json({"out": str(out), **manifest.to_json()})
        return
    console.table(f"exported to {out} for {manifest.board} ({manifest.board_type}, {manifest.arch}"
                  + (f", VTA {manifest.bitstream})" if manifest.bitstream else ")"),
                  ["workload", "config", "tuned latency", "files"],
                  [(k.label, f"#{k.index}", _ms(k.latency_s), k.files.get("library") or k.files["program"])
                   for k in manifest.kernels])
    console.info(f"manifest: {out / 'manifest.json'} (log sha256 {manifest.log['sha256'][:16]}...)")


@app.command("run", rich_help_panel="Deploy")
def run(
    folder: Annotated[Path, typer.Argument(help="Export folder (written by `edgetune export`).")],
    board: Annotated[str, typer.Option("--board", "-b", help="Board to run on (registered, or local / vta-fsim).")],
    check: Annotated[bool, typer.Option(
        "--check/--no-check", help="Compare the output with the numpy reference (exit 1 when it differs).")] = True,
    workload: Annotated[str | None, typer.Option(
        "--workload", "-w", help="Run only this workload (default: every kernel of the export).")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Timed runs to average.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    tracker: Annotated[str | None, typer.Option(
        help="RPC tracker HOST:PORT (default: where the board was provisioned).")] = None,
    vta_config: Annotated[str | None, typer.Option(
        "--vta-config", help="VTA simulator: model another hardware preset (as the export was tuned with).")] = None,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
) -> None:
    """Run an exported kernel on a board (over RPC) or the VTA simulator, check it, compare the latency."""
    ex = load_export(folder)
    brd = with_vta_preset(resolve_board(board, Inventory(inventory) if inventory else None), vta_config)
    ex.check_board(brd)
    labels = [ex.kernel(workload).label] if workload else [k.label for k in ex.kernels]
    results = []
    with console.progress(transient=True) as bar:
        task = bar.add_task(f"run on {board}", total=len(labels), status="")
        for label in labels:
            bar.update(task, status=label)
            results.append(ex.run(brd, check=check, workload=label, seed=seed, repeat=repeat, tracker=tracker,
                                  on_wait=console.warn))
            bar.advance(task)
    if json:
        console.print_json({"export": str(folder), "tuned_on": ex.manifest.tuned_on["board"],
                            "results": [r.to_json() for r in results]})
    else:
        console.table(f"{folder} on {board} (tuned latency: measured on {ex.manifest.tuned_on['board']})",
                      ["workload", "latency", "tuned latency", "ratio", "output"],
                      [(r.workload, _ms(r.seconds), _ms(r.expected_seconds),
                        f"{r.seconds / r.expected_seconds:.2f}x" if r.expected_seconds else "-",
                        "not checked" if r.correct is None else ("correct" if r.correct else "WRONG") +
                        f" ({r.message})") for r in results])
    wrong = [r for r in results if r.correct is False]
    if wrong:
        console.error(f"{len(wrong)} kernel(s) gave a wrong output: {wrong[0].workload}: {wrong[0].message}")
        raise typer.Exit(1)
