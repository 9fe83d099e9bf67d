"""``edgetune board``: the board inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.backends import backend_for
from toolkit import console
from toolkit.boards import BUILTIN_BOARDS, BoardEntry, Inventory, load_profile, profile_names
from toolkit.cli.app import app
from toolkit.cli.options import InventoryOpt, JsonOpt
from toolkit.errors import BoardError, InventoryError

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
    if inventory is not None and not Path(inventory).expanduser().exists():
        raise InventoryError(f"inventory {inventory} does not exist; check the path (`edgetune board add "
                             "--inventory PATH` creates one)")
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
    rows = {k: v for k, v in d.items() if k != "profile"}
    rows.update((k, v) for k, v in d["profile"].items() if k not in rows and v is not None)
    console.table(f"board {name}", ["", "value"], [(k, str(v)) for k, v in rows.items()])


@board_app.command("remove")
def remove(name: Annotated[str, typer.Argument(help="Board name.")], inventory: InventoryOpt = None) -> None:
    """Remove a board from the inventory, with what edgetune keeps of its provisioning (stop it first)."""
    from toolkit.rpc.agent_control import forget
    from toolkit.rpc.tunnel import running_keeper

    if running_keeper(name) is not None:
        raise BoardError(f"board {name} still has its SSH tunnels open; run `edgetune board stop {name}` first, then "
                         "remove it")
    inv = Inventory(inventory)
    inv.remove(name)
    forget(name)
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


AcceptNewOpt = Annotated[bool, typer.Option(
    "--accept-new-host-key", help="Record the host key of a board seen for the first time (never a changed one).")]


def _registered(name: str, inventory: Optional[Path]) -> BoardEntry:
    if name in BUILTIN_BOARDS:
        raise BoardError(f"{name!r} is built in and runs on this machine; register a board reached over SSH "
                         f"with `edgetune board add NAME --type {name} --host HOST`")
    return Inventory(inventory).get(name)


@board_app.command("check")
def check(
    name: Annotated[str, typer.Argument(help="Board name.")],
    accept_new_host_key: AcceptNewOpt = False,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
) -> None:
    """Log in and check what the board has (OS, Python, TVM runtime, GPU, FPGA) and what it lacks."""
    from toolkit.rpc import board_check as chk
    from toolkit.rpc.agent_control import board_state
    from toolkit.rpc.ssh import connect_board

    entry = _registered(name, inventory)
    state = board_state(name) or {}
    with connect_board(entry, accept_new_host_key=accept_new_host_key) as session:
        facts = chk.probe(session, python=state.get("python", "python3"),
                          remote_dir=state.get("remote_dir", "~/.edgetune"))
    findings = chk.assess(entry, facts) + backend_for(entry.profile).board_findings(entry.profile, facts, name)
    if json:
        console.print_json(chk.findings_json(findings, facts))
    else:
        console.table(f"board {name} ({entry.type})", ["item", "value", "ok", "fix"],
                      [(f.item, f.value, "yes" if f.ok else "NO", "" if f.ok else f.fix) for f in findings])
    if not all(f.ok for f in findings):
        raise typer.Exit(1)


@board_app.command("provision")
def provision(
    name: Annotated[str, typer.Argument(help="Board name.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print every step and command; change nothing.")] = False,
    tracker: Annotated[Optional[str], typer.Option(
        help="Tracker HOST:PORT as the board reaches it (default: the one `edgetune tracker start` runs).")] = None,
    runtime_path: Annotated[Optional[Path], typer.Option(
        "--runtime-path", help="A local TVM runtime to upload: a .whl, or a directory with python/ and build/.")
    ] = None,
    python: Annotated[Optional[str], typer.Option(
        help="Use this Python on the board (it must import tvm and numpy) instead of a virtualenv.")] = None,
    system_site_packages: Annotated[bool, typer.Option(
        "--system-site-packages", help="The virtualenv sees the board's system packages (no download when present).")
    ] = False,
    remote_dir: Annotated[str, typer.Option(
        help="Directory on the board for the agent, venv and logs.")] = "~/.edgetune",
    expose: Annotated[bool, typer.Option("--expose", help="Bind the agent to all interfaces (default loopback).")
                      ] = False,
    bitstream: Annotated[Optional[str], typer.Option(
        help="FPGA boards: load this cached bitstream (TARGET/HW_VER/NAME) instead of the profile's; a mismatch "
             "with the board's VTA config is refused.")] = None,
    executor: Annotated[Optional[str], typer.Option(
        metavar="fsim", help="FPGA boards: run the agent's register-level driver against the simulated VTA device "
                             "instead of the FPGA (no sudo; a cached bitstream is named, not loaded): bring-up "
                             "and emulated boards.")] = None,
    tunnel: Annotated[Optional[bool], typer.Option(
        "--tunnel/--no-tunnel", help="Reach the board's agent and let it reach the tracker through SSH tunnels kept "
                                     "by a background process, so no RPC port is on any network (default: on, "
                                     "except for boards on loopback or with --expose).")] = None,
    accept_new_host_key: AcceptNewOpt = False,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
) -> None:
    """Install the agent and TVM runtime on a board and start it registered with the tracker (idempotent)."""
    from toolkit.rpc import provision as prov
    from toolkit.rpc.service import tracker_address
    from toolkit.rpc.ssh import connect_board
    from toolkit.rpc.tunnel import running_keeper, stop_keeper

    entry = _registered(name, inventory)
    if expose:
        console.warn(f"the agent on {name} binds all interfaces: anyone who can reach the board can load "
                     "code and bitstreams through it (TVM RPC has no authentication); prefer the default "
                     "(loopback, reached through an SSH tunnel)")
    if not dry_run:
        prov.preflight(entry, python, runtime_path)
    address = tracker_address(tracker) if (tracker or not dry_run) else _dry_tracker()
    opts = prov.ProvisionOptions(tracker=address, remote_dir=remote_dir, python=python,
                                 system_site_packages=system_site_packages, runtime_path=runtime_path, expose=expose,
                                 bitstream=bitstream, executor=executor)
    kept_before = running_keeper(name) is not None
    plan, tunnel = prov.tunnelled_plan(entry, opts, tunnel=tunnel, dry_run=dry_run, inventory=inventory,
                                       accept_new_host_key=accept_new_host_key)
    if tunnel and dry_run and not json:
        console.info("# tunnel: a background process opens board:127.0.0.1:R -> tracker and "
                     "127.0.0.1:L -> agent (R, L chosen when it starts; shown as 0 below)")
    if dry_run:
        if json:
            console.print_json({"board": name, "tunnel": tunnel, "steps": [{"name": s.name, "check": s.check,
                                "run": s.command,
                                "upload": s.upload[1] if s.upload else None, "note": s.note} for s in plan.steps]})
        else:
            console.info(f"# provisioning plan for {name} ({entry.type}); nothing is changed")
            for line in plan.describe():
                console.info(line)
        return
    try:
        with connect_board(entry, accept_new_host_key=accept_new_host_key) as session, console.progress() as bar:
            task = bar.add_task(f"provision {name}", total=len(plan.steps), status="")
            outcomes = prov.run_plan(plan, session, progress=lambda s: bar.update(task, advance=1, status=s))
    except BaseException:
        if tunnel and not kept_before:
            stop_keeper(name)   # the tunnels this run opened serve no agent
        raise
    if json:
        console.print_json({"board": name, "steps": [o.__dict__ for o in outcomes]})
        return
    for o in outcomes:
        console.info(f"{'changed' if o.changed else 'ok':8} {o.name}: {o.detail}")


def _dry_tracker() -> tuple[str, int]:
    from toolkit.rpc.service import DEFAULT_PORT, running_tracker

    state = running_tracker()
    return (state["host"], int(state["port"])) if state else ("127.0.0.1", DEFAULT_PORT)


@board_app.command("stop")
def stop(name: Annotated[str, typer.Argument(help="Board name.")], accept_new_host_key: AcceptNewOpt = False,
         inventory: InventoryOpt = None) -> None:
    """Stop a board's agent (its whole process group)."""
    from toolkit.rpc.agent_control import stop_agent
    from toolkit.rpc.ssh import connect_board

    from toolkit.rpc.tunnel import stop_keeper

    entry = _registered(name, inventory)
    with connect_board(entry, accept_new_host_key=accept_new_host_key) as session:
        was = stop_agent(name, session)
    tunnel = stop_keeper(name)
    console.info((f"stopped the agent on {name}" if was else f"no agent was running on {name}")
                 + (" and its SSH tunnels" if tunnel else ""))


