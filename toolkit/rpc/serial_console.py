"""Bring a board with no network access (or no known address) onto SSH over its serial console.

Logs in on the serial line (pyserial), reads the board's IP addresses and architecture,
optionally installs a public key and enables sshd, and suggests the ``edgetune board add`` line.
The password is typed interactively or read from stdin by the CLI; it is sent once and never
stored. Every command is framed by markers, so the board's echo and prompt never pollute output.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Callable

import serial

from toolkit.errors import BoardError

_LOGIN = re.compile(rb"login:\s*$")
_PASSWORD = re.compile(rb"[Pp]assword:\s*$")
_PROMPT = re.compile(rb"[#$>] ?$")
_INCORRECT = re.compile(rb"[Ll]ogin incorrect|[Aa]uthentication failure")


class SerialConsoleError(BoardError):
    """The serial console did not answer as expected."""


@dataclass
class BoardFacts:
    """What the console learned about the board."""

    arch: str
    addresses: list[str]
    hostname: str
    user: str
    key_installed: bool = False
    sshd: str = ""
    candidates: list[str] = field(default_factory=list)

    def add_command(self, name: str, key: str | None = None) -> str:
        """The ``edgetune board add`` line for this board."""
        type_ = self.candidates[0] if len(self.candidates) == 1 else "TYPE"
        host = self.addresses[0] if self.addresses else "HOST"
        line = f"edgetune board add {shlex.quote(name)} --type {type_} --host {host} --user {shlex.quote(self.user)}"
        return line + (f" --key {shlex.quote(key)}" if key else "")


class SerialConsole:
    """A logged-in shell on a serial line. ``port`` is an open ``serial.Serial`` (or compatible)."""

    def __init__(self, port: serial.Serial, timeout: float = 10.0) -> None:
        self.port, self.timeout = port, timeout
        self._buf = b""
        self._n = 0

    @classmethod
    def open(cls, device: str, baud: int = 115200, timeout: float = 10.0) -> "SerialConsole":
        """Open ``device`` (e.g. /dev/ttyUSB0) at ``baud``."""
        try:
            port = serial.Serial(device, baud, timeout=0.1)
        except (serial.SerialException, OSError) as exc:
            raise SerialConsoleError(f"cannot open serial device {device}: {exc}; check the cable and that you "
                                     "may use it (group dialout)") from None
        return cls(port, timeout)

    def close(self) -> None:
        """Close the serial port."""
        self.port.close()

    def __enter__(self) -> "SerialConsole":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, text: str) -> None:
        """Write ``text`` to the line."""
        self.port.write(text.encode())
        self.port.flush()

    def expect(self, patterns: list[re.Pattern], timeout: float | None = None) -> tuple[int, bytes]:
        """Read until one of ``patterns`` matches; ``(its index, the text read up to the match's end)``."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for k, pat in enumerate(patterns):
                m = pat.search(self._buf)
                if m:
                    text, self._buf = self._buf[: m.end()], self._buf[m.end():]
                    return k, text
            if time.monotonic() > deadline:
                tail = self._buf[-80:].decode(errors="replace").strip().replace("\r", "").replace("\n", " | ")
                raise SerialConsoleError(f"the serial console did not answer as expected within "
                                         f"{timeout or self.timeout:.0f}s (last output: {tail!r}); "
                                         "check the device and --baud")
            chunk = self.port.read(4096)
            if chunk:
                self._buf += chunk

    def login(self, user: str, password: Callable[[], str]) -> None:
        """Log in as ``user``; ``password()`` is called only if the board asks for one."""
        self.send("\n")
        k, _ = self.expect([_LOGIN, _PROMPT, _PASSWORD])
        if k == 2:  # our newline was taken as an empty user name: fail that attempt, get a fresh prompt
            self.send("\n")
            k, _ = self.expect([_LOGIN, _PROMPT], timeout=max(self.timeout, 15))
        if k == 1:
            return  # a shell is already open on the console
        self.send(user + "\n")
        k, _ = self.expect([_PASSWORD, _PROMPT, _INCORRECT])
        if k == 0:
            self.send(password() + "\n")
            k, _ = self.expect([_INCORRECT, _PROMPT, _LOGIN], timeout=max(self.timeout, 15))
            if k != 1:
                raise SerialConsoleError(f"login as {user!r} on the serial console was refused: wrong user or "
                                         "password (nothing was stored; try again)")
        elif k == 2:
            raise SerialConsoleError(f"login as {user!r} on the serial console was refused")

    def run(self, command: str, timeout: float | None = None) -> tuple[int, str]:
        """Run a shell command; ``(exit status, output)``."""
        self._n += 1
        tag = f"ET{self._n}X"
        # the markers are split in the command line, so the board's echo of it never matches
        self.send(f"echo '{tag}''B'; {command}; echo '{tag}''E' $?\n")
        self.expect([re.compile(rf"{tag}B\r?\n".encode())], timeout)
        _, text = self.expect([re.compile(rf"{tag}E (\d+)\r?\n".encode())], timeout)
        m = re.search(rf"{tag}E (\d+)\r?\n".encode(), text)
        body = text[: m.start()].decode(errors="replace").replace("\r\n", "\n")
        return int(m.group(1)), body

    def sudo(self, command: str, password: Callable[[], str], timeout: float | None = None) -> tuple[int, str]:
        """Run ``command`` as root (directly when logged in as root); sudo's password is sent when asked."""
        if self.run("id -u")[1].strip() == "0":
            return self.run(command, timeout)
        self._n += 1
        tag = f"ET{self._n}X"
        self.send(f"echo '{tag}''B'; sudo -S -p '{tag}''P' sh -c {shlex.quote(command)}; echo '{tag}''E' $?\n")
        self.expect([re.compile(rf"{tag}B\r?\n".encode())], timeout)
        k, text = self.expect([re.compile(rf"{tag}P".encode()), re.compile(rf"{tag}E (\d+)\r?\n".encode())], timeout)
        out = b""
        if k == 0:
            self.send(password() + "\n")
            _, text = self.expect([re.compile(rf"{tag}E (\d+)\r?\n".encode())], timeout)
        out += text
        m = re.search(rf"{tag}E (\d+)\r?\n".encode(), out)
        return int(m.group(1)), out[: m.start()].decode(errors="replace").replace("\r\n", "\n")


_ADDRESSES = ("hostname -I 2>/dev/null || ip -4 -o addr show scope global 2>/dev/null | "
              "awk '{split($4, a, \"/\"); print a[1]}'")


def board_types_for(arch: str) -> list[str]:
    """Board types whose profile runs on ``arch`` (simulator-only types excluded)."""
    from toolkit.boards import load_profile, profile_names

    same = {"armv7l": "armv7l", "armv7": "armv7l", "aarch64": "aarch64", "arm64": "aarch64", "x86_64": "x86_64"}
    want = same.get(arch, arch)
    return [n for n in profile_names() if load_profile(n).arch == want and load_profile(n).executor != "fsim"]


def bring_up(console: SerialConsole, user: str, password: Callable[[], str], *, install_key: str | None = None,
             enable_sshd: bool = False) -> BoardFacts:
    """Log in, read arch/addresses/hostname, optionally install ``install_key`` (a public key line) and sshd."""
    console.login(user, password)
    arch = console.run("uname -m")[1].strip()
    hostname = console.run("hostname 2>/dev/null || uname -n")[1].strip()
    addresses = [a for a in console.run(_ADDRESSES)[1].split() if re.match(r"^\d+\.\d+\.\d+\.\d+$", a)
                 and not a.startswith("127.")]
    facts = BoardFacts(arch=arch, addresses=addresses, hostname=hostname, user=user,
                       candidates=board_types_for(arch))
    if install_key:
        key = install_key.strip()
        if not re.match(r"^(ssh-|ecdsa-|sk-)\S+ [A-Za-z0-9+/=]+( .*)?$", key) or "\n" in key:
            raise SerialConsoleError("--install-key must be a public key file (e.g. ~/.ssh/id_ed25519.pub), "
                                     "never a private key")
        q = shlex.quote(key)
        rc, out = console.run(f"mkdir -p ~/.ssh && chmod 700 ~/.ssh && (grep -qxF {q} ~/.ssh/authorized_keys "
                              f"2>/dev/null || echo {q} >> ~/.ssh/authorized_keys) && chmod 600 ~/.ssh/authorized_keys")
        if rc:
            raise SerialConsoleError(f"could not install the public key on the board: {out.strip()[-120:]}")
        facts.key_installed = True
    if enable_sshd:
        rc, out = console.sudo("systemctl enable --now ssh 2>/dev/null || systemctl enable --now sshd 2>/dev/null "
                               "|| service ssh start", password, timeout=60)
        facts.sshd = "enabled" if rc == 0 else f"failed: {out.strip()[-120:]}"
    return facts
