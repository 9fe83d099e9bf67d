"""This process's link to a Ray cluster: :class:`ClusterClient`, a helper process that is the cluster's driver.

Ray ends a driver's process at once when the node it is attached to dies (no exception, no message). The
helper takes that end instead: edgetune's own process sees the helper gone, says in one line that the cluster
was lost and keeps its log intact (every finished trial is in it; ``--resume`` continues once the cluster is
back). The helper also keeps Ray's threads and signal handlers out of the process that writes the log.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import socket
import subprocess
import sys
import time
from collections import deque
from multiprocessing.connection import Connection
from typing import Any, Callable, Sequence

import cloudpickle

from toolkit.errors import ClusterError, one_line
from toolkit.procs import SAFE_PATH, SAFE_PATH_ENV
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.core.space import Config

HEAD_LOST_S = 15
"""How long the helper waits for a head that stopped answering before it gives up (Ray's default is 60 s)."""
SYSTEM_RETRIES = 2
"""How often Ray runs a task again when its worker or node died under it (a node lost mid-run)."""

Chunk = list[Any]
"""What one cluster task gets after the shared object (e.g. a template): a list of items (configs, indices)."""


def lost(address: str, why: str = "") -> ClusterError:
    """The error of a cluster lost mid-run."""
    return ClusterError(f"the Ray cluster at {address} was lost{f' ({why})' if why else ''}: its head, or this "
                        "machine's node, stopped; every finished trial is in the log: restart the cluster and rerun "
                        "with --resume")


class ClusterClient:
    """A helper process connected to the Ray cluster at ``address`` as its driver; :meth:`map` runs work there.

    Lifecycle: created (the helper starts and connects: a one-line :class:`ClusterError` when no head answers),
    :meth:`map` as often as needed, :meth:`close` at the end. A helper lost mid-call (the cluster's head or this
    machine's node died) raises :class:`ClusterError`. Calls travel as cloudpickle over a socket pair, so a
    template class defined in a script or notebook reaches the workers as it is.
    """

    def __init__(self, address: str) -> None:
        self.address = address
        ours, theirs = socket.socketpair()
        with theirs:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, *SAFE_PATH, "-m", __name__, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, **SAFE_PATH_ENV, "RAY_gcs_rpc_server_reconnect_timeout_s": str(HEAD_LOST_S)})
        self._conn = Connection(ours.detach())
        self.cpus = int(self._call(_connect, address))

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._proc is None:
            raise ClusterError(f"the link to the Ray cluster at {self.address} is closed")
        try:
            self._conn.send_bytes(cloudpickle.dumps((fn, args)))
            status, value = pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError):
            self.close()
            raise lost(self.address) from None
        if status == "error":
            raise value
        return value

    def map(self, fn: Callable[[Any, Chunk], list[Any]], shared: Any, chunks: Sequence[Chunk], *,
            timeout_s: float | None, n_parallel: int,
            failed: Callable[[Any, ErrorClass, str], Any] | None = None) -> list[list[Any]]:
        """``fn(shared, chunk)`` for every chunk on the cluster's workers, at most ``n_parallel`` at once; the
        results in order. With ``timeout_s`` (per item of a chunk) a chunk past it is cancelled (its worker
        killed) and each item becomes ``failed(item, TIMEOUT, message)``; a worker that crashed on a chunk gives
        ``failed(item, COMPILE_ERROR, ...)``. Without ``failed`` such a chunk raises :class:`ClusterError`."""
        return self._call(_map, self.address, fn, shared, list(chunks), timeout_s, n_parallel, failed)

    def close(self) -> None:
        """Stop the helper (the cluster keeps running)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            self._conn.close()     # the helper reads the end of its socket and leaves the cluster
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- in the helper process ------------------------------------------------------------------------


def _connect(address: str) -> float:
    """Connect the helper to the cluster; the cluster's CPUs."""
    from toolkit.cluster.nodes import connect

    ray = connect(address)
    cpus = ray.cluster_resources().get("CPU", 0.0)
    if cpus < 1:
        raise ClusterError(f"the Ray cluster at {address} has no CPU to work on; join a node with "
                           "`edgetune cluster join`")
    return cpus


