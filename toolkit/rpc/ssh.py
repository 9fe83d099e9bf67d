"""SSH to boards with paramiko: key-only login, verified host keys, one-line errors.

Host keys are checked against ``known_hosts`` (``$EDGETUNE_KNOWN_HOSTS``, else ``~/.ssh/known_hosts``).
An unknown host is refused unless ``accept_new_host_key`` (then its key is recorded, like OpenSSH's
``StrictHostKeyChecking=accept-new``); a changed host key is always refused, with both fingerprints.
Login uses a key file, the SSH agent or ``~/.ssh/config`` (``Host`` aliases, ``HostName``, ``User``,
``Port``, ``IdentityFile``); passwords are never used.

>>> target = SSHTarget("127.0.0.1", 22, "root")
>>> target.address
'root@127.0.0.1:22'
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import shlex
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko

from toolkit.errors import BoardError

if TYPE_CHECKING:
    from toolkit.boards import BoardEntry

DEFAULT_TIMEOUT_S = 10.0

logging.getLogger("paramiko").addHandler(logging.NullHandler())
"""paramiko's transport thread logs what it then raises (a host that closes before its banner: two tracebacks);
edgetune reports the raised error in one line, so the log has a handler that keeps it off the terminal."""


def known_hosts_path() -> Path:
    """``$EDGETUNE_KNOWN_HOSTS``, else ``~/.ssh/known_hosts``."""
    return Path(os.environ.get("EDGETUNE_KNOWN_HOSTS") or "~/.ssh/known_hosts").expanduser()


def ssh_config_path() -> Path:
    """``$EDGETUNE_SSH_CONFIG``, else ``~/.ssh/config``."""
    return Path(os.environ.get("EDGETUNE_SSH_CONFIG") or "~/.ssh/config").expanduser()


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style fingerprint, e.g. ``ssh-ed25519 SHA256:...``."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


def _host_id(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


@dataclass(frozen=True)
class SSHTarget:
    """Where and as whom to log in; ``alias`` is the name looked up in ``~/.ssh/config``."""

    host: str
    port: int = 22
    user: str | None = None
    key_files: tuple[str, ...] = ()
    alias: str | None = None

    @property
    def address(self) -> str:
        """``user@host:port`` for messages."""
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"

    @classmethod
    def from_entry(cls, entry: "BoardEntry") -> "SSHTarget":
        """The login of an inventory board, completed from ``~/.ssh/config`` (explicit fields win)."""
        if not entry.host:
            raise BoardError(f"board {entry.name!r} has no host; re-add it with "
                             f"`edgetune board add {entry.name} --type {entry.type} --host HOST --replace`")
        cfg: dict = {}
        path = ssh_config_path()
        if path.is_file():
            cfg = paramiko.SSHConfig.from_path(str(path)).lookup(entry.host)
        host = cfg.get("hostname", entry.host)
        port = entry.port if entry.port != 22 else int(cfg.get("port", 22))
        user = entry.user or cfg.get("user")
        keys = tuple([str(Path(entry.key).expanduser())] if entry.key else
                     [str(Path(k).expanduser()) for k in cfg.get("identityfile", [])
                      if Path(k).expanduser().is_file()])
        return cls(host=host, port=port, user=user, key_files=keys, alias=entry.host)


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown hosts, or record them when the user opted in (``accept-new``)."""

    def __init__(self, accept_new: bool, path: Path, port: int, revoked: frozenset[str] = frozenset()) -> None:
        self.accept_new, self.path, self.port, self.revoked = accept_new, path, port, revoked

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        host_id = hostname  # paramiko already passes "[host]:port" for non-22 ports
        if key.get_base64() in self.revoked:
            raise BoardError(f"the SSH host key of {host_id} ({fingerprint(key)}) is marked @revoked in "
                             f"{self.path}; do not connect until the board has a new host key")
        if not self.accept_new:
            raise BoardError(
                f"unknown SSH host key for {host_id} ({fingerprint(key)}); check it on the board "
                f"(`ssh-keygen -lf /etc/ssh/ssh_host_{key.get_name().removeprefix('ssh-')}_key.pub`) "
                "and rerun with --accept-new-host-key to record it")
        client.get_host_keys().add(host_id, key.get_name(), key)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path, "a") as fh:
            fh.write(f"{host_id} {key.get_name()} {key.get_base64()}\n")


@dataclass
class CommandResult:
    """Exit status and output of one remote command."""

    command: str
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """True when the command exited with 0."""
        return self.rc == 0


