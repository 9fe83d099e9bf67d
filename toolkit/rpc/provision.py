"""Provisioning a board over SSH: a per-board plan of check-before-do steps, run or printed.

The plan (from the board's profile and :class:`ProvisionOptions`):

1. make the remote directory (``~/.edgetune`` by default);
2. upload the agent (the subset of edgetune's ``toolkit`` package it imports);
3. a Python environment: a virtualenv (``--system-site-packages`` reuses the board's packages), or an
   existing interpreter given with ``--python`` that already has the TVM runtime;
4. the TVM runtime: the profile's wheel (aarch64/x86_64), the runtime bundle cross-built on this machine
   (armv7 Pynq: :mod:`toolkit.rpc.runtime_bundle`; the board needs no compiler), or uploaded from
   ``--runtime-path``; boards that say how much memory their agent needs are checked for it first;
5. FPGA boards: upload the bitstream matching the profile's VTA config (refused on a mismatch);
6. start the agent detached (own process group, pid file, log) registered with the tracker under
   the board's RPC key;
7. verify: the tracker lists it and it answers ``edgetune.health``.

Each step has a check command; a step whose check passes is skipped, so a second run changes nothing.

>>> from toolkit.boards import BoardEntry
>>> plan = make_plan(BoardEntry("rpi", "rpi4", host="rpi"), ProvisionOptions(tracker=("127.0.0.1", 9190)))
>>> [s.name for s in plan.steps][:3]
['remote directory', 'upload agent', 'virtualenv']
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import shlex
import tarfile
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

from toolkit import bitstreams
from toolkit.boards import BoardEntry
from toolkit.errors import BoardError
from toolkit.rpc.agent_control import (DEFAULT_REMOTE_DIR, agent_paths, agent_running, call_health, stop_command,
                                       wait_agent_state,
                                       wait_registered)
from toolkit.rpc.plan_steps import Step, fail, memory_step, runtime_steps
from toolkit.rpc.ssh import SSHSession, quote
from toolkit.state import write_state

REMOTE_PATH = re.compile(r"[A-Za-z0-9_/.~+-]{1,255}")
"""What a path on the board may hold: nothing a shell reads as syntax."""
_PKG_ROOT = Path(__file__).resolve().parent.parent
AGENT_FILES = ("__init__.py", "version.py", "errors.py", "rpc/__init__.py", "rpc/agent.py", "rpc/vta_driver.py")
AGENT_PACKAGES = ("vta",)
"""What the agent imports from ``toolkit`` (relative to the package): files and whole subpackages."""


@dataclass
class ProvisionOptions:
    """How to provision a board.

    ``tracker`` is the tracker's address from here; ``board_tracker`` as the board reaches it (default
    the same; through an SSH tunnel it is the tunnel's end on the board). ``python``: use this interpreter on
    the board (it must already import TVM) instead of a virtualenv. ``system_site_packages``: the
    virtualenv sees the board's system packages (no download when they are there).
    ``runtime_path``: a local TVM runtime to upload (a ``.whl``, or a directory with ``python/`` and
    ``build/libtvm_runtime.so``) instead of installing or building one. ``bitstream``: load this cached
    bitstream (``TARGET/HW_VER/NAME``) instead of the profile's; a mismatch is refused. ``expose``: bind the agent to
    all interfaces (default loopback: clients reach it on the board itself or through a tunnel).
    ``executor``: ``"fsim"`` runs an FPGA board's agent and register-level driver against the simulated VTA
    device instead of the FPGA (bring-up before a bitstream, emulated boards): no sudo; the profile's bitstream
    is uploaded and named to the device when it is cached (the simulated device loads nothing).
    """

    tracker: tuple[str, int]
    board_tracker: tuple[str, int] | None = None
    remote_dir: str = DEFAULT_REMOTE_DIR
    python: str | None = None
    system_site_packages: bool = False
    runtime_path: Path | None = None
    expose: bool = False
    report_host: str | None = None
    report_port: int = 0
    bitstream: str | None = None
    executor: str | None = None
    verify_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        for flag, value in (("--remote-dir", self.remote_dir), ("--python", self.python)):
            if value is None:
                continue
            plain = bool(REMOTE_PATH.fullmatch(value)) and ".." not in value.split("/")
            if not plain or (flag == "--remote-dir" and not value.startswith(("/", "~"))):
                raise BoardError(f"{flag} {value[:60]!r} must be a plain path on the board (letters, digits, "
                                 "'/._+-~', absolute or under ~; a bare command name for --python)")
        if self.executor not in (None, "fsim"):
            raise BoardError(f"--executor {self.executor[:20]!r}: the only other executor is fsim (the simulated "
                             "VTA device); drop --executor to use the board's own")


def executor_of(entry: BoardEntry, opts: ProvisionOptions) -> str:
    """The agent's executor: ``fpga``, ``fsim`` or ``tvm`` (``--executor fsim`` only on VTA boards)."""
    profile = entry.profile
    if opts.executor is not None:
        if not profile.vta:
            raise BoardError(f"board {entry.name} ({profile.name}) runs no VTA programs; drop --executor")
        return opts.executor
    return profile.executor if profile.executor in ("fsim", "fpga") else "tvm"


