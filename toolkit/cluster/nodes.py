"""Ray nodes on this machine: started detached (``ray start --block`` in its own process group), found again
through state files, stopped by process group; and the driver's connection to a cluster.

State: ``$XDG_STATE_HOME/edgetune/cluster/<role>-<pid>.json`` per node this machine started (``pid``,
``create_time``, ``role``, ``address``, ``temp_dir``). Ray has no authentication and no loopback-only mode (its
servers listen on every interface; a node on 127.0.0.1 advertises the machine's network address), so a node
starts on a machine with a network address only when ``expose`` is set (docs/security.md).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from toolkit.cluster import ENV_ADDRESS, require_ray
from toolkit.errors import ClusterError
from toolkit.procs import LOOPBACK, SAFE_PATH_ENV, identity, is_running, stop_group
from toolkit.state import remove_state, state_dir, state_lock, write_state

DEFAULT_PORT = 6379
"""The head's port (Ray's GCS), as Ray's own default."""
START_WAIT_S = 60.0
"""How long ``start``/``join`` wait for Ray to say its node runs."""
STARTED = "Ray runtime started."
"""The line ``ray start`` prints once its node runs."""
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}
"""Ray's usage statistics stay off: nothing is sent beyond the cluster."""

EXPOSED_WARNING = ("Ray has no authentication and its servers listen on every interface of this machine: anyone who "
                   "can reach it can run code here; keep the cluster on a private network behind a firewall")


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> ``(host, port)``; a one-line error otherwise."""
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(f"cluster address {address!r} must be HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT}")
    return host, int(port)


def _ray_executable() -> str:
    """The ``ray`` command of the Ray this Python imports."""
    require_ray()
    beside = Path(sys.executable).parent / "ray"
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        raise ClusterError("Ray's `ray` command is not on PATH; reinstall with pip install 'edgetune[cluster]'")
    return found


def local_nodes() -> list[dict[str, Any]]:
    """The nodes this machine started that still run (stale state files are removed)."""
    folder = state_dir() / "cluster"
    nodes = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        name = f"cluster/{path.stem}"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = None
        if isinstance(state, dict) and is_running(state):
            nodes.append({**state, "state": name})
        else:
            remove_state(name)
    return nodes


def network_addresses() -> list[str]:
    """This machine's addresses beyond loopback (Ray's servers listen on all of them)."""
    import psutil

    out = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ip = ipaddress.ip_address(a.address.split("%")[0])
            if not (ip.is_loopback or ip.is_link_local):
                out.append(str(ip))
    return out


def start_node(address: str | None = None, *, host: str | None = None, port: int = DEFAULT_PORT,
               num_cpus: int | None = None, expose: bool = False, wait_s: float = START_WAIT_S,
               on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Start a head (``address=None``, on ``port``) or a node joining the head at ``address``; the node's state.

    Ray has no loopback-only mode: its servers listen on every interface and a node on ``127.0.0.1`` advertises
    the machine's network address. So a node is refused on a machine with a network address unless ``expose``.
    ``host`` is the address the node advertises (default: Ray's choice).
    """
    reachable = network_addresses()
    if reachable and not expose:
        raise ClusterError(f"a Ray node listens on every interface of this machine ({', '.join(reachable[:3])}) "
                           "with no authentication; Ray has no loopback-only mode: pass --expose to start it "
                           "anyway, on a private firewalled network (docs/security.md)")
    if address is not None:
        parse_address(address)
    role = "head" if address is None else "worker"
    with state_lock("cluster"):
        for node in local_nodes():
            if role == "head" and node["role"] == "head":
                return {**node, "already_running": True}
        temp = tempfile.mkdtemp(prefix="edgetune-ray-")   # short: Ray's socket paths must fit 107 bytes
        argv = [_ray_executable(), "start", "--block", "--disable-usage-stats", "--temp-dir", temp]
        argv += ["--node-ip-address", host] if host else []
        argv += (["--head", "--port", str(port), "--include-dashboard=false"] if address is None
                 else ["--address", address])
        if num_cpus is not None:
            argv += ["--num-cpus", str(num_cpus)]
        log = Path(temp) / "start.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, env={**os.environ, **RAY_ENV, **SAFE_PATH_ENV})
        if on_wait is not None:
            on_wait(f"waiting for the Ray {role} to start (up to {wait_s:g} s)")
        deadline = time.monotonic() + wait_s
        while STARTED not in _read(log):
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_group(proc.pid)
                proc.wait()
                said = _said(log) or "no output"
                shutil.rmtree(temp, ignore_errors=True)
                why = "exited" if time.monotonic() <= deadline else "did not start"
                raise ClusterError(f"the Ray {role} {why} ({said}); check that "
                                   f"{'the port is free' if role == 'head' else 'the head runs at ' + str(address)}")
            time.sleep(0.2)
        advertised = re.search(r"--address='([^']+)'", _read(log)) if address is None else None
        state = {**identity(proc.pid), "role": role,
                 "address": advertised.group(1) if advertised else (address or f"{host or LOOPBACK}:{port}"),
                 "temp_dir": temp, "exposed": bool(reachable), "started": time.time()}
        write_state(f"cluster/{role}-{proc.pid}", state)
        return state


