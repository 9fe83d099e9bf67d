"""``edgetune tracker``: the TVM RPC tracker boards register with."""

from __future__ import annotations

from typing import Annotated

import typer

from toolkit import console
from toolkit.cli.app import app
from toolkit.cli.options import JsonOpt
from toolkit.procs import LOOPBACK
from toolkit.rpc import service

tracker_app = typer.Typer(help="Start, stop and inspect the RPC tracker.", no_args_is_help=True)
app.add_typer(tracker_app, name="tracker", rich_help_panel="Boards")


@tracker_app.command("start")
def start(
    port: Annotated[int, typer.Option(
        min=0, max=65535, help="Port (the next free one up to PORT+10 is taken; 0: any free port).")
    ] = service.DEFAULT_PORT,
    expose: Annotated[bool, typer.Option(
        "--expose", help="Bind 0.0.0.0 instead of loopback (anyone on the network can then use your boards).")] = False,
    json: JsonOpt = False,
) -> None:
    """Start the tracker in the background (loopback only unless --expose)."""
    if expose:
        console.warn("the tracker binds 0.0.0.0: anyone who can reach this machine can request your boards "
                     "and run code on them; prefer the default (boards connect through SSH tunnels)")
    state = service.start_service("0.0.0.0" if expose else LOOPBACK, port)
    if json:
        console.print_json(state)
    elif state.get("already_running"):
        console.info(f"tracker already running on {state['host']}:{state['port']} (pid {state['pid']})")
    else:
        console.info(f"tracker started on {state['host']}:{state['port']} (pid {state['pid']})")


@tracker_app.command("stop")
def stop() -> None:
    """Stop the tracker (its whole process group)."""
    console.info("tracker stopped" if service.stop_service() else "no tracker was running")


@tracker_app.command("status")
def status(json: JsonOpt = False) -> None:
    """Show the tracker and the boards registered with it (per key: free, pending)."""
    st = service.status()
    if json:
        console.print_json(st)
        return
    if not st["running"]:
        console.info("no tracker running (start one with `edgetune tracker start`)")
        raise typer.Exit(1)
    console.info(f"tracker on {st['host']}:{st['port']} (pid {st['pid']})")
    summary = st["summary"]
    console.table("queues", ["key", "free", "pending"],
                  [(k, v.get("free"), v.get("pending")) for k, v in sorted(summary.get("queue_info", {}).items())])
    console.table("servers", ["key", "address"],
                  [(s.get("key"), f"{s['addr'][0]}:{s['addr'][1]}") for s in summary.get("server_info", [])])