@dataclass
class SSHSession:
    """An open SSH connection to a board. Use as a context manager."""

    target: SSHTarget
    client: paramiko.SSHClient
    _sftp: paramiko.SFTPClient | None = field(default=None, repr=False)
    _no_sftp: bool = field(default=False, repr=False)

    def __enter__(self) -> "SSHSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def transport(self) -> paramiko.Transport:
        """The underlying transport (port forwarding)."""
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise BoardError(f"the SSH connection to {self.target.address} was closed; rerun the command")
        return transport

    def run(self, command: str, *, timeout: float = 120.0, check: bool = False,
            stdin: bytes | None = None) -> CommandResult:
        """Run a shell command; ``check`` raises :class:`BoardError` on a non-zero exit."""
        try:
            chan_in, chan_out, chan_err = self.client.exec_command(command, timeout=timeout)
            if stdin is not None:
                chan_in.write(stdin)
                chan_in.channel.shutdown_write()
            out = chan_out.read().decode(errors="replace")
            err = chan_err.read().decode(errors="replace")
            rc = chan_out.channel.recv_exit_status()
        except (socket.timeout, TimeoutError):
            raise BoardError(f"command on {self.target.address} timed out after {timeout:.0f}s: "
                             f"{command[:80]}; check the board's load or raise the timeout") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise BoardError(f"SSH connection to {self.target.address} dropped ({exc}); "
                             "check the board and rerun") from None
        result = CommandResult(command, rc, out, err)
        if check and not result.ok:
            last = (err.strip() or out.strip()).splitlines()[-1:] or ["no output"]
            raise BoardError(f"`{command[:100]}` failed on {self.target.address} (exit {rc}): {last[0]}")
        return result

    @property
    def sftp(self) -> paramiko.SFTPClient | None:
        """An SFTP client on this connection (opened once); ``None`` when the server has no ``sftp``
        subsystem (minimal images, dropbear): transfers then go through plain commands."""
        if self._sftp is None and not self._no_sftp:
            try:
                self._sftp = self.client.open_sftp()
            except (paramiko.SSHException, EOFError, OSError):
                self._no_sftp = True
        return self._sftp

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write ``data`` to ``remote_path`` (absolute, or relative to the login directory): over SFTP, or
        without it through ``cat`` into a temporary file renamed into place."""
        sftp = self.sftp
        if sftp is None:
            tmp = f"{remote_path}.edgetune-upload"
            self.run(f"umask 077 && cat > {quote(tmp)} && chmod {mode:o} {quote(tmp)} && "
                     f"mv -f {quote(tmp)} {quote(remote_path)}", stdin=data, check=True,
                     timeout=120.0 + len(data) / 100e3)
            return
        try:
            with sftp.open(remote_path, "wb") as fh:
                fh.write(data)
            sftp.chmod(remote_path, mode)
        except (OSError, paramiko.SSHException) as exc:
            raise BoardError(f"upload of {remote_path} to {self.target.address} failed: "
                             f"{getattr(exc, 'strerror', None) or exc}; check the board's disk and permissions") \
                from None

    def home(self) -> str:
        """The login user's home directory on the board."""
        sftp = self.sftp
        if sftp is None:
            return self.run('printf %s "$HOME"', check=True).stdout
        return sftp.normalize(".")

    def close(self) -> None:
        """Close SFTP and the connection."""
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        self.client.close()


def load_known_hosts(keys: paramiko.HostKeys, path: Path) -> frozenset[str]:
    """Add ``path``'s host keys to ``keys``; the base64 keys its ``@revoked`` lines name. ``@cert-authority``
    lines are skipped (edgetune verifies plain host keys, not certificates)."""
    revoked: set[str] = set()
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BoardError(f"cannot read known_hosts {path}: {exc}; fix or move the file") from None
    for no, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            marker, _, rest = line.partition(" ")
            fields_ = rest.split()
            if marker == "@revoked" and len(fields_) >= 3:
                revoked.add(fields_[2])
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, no)
        except Exception:  # noqa: BLE001 - paramiko raises several kinds for a malformed key
            entry = None
        if entry is None or entry.key is None:
            raise BoardError(f"known_hosts {path}:{no} is not a host key line; fix or remove that line")
        for host in entry.hostnames:
            keys.add(host, entry.key.get_name(), entry.key)
    return frozenset(revoked)


