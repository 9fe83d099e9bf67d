"""The board agent: a TVM RPC server registered with a tracker, plus edgetune's global functions.

Run on a board (``edgetune board provision`` starts it)::

    python -m toolkit.rpc.agent --tracker 127.0.0.1:9190 --key pynq --executor fpga \
        --bitstream ~/.edgetune/bitstreams/1x16_i8w8a32_15_15_18_17.bit

Functions a client reaches with ``remote.get_function(NAME)`` (:data:`FUNCTIONS`; docs/security.md says
what else TVM's RPC server offers every client):

- ``edgetune.health() -> str``: JSON ``{"ok", "name", "key", "executor", "pid"}`` (and ``"bitstream"``, the
  file name of the bitstream it was started with).
- ``edgetune.board_info() -> str``: JSON with architecture, cores, memory, Python and TVM versions.
- ``edgetune.vta.run(program, inputs, repeat) -> bytes``: run a VTA program (``Program.to_bytes()``)
  with inputs (an ``.npz``) ``repeat`` times; returns an ``.npz`` of outputs plus ``__seconds__``
  (one entry per run), ``__counters__`` (JSON) and ``__board__``; a failing program returns
  ``__error__`` (its message) instead, so a raised RPC error always means a lost board.
  The executor is the FPGA driver on Pynq-class boards and the simulator on ``vta-fsim`` boards.
- ``edgetune.vta.run_model(package, inputs) -> bytes``: run a whole int8 model (an export's graph, arrays and
  VTA programs in one ``.npz``) on every input, its VTA layers on the executor and the rest in numpy on the
  board, all in one call; returns the outputs, each layer's seconds and a crc32 of every int8 tensor.

This module only needs the standard library, numpy and TVM on the board (plus the VTA simulator
modules for ``--executor fsim`` and ``pynq`` for ``--executor fpga``).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("edgetune.agent")

_SETTINGS: dict[str, Any] = {}
_EXECUTOR: list[Any] = []


def _executor() -> Any:
    """The VTA executor of this agent (created on first use, kept per process)."""
    if not _EXECUTOR:
        from toolkit.rpc.vta_driver import make_executor

        _EXECUTOR.append(make_executor(_SETTINGS["executor"], bitstream=_SETTINGS.get("bitstream"),
                                       config=_SETTINGS.get("vta_config")))
    return _EXECUTOR[0]


def health() -> str:
    """Liveness: who answers and with which executor."""
    bitstream = _SETTINGS.get("bitstream_name")
    return json.dumps({"ok": True, "name": _SETTINGS.get("name"), "key": _SETTINGS.get("key"),
                       "executor": _SETTINGS.get("executor"), "pid": os.getpid(), "time": time.time(),
                       **({"bitstream": bitstream} if bitstream else {})})


def board_info() -> str:
    """Architecture, OS, cores, memory, Python and TVM versions of the board."""
    import tvm

    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return json.dumps({"arch": platform.machine(), "os": platform.platform(), "cores": os.cpu_count(),
                       "mem_mb": mem_kb // 1024, "python": platform.python_version(), "tvm": tvm.__version__,
                       "executor": _SETTINGS.get("executor"), "name": _SETTINGS.get("name")})


def vta_run(program: Any, inputs: Any, repeat: int = 1) -> bytearray:
    """Run a VTA program ``repeat`` times; outputs, per-run seconds and counters as ``.npz`` bytes."""
    import numpy as np

    buf = io.BytesIO()
    board = np.frombuffer(str(_SETTINGS.get("name")).encode(), dtype=np.uint8)
    try:
        arrays = dict(np.load(io.BytesIO(bytes(inputs)), allow_pickle=False)) if len(bytes(inputs)) else {}
        result = _executor().run(bytes(program), arrays, max(1, int(repeat)))
    except Exception as exc:  # noqa: BLE001 - a failing program is a result, not a lost board
        message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        np.savez(buf, __error__=np.frombuffer(message.encode(), dtype=np.uint8), __board__=board)
        return bytearray(buf.getvalue())
    np.savez(buf, __seconds__=np.asarray(result.seconds, dtype="float64"), __board__=board,
             __counters__=np.frombuffer(json.dumps(result.counters).encode(), dtype=np.uint8),
             **{k: np.asarray(v) for k, v in result.outputs.items()})
    return bytearray(buf.getvalue())


def vta_run_model(package: Any, inputs: Any) -> bytearray:
    """Run a whole int8 model (``.npz`` of :func:`toolkit.vta.graph.to_package`) on every input of ``inputs`` (an
    ``.npz`` of ``x``, inputs stacked on axis 0): its VTA layers on this board's executor (each segment's program
    and weights put on the device once for all inputs), the other layers in numpy here. Returns an ``.npz`` of
    ``out{i}_{k}`` (output ``k`` of input ``i``), ``__seconds__`` (inputs x layers), ``__layers__`` and
    ``__digests__`` (JSON: layer names; crc32 of every int8 tensor per input) and ``__board__``; a model that
    fails returns ``__error__``."""
    import numpy as np

    from toolkit.vta.graph import run_package

    loaded: list[Any] = []

    def load_program(program: bytes, constants: dict[str, Any]) -> Any:
        on_device = _executor().load_program(program, constants)    # the weights written once for every input
        loaded.append(on_device)

        def run(named: dict[str, Any]) -> tuple[dict[str, Any], float]:
            result = on_device.run(named)
            return result.outputs, float(np.mean(result.seconds))
        return run

    buf = io.BytesIO()
    board = np.frombuffer(str(_SETTINGS.get("name")).encode(), dtype=np.uint8)
    try:
        with np.load(io.BytesIO(bytes(package)), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        with np.load(io.BytesIO(bytes(inputs)), allow_pickle=False) as npz:
            x = npz["x"]
        outputs, seconds, digests = run_package(arrays, x, load_program)
    except Exception as exc:  # noqa: BLE001 - a failing model is a result, not a lost board
        message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        np.savez(buf, __error__=np.frombuffer(message.encode(), dtype=np.uint8), __board__=board)
        return bytearray(buf.getvalue())
    finally:
        for on_device in loaded:
            on_device.close()
    layers = list(seconds[0])
    np.savez(buf, __board__=board, __seconds__=np.asarray([[s[n] for n in layers] for s in seconds]),
             __layers__=np.frombuffer(json.dumps(layers).encode(), dtype=np.uint8),
             __digests__=np.frombuffer(json.dumps(digests).encode(), dtype=np.uint8),
             **{f"out{i}_{k}": o for i, outs in enumerate(outputs) for k, o in enumerate(outs)})
    return bytearray(buf.getvalue())


FUNCTIONS = {"edgetune.health": health, "edgetune.board_info": board_info, "edgetune.vta.run": vta_run,
             "edgetune.vta.run_model": vta_run_model}
"""What the agent adds to TVM's RPC server: what tuning and ``edgetune run`` need, nothing more (the
bitstream is loaded once, at start, from the path provisioning uploaded; no function writes files)."""


def register_functions() -> None:
    """Register edgetune's global functions in this process (inherited by TVM's session workers)."""
    import tvm

    for name, fn in FUNCTIONS.items():
        tvm.register_global_func(name, fn, override=True)


HANDSHAKE_S = 2.0
"""How long a new connection may take to send its whole handshake before the agent drops it (TVM's loop would
wait for it)."""
MAX_KEY_BYTES = 4096
"""The longest handshake key the agent reads (TVM's keys are tens of bytes)."""
RPC_MAGIC = 0xFF271
"""TVM RPC's magic number, the first four bytes of a client's handshake."""


def handshake_problem(frame: bytes) -> str | None:
    """What is wrong with the start ``frame`` of a handshake (``None``: complete and well formed, or not RPC at all,
    which TVM's loop closes itself; ``"incomplete"``: more bytes are needed)."""
    if len(frame) < 4:
        return "incomplete"
    if struct.unpack("<i", frame[:4])[0] != RPC_MAGIC:
        return None
    if len(frame) < 8:
        return "incomplete"
    keylen = struct.unpack("<i", frame[4:8])[0]
    if not 0 < keylen <= MAX_KEY_BYTES:
        return f"a key length of {keylen}"
    if len(frame) < 8 + keylen:
        return "incomplete"
    try:
        words = frame[8:8 + keylen].decode("utf-8").split()
    except UnicodeDecodeError:
        return "a key that is not UTF-8"
    if not words:
        return "an empty key"
    for word in words[1:]:
        if word.startswith("-timeout="):
            try:
                float(word[9:])
            except ValueError:
                return f"a bad option {word[:40]!r}"
    return None


class _HandshakeGuard:
    """The listening socket as TVM's server loop sees it, except that ``accept`` hands it only connections whose
    whole handshake arrived within :data:`HANDSHAKE_S` and is well formed (peeked, not consumed): an idle or slow
    connection cannot block every other client, and a malformed key cannot raise out of the loop."""

    def __init__(self, sock: socket.socket, timeout: float = HANDSHAKE_S) -> None:
        self._sock, self._timeout = sock, timeout

    def accept(self) -> tuple[socket.socket, Any]:
        conn, addr = self._sock.accept()
        problem = self._wait_for_handshake(conn)
        if problem is None:
            return conn, addr
        log.warning("dropped a connection from %s: %s", addr, problem)
        conn.close()
        stand_in, other = socket.socketpair()   # four bytes that are not RPC's magic: TVM's loop closes it
        other.sendall(b"\0\0\0\0")            # and goes on serving (and pinging the tracker)
        other.close()
        return stand_in, addr

    def _wait_for_handshake(self, conn: socket.socket) -> str | None:
        """``None`` once the connection's handshake is complete and well formed (or it is no RPC client), else why
        it is dropped."""
        import select

        deadline = time.monotonic() + self._timeout
        seen = -1
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([conn], [], [], left)[0]:
                return f"no complete handshake in {self._timeout:.0f} s"
            try:
                frame = conn.recv(8 + MAX_KEY_BYTES, socket.MSG_PEEK)
            except OSError as exc:
                return f"a failed read ({exc})"
            if not frame:
                return "closed before its handshake"
            problem = handshake_problem(frame)
            if problem != "incomplete":
                return None if problem is None else f"a handshake with {problem}"
            if len(frame) == seen:        # nothing new yet: wait a little rather than peek in a busy loop
                time.sleep(0.02)
            seen = len(frame)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1)
    return sock


