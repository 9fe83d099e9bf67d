"""``edgetune cluster``: Ray nodes on this machine (the optional ``edgetune[cluster]`` extra)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from toolkit import console
from toolkit.cli.app import app
from toolkit.cli.options import ClusterOpt, JsonOpt
from toolkit.cluster import nodes

cluster_app = typer.Typer(help="Start, join, inspect and stop a Ray cluster that builds and sweeps for edgetune.",
                          no_args_is_help=True)
app.add_typer(cluster_app, name="cluster", rich_help_panel="Boards")

HostOpt = Annotated[Optional[str], typer.Option(
    "--host", help="The address this node advertises to the others (default: Ray's choice, its network address).")]
ExposeOpt = Annotated[bool, typer.Option(
    "--expose", help="Start on a machine with a network address: Ray listens on every interface with no "
                     "authentication, so anyone who reaches it can run code here (use a private, firewalled network).")]
CpusOpt = Annotated[Optional[int], typer.Option("--num-cpus", min=1, help="CPUs this node offers (default: all).")]


def _started(state: dict, json: bool) -> None:
    if state.get("exposed"):
        console.warn(nodes.EXPOSED_WARNING)
    if json:
        console.print_json(state)
    elif state.get("already_running"):
        console.info(f"Ray head already running at {state['address']} (pid {state['pid']})")
    else:
        console.info(f"Ray {state['role']} started (pid {state['pid']}); cluster {state['address']}: pass "
                     f"--cluster {state['address']} or set EDGETUNE_CLUSTER")


@cluster_app.command("start")
def start(
    host: HostOpt = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="The head's port (Ray's GCS).")] = nodes.DEFAULT_PORT,
    num_cpus: CpusOpt = None,
    expose: ExposeOpt = False,
    json: JsonOpt = False,
) -> None:
    """Start a Ray head on this machine, in the background (stop it with `edgetune cluster stop`).

    Example: ``edgetune cluster start --expose --num-cpus 2`` prints the cluster's address, then ``edgetune tune -w
    resnet18.C2 -b local --cluster ADDRESS``.
    """
    _started(nodes.start_node(host=host, port=port, num_cpus=num_cpus, expose=expose, on_wait=console.waiting), json)


@cluster_app.command("join")
def join(
    address: Annotated[str, typer.Argument(help="The head's HOST:PORT.", metavar="HOST:PORT")],
    host: HostOpt = None,
    num_cpus: CpusOpt = None,
    expose: ExposeOpt = False,
    json: JsonOpt = False,
) -> None:
    """Start a Ray node on this machine that joins the head at HOST:PORT (in the background)."""
    _started(nodes.start_node(address, host=host, num_cpus=num_cpus, expose=expose, on_wait=console.waiting), json)


@cluster_app.command("status")
def status(cluster: ClusterOpt = None, json: JsonOpt = False) -> None:
    """The nodes this machine started and, through the head, every node of the cluster."""
    local = nodes.local_nodes()
    address = nodes.cluster_address(cluster) or next((n["address"] for n in local), None)
    members = nodes.cluster_nodes(address) if address else []
    if json:
        console.print_json({"address": address, "local": local, "nodes": members})
        return
    if not local and not address:
        console.info("no Ray node runs here (start one with `edgetune cluster start`)")
        raise typer.Exit(1)
    console.table("nodes started here", ["role", "pid", "cluster"],
                  [(n["role"], n["pid"], n["address"]) for n in local])
    if address:
        console.table(f"cluster {address}", ["node", "address", "alive", "CPUs"],
                      [(m["node_id"], m["address"], "yes" if m["alive"] else "no", f"{m['cpus']:g}")
                       for m in members])


@cluster_app.command("stop")
def stop() -> None:
    """Stop every Ray node this machine started (each one's whole process group)."""
    stopped = nodes.stop_nodes()
    console.info(f"stopped {len(stopped)} Ray node(s)" if stopped else "no Ray node was running here")