def _read(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")
    return ""


def _said(log: Path) -> str:
    """The line of Ray's output that says what went wrong (its last error line, else its last line)."""
    lines = [ln.strip() for ln in _read(log).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "rror" in ln or "failed" in ln.lower()]
    return (errors or lines or [""])[-1][:300]


def stop_nodes() -> list[dict[str, Any]]:
    """Stop every node this machine started (workers first, then heads); the nodes stopped."""
    with state_lock("cluster"):
        nodes = sorted(local_nodes(), key=lambda n: n["role"] == "head")
        for node in nodes:
            stop_group(int(node["pid"]))
            shutil.rmtree(node["temp_dir"], ignore_errors=True)
            remove_state(node["state"])
        return nodes


def cluster_address(explicit: str | None = None) -> str | None:
    """The cluster to use: ``explicit`` (``--cluster``), else ``$EDGETUNE_CLUSTER``; ``None``: this machine alone."""
    address = explicit or os.environ.get(ENV_ADDRESS) or None
    if address is not None:
        parse_address(address)
    return address


def _reachable(host: str, port: int, timeout: float = 5.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def connect(address: str) -> Any:
    """Connect this process to the cluster at ``address`` as its driver (once per process); the ``ray`` module."""
    ray = require_ray()
    host, port = parse_address(address)
    if ray.is_initialized():
        return ray
    if not _reachable(host, port):
        raise ClusterError(f"no Ray head answers at {address}; start one with `edgetune cluster start` or check "
                           "--cluster / $EDGETUNE_CLUSTER")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:   # this machine's address as the head sees it
        s.connect((host, port))
        own_ip = s.getsockname()[0]
    os.environ.update(RAY_ENV)
    try:
        ray.init(address=address, _node_ip_address=own_ip, namespace="edgetune", logging_level="ERROR",
                 log_to_driver=False, configure_logging=False)
    except Exception as exc:  # noqa: BLE001 - Ray's many connection errors become one line
        raise ClusterError(f"cannot join the Ray cluster at {address} ({' '.join(str(exc).split())[:200]}); "
                           "this machine needs a Ray node of the same version (`edgetune cluster join`)") from None
    return ray


def cluster_nodes(address: str) -> list[dict[str, Any]]:
    """The cluster's nodes as its head knows them: address, alive, CPUs."""
    ray = connect(address)
    return [{"address": n.get("NodeManagerAddress"), "alive": bool(n.get("Alive")),
             "cpus": float(n.get("Resources", {}).get("CPU", 0.0)), "node_id": n.get("NodeID", "")[:12]}
            for n in ray.nodes()]