@dataclass
class Plan:
    """Steps for one board, plus where things live on it."""

    board: str
    steps: list[Step]
    remote_dir: str
    python: str
    agent_dir: str
    state: dict = field(default_factory=dict)

    def describe(self) -> list[str]:
        """Every command, in order."""
        return [line for s in self.steps for line in s.describe()]


def agent_files() -> list[tuple[str, Path]]:
    """``(name in the bundle, file here)`` of every module the agent runs on a board."""
    files: list[tuple[str, Path]] = [(f"toolkit/{f}", _PKG_ROOT / f) for f in AGENT_FILES]
    for pkg in AGENT_PACKAGES:
        files += [(f"toolkit/{p.relative_to(_PKG_ROOT).as_posix()}", p)
                  for p in sorted((_PKG_ROOT / pkg).rglob("*.py"))]
    return [(name, path) for name, path in files if path.is_file()]


@lru_cache(maxsize=1)
def agent_bundle() -> tuple[bytes, str]:
    """A reproducible ``.tar.gz`` of the agent's files and its digest (built once per process)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for arcname, path in agent_files():
            data = path.read_bytes()
            info = tarfile.TarInfo(arcname)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    digest = hashlib.sha256(raw.getvalue()).hexdigest()[:16]
    return gzip.compress(raw.getvalue(), mtime=0), digest


def _paths(entry: BoardEntry, opts: ProvisionOptions) -> dict[str, str]:
    return agent_paths(entry.name, opts.remote_dir)


def _bitstream_steps(entry: BoardEntry, p: dict[str, str], ref: str | None,
                     executor: str) -> tuple[list[Step], str | None]:
    profile = entry.profile
    if profile.executor != "fpga" or executor == "tvm":
        if ref:
            raise BoardError(f"board {entry.name} ({profile.name}) has no FPGA; drop --bitstream")
        return [], None
    want = bitstreams.parse_ref(ref) if ref else bitstreams.for_profile(profile)
    bitstreams.check_matches(profile, want)
    local = bitstreams.cached_path(want)
    remote = f"{p['bits']}/{want.name}.{want.ext}"
    what = f"{want.target}/{want.hw_ver}/{want.name}.{want.ext}"
    if local is None and executor == "fsim" and not ref:
        return [], None  # the simulated device runs without one; with one cached it is uploaded and named
    if local is None:
        fix = (f"`edgetune bitstream add FILE --target {want.target} --hw-ver {want.hw_ver}`"
               + (f" (download: {want.url})" if want.url else ""))
        return [Step(f"upload bitstream {what}", note=f"NOT CACHED: add it with {fix}",
                     check=f"test -f {quote(remote)}",
                     command=fail(f"bitstream {what} is not cached: add it with {fix}"))], remote
    digest = bitstreams.sha256_of(local)
    steps = [Step(f"upload bitstream {what}", upload=(local.read_bytes(), remote),
                  check=f"printf '%s  %s\\n' {digest} {quote(remote)} | sha256sum -c --status",
                  note=f"sha256 {digest[:12]}")]
    hwh = local.with_suffix(".hwh")
    if hwh.is_file():
        steps.append(Step("upload .hwh", upload=(hwh.read_bytes(), remote.rsplit(".", 1)[0] + ".hwh"),
                          check=f"test -f {quote(remote.rsplit('.', 1)[0] + '.hwh')}"))
    return steps, remote


def agent_command(entry: BoardEntry, opts: ProvisionOptions, py: str, p: dict[str, str],
                  bitstream: str | None) -> list[str]:
    """The agent's argv on the board."""
    profile = entry.profile
    executor = executor_of(entry, opts)
    bt = opts.board_tracker or opts.tracker
    argv = [py, "-m", "toolkit.rpc.agent", "--tracker", f"{bt[0]}:{bt[1]}",
            "--key", entry.effective_rpc_key, "--executor", executor, "--name", entry.name,
            "--host", "0.0.0.0" if opts.expose else "127.0.0.1",
            "--pid-file", p["pid"], "--state-file", p["state"]]
    if opts.report_host:
        argv += ["--report-host", opts.report_host]
    if opts.report_port:
        argv += ["--report-port", str(opts.report_port)]
    if profile.vta:
        argv += ["--vta-config", str(profile.vta.get("preset", "pynq"))]
    if bitstream:
        argv += ["--bitstream", bitstream]
    return argv