def serve(args: argparse.Namespace) -> None:
    """Register functions, bind, write the state file, then serve the tracker forever."""
    from tvm.rpc import server as rpc_server

    _SETTINGS.update(name=args.name, key=args.key, executor=args.executor, bitstream=args.bitstream,
                     bitstream_name=Path(args.bitstream).name if args.bitstream else None,
                     vta_config=args.vta_config, workdir=os.getcwd())
    register_functions()
    if args.executor in ("fsim", "fpga"):
        import toolkit.rpc.vta_driver  # noqa: F401 - imported once here, inherited by every forked session
        import toolkit.vta.program  # noqa: F401
        import toolkit.vta.sim  # noqa: F401
    if args.executor in ("fpga", "fsim") and args.bitstream:
        _executor()  # loads (fsim: checks) the bitstream once, at start
        _EXECUTOR.clear()  # each forked session reopens the MMIO mapping ...
        _SETTINGS["bitstream"] = None  # ... without reloading the bitstream
    sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    host, tport = args.tracker.rsplit(":", 1)
    report_port = args.report_port or port
    if args.state_file:
        Path(args.state_file).write_text(json.dumps({
            "pid": os.getpid(), "host": args.host, "port": port, "report_port": report_port,
            "report_host": args.report_host, "key": args.key, "tracker": args.tracker,
            "executor": args.executor, "name": args.name}))
    log.info("agent %s: key %s, executor %s, bind to %s:%d, tracker %s", args.name, args.key, args.executor,
             args.host, port, args.tracker)
    # TVM's own server loop (register with the tracker, accept, fork a session per client); the
    # reported port differs from the bound one when the board is reached through an SSH tunnel.
    while True:
        try:
            rpc_server._listen_loop(_HandshakeGuard(sock), report_port, args.key, (host, int(tport)), None,
                                    args.report_host)
        except (RuntimeError, OSError, AssertionError) as exc:  # tracker (or its tunnel) gone: keep retrying
            log.warning("tracker %s unreachable (%s); retrying in 2 s", args.tracker, exc)
            time.sleep(2)
        except Exception as exc:  # noqa: BLE001 - anything else one client caused: drop it, keep serving
            log.warning("a client's connection failed (%s: %s); serving on", type(exc).__name__, exc)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m toolkit.rpc.agent", description=__doc__.split("\n\n")[0])
    p.add_argument("--tracker", required=True, help="tracker HOST:PORT as the board reaches it")
    p.add_argument("--key", required=True, help="RPC key to register under")
    p.add_argument("--executor", choices=("tvm", "fsim", "fpga"), default="tvm")
    p.add_argument("--name", default=socket.gethostname(), help="board name reported by edgetune.health")
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback unless exposed)")
    p.add_argument("--port", type=int, default=0, help="bind port (0: any free port)")
    p.add_argument("--report-host", default=None, help="address the tracker hands to clients")
    p.add_argument("--report-port", type=int, default=0, help="port the tracker hands to clients")
    p.add_argument("--bitstream", default=None, help="bitstream to load at start (fpga; fsim checks it is there)")
    p.add_argument("--vta-config", default=None, help="VTA hardware config name or JSON (fsim/fpga)")
    p.add_argument("--pid-file", default=None)
    p.add_argument("--state-file", default=None)
    return p


def main(argv: list[str] | None = None) -> None:
    """Entry point: detach into its own process group, write the pid file, serve."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    if os.getpid() != os.getpgid(0):
        os.setsid()  # own process group: `board stop` kills the agent and its session workers at once
    if args.pid_file:
        Path(args.pid_file).write_text(str(os.getpid()))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    serve(args)


if __name__ == "__main__":
    main()