@functools.cache
def _remote(fn: Callable[..., Any]) -> Any:
    """``fn`` as a Ray task of one CPU."""
    import ray

    return ray.remote(num_cpus=1, max_retries=SYSTEM_RETRIES, retry_exceptions=False)(fn)


def _map(address: str, fn: Callable[[Any, Chunk], list[Any]], shared: Any, chunks: list[Chunk],
         timeout_s: float | None, n_parallel: int, failed: Callable[[Any, ErrorClass, str], Any] | None
         ) -> list[list[Any]]:
    try:
        return _map_on_cluster(fn, shared, chunks, timeout_s, n_parallel, failed)
    except (OSError, ConnectionError) as exc:     # Ray's link to its node broke under a call
        raise lost(address, f"{type(exc).__name__}: {one_line(exc)[:100]}") from None


def _map_on_cluster(fn: Callable[[Any, Chunk], list[Any]], shared: Any, chunks: list[Chunk],
                    timeout_s: float | None, n_parallel: int, failed: Callable[[Any, ErrorClass, str], Any] | None
                    ) -> list[list[Any]]:
    import ray

    shared_ref = ray.put(shared)
    out: list[list[Any] | None] = [None] * len(chunks)
    queue = deque(range(len(chunks)))
    running: dict[Any, tuple[int, float]] = {}
    while queue or running:
        while queue and len(running) < n_parallel:
            pos = queue.popleft()
            deadline = time.monotonic() + timeout_s * len(chunks[pos]) if timeout_s else float("inf")
            running[_remote(fn).remote(shared_ref, chunks[pos])] = (pos, deadline)
        soonest = min(d for _, d in running.values())
        wait = None if soonest == float("inf") else max(0.0, soonest - time.monotonic())
        done, _ = ray.wait(list(running), num_returns=1, timeout=wait)
        for ref in done:
            pos, _ = running.pop(ref)
            out[pos] = _result(ref, chunks[pos], failed)
        now = time.monotonic()
        for ref in [r for r, (_, d) in running.items() if d <= now]:
            pos, _ = running.pop(ref)
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)     # kills the worker: a hung build never holds a CPU
            if failed is None:
                raise ClusterError(f"a cluster task exceeded {timeout_s:g} s per item")
            out[pos] = [failed(item, ErrorClass.TIMEOUT, f"build exceeded {timeout_s:g} s") for item in chunks[pos]]
    return out  # type: ignore[return-value]


def _result(ref: Any, chunk: Chunk, failed: Callable[[Any, ErrorClass, str], Any] | None) -> list[Any]:
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        crashed = isinstance(exc, ray.exceptions.WorkerCrashedError)
        message = ("the worker crashed on this config" if crashed
                   else f"{type(exc).__name__}: {one_line(exc)[:300]}")
        if failed is None:
            raise ClusterError(f"a cluster task failed ({message})") from None
        return [failed(item, ErrorClass.COMPILE_ERROR, message) for item in chunk]


def failed_build(config: Config, error: ErrorClass, message: str) -> MeasureResult:
    """A config's failed build as a result (for :meth:`ClusterClient.map`)."""
    return MeasureResult(config.index, config.values, error=error, message=message)


def _serve(fd: int) -> None:
    """The helper's loop: run each call received, send its value (or its exception) back, until the socket ends."""
    conn = Connection(fd)
    while True:
        try:
            fn, args = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", fn(*args))
        except Exception as exc:  # noqa: BLE001 - sent back to be raised in the caller
            reply = ("error", exc if isinstance(exc, ClusterError) else ClusterError(f"{type(exc).__name__}: "
                                                                                       f"{one_line(exc)[:300]}"))
        conn.send_bytes(cloudpickle.dumps(reply))


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