@board_app.command("logs")
def logs(name: Annotated[str, typer.Argument(help="Board name.")],
         lines: Annotated[int, typer.Option("--lines", "-n", help="How many lines.")] = 50,
         accept_new_host_key: AcceptNewOpt = False, inventory: InventoryOpt = None) -> None:
    """Print the end of a board's agent log."""
    from toolkit.rpc.agent_control import agent_log
    from toolkit.rpc.ssh import connect_board

    entry = _registered(name, inventory)
    with connect_board(entry, accept_new_host_key=accept_new_host_key) as session:
        text = agent_log(name, session, lines)
    for line in text.splitlines():
        console.info(line)


@board_app.command("status")
def status(inventory: InventoryOpt = None, json: JsonOpt = False) -> None:
    """Every board: reachable, agent up, registered with the tracker, its key's queue."""
    from toolkit.rpc.board_status import fleet_status

    rows = fleet_status(Inventory(inventory).load())
    if json:
        console.print_json(rows)
        return
    console.table("boards", ["name", "type", "reachable", "agent", "registered", "queue (free/pending)", "note"],
                  [(r["name"], r["type"], _yn(r["reachable"]), _yn(r["agent_up"]), _yn(r["registered"]),
                    r["queue"], r["note"]) for r in rows])


def _yn(v: object) -> str:
    return "-" if v is None else ("yes" if v else "no")