def _sh(argv: list[str]) -> str:
    return " ".join(quote(a) if a.startswith("~") else shlex.quote(a) for a in argv)


def make_plan(entry: BoardEntry, opts: ProvisionOptions) -> Plan:
    """The provisioning plan of a board (no connection needed)."""
    profile = entry.profile
    q = quote
    p = _paths(entry, opts)
    py = opts.python or f"{p['venv']}/bin/python"
    bundle, digest = agent_bundle()
    steps = [
        Step("remote directory", check=f"test -d {q(p['agent_dir'])} && test -d {q(p['bits'])}",
             command=f"mkdir -p {q(p['agent_dir'])} {q(p['bits'])}"),
        Step("upload agent", check=f"test \"$(cat {q(p['code'])}/.digest 2>/dev/null)\" = {digest}",
             upload=(bundle, f"{p['root']}/agent.tar.gz"),
             command=f"rm -rf {q(p['code'])} && mkdir -p {q(p['code'])} && tar -xzf {q(p['root'])}/agent.tar.gz "
                     f"-C {q(p['code'])} && echo {digest} > {q(p['code'])}/.digest && rm {q(p['root'])}/agent.tar.gz",
             note=f"toolkit subset, digest {digest}"),
    ]
    if "agent_memory_mb" in profile.limits:
        steps.insert(0, memory_step(entry, p))
    if not opts.python:
        flag = " --system-site-packages" if opts.system_site_packages else ""
        steps.append(Step("virtualenv", check=f"test -x {q(py)}",
                          command=f"python3 -m venv{flag} {q(p['venv'])}"))
    steps += runtime_steps(entry, opts.python, opts.runtime_path, py, p)
    executor = executor_of(entry, opts)
    bit_steps, remote_bit = _bitstream_steps(entry, p, opts.bitstream, executor)
    steps += bit_steps
    argv = agent_command(entry, opts, py, p, remote_bit)
    args_digest = hashlib.sha256(("\0".join(argv) + digest).encode()).hexdigest()[:16]
    sudo = bool(profile.runtime.get("needs_sudo")) and executor == "fpga"
    env = f"PYTHONPATH={q(p['code'])}"
    if opts.runtime_path is not None and Path(opts.runtime_path).is_dir():
        env += f" TVM_LIBRARY_PATH={q(p['tvm'])}/build"
    launch = f"{'sudo -n ' if sudo else ''}env {env} nohup {_sh(argv)}"
    pid = q(p["pid"])
    steps.append(Step(
        f"start agent (key {entry.effective_rpc_key})",
        check=f"[ -f {pid} ] && {agent_running(pid)} && "
              f"[ \"$(cat {q(p['args'])} 2>/dev/null)\" = {args_digest} ]",
        command=f"{stop_command(p, sudo)}; cd {q(p['agent_dir'])} && rm -f {q(p['state'])} && "
                f"echo {args_digest} > {q(p['args'])} && {{ {launch} > {q(p['log'])} 2>&1 < /dev/null & }}",
        note="needs passwordless sudo for the FPGA" if sudo else ""))
    state = {"board": entry.name, "remote_dir": opts.remote_dir, "python": py, "tracker": list(opts.tracker),
             "tunnel": opts.board_tracker is not None,
             "key": entry.effective_rpc_key, "agent_dir": p["agent_dir"], "sudo": sudo,
             "executor": executor}
    plan = Plan(entry.name, steps, opts.remote_dir, py, p["agent_dir"], state)
    plan.steps.append(Step("verify", local=_verifier(entry, opts, p), note="tracker lists it; health answers"))
    return plan


