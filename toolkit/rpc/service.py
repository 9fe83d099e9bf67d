"""The user's long-running TVM RPC tracker: started detached, found again through a state file.

State: ``$XDG_STATE_HOME/edgetune/tracker.json`` (``pid``, ``host``, ``port``). The tracker binds to
loopback unless exposed; boards reach it through SSH reverse tunnels (:mod:`toolkit.rpc.tunnel`).
"""

from __future__ import annotations

import time
from pathlib import Path

from toolkit.errors import BoardError
from toolkit.procs import identity, is_running
from toolkit.state import read_state, remove_state, state_lock, write_state
from toolkit.procs import LOOPBACK, stop_group
from toolkit.rpc.tracker import start_tracker, tracker_summary

DEFAULT_PORT = 9190


def running_tracker() -> dict | None:
    """The state of the tracker started by ``edgetune tracker start``, if it still runs."""
    state = read_state("tracker")
    if is_running(state):
        return state
    if state:   # stale (or from a process that reuses the pid): never signalled
        remove_state("tracker")
    return None


def start_service(host: str = LOOPBACK, port: int = DEFAULT_PORT, port_end: int | None = None) -> dict:
    """Start a detached tracker (or return the running one); its state. Starts race under a lock: one
    starts the tracker, the others find it (no orphan that ``tracker stop`` would not know)."""
    with state_lock("tracker"):
        state = running_tracker()
        if state:
            return {**state, "already_running": True}
        tracker = start_tracker(host, port, port_end or (None if port == 0 else port + 10))
        state = {**identity(tracker.pid), "host": host, "port": tracker.address[1], "log": tracker.log_path,
                 "started": time.time()}
        write_state("tracker", state)
        return state


def stop_service(timeout: float = 5.0) -> bool:
    """Stop the tracker's process group; ``True`` if one was running."""
    with state_lock("tracker"):
        return _stop(timeout)


def _stop(timeout: float) -> bool:
    state = running_tracker()
    if not state:
        return False
    stop_group(int(state["pid"]), timeout)   # the workers it forked included
    remove_state("tracker")
    if state.get("log"):
        Path(state["log"]).unlink(missing_ok=True)
    return True


def tracker_address(explicit: str | None = None) -> tuple[str, int]:
    """``HOST:PORT`` given explicitly, else the running tracker's address."""
    if explicit:
        host, _, port = explicit.rpartition(":")
        if not host or not port.isdigit():
            raise BoardError(f"tracker address {explicit!r} must be HOST:PORT, e.g. 127.0.0.1:9190")
        return host, int(port)
    state = running_tracker()
    if not state:
        raise BoardError("no RPC tracker is running; start one with `edgetune tracker start` "
                         "or give --tracker HOST:PORT")
    host = state["host"]
    return (LOOPBACK if host == "0.0.0.0" else host), int(state["port"])


def status() -> dict:
    """The running tracker's state and summary (queue per key, servers)."""
    state = running_tracker()
    if not state:
        return {"running": False}
    host, port = tracker_address()
    return {"running": True, **state, "summary": tracker_summary(host, port)}


def board_tracker_address(board_name: str, tracker: tuple[str, int] | str | None = None) -> tuple[str, int]:
    """The tracker a board is reached through: ``tracker`` when given (``(host, port)`` or ``HOST:PORT``),
    else the one its last provisioning registered it with, else the running tracker's.

    This is the one place that resolves a board's tracker; runners and exports call it.
    """
    if isinstance(tracker, tuple):
        return tracker[0], int(tracker[1])
    if tracker is None:
        state = read_state(f"boards/{board_name}")
        if state:
            return state["tracker"][0], int(state["tracker"][1])
    return tracker_address(tracker)


def boards_under_key(board_name: str, rpc_key: str, tracker: tuple[str, int] | str | None = None) -> int:
    """How many boards (RPC servers) the board's tracker holds under ``rpc_key``, busy or free."""
    host, port = board_tracker_address(board_name, tracker)
    servers = tracker_summary(host, port).get("server_info", [])
    return sum(1 for s in servers if s.get("key") == f"server:{rpc_key}")
