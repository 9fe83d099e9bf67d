"""``edgetune workloads``: named layers, spec parsing, built-in networks and PyTorch extraction."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from toolkit import console
from toolkit.cli.app import app
from toolkit.cli.options import JsonOpt
from toolkit.workloads.extract import Extraction, Requant, extract, parse_input_shape, parse_scales, requant_shifts
from toolkit.backends import backend_for
from toolkit.workloads.networks import NETWORKS, Network, get_network
from toolkit.workloads import list_named, parse_workload

VtaOpt = Annotated[bool, typer.Option("--vta", help="Also show the VTA tasks: channels padded to the block "
                                                    "size (16) as TVM's graph_pack does; grouped/dilated convs "
                                                    "left on the CPU.")]
FirstConvOpt = Annotated[str, typer.Option("--first-conv", help="With --vta: 'cpu' leaves the first conv on the "
                                                                "CPU (TVM's VTA flow), 'pad' pads its channels.")]

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


@workloads_app.command("networks")
def networks(name: Annotated[Optional[str], typer.Argument(help="A built-in network; omit to list them all.")] = None,
             vta: VtaOpt = False, first_conv: FirstConvOpt = "s2d", json: JsonOpt = False) -> None:
    """List the built-in networks, or show one network's conv layers (with --vta: its VTA tasks)."""
    if name is None:
        nets = [get_network(n) for n in NETWORKS]
        if json:
            console.print_json([{"name": n.name, "input_shape": list(n.input_shape), "convs": n.n_convs,
                                 "shapes": len(n.layers), "macs": n.macs, "source": n.source} for n in nets])
            return
        console.table("networks", ["name", "input", "convs", "shapes", "conv GMACs"],
                      [(n.name, "x".join(map(str, n.input_shape)), n.n_convs, len(n.layers), f"{n.macs / 1e9:.3f}")
                       for n in nets])
        return
    _print_network(get_network(name), None, vta, first_conv, json)


@workloads_app.command("extract")
def extract_cmd(
    model: Annotated[str, typer.Argument(help="A .pt2 (torch.export.save), a TorchScript file (torch.jit.save), "
                                              "or module:factory (pkg.mod:make_net or path/to/file.py:make_net).")],
    input_shape: Annotated[str, typer.Option("--input-shape", help="Input N,C,H,W.")] = "1,3,224,224",
    name: Annotated[Optional[str], typer.Option("--name", help="Layer name prefix (default: file stem or "
                                                               "factory name).")] = None,
    vta: VtaOpt = False,
    first_conv: FirstConvOpt = "s2d",
    scales: Annotated[Optional[str], typer.Option(
        "--scales", help="Requantisation scales: S_IN,S_W,S_OUT for every conv, or a JSON file mapping module "
                         "names (or \"*\") to [s_in, s_w, s_out]; gives each conv's right shift "
                         "round(-log2(s_in*s_w/s_out)).")] = None,
    json: JsonOpt = False,
) -> None:
    """Extract every Conv2d of a PyTorch model as a workload with its multiplicity."""
    shape = parse_input_shape(input_shape)
    scale_map = parse_scales(scales) if scales is not None else None
    with console.waiting(f"tracing model {model} for input {input_shape} (torch.export)"):
        ex = extract(model, shape, name=name)
    shifts = requant_shifts(ex.network, scale_map) if scale_map is not None else None
    _print_network(ex.network, ex, vta, first_conv, json, shifts)


def _print_network(net: Network, ex: Extraction | None, vta: bool, first_conv: str, json: bool,
                   shifts: dict[str, Requant] | None = None) -> None:
    plan = backend_for("vta").plan_network(net, first_conv=first_conv) if vta else None
    if json:
        d = ex.to_dict() if ex is not None else net.to_dict()
        if plan is not None:
            d["vta"] = plan.to_dict()
        if shifts is not None:
            d["requant"] = {m: r.to_dict() for m, r in shifts.items()}
        console.print_json(d)
        return
    console.info(f"{net.name}: {net.n_convs} convs, {len(net.layers)} distinct shapes, "
                 f"{net.macs / 1e9:.3f} GMACs (input {'x'.join(map(str, net.input_shape))})")
    rows = []
    for layer in net.layers:
        shift = ""
        if shifts is not None:
            shift = " ".join(sorted({str(shifts[m].shift) for m in layer.modules if m in shifts}))
        wl = layer.workload
        rows.append((layer.name, wl.spec(), layer.count, wl.kind, f"{wl.macs * layer.count:,}",
                     shift, ", ".join(layer.modules[:3]) + (" ..." if len(layer.modules) > 3 else "")))
    columns = ["name", "spec", "count", "kind", "MACs x count"] + (["shift"] if shifts is not None else []) + \
        ["modules"]
    console.table(None, columns, [r if shifts is not None else r[:5] + r[6:] for r in rows])
    if ex is not None:
        for module, why in ex.skipped:
            console.warn(f"{module}: {why}")
    if plan is not None:
        console.table(f"{net.name} on VTA (channels padded to 16)", ["task", "spec", "count", "layers"],
                      [(t.workload.name, t.workload.spec(), t.count, ", ".join(t.layers)) for t in plan.tasks])
        for layer, why in plan.skipped:
            if not why.startswith(("grouped", "depthwise", "dilated")):
                console.info(f"not on VTA: {layer}: {why}")