def preflight(entry: BoardEntry, python: str | None = None, runtime_path: Path | None = None) -> None:
    """What must hold here before a board is touched: an armv7 board's runtime bundle is built and verified
    (unless ``python`` or ``runtime_path`` bring the runtime another way)."""
    if entry.profile.runtime.get("method") == "bundle" and python is None and runtime_path is None:
        from toolkit.rpc.runtime_bundle import require

        require(entry.profile.runtime.get("bundle", "armv7"))


def on_loopback(host: str | None) -> bool:
    """Is ``host`` this machine's loopback (a board reached without a network)."""
    return bool(host) and (host == "localhost" or host.startswith("127.") or host == "::1")


def tunnelled_plan(entry: BoardEntry, opts: ProvisionOptions, *, tunnel: bool | None = None, dry_run: bool = False,
                   inventory: Path | None = None, accept_new_host_key: bool = False) -> tuple[Plan, bool]:
    """The provisioning plan and whether the board is reached through SSH tunnels.

    By default (``tunnel=None``) it is, unless the agent is exposed (``opts.expose``) or the board is on
    loopback: then no RPC port is on any network. With a tunnel, the keeper process (board ``127.0.0.1:R``
    -> tracker, ``127.0.0.1:L`` here -> agent) is started first and ``opts`` point the agent at its ends; a
    dry run shows the ports as 0 and starts nothing. ``opts`` is not changed: the plan holds the tunnel's ends.
    """
    if not dry_run:
        preflight(entry, opts.python, opts.runtime_path)
    if tunnel is None:
        tunnel = not opts.expose and not on_loopback(entry.host)
    if tunnel and dry_run:
        opts = replace(opts, board_tracker=("127.0.0.1", 0), report_host="127.0.0.1", report_port=0)
    elif tunnel:
        from toolkit.rpc.tunnel import start_keeper

        keeper = start_keeper(entry.name, opts.tracker, agent_paths(entry.name, opts.remote_dir)["state"],
                              inventory=inventory, accept_new_host_key=accept_new_host_key)
        opts = replace(opts, board_tracker=("127.0.0.1", int(keeper["remote_port"])), report_host="127.0.0.1",
                       report_port=int(keeper["local_port"]))
    return make_plan(entry, opts), tunnel


def _verifier(entry: BoardEntry, opts: ProvisionOptions, p: dict[str, str]) -> Callable[[SSHSession], str]:
    def verify(session: SSHSession) -> str:
        """wait until the tracker lists the agent under its key and edgetune.health answers"""
        agent = wait_agent_state(session, p, opts.verify_timeout_s)
        wait_registered(opts.tracker, entry.effective_rpc_key, int(agent["report_port"]), opts.verify_timeout_s,
                        log=lambda: session.run(f"tail -n 5 {quote(p['log'])}").stdout)
        health = call_health(opts.tracker, entry.effective_rpc_key, entry.name, opts.verify_timeout_s)
        return f"agent pid {agent['pid']} port {agent['port']} answers: {health}"
    return verify


# -- running plans ------------------------------------------------------------------------------


@dataclass
class StepOutcome:
    """What happened to one step."""

    name: str
    changed: bool
    detail: str = ""


def run_plan(plan: Plan, session: SSHSession, progress: Callable[[str], None] | None = None) -> list[StepOutcome]:
    """Run a plan on a board: each step is skipped when its check passes."""
    out = []
    for step in plan.steps:
        if progress:
            progress(step.name)
        if step.local is not None:
            out.append(StepOutcome(step.name, False, step.local(session)))
            continue
        if step.check and session.run(step.check, timeout=60).ok:
            out.append(StepOutcome(step.name, False, "unchanged"))
            continue
        if step.upload:
            data, remote = step.upload
            session.run(f"mkdir -p {quote(remote.rsplit('/', 1)[0])}", check=True)
            session.put_bytes(data, _sftp_path(session, remote))
        if step.command:
            r = session.run(step.command, timeout=1800)
            if not r.ok:
                last = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ["no output"]
                raise BoardError(f"provisioning {plan.board}: step '{step.name}' failed (exit {r.rc}): {last[0]}")
        out.append(StepOutcome(step.name, True, "done"))
    write_state(f"boards/{plan.board}", plan.state)
    return out


def _sftp_path(session: SSHSession, path: str) -> str:
    if path.startswith("~/"):
        return f"{session.home()}/{path[2:]}"
    return path


