"""``edgetune workloads``: named layers and spec parsing."""

from __future__ import annotations

from typing import Annotated

import typer

from toolkit import console
from toolkit.cli.app import app
from toolkit.cli.options import JsonOpt
from toolkit.workloads import list_named, parse_workload

workloads_app = typer.Typer(help="Conv2d workloads: named layers and specs.", no_args_is_help=True)
app.add_typer(workloads_app, name="workloads", rich_help_panel="Tune")


def _row(w) -> dict:
    return {"name": w.name, "spec": w.spec(), "out": f"{w.oh}x{w.ow}", "macs": w.macs}


@workloads_app.command("list")
def list_(json: JsonOpt = False) -> None:
    """List the named layers (resnet18.C1 to C11)."""
    rows = [_row(w) for w in list_named()]
    if json:
        console.print_json(rows)
        return
    console.table("workloads", ["name", "spec", "output", "MACs"],
                  [(r["name"], r["spec"], r["out"], f"{r['macs']:,}") for r in rows])


@workloads_app.command("show")
def show(spec: Annotated[str, typer.Argument(help="A spec (conv2d:H=56,...) or a named layer.")],
         json: JsonOpt = False) -> None:
    """Parse a workload spec and print its shape."""
    w = parse_workload(spec)
    d = _row(w) | w.to_dict()
    if json:
        console.print_json(d)
        return
    console.info(f"{w.label}: {w.spec()} -> output {w.oh}x{w.ow}, {w.macs:,} MACs")
