"""Emulated boards: a Debian arm64 or armhf userland run by ``qemu-user`` through ``binfmt_misc``.

Two images: ``aarch64`` (a Raspberry Pi 4, ZCU102 or Ultra96: Debian's packages plus the aarch64
``apache-tvm`` wheel from PyPI) and ``armv7`` (a Pynq-Z1/Z2: Debian armhf with Python and numpy from
Debian, as a PYNQ image has them, and no TVM: PyPI has no armv7 wheel, so ``board provision`` uploads
the runtime bundle that :mod:`toolkit.rpc.runtime_bundle` cross-builds). An image is built once per
machine with ``mmdebstrap`` (:mod:`toolkit.testing.board_image`) and cached under
``$EDGETUNE_EMULATED_CACHE`` (default ``~/.cache/edgetune/emulated``) in a folder named by a hash of
its :class:`Recipe`. A board started from it runs in its own network namespace (reached from here on a
veth pair, ``10.213.N.2``) and its own process namespace (``tini`` is its init and reaps orphans; the
board sees only its own processes), on an overlay of the image (the image is never written), with its own
``sshd``, a fresh host key and one authorised client key (key-only login, as root). Nothing but SSH
reaches it: the board's loopback, where the agent listens, is its own.

    python -m toolkit.testing.emulated_board build [--arch armv7]   # once per machine (minutes)
    python -m toolkit.testing.emulated_board check                  # start a board, log in, import tvm, stop

A board runs in a memory cgroup (``memory_mb``: the Pynq's 512 MB) and on ``cpus`` CPUs when asked.

Needs root (namespaces, mounts), ``qemu-user-static``, ``mmdebstrap`` and ``iproute2`` from Debian.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from toolkit.testing.board_image import (ARMV7, RECIPES, EmulationUnavailable, Recipe, build_image, cache_root,  # noqa: F401
                                         ensure_binfmt, image_dir, image_info, kernel_has_binfmt, require_tools,
                                         skip_reason, run_tool)

CGROUP_V1 = Path("/sys/fs/cgroup")
SUBNET = "10.213"


# -- a running board ---------------------------------------------------------------------------


@dataclass
class EmulatedBoard:
    """One running emulated board: ``ssh root@address`` with ``client_key``; ``known_hosts_line`` trusts it."""

    netns: str
    address: str
    host_address: str
    workdir: Path
    client_key: Path
    host_key_pub: str
    port: int = 22
    sshd_pid: int = 0
    _log: Path = field(default=Path(), repr=False)
    cgroups: list[Path] = field(default_factory=list)

    @property
    def known_hosts_line(self) -> str:
        return f"{self.address} {self.host_key_pub}\n"

    def pids(self) -> list[int]:
        """Every process running in the board's network namespace."""
        r = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
        return [int(p) for p in r.stdout.split()]

    def stop(self) -> None:
        """Kill everything on the board, remove its namespace and its overlay."""
        for _ in range(3):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
        subprocess.run(["ip", "link", "del", f"{self.netns}h"], capture_output=True)
        for group in self.cgroups:
            with contextlib.suppress(OSError):
                group.rmdir()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def memory_peak_mb(self) -> float | None:
        """The most memory the board has used so far (its memory cgroup's high-water mark), or ``None``."""
        for group in self.cgroups:
            peak = group / "memory.max_usage_in_bytes"
            if peak.exists():
                return int(peak.read_text()) / 2**20
        return None

    def log_tail(self, lines: int = 5) -> str:
        """The end of the board's sshd log."""
        try:
            return " | ".join(self._log.read_text().strip().splitlines()[-lines:])
        except OSError:
            return ""


def _free_slot() -> int:
    taken = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for n in range(1, 250):
        if f"etb{n}" not in taken and f"etb{n}h" not in links:
            return n
    raise EmulationUnavailable("no free slot for an emulated board (250 running?)")


SSHD_CONFIG = """Port 22
ListenAddress {address}
HostKey /etc/ssh/edgetune_host_key
AuthorizedKeysFile /root/.ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding yes
Subsystem sftp /usr/lib/openssh/sftp-server
LogLevel ERROR
MaxStartups 50
"""


