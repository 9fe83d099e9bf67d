"""``edgetune vta``: compile a conv2d schedule to a VTA program, or compile and simulate it."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit import console
from toolkit.boards import resolve_board
from toolkit.cli.app import app
from toolkit.cli.options import JsonOpt
from toolkit.errors import ConfigError
from toolkit.workloads import parse_workload

vta_app = typer.Typer(help="edgetune's VTA conv2d compiler and simulator.", no_args_is_help=True)
app.add_typer(vta_app, name="vta", rich_help_panel="Tune")

WorkloadOpt = Annotated[str, typer.Option("--workload", "-w", help="A workload spec (conv2d:H=56,...) or a named "
                                                                   "layer such as resnet18.C2.")]
ConfigOpt = Annotated[str, typer.Option("--config", "-c", help="Schedule config as JSON ({\"tile_h\": [7, 8], ...}) "
                                                               "or @FILE holding it.")]
BoardOpt = Annotated[str, typer.Option("--board", help="A VTA board (its [vta] preset gives the hardware config).")]
BiasOpt = Annotated[bool, typer.Option("--bias", help="Add a per-channel int32 bias (LOAD ACC + ALU ADD).")]
CompatOpt = Annotated[bool, typer.Option("--tvm-compat", help="Reject schedules TVM v0.18's VTA lowering cannot "
                                                              "build (TVMCompatError).")]
ShiftOpt = Annotated[int, typer.Option("--shift", min=0, max=31,
                                       help="Requantisation right shift of the int32 accumulator (0..31).")]


def parse_config_arg(text: str) -> dict:
    """A schedule config from a JSON string or ``@file``; :class:`ConfigError` in one line otherwise."""
    source = "config"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {source}: {exc.strerror}") from None
    try:
        value = jsonlib.loads(text)
    except jsonlib.JSONDecodeError as exc:
        raise ConfigError(f"{source} is not valid JSON ({exc.msg} at column {exc.colno}); "
                          "give e.g. '{\"tile_h\": [7, 8], \"tile_w\": [1, 56], ...}'") from None
    if isinstance(value, dict) and "config" in value and isinstance(value["config"], dict):
        value = value["config"]  # a record or truth line
    if not isinstance(value, dict):
        raise ConfigError(f"{source} must be a JSON object of knob values")
    return value


def vta_hw(board_name: str):
    """The VTAConfig of a VTA board (:class:`BoardError` for other boards)."""
    from toolkit.vta.config import get_preset

    from toolkit.backends.vta.backend import require_vta

    board = resolve_board(board_name)
    require_vta(board)
    return get_preset(board.profile.vta["preset"])


@vta_app.command("compile")
def compile_cmd(workload: WorkloadOpt, config: ConfigOpt, board: BoardOpt = "vta-fsim",
                out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the program binary.")] = None,
                dump: Annotated[bool, typer.Option("--dump", help="Print the instruction listing.")] = False,
                bias: BiasOpt = False, shift: ShiftOpt = 8, tvm_compat: CompatOpt = False,
                json: JsonOpt = False) -> None:
    """Compile one schedule config to a VTA program (instructions + micro-ops)."""
    from toolkit.vta.compiler import compile_conv2d

    wl, cfg, hw = parse_workload(workload), parse_config_arg(config), vta_hw(board)
    compiled = compile_conv2d(wl, cfg, hw, bias=bias, shift=shift, tvm_compat=tvm_compat)
    program = compiled.program
    if out is not None:
        program.save(out)
    if dump:
        console.out.print(program.listing(), markup=False, highlight=False)
    counts = program.counts()
    if json:
        console.print_json({"workload": wl.label, "config": compiled.config, "hw": hw.bitstream,
                            "instructions": counts, "uops": len(program.uops), "features": compiled.features,
                            "out": str(out) if out else None})
        return
    if not dump:
        console.table(f"{wl.label} on {hw.model}", ["instruction", "count"], sorted(counts.items()))
    console.info(f"{counts['total']} instructions, {len(program.uops)} micro-ops"
                 + (f"; wrote {out}" if out else ""))


@vta_app.command("run")
def run_cmd(workload: WorkloadOpt, config: ConfigOpt, board: BoardOpt = "vta-fsim",
            check: Annotated[bool, typer.Option("--check", help="Simulate the data too and compare the output with "
                                                                "the NumPy reference.")] = False,
            bias: BiasOpt = False, shift: ShiftOpt = 8, tvm_compat: CompatOpt = False,
            seed: Annotated[int, typer.Option("--seed", help="Seed of the random inputs.")] = 0,
            json: JsonOpt = False) -> None:
    """Compile and simulate one config: counters, modelled cycles and seconds (with --check: correctness)."""
    import numpy as np

    from toolkit.vta.reference import run_conv2d

    wl, cfg, hw = parse_workload(workload), parse_config_arg(config), vta_hw(board)
    r = run_conv2d(wl, cfg, hw, bias=bias, shift=shift, tvm_compat=tvm_compat, check=check,
                   timing_only=not check, rng=np.random.default_rng(seed))
    d = {"workload": wl.label, "config": r["compiled"].config, "hw": hw.bitstream, "cycles": r["cycles"],
         "seconds": r["seconds"], "counters": r["counters"], "correct": r["correct"]}
    if json:
        console.print_json(d)
        return
    console.table(f"{wl.label} on {hw.model}", ["counter", "value"], [(k, f"{v:,}") for k, v in r["counters"].items()])
    verdict = "" if r["correct"] is None else ("; output correct" if r["correct"] else "; OUTPUT WRONG")
    console.info(f"{r['cycles']:,} cycles, {r['seconds'] * 1e3:.3f} ms{verdict}")
    if r["correct"] is False:
        raise typer.Exit(1)
