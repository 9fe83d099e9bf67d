"""TVM's RPC server, started beside its tracker: TVM is imported while the tracker starts, and the server runs
once the tracker (``--tracker HOST:PORT`` among the arguments) accepts connections.

``python -m toolkit.rpc.late_server ARGS`` takes the arguments of ``python -m tvm.exec.rpc_server``. TVM's server
retries a refused tracker only every 5 s; waiting here first lets :func:`toolkit.rpc.tracker.ensure_local_rpc`
start the tracker and the server at once instead of one after the other.
"""

from __future__ import annotations

import runpy
import socket
import sys
import time

WAIT_S = 60.0


def tracker_address(argv: list[str]) -> tuple[str, int]:
    """``(host, port)`` of ``--tracker HOST:PORT`` (or ``--tracker=HOST:PORT``) in ``argv``."""
    for k, arg in enumerate(argv):
        if arg == "--tracker" and k + 1 < len(argv):
            value = argv[k + 1]
        elif arg.startswith("--tracker="):
            value = arg.split("=", 1)[1]
        else:
            continue
        host, _, port = value.rpartition(":")
        return host, int(port)
    raise SystemExit("toolkit.rpc.late_server needs --tracker HOST:PORT")


def wait_for(address: tuple[str, int], wait_s: float = WAIT_S) -> None:
    """Return once ``address`` accepts a TCP connection; exit with a line after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            socket.create_connection(address, timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"the RPC tracker at {address[0]}:{address[1]} did not accept connections "
                                 f"within {wait_s:.0f} s") from None
            time.sleep(0.05)


def main() -> None:
    address = tracker_address(sys.argv[1:])
    import tvm.exec.rpc_server  # noqa: F401 - the slow part, done while the tracker starts

    wait_for(address)
    runpy.run_module("tvm.exec.rpc_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
