"""A real OpenSSH server on loopback (127.0.0.1, .2, .3), started once per test session.

It runs as the current user with its own host key and one authorised ed25519 test key; tests
reach "boards" that are this machine through it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolkit.testing.emulated_board import ssh_banner

SSHD = "/usr/sbin/sshd"
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


@dataclass
class SSHServer:
    pid: int
    port: int
    client_key: Path
    wrong_key: Path
    host_key_pub: Path
    other_host_key_pub: Path
    known_hosts_line: dict[str, str]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> SSHServer:
    yield from _sshd(tmp_path_factory, sftp=True)


@pytest.fixture(scope="session")
def sshd_no_sftp(tmp_path_factory) -> SSHServer:
    """The same server without the ``sftp`` subsystem (as on minimal board images and dropbear)."""
    yield from _sshd(tmp_path_factory, sftp=False)


def _sshd(tmp_path_factory, sftp: bool):
    if not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
        pytest.skip("OpenSSH server not installed (apt-get install openssh-server); SSH tests need it")
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "other_host_key", "client_key", "wrong_key"):
        _keygen(d / name)
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    port = free_port()
    lines = [f"ListenAddress {a}:{port}" for a in ADDRESSES] + [
        f"HostKey {d / 'host_key'}", f"AuthorizedKeysFile {d / 'authorized_keys'}",
        f"PidFile {d / 'sshd.pid'}", "PermitRootLogin prohibit-password", "StrictModes no", "UsePAM no",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "AllowTcpForwarding yes",
        "LogLevel ERROR", "MaxStartups 50",
    ] + (["Subsystem sftp internal-sftp"] if sftp else [])
    (d / "sshd_config").write_text("\n".join(lines) + "\n")
    try:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    except OSError as exc:
        if os.geteuid() == 0:
            pytest.skip(f"cannot create /run/sshd for the test sshd: {exc}")
    log = open(d / "sshd.log", "w")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=log,
                            start_new_session=True)
    deadline = time.monotonic() + 20
    while not all(ssh_banner(a, port) for a in ADDRESSES):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.skip(f"sshd did not start: {(d / 'sshd.log').read_text()[-500:]}")
        time.sleep(0.1)
    pub = (d / "host_key.pub").read_text().split()
    server = SSHServer(proc.pid, port, d / "client_key", d / "wrong_key", d / "host_key.pub", d / "other_host_key.pub",
                       {a: f"[{a}]:{port} {pub[0]} {pub[1]}\n" for a in ADDRESSES})
    yield server
    os.killpg(proc.pid, 15)
    proc.wait(timeout=10)
    log.close()


@pytest.fixture
def trusted(sshd, known_hosts) -> Path:
    """known_hosts that already trusts the test sshd on all three addresses."""
    known_hosts.write_text("".join(sshd.known_hosts_line.values()))
    return known_hosts