def connect(target: SSHTarget, *, accept_new_host_key: bool = False,
            timeout: float = DEFAULT_TIMEOUT_S, known_hosts: Path | None = None) -> SSHSession:
    """Open a verified, key-authenticated SSH connection or raise a one-line :class:`BoardError`."""
    path = known_hosts or known_hosts_path()
    client = paramiko.SSHClient()
    for key_file in target.key_files:
        mode = Path(key_file).expanduser().stat().st_mode
        if mode & 0o077:
            raise BoardError(f"the SSH key {key_file} is readable by other users (mode {stat.S_IMODE(mode):o}); "
                             f"`chmod 600 {key_file}`, as ssh itself requires")
    revoked = load_known_hosts(client.get_host_keys(), path) if path.is_file() else frozenset()
    client.set_missing_host_key_policy(_HostKeyPolicy(accept_new_host_key, path, target.port, revoked))
    where = target.address
    try:
        client.connect(
            target.host, port=target.port, username=target.user, password=None,
            key_filename=list(target.key_files) or None, allow_agent=True,
            look_for_keys=not target.key_files, timeout=timeout, banner_timeout=timeout,
            auth_timeout=timeout, channel_timeout=timeout,
        )
    except BoardError:
        client.close()
        raise
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise BoardError(
            f"SSH host key of {_host_id(target.host, target.port)} CHANGED: known_hosts has "
            f"{fingerprint(exc.expected_key)}, the server sent {fingerprint(exc.key)}; if the board was "
            f"reinstalled, remove the old key with `ssh-keygen -R '{_host_id(target.host, target.port)}' "
            f"-f {path}` and rerun with --accept-new-host-key, otherwise do not connect") from None
    except paramiko.PasswordRequiredException:
        client.close()
        raise BoardError(f"the SSH key {', '.join(target.key_files)} is encrypted; load it into the agent "
                         "with `ssh-add KEY` (edgetune never asks for passphrases)") from None
    except paramiko.AuthenticationException:
        client.close()
        keys = ", ".join(target.key_files) or "the SSH agent's and ~/.ssh/id_* keys"
        raise BoardError(f"SSH login to {where} refused for {keys}; authorise the key on the board "
                         f"(`ssh-copy-id -i KEY.pub -p {target.port} {target.user or 'USER'}@{target.host}`, "
                         "or `edgetune board console --install-key`) or give the right one with --key") from None
    except paramiko.ssh_exception.NoValidConnectionsError as exc:
        client.close()
        codes = {getattr(e, "errno", None) for e in exc.errors.values()}
        if codes & {errno.EHOSTUNREACH, errno.ENETUNREACH}:
            raise BoardError(f"cannot reach {where}: no route to host; check the board is powered on, on this "
                             "network, and the address is right") from None
        raise BoardError(f"cannot reach {where}: connection refused; is sshd running on the board and "
                         "is the port right (`edgetune board add NAME --port P --replace`)?") from None
    except socket.gaierror as exc:
        client.close()
        raise BoardError(f"cannot resolve host {target.host!r} ({exc.strerror}); check the name or "
                         "use its IP address") from None
    except (socket.timeout, TimeoutError):
        client.close()
        raise BoardError(f"timed out after {timeout:.0f}s connecting to {where}; check the board is "
                         "powered on and on the network (ping it)") from None
    except (paramiko.SSHException, EOFError, ConnectionResetError) as exc:
        client.close()
        raise BoardError(f"{where} does not speak SSH ({' '.join(str(exc).split()) or type(exc).__name__}); "
                         "check the port is the board's sshd port") from None
    except OSError as exc:
        client.close()
        raise BoardError(f"cannot reach {where}: {exc.strerror or exc}; check the address and "
                         "the network") from None
    server_key = client.get_transport().get_remote_server_key()
    if server_key.get_base64() in revoked:
        client.close()
        raise BoardError(f"the SSH host key of {where} ({fingerprint(server_key)}) is marked @revoked in {path}; "
                         "do not connect until the board has a new host key")
    return SSHSession(target, client)


def connect_board(entry: "BoardEntry", *, accept_new_host_key: bool = False,
                  timeout: float = DEFAULT_TIMEOUT_S) -> SSHSession:
    """:func:`connect` to an inventory board."""
    return connect(SSHTarget.from_entry(entry), accept_new_host_key=accept_new_host_key, timeout=timeout)


def quote(path: str) -> str:
    """Shell-quote a remote path, keeping a leading ``~/`` expandable."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)
