"""A two-node Ray cluster inside network namespaces, for tests: nothing it starts listens beyond them.

Two namespaces joined by a veth pair stand for two machines (``10.233.<slot>.1`` runs the head, ``.2`` a worker
node); each has its own edgetune state folder. Commands run in the head's namespace as the cluster's driver
(:meth:`TestCluster.run`); :meth:`TestCluster.kill` kills a node's whole process group, as a lost machine. Needs
root and ``ip`` (iproute2); :class:`ClusterUnavailable` says why not.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUBNET = "10.233"


class ClusterUnavailable(RuntimeError):
    """Namespaces (or Ray) are not available here; the message says why."""


def _run(argv: list[str]) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise ClusterUnavailable(f"{' '.join(argv[:4])} failed: {(r.stderr or r.stdout).strip()[:200]}")


def available() -> str | None:
    """Why a namespaced cluster cannot run here, or ``None`` when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is missing"
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install 'edgetune[cluster]')"
    return None


@dataclass
class TestCluster:
    """A head and a worker node in two namespaces; :meth:`close` removes everything."""

    slot: int
    work: Path
    port: int = 6379
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def head_ip(self) -> str:
        return f"{SUBNET}.{self.slot}.1"

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.port}"

    def netns(self, node: str) -> str:
        return f"etr{self.slot}{node[0]}"

    def env(self, node: str) -> dict[str, str]:
        """The node's environment: its own state folder, inventory and working folder."""
        home = self.work / node
        return {**os.environ, "XDG_STATE_HOME": str(home / "state"), "XDG_CONFIG_HOME": str(home / "config"),
                "EDGETUNE_INVENTORY": str(home / "inventory.toml"), "EDGETUNE_CLUSTER": "",
                "RAY_USAGE_STATS_ENABLED": "0"}

    def run(self, argv: list[str], node: str = "head", timeout: float = 300.0,
            **kwargs: Any) -> subprocess.CompletedProcess:
        """``argv`` (``edgetune`` arguments, or ``["python", ...]``) in ``node``'s namespace; its output."""
        cmd = [sys.executable, *argv[1:]] if argv[0] == "python" else [sys.executable, "-m", "toolkit", *argv]
        return subprocess.run(["ip", "netns", "exec", self.netns(node), *cmd], capture_output=True, text=True,
                              timeout=timeout, env=self.env(node), cwd=self.work / node, **kwargs)

    def start(self, node: str, num_cpus: int = 1) -> dict[str, Any]:
        """Start the head (``node="head"``) or the worker node, through ``edgetune cluster``."""
        argv = (["cluster", "start", "--port", str(self.port)] if node == "head" else ["cluster", "join", self.address])
        r = self.run([*argv, "--host", self.ip(node), "--expose", "--num-cpus", str(num_cpus), "--json"], node,
                     timeout=120)
        if r.returncode != 0:
            raise ClusterUnavailable(f"`edgetune {' '.join(argv[:2])}` failed: {r.stderr.strip()[-300:]}")
        self.nodes[node] = json.loads(r.stdout)
        return self.nodes[node]

    def ip(self, node: str) -> str:
        return f"{SUBNET}.{self.slot}.{1 if node == 'head' else 2}"

    def kill(self, node: str) -> None:
        """Kill ``node``'s whole process group at once, as a machine lost."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(self.nodes[node]["pid"]), signal.SIGKILL)

    def close(self) -> None:
        """Kill every process in both namespaces and remove them."""
        for node in ("worker", "head"):
            ns = self.netns(node)
            for _ in range(5):
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.2)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for node in self.nodes.values():
            shutil.rmtree(node.get("temp_dir", ""), ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)


def _claim_slot() -> int:
    """A slot whose head namespace this call created (``ip netns add`` fails on a taken name: no race)."""
    for n in range(1, 250):
        if subprocess.run(["ip", "netns", "add", f"etr{n}h"], capture_output=True).returncode == 0:
            return n
    raise ClusterUnavailable("no free slot for a test cluster (250 running?)")


def make_cluster() -> TestCluster:
    """Two namespaces joined by a veth pair, loopback up in both; no Ray node started yet."""
    why = available()
    if why:
        raise ClusterUnavailable(why)
    c = TestCluster(_claim_slot(), Path(tempfile.mkdtemp(prefix="edgetune-cluster-")))
    for node in ("head", "worker"):
        (c.work / node).mkdir()
    h, w = c.netns("head"), c.netns("worker")
    try:
        for argv in (["ip", "netns", "add", w],
                     ["ip", "link", "add", f"{h}v", "type", "veth", "peer", "name", f"{w}v"],
                     ["ip", "link", "set", f"{h}v", "netns", h], ["ip", "link", "set", f"{w}v", "netns", w],
                     ["ip", "netns", "exec", h, "ip", "addr", "add", f"{c.ip('head')}/24", "dev", f"{h}v"],
                     ["ip", "netns", "exec", w, "ip", "addr", "add", f"{c.ip('worker')}/24", "dev", f"{w}v"],
                     ["ip", "netns", "exec", h, "ip", "link", "set", f"{h}v", "up"],
                     ["ip", "netns", "exec", w, "ip", "link", "set", f"{w}v", "up"],
                     ["ip", "netns", "exec", h, "ip", "link", "set", "lo", "up"],
                     ["ip", "netns", "exec", w, "ip", "link", "set", "lo", "up"]):
            _run(argv)
    except ClusterUnavailable:
        c.close()
        raise
    return c