@board_app.command("console")
def console_(
    serial_device: Annotated[str, typer.Option("--serial", help="Serial device of the board, e.g. /dev/ttyUSB0.")],
    baud: Annotated[int, typer.Option(help="Baud rate.")] = 115200,
    user: Annotated[str, typer.Option(help="Login user on the board.")] = "xilinx",
    password_stdin: Annotated[bool, typer.Option(
        "--password-stdin", help="Read the password from stdin (default: ask; it is never stored).")] = False,
    install_key: Annotated[Optional[Path], typer.Option(
        "--install-key", help="Public key file to authorise for SSH, e.g. ~/.ssh/id_ed25519.pub.")] = None,
    enable_sshd: Annotated[bool, typer.Option("--enable-sshd", help="Enable and start sshd on the board.")] = False,
    name: Annotated[str, typer.Option(help="Board name for the suggested `board add`.")] = "board1",
    add_board: Annotated[bool, typer.Option("--add", help="Register the board right away.")] = False,
    type: Annotated[Optional[str], typer.Option("--type", help="Board type for --add (default: guessed).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each answer.")] = 10.0,
    inventory: InventoryOpt = None,
    json: JsonOpt = False,
) -> None:
    """Log in over a serial console, read the board's address, optionally install a key and enable sshd."""
    import getpass
    import sys

    from toolkit.rpc.serial_console import SerialConsole, bring_up

    def password() -> str:
        if password_stdin:
            return sys.stdin.readline().rstrip("\n")
        return getpass.getpass(f"password for {user} on the board (not stored): ")

    pub = None
    if install_key is not None:
        path = install_key.expanduser()
        if not path.is_file():
            raise BoardError(f"public key file {path} does not exist; create one with `ssh-keygen -t ed25519`")
        pub = path.read_text()
    with SerialConsole.open(serial_device, baud, timeout=timeout) as con:
        facts = bring_up(con, user, password, install_key=pub, enable_sshd=enable_sshd)
    private = str(install_key.expanduser()).removesuffix(".pub") if install_key else None
    command = facts.add_command(name, private)
    if json:
        console.print_json({**facts.__dict__, "add_command": command})
    else:
        console.info(f"board {facts.hostname}: {facts.arch}, addresses {', '.join(facts.addresses) or 'none'}"
                     f"{', key installed' if facts.key_installed else ''}"
                     f"{', sshd ' + facts.sshd if facts.sshd else ''}")
        console.info(f"register it with: {command}")
    if add_board:
        chosen = type or (facts.candidates[0] if len(facts.candidates) == 1 else None)
        if not chosen or not facts.addresses:
            raise BoardError(f"cannot register automatically (types for {facts.arch}: "
                             f"{', '.join(facts.candidates) or 'none'}; addresses: {facts.addresses or 'none'}); "
                             "pass --type, or run the printed command")
        entry = BoardEntry(name=name, type=chosen, host=facts.addresses[0], user=user, key=private)
        Inventory(inventory).add(entry)
        console.info(f"added board {name} ({chosen}) at {facts.addresses[0]}")
