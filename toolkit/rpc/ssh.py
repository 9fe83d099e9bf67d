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
import hashlib
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

    def __init__(self, accept_new: bool, path: Path, port: int) -> None:
        self.accept_new, self.path, self.port = accept_new, path, port

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        host_id = hostname  # paramiko already passes "[host]:port" for non-22 ports
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
    def sftp(self) -> paramiko.SFTPClient:
        """An SFTP client on this connection (opened once)."""
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
        return self._sftp

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write ``data`` to ``remote_path`` (absolute, or relative to the login directory)."""
        with self.sftp.open(remote_path, "wb") as fh:
            fh.write(data)
        self.sftp.chmod(remote_path, mode)

    def put_file(self, local: Path, remote_path: str) -> None:
        """Upload a local file, keeping its permission bits."""
        self.sftp.put(str(local), remote_path)
        self.sftp.chmod(remote_path, stat.S_IMODE(local.stat().st_mode))

    def home(self) -> str:
        """The login user's home directory on the board."""
        return self.sftp.normalize(".")

    def close(self) -> None:
        """Close SFTP and the connection."""
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        self.client.close()


def connect(target: SSHTarget, *, accept_new_host_key: bool = False,
            timeout: float = DEFAULT_TIMEOUT_S, known_hosts: Path | None = None) -> SSHSession:
    """Open a verified, key-authenticated SSH connection or raise a one-line :class:`BoardError`."""
    path = known_hosts or known_hosts_path()
    client = paramiko.SSHClient()
    if path.is_file():
        try:
            client.load_host_keys(str(path))
        except (OSError, paramiko.SSHException) as exc:
            raise BoardError(f"cannot read known_hosts {path}: {exc}; fix or move the file") from None
    client.set_missing_host_key_policy(_HostKeyPolicy(accept_new_host_key, path, target.port))
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
    except paramiko.ssh_exception.NoValidConnectionsError:
        client.close()
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
