"""SSH tunnels between this machine and a board, so no RPC port is exposed on any network.

- reverse: the board's ``127.0.0.1:remote_port`` leads to the tracker here (paramiko
  ``transport.request_port_forward``); the agent registers through it;
- local: ``127.0.0.1:local_port`` here leads to the agent's port on the board's loopback
  (``direct-tcpip`` channels); the agent reports this port to the tracker, so clients that get
  the board from the tracker connect here.

A dropped SSH connection is re-established (same ports) by a monitor thread; the agent keeps
retrying the tracker meanwhile and registers again once the reverse tunnel is back.

Keeper process (started by ``edgetune board provision NAME --tunnel``)::

    python -m toolkit.rpc.tunnel NAME --tracker 127.0.0.1:9190
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import threading
import time
from pathlib import Path
from typing import Callable

import paramiko

from toolkit.procs import SAFE_PATH, SAFE_PATH_ENV, identity, is_running, stop_group
from toolkit.boards import BoardEntry, Inventory
from toolkit.errors import BoardError, EdgetuneError
from toolkit.rpc.ssh import SSHSession, connect_board
from toolkit.state import read_state, remove_state, write_state


def _pump(a, b) -> None:
    """Copy bytes both ways between two sockets/channels until either side closes."""
    try:
        while True:
            ready, _, _ = select.select([a, b], [], [], 1.0)
            for src in ready:
                data = src.recv(65536)
                if not data:
                    return
                (b if src is a else a).sendall(data)
    except (OSError, EOFError, paramiko.SSHException):
        return
    finally:
        for s in (a, b):
            try:
                s.close()
            except (OSError, EOFError):
                pass


class BoardTunnel:
    """Reverse tunnel to the tracker + local tunnel to the agent for one board, kept up while open.

    ``agent_port()`` returns the agent's port on the board (read when a client connects).
    """

    def __init__(self, entry: BoardEntry, tracker: tuple[str, int], *, remote_port: int = 0, local_port: int = 0,
                 agent_port: Callable[[SSHSession], int] | None = None, accept_new_host_key: bool = False,
                 retry_s: float = 2.0) -> None:
        self.entry, self.tracker = entry, tracker
        self.remote_port, self.local_port = remote_port, local_port
        self._agent_port = agent_port
        self.accept_new_host_key, self.retry_s = accept_new_host_key, retry_s
        self.session: SSHSession | None = None
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.reconnects = 0

    # -- lifecycle --------------------------------------------------------------------------------
    def open(self) -> "BoardTunnel":
        """Connect, open both tunnels, start the monitor; ports are then fixed for this object's life."""
        self._connect()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.local_port))
        self._listener.listen(16)
        self.local_port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept_loop, daemon=True, name="tunnel-local").start()
        threading.Thread(target=self._monitor, daemon=True, name="tunnel-monitor").start()
        return self

    def close(self) -> None:
        """Stop forwarding and disconnect."""
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            if self.session is not None:
                self.session.close()

    def __enter__(self) -> "BoardTunnel":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connect(self) -> None:
        session = connect_board(self.entry, accept_new_host_key=self.accept_new_host_key)
        transport = session.transport
        transport.set_keepalive(5)
        try:
            port = transport.request_port_forward("127.0.0.1", self.remote_port, handler=self._reverse_handler)
        except paramiko.SSHException:
            session.close()
            raise BoardError(f"the board {self.entry.name} refused a reverse tunnel on 127.0.0.1:{self.remote_port} "
                             "(port taken, or AllowTcpForwarding no in its sshd_config)") from None
        self.remote_port = port
        with self._lock:
            self.session = session

    def alive(self) -> bool:
        """True while the SSH connection is up."""
        with self._lock:
            t = self.session.client.get_transport() if self.session else None
        return bool(t and t.is_active())

    def _monitor(self) -> None:
        while not self._stop.wait(0.5):
            if self.alive():
                continue
            with self._lock:
                if self.session is not None:
                    self.session.close()
                    self.session = None
            while not self._stop.is_set():
                try:
                    self._connect()
                    self.reconnects += 1
                    break
                except EdgetuneError:
                    self._stop.wait(self.retry_s)

    # -- forwarding -------------------------------------------------------------------------------
    def _reverse_handler(self, channel: paramiko.Channel, origin: tuple, server: tuple) -> None:
        try:
            sock = socket.create_connection(self.tracker, timeout=10)
        except OSError:
            channel.close()
            return
        sock.settimeout(None)
        threading.Thread(target=_pump, args=(channel, sock), daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._forward_local, args=(conn, peer), daemon=True).start()

    def _forward_local(self, conn: socket.socket, peer: tuple) -> None:
        try:
            with self._lock:
                session = self.session
            if session is None or self._agent_port is None:
                raise BoardError("tunnel down")
            port = self._agent_port(session)
            channel = session.transport.open_channel("direct-tcpip", ("127.0.0.1", port), peer)
        except (EdgetuneError, paramiko.SSHException, OSError, ValueError):
            conn.close()
            return
        _pump(conn, channel)


