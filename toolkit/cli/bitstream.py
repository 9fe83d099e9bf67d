"""``edgetune bitstream``: the local cache of VTA bitstreams."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit import bitstreams, console
from toolkit.cli.app import app
from toolkit.cli.options import JsonOpt

bitstream_app = typer.Typer(help="List, add and verify VTA bitstreams.", no_args_is_help=True)
app.add_typer(bitstream_app, name="bitstream", rich_help_panel="Boards")


@bitstream_app.command("list")
def list_(json: JsonOpt = False) -> None:
    """Known bitstreams (catalog) and which are cached."""
    cached = {(c.target, c.hw_ver, c.name): c for c in bitstreams.list_cached()}
    rows = []
    for b in bitstreams.catalog():
        c = cached.pop((b.target, b.hw_ver, b.name), None)
        rows.append({"target": b.target, "hw_ver": b.hw_ver, "name": b.name, "clock_mhz": b.clock_mhz,
                     "cached": str(c.path) if c else "", "status": c.status if c else "", "url": b.url})
    rows += [{"target": c.target, "hw_ver": c.hw_ver, "name": c.name, "clock_mhz": "", "cached": str(c.path),
              "status": c.status, "url": ""} for c in cached.values()]
    if json:
        console.print_json({"cache": str(bitstreams.cache_dir()), "bitstreams": rows})
        return
    console.info(f"cache: {bitstreams.cache_dir()}")
    console.table("bitstreams", ["target", "hw_ver", "name", "MHz", "cached", "status"],
                  [(r["target"], r["hw_ver"], r["name"], r["clock_mhz"], r["cached"] or "-", r["status"])
                   for r in rows])


@bitstream_app.command("add")
def add(
    path: Annotated[Path, typer.Argument(help="A .bit (or .rbf) file; a .hwh next to it is copied too.")],
    target: Annotated[str, typer.Option(help="FPGA target: pynq, ultra96, zcu102, de10nano.")],
    hw_ver: Annotated[str, typer.Option("--hw-ver", help="VTA hardware version, e.g. 0.0.2.")] = "0.0.2",
    name: Annotated[Optional[str], typer.Option(help="Bitstream name (default: the file name).")] = None,
) -> None:
    """Copy a bitstream into the cache (checked against the catalog's sha256 when known)."""
    dest, digest = bitstreams.add(path, target, hw_ver, name)
    console.info(f"cached {dest} (sha256 {digest})")


@bitstream_app.command("verify")
def verify(json: JsonOpt = False) -> None:
    """Check every cached bitstream against the catalog; exit 1 on a digest mismatch."""
    cached = bitstreams.list_cached()
    if json:
        console.print_json([{"path": str(c.path), "sha256": c.sha256, "status": c.status, "hwh": c.hwh}
                            for c in cached])
    else:
        console.table("cached bitstreams", ["path", "sha256", "status", "hwh"],
                      [(c.path, c.sha256[:16], c.status, "yes" if c.hwh else "no") for c in cached])
    if any(c.status == "MISMATCH" for c in cached):
        raise typer.Exit(1)