def _cgroup(name: str, memory_mb: int | None, cpus: int | None) -> list[Path]:
    """cgroup v1 folders capping a board's memory (no swap) and CPUs; empty when nothing is capped."""
    made = []
    if memory_mb:
        mem = CGROUP_V1 / "memory" / name
        if not mem.parent.is_dir():
            raise EmulationUnavailable("no cgroup v1 memory controller at /sys/fs/cgroup/memory: the board's "
                                       "memory cannot be capped here")
        mem.mkdir(exist_ok=True)
        made.append(mem)
        (mem / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
        swap = mem / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(str(memory_mb << 20))
    if cpus:
        cpuset = CGROUP_V1 / "cpuset" / name
        if not cpuset.parent.is_dir():
            raise EmulationUnavailable("no cgroup v1 cpuset controller at /sys/fs/cgroup/cpuset")
        cpuset.mkdir(exist_ok=True)
        made.append(cpuset)
        have = sorted(os.sched_getaffinity(0))
        (cpuset / "cpuset.cpus").write_text(",".join(map(str, have[:cpus])))
        (cpuset / "cpuset.mems").write_text((cpuset.parent / "cpuset.mems").read_text().strip())
    return made


def _join(groups: list[Path]) -> None:
    """Move the calling process (and so all it starts) into ``groups``."""
    for group in groups:
        (group / "cgroup.procs").write_text(str(os.getpid()))


def start_board(image: Path, workdir: Path | None = None, wait_s: float = 120.0, memory_mb: int | None = None,
                cpus: int | None = None) -> EmulatedBoard:
    """Start an emulated board from a built image; it answers SSH when this returns. ``memory_mb`` caps the
    memory of everything on the board (qemu's own included), ``cpus`` the CPUs it runs on."""
    require_tools()
    rootfs = image / "rootfs"
    if not (image / "image.json").is_file():
        raise EmulationUnavailable(f"no emulated board image in {image}; run "
                                   "`python -m toolkit.testing.emulated_board build`")
    ensure_binfmt(json.loads((image / "image.json").read_text())["recipe"].get("qemu", "aarch64"))
    slot = _free_slot()
    netns = f"etb{slot}"
    work = Path(workdir or tempfile.mkdtemp(prefix=f"edgetune-{netns}-"))
    upper, scratch, merged = work / "upper", work / "work", work / "root"
    for d in (upper / "etc/ssh", upper / "root/.ssh", scratch, merged):
        d.mkdir(parents=True, exist_ok=True)
    for key in ("client_key", "host_key"):
        run_tool(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"edgetune-{netns}", "-f", str(work / key)],
             "ssh-keygen")
    host, board = f"{SUBNET}.{slot}.1", f"{SUBNET}.{slot}.2"
    shutil.copy(work / "host_key", upper / "etc/ssh/edgetune_host_key")
    os.chmod(upper / "etc/ssh/edgetune_host_key", 0o600)
    (upper / "etc/ssh/edgetune_sshd_config").write_text(SSHD_CONFIG.format(address=board))
    (upper / "root/.ssh").chmod(0o700)
    (upper / "root/.ssh/authorized_keys").write_text((work / "client_key.pub").read_text())
    os.chmod(upper / "root/.ssh/authorized_keys", 0o600)
    (upper / "etc/hostname").write_text(f"emulated-{netns}\n")
    ifh, ifb = f"{netns}h", f"{netns}b"
    for argv in (["ip", "netns", "add", netns], ["ip", "link", "add", ifh, "type", "veth", "peer", "name", ifb],
                 ["ip", "link", "set", ifb, "netns", netns], ["ip", "addr", "add", f"{host}/24", "dev", ifh],
                 ["ip", "link", "set", ifh, "up"],
                 ["ip", "netns", "exec", netns, "ip", "addr", "add", f"{board}/24", "dev", ifb],
                 ["ip", "netns", "exec", netns, "ip", "link", "set", ifb, "up"],
                 ["ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up"]):
        run_tool(argv, " ".join(argv[:4]))
    groups = _cgroup(f"edgetune-{netns}", memory_mb, cpus)
    # the board sees its own memory cgroup where a container sees it (what free memory it has)
    own = "".join(f"mkdir -p {merged}/sys/fs/cgroup/memory && mount --bind {g} {merged}/sys/fs/cgroup/memory && "
                  for g in groups if g.parent.name == "memory")
    mounts = (f"mount -t overlay overlay -o lowerdir={rootfs},upperdir={upper},workdir={scratch} {merged} && "
              f"mount -t proc proc {merged}/proc && mount --rbind /dev {merged}/dev && {own}"
              f"mount -t tmpfs tmpfs {merged}/run && mkdir -p {merged}/run/sshd && "
              f"mount -t tmpfs tmpfs {merged}/tmp && "
              f"exec chroot {merged} /usr/bin/tini -- /usr/sbin/sshd -D -e -f /etc/ssh/edgetune_sshd_config")
    log = work / "sshd.log"
    with open(log, "w") as out:
        # nsenter, not `ip netns exec`: that mounts a fresh /sys, without the host's cgroups
        proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{netns}", "unshare", "--mount", "--pid", "--fork",
                                 "--propagation", "private", "sh", "-c", mounts], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=lambda: _join(groups))
    b = EmulatedBoard(netns, board, host, work, work / "client_key",
                      " ".join((work / "host_key.pub").read_text().split()[:2]), sshd_pid=proc.pid, _log=log,
                      cgroups=groups)
    deadline = time.monotonic() + wait_s
    while not ssh_banner(board, 22):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = b.log_tail()
            b.stop()
            raise EmulationUnavailable(f"the emulated board's sshd did not start: {tail or 'no log'}")
        time.sleep(0.2)
    return b


