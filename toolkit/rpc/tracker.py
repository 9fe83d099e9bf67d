"""Real TVM RPC tracker and server processes on this machine, and the tracker's view of its boards.

Both run as ``python -m tvm.exec.rpc_tracker`` / ``rpc_server`` subprocesses in their own
process group (they fork workers), so :meth:`stop` ends the whole group and frees the port.
They bind to loopback unless told otherwise.

>>> from toolkit.rpc.tracker import start_tracker, start_server, tracker_summary
>>> with start_tracker() as tracker, start_server(tracker.address, key="demo") as server:  # doctest: +SKIP
...     sorted(tracker_summary(*tracker.address)["queue_info"])
['demo']
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence


from toolkit.errors import BoardError
from toolkit.child_env import lean_env
from toolkit.procs import LOOPBACK, SAFE_PATH, kill_group

_BIND = re.compile(r"bind to \S+?:(\d+)")


def _free_port(host: str) -> int:
    """A port the OS reports free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_range(host: str, port: int, port_end: int | None) -> tuple[int, int]:
    if port == 0:
        port = _free_port(host)
        return port, port_end or min(port + 50, 65536)
    return port, port_end or port + 1


class _Process:
    """A TVM RPC subprocess in its own session; its log goes to a temporary file."""

    kind = "process"

    def __init__(self, argv: Sequence[str], host: str, die_with_parent: bool = False,
                 runtime_only: bool = False) -> None:
        self.host = host
        self.argv = list(argv)
        fd, self.log_path = tempfile.mkstemp(prefix=f"edgetune-{self.kind}-", suffix=".log")
        self._log = os.fdopen(fd, "w")
        env = lean_env({**os.environ, "PYTHONUNBUFFERED": "1"})   # its own children (TVM's workers) too
        if runtime_only:   # TVM's runtime library alone (the tracker): a second less to start
            env["TVM_USE_RUNTIME_LIB"] = "1"
        # with die_with_parent a guard (the group leader) kills the whole group when this process dies
        guard = [sys.executable, *SAFE_PATH, "-m", "toolkit.rpc.guard", str(os.getpid())] if die_with_parent else []
        self.proc = subprocess.Popen([*guard, *self.argv], stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.port: int | None = None

    @property
    def pid(self) -> int:
        """Process id (also the process group id)."""
        return self.proc.pid

    def alive(self) -> bool:
        """True while the main process runs."""
        return self.proc.poll() is None

    def log(self) -> str:
        """Everything the process printed so far."""
        return Path(self.log_path).read_text(errors="replace")

    def _bound_port(self) -> int | None:
        m = _BIND.search(self.log())
        return int(m.group(1)) if m else None

    def _fail(self, what: str) -> BoardError:
        tail = " | ".join(self.log().strip().splitlines()[-3:])
        self.stop()
        return BoardError(f"the RPC {self.kind} {what} ({' '.join(self.argv[1:4])}...): {tail or 'no output'}")

    def stop(self, timeout: float = 5.0) -> None:
        """Kill the process group (SIGTERM, then SIGKILL) and remove the log."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        kill_group(self.proc.pid, timeout)   # what still runs, workers that outlive the leader included
        self.proc.poll()                     # reap the leader if the SIGKILL ended it
        if not self._log.closed:
            self._log.close()
            Path(self.log_path).unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TrackerProcess(_Process):
    """``python -m tvm.exec.rpc_tracker`` on ``host``; :attr:`address` once ready."""

    kind = "tracker"

    def wait_ready(self, timeout: float = 30.0) -> "TrackerProcess":
        """Wait until the tracker accepts connections; :class:`BoardError` if it dies or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise self._fail("exited at start")
            self.port = self.port or self._bound_port()
            if self.port:
                try:
                    with socket.create_connection((self.host, self.port), timeout=1.0):
                        return self
                except OSError:
                    pass
            time.sleep(0.05)
        raise self._fail(f"did not accept connections within {timeout:.0f} s")

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` of the running tracker."""
        if self.port is None:
            self.wait_ready()
        return self.host, int(self.port)  # type: ignore[arg-type]


class ServerProcess(_Process):
    """``python -m tvm.exec.rpc_server``, registered with a tracker under ``key`` (or standalone)."""

    kind = "server"

    def __init__(self, argv: Sequence[str], host: str, tracker: tuple[str, int] | None, key: str | None,
                 die_with_parent: bool = False) -> None:
        super().__init__(argv, host, die_with_parent)
        self.tracker = tracker
        self.key = key

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` the server listens on (for direct connections)."""
        if self.port is None:
            self.wait_ready()
        return self.host, int(self.port)  # type: ignore[arg-type]

    def wait_ready(self, timeout: float = 30.0) -> "ServerProcess":
        """Wait until the tracker lists this server under its key (standalone: until it accepts)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise self._fail("exited at start")
            self.port = self.port or self._bound_port()
            if self.port and self._ready():
                return self
            time.sleep(0.1)
        where = (f"register with the tracker at {self.tracker[0]}:{self.tracker[1]} under key {self.key!r}"
                 if self.tracker else "accept connections")
        raise self._fail(f"did not {where} within {timeout:.0f} s")

    def _ready(self) -> bool:
        if self.tracker is None:
            try:
                with socket.create_connection((self.host, int(self.port)), timeout=1.0):  # type: ignore[arg-type]
                    return True
            except OSError:
                return False
        try:
            info = tracker_summary(*self.tracker)
        except BoardError:
            return False
        # the tracker lists the connection (server_info) before the server offers itself (queue_info):
        # ready only once both show it, or a request made right now would find no such key
        listed = any(s.get("key", "").split(":", 1)[-1] == self.key and int(s["addr"][1]) == self.port
                     for s in info.get("server_info", []))
        return listed and self.key in info.get("queue_info", {})


def start_tracker(host: str = LOOPBACK, port: int = 0, port_end: int | None = None,
                  python: str = sys.executable, wait: float | None = 30.0,
                  die_with_parent: bool = False) -> TrackerProcess:
    """Start a tracker on ``host`` (``port=0``: a free port) and wait until it accepts connections.

    ``die_with_parent``: the tracker is killed when this process dies, even by SIGKILL
    (leave it off for a detached tracker that must outlive its starter).
    """
    lo, hi = _port_range(host, port, port_end)
    tracker = TrackerProcess([python, *SAFE_PATH, "-m", "tvm.exec.rpc_tracker", "--host", host,
                              "--port", str(lo), "--port-end", str(hi)], host, die_with_parent, runtime_only=True)
    return tracker.wait_ready(wait) if wait else tracker


def start_server(tracker: tuple[str, int] | None, key: str | None = None, host: str = LOOPBACK, port: int = 0,
                 port_end: int | None = None, extra_args: Sequence[str] = (),
                 python: str = sys.executable, module: str = "tvm.exec.rpc_server",
                 wait: float | None = 30.0, die_with_parent: bool = False) -> ServerProcess:
    """Start an RPC server registered with ``tracker`` under ``key`` and wait until the tracker lists it.

    ``tracker=None`` starts a standalone server for direct connections (``host:port``);
    ``die_with_parent`` as in :func:`start_tracker`.
    """
    if tracker is not None and not key:
        raise BoardError("an RPC server registered with a tracker needs a key")
    lo, hi = _port_range(host, port, port_end)
    argv = [python, *SAFE_PATH, "-m", module, "--host", host, "--port", str(lo), "--port-end", str(hi)]
    if tracker is not None:
        argv += ["--tracker", f"{tracker[0]}:{tracker[1]}", "--key", str(key)]
    server = ServerProcess([*argv, *extra_args], host, tracker, key, die_with_parent)
    return server.wait_ready(wait) if wait else server


def tracker_summary(host: str, port: int) -> dict[str, Any]:
    """The tracker's ``summary()``: ``{"queue_info": {key: {free, pending}}, "server_info": [...]}``."""
    from tvm import rpc

    try:
        # TVM retries a refused tracker connection for 60 s; fail fast when nothing listens
        socket.create_connection((host, int(port)), timeout=5.0).close()
        return dict(rpc.connect_tracker(host, int(port)).summary())
    except Exception as exc:  # noqa: BLE001 - TVM raises plain RuntimeError/ConnectionError
        raise BoardError(f"cannot reach the RPC tracker at {host}:{port} ({exc}); "
                         "start it with `edgetune tracker start` or check the address") from None


NEVER_SEEN_S = 10.0
"""The longest a command waits for a board no server of its key has registered for yet (a lost board is waited
for as long as ``--wait-board`` says)."""


def require_server(host: str, port: int, key: str, board: str, grace_s: float = NEVER_SEEN_S,
                   on_wait: Callable[[str], None] | None = None) -> None:
    """Before a run's first measurement: the tracker answers and lists a server under ``key`` within
    ``grace_s`` (:class:`BoardError` naming what is missing and the command that fixes it); ``on_wait`` is told
    once when it has to wait."""
    deadline = None                 # counted from the tracker's first answer (TVM's client loads for seconds)
    while True:
        info = tracker_summary(host, port)
        if any(s.get("key", "").split(":", 1)[-1] == key for s in info.get("server_info", [])):
            return
        if deadline is None:
            deadline = time.monotonic() + grace_s
            if on_wait is not None:
                on_wait(f"no board is registered with the tracker {host}:{port} under key {key!r} yet: waiting up "
                        f"to {grace_s:.0f} s for board {board}")
        elif time.monotonic() >= deadline:
            raise BoardError(f"no board is registered with the tracker {host}:{port} under key {key!r} (waited "
                             f"{grace_s:.0f} s); start its agent with `edgetune board provision {board}` (`edgetune "
                             "board status` shows what runs)")
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


# -- the `local` board: a tracker + server on loopback, shared by everything in this process ----

_LOCAL: dict[str, tuple[TrackerProcess, ServerProcess, list[int]]] = {}
_LOCAL_LOCK = threading.Lock()


def _start_local(key: str, tries: int = 3) -> tuple[TrackerProcess, ServerProcess]:
    """A loopback tracker and a server under ``key``, started at once (each imports TVM for seconds): the tracker
    on a port chosen here, the server waiting for it (:mod:`toolkit.rpc.late_server`); another port when the
    chosen one was taken meanwhile. Both die with this process."""
    for attempt in range(1, tries + 1):
        port = _free_port(LOOPBACK)
        tracker = start_tracker(port=port, port_end=port + 1, wait=None, die_with_parent=True)
        server = start_server((LOOPBACK, port), key, module="toolkit.rpc.late_server", wait=None,
                              die_with_parent=True)
        try:
            tracker.wait_ready()
            return tracker, server.wait_ready()
        except BaseException as exc:
            server.stop()
            tracker.stop()
            taken = isinstance(exc, BoardError) and tracker.port is None    # the port went to another process
            if not taken or attempt == tries:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def ensure_local_rpc(key: str = "local") -> tuple[str, int, Callable[[], None]]:
    """Start (or reuse) a loopback tracker and a server registered under ``key``.

    Returns ``(tracker_host, tracker_port, stop)``; ``stop()`` releases this caller's use and
    the processes end when the last user stops, at interpreter exit, or when this process is
    killed (a guard process kills their groups, forked workers included: :mod:`toolkit.rpc.guard`).
    """
    with _LOCAL_LOCK:
        entry = _LOCAL.get(key)
        if entry and not (entry[0].alive() and entry[1].alive()):
            entry[1].stop()
            entry[0].stop()
            entry = None
        if entry is None:
            tracker, server = _start_local(key)
            entry = (tracker, server, [0])
            _LOCAL[key] = entry
        entry[2][0] += 1
    tracker, server, users = entry
    released = threading.Event()

    def stop() -> None:
        if released.is_set():
            return
        released.set()
        with _LOCAL_LOCK:
            users[0] -= 1
            if users[0] <= 0 and _LOCAL.get(key) is entry:
                del _LOCAL[key]
                server.stop()
                tracker.stop()

    host, port = tracker.address
    return host, port, stop


@contextlib.contextmanager
def local_rpc(key: str = "local") -> Iterator[tuple[str, int]]:
    """``with local_rpc("local") as (host, port):`` — :func:`ensure_local_rpc` as a context manager."""
    host, port, stop = ensure_local_rpc(key)
    try:
        yield host, port
    finally:
        stop()


@atexit.register
def _stop_local() -> None:
    for tracker, server, _ in list(_LOCAL.values()):
        server.stop()
        tracker.stop()
    _LOCAL.clear()