def agent_port_from_state(state_path: str) -> Callable[[SSHSession], int]:
    """Reads the agent's bound port from its state file on the board."""
    from toolkit.rpc.ssh import quote

    def port(session: SSHSession) -> int:
        r = session.run(f"cat {quote(state_path)}", check=True, timeout=10)
        return int(json.loads(r.stdout)["port"])
    return port


# -- the keeper process -------------------------------------------------------------------------------

def running_keeper(name: str) -> dict | None:
    """State of a board's tunnel keeper (``pid``, ``remote_port``, ``local_port``) if it runs."""
    state = read_state(f"tunnels/{name}")
    if is_running(state) and state.get("ready"):
        return state
    return None


def stop_keeper(name: str) -> bool:
    """Stop a board's tunnel keeper and what it started (SIGKILL when it does not end within 5 s of SIGTERM);
    ``True`` if one was running."""
    state = read_state(f"tunnels/{name}")
    remove_state(f"tunnels/{name}")
    if not is_running(state):
        return False
    stop_group(int(state["pid"]), timeout=5.0)
    return True


def start_keeper(name: str, tracker: tuple[str, int], agent_state: str, *, inventory: Path | None = None,
                 accept_new_host_key: bool = False, timeout: float = 30.0) -> dict:
    """Start (or reuse) the detached keeper of ``name``'s tunnels; its state once both tunnels are up."""
    import subprocess
    import sys

    state = running_keeper(name)
    if state and tuple(state["tracker"]) == tuple(tracker):
        return state
    stop_keeper(name)
    argv = [sys.executable, *SAFE_PATH, "-m", "toolkit.rpc.tunnel", name, "--tracker", f"{tracker[0]}:{tracker[1]}",
            "--agent-state", agent_state]
    if inventory:
        argv += ["--inventory", str(inventory)]
    if accept_new_host_key:
        argv.append("--accept-new-host-key")
    log_path = Path(read_state_dir()) / "tunnels" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, **SAFE_PATH_ENV})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(f"tunnels/{name}")
        if state and state.get("pid") == proc.pid and state.get("ready"):
            return state
        if proc.poll() is not None:
            tail = log_path.read_text().strip().splitlines()[-1:] or ["no output"]
            raise BoardError(f"the SSH tunnel to {name} failed: {tail[0]}")
        time.sleep(0.1)
    stop_group(proc.pid, timeout=5.0)
    raise BoardError(f"the SSH tunnel to {name} did not come up within {timeout:.0f}s; see {log_path}")


def read_state_dir() -> Path:
    """Where keeper state and logs live."""
    from toolkit.state import state_dir

    return state_dir()


def main(argv: list[str] | None = None) -> None:
    """Keeper: hold a board's tunnels open until SIGTERM."""
    import signal

    p = argparse.ArgumentParser(prog="python -m toolkit.rpc.tunnel")
    p.add_argument("board")
    p.add_argument("--tracker", required=True)
    p.add_argument("--agent-state", required=True, help="the agent's state file on the board")
    p.add_argument("--inventory", default=None)
    p.add_argument("--accept-new-host-key", action="store_true")
    args = p.parse_args(argv)
    host, _, port = args.tracker.rpartition(":")
    entry = Inventory(args.inventory).get(args.board)
    try:
        tunnel = BoardTunnel(entry, (host, int(port)), agent_port=agent_port_from_state(args.agent_state),
                             accept_new_host_key=args.accept_new_host_key).open()
    except EdgetuneError as exc:
        print(f"error: {exc}", flush=True)
        raise SystemExit(2) from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    write_state(f"tunnels/{args.board}", {**identity(), "ready": True, "tracker": [host, int(port)],
                                          "remote_port": tunnel.remote_port, "local_port": tunnel.local_port})
    print(f"tunnels up: board 127.0.0.1:{tunnel.remote_port} -> tracker {args.tracker}; "
          f"127.0.0.1:{tunnel.local_port} -> agent", flush=True)
    last = 0
    while not stop.wait(1.0):
        if tunnel.reconnects != last:
            last = tunnel.reconnects
            print(f"reconnected ({last})", flush=True)
    tunnel.close()


if __name__ == "__main__":
    main()