def ssh_banner(host: str, port: int) -> bool:
    """Does an SSH server answer at ``host:port`` (its ``SSH-`` greeting within a second)."""
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


@contextlib.contextmanager
def emulated_board(image: Path) -> Iterator[EmulatedBoard]:
    """A running board for the duration of a ``with`` block."""
    board = start_board(image)
    try:
        yield board
    finally:
        board.stop()


@contextlib.contextmanager
def provisioned(image: Path, name: str, board_type: str, *provision: str,
                timeout_s: float = 7200) -> Iterator[Callable[..., subprocess.CompletedProcess]]:
    """A board started from ``image``, added as ``name`` (``--type board_type``), given a tracker and provisioned
    (``board provision NAME --system-site-packages *provision``) by the CLI as a user runs it, in a private
    home (its own inventory, known hosts and state; no SSH agent). Yields ``cli(*args, ok=True)``, which runs
    ``edgetune ARGS`` there (``ok``: exit with its error when it fails); board, tracker and board namespace are
    stopped afterwards."""
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="edgetune-emulated-") as tmp:
        home = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(root), "XDG_STATE_HOME": str(home / "state"),
               "XDG_CONFIG_HOME": str(home / "config"), "EDGETUNE_INVENTORY": str(home / "inventory.toml"),
               "EDGETUNE_KNOWN_HOSTS": str(home / "known_hosts"), "EDGETUNE_SSH_CONFIG": str(home / "none")}
        env.pop("SSH_AUTH_SOCK", None)

        def cli(*args: object, ok: bool = True) -> subprocess.CompletedProcess:
            r = subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], env=env, capture_output=True,
                               text=True, timeout=timeout_s)
            if ok and r.returncode != 0:
                raise SystemExit(f"edgetune {' '.join(map(str, args))} failed: {r.stderr.strip()[-400:]}")
            return r

        board = start_board(image)
        try:
            (home / "known_hosts").write_text(board.known_hosts_line)
            cli("board", "add", name, "--type", board_type, "--host", board.address, "--user", "root", "--key",
                board.client_key)
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            cli("tracker", "start", "--port", port)
            cli("board", "provision", name, "--system-site-packages", *provision)
            yield cli
        finally:
            cli("board", "stop", name, ok=False)
            cli("tracker", "stop", ok=False)
            board.stop()


def check(image: Path, say: Callable[[str], None] = print) -> str:
    """Start a board, log in over SSH with its key, import tvm (an armv7 image: numpy, its TVM comes with
    provisioning) on it, stop it; what the board said."""
    has_tvm = bool(json.loads((image / "image.json").read_text())["recipe"].get("wheels"))
    module = "tvm" if has_tvm else "numpy"
    with emulated_board(image) as b, tempfile.NamedTemporaryFile("w", suffix=".known_hosts") as kh:
        kh.write(b.known_hosts_line)
        kh.flush()
        say(f"board up at {b.address}; logging in and importing {module} on it (about 10 s under emulation) ...")
        r = run_tool(["ssh", "-i", str(b.client_key), "-o", f"UserKnownHostsFile={kh.name}", "-o", "BatchMode=yes",
                  "-o", "StrictHostKeyChecking=yes", f"root@{b.address}",
                  f"python3 -c 'import platform, {module}; print(platform.machine(), {module}.__version__)'"], "ssh",
                 timeout=300)
        return r.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkit.testing.emulated_board",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("build", "check", "info", "path"))
    parser.add_argument("--arch", choices=sorted(RECIPES), default="aarch64", help="which board image")
    args = parser.parse_args(argv)
    recipe = RECIPES[args.arch]
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        if args.command == "path":
            print(image_dir(recipe))
        elif args.command == "info":
            info = image_info(recipe)
            print(json.dumps(info, indent=1) if info else f"not built: {image_dir(recipe)}")
        elif skip_reason():
            say(f"emulated boards skipped: {skip_reason()}")
        else:
            image = build_image(recipe, say=say)
            if args.command == "check":
                print(check(image, say))
            else:
                print(image)
    except EmulationUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
