"""``edgetune board``: the board inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit import console
from toolkit.boards import BUILTIN_BOARDS, BoardEntry, Inventory, load_profile, profile_names
from toolkit.cli.app import app
from toolkit.cli.options import InventoryOpt, JsonOpt

board_app = typer.Typer(help="Register and inspect boards.", no_args_is_help=True)
app.add_typer(board_app, name="board", rich_help_panel="Boards")


def _entry_dict(entry: BoardEntry) -> dict:
    return {"name": entry.name, **entry.to_toml(), "rpc_key": entry.effective_rpc_key,
            "family": entry.profile.family, "arch": entry.profile.arch}


@board_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="A name for the board, e.g. pynq1.")],
    type: Annotated[str, typer.Option("--type", "-t", help=f"Board type: {', '.join(profile_names())}.")],
    host: Annotated[Optional[str], typer.Option(help="Host name or IP address (or an ~/.ssh/config alias).")] = None,
    port: Annotated[int, typer.Option(help="SSH port.")] = 22,
    user: Annotated[Optional[str], typer.Option(help="SSH user (default: the profile's).")] = None,
    key: Annotated[Optional[Path], typer.Option(help="SSH private key file (never a password).")] = None,
    rpc_key: Annotated[Optional[str], typer.Option("--rpc-key", help="TVM RPC key (default: the profile's).")] = None,
    tag: Annotated[Optional[list[str]], typer.Option("--tag", help="A tag; repeat for several.")] = None,
    replace: Annotated[bool, typer.Option(help="Replace a board of the same name.")] = False,
    inventory: InventoryOpt = None,
) -> None:
    """Register a board in the inventory."""
    profile = load_profile(type)
    entry = BoardEntry(
        name=name, type=type, host=host, port=port, user=user or profile.ssh.get("user"),
        key=str(key.expanduser()) if key else None, rpc_key=rpc_key, tags=list(tag or []),
    )
    inv = Inventory(inventory)
    inv.add(entry, replace=replace)
    console.info(f"added board {name} ({type}, rpc key {entry.effective_rpc_key}) to {inv.path}")


@board_app.command("list")
def list_(inventory: InventoryOpt = None, json: JsonOpt = False) -> None:
    """List registered boards (and the built-in ones)."""
    boards = Inventory(inventory).load()
    if json:
        console.print_json({"boards": [_entry_dict(b) for b in boards], "builtin": list(BUILTIN_BOARDS)})
        return
    rows = [(b.name, b.type, b.host or "-", b.port, b.user or "-", b.effective_rpc_key, ",".join(b.tags))
            for b in boards]
    rows += [(n, n, "(built-in)", "", "", load_profile(n).rpc_key, "") for n in BUILTIN_BOARDS]
    console.table("boards", ["name", "type", "host", "port", "user", "rpc key", "tags"], rows)


@board_app.command("show")
def show(name: Annotated[str, typer.Argument(help="Board name.")], inventory: InventoryOpt = None,
         json: JsonOpt = False) -> None:
    """Show one board with its profile."""
    if name in BUILTIN_BOARDS:
        p = load_profile(name)
        d = {"name": name, "type": name, "builtin": True, "rpc_key": p.rpc_key}
    else:
        entry = Inventory(inventory).get(name)
        p = entry.profile
        d = _entry_dict(entry)
    d["profile"] = {"description": p.description, "arch": p.arch, "family": p.family, "target": p.target,
                    "vta": p.vta, "runtime": p.runtime, "cross_compiler": p.cross_compiler}
    if json:
        console.print_json(d)
        return
    for k, v in d.items():
        if k != "profile":
            console.info(f"{k:10} {v}")
    for k, v in d["profile"].items():
        console.info(f"{k:10} {v}")


@board_app.command("remove")
def remove(name: Annotated[str, typer.Argument(help="Board name.")], inventory: InventoryOpt = None) -> None:
    """Remove a board from the inventory."""
    inv = Inventory(inventory)
    inv.remove(name)
    console.info(f"removed board {name} from {inv.path}")


@board_app.command("types")
def types(json: JsonOpt = False) -> None:
    """List the supported board types (profiles in boards/)."""
    profiles = [load_profile(n) for n in profile_names()]
    if json:
        console.print_json([{"type": p.name, "family": p.family, "arch": p.arch, "rpc_key": p.rpc_key,
                             "description": p.description} for p in profiles])
        return
    console.table("board types", ["type", "family", "arch", "rpc key", "description"],
                  [(p.name, p.family, p.arch, p.rpc_key, p.description) for p in profiles])
