"""Processes edgetune starts: who a stored process id is (a pid with the start time it had, so that a stale state
file never leads edgetune to signal an unrelated process that reuses the number), how a process group is stopped
(services fork workers: each runs in its own group), and the flags that keep a child's imports safe."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

import psutil


LOOPBACK = "127.0.0.1"
"""The address edgetune's services (tracker, RPC servers, tunnels, Ray nodes) bind unless told otherwise."""
SAFE_PATH = ("-P",)
"""Python's flag that keeps the working folder off a child's ``sys.path``: a ``tvm.py`` or ``toolkit.py`` in the
folder a command runs in is never imported by the processes edgetune starts."""
SAFE_PATH_ENV = {"PYTHONSAFEPATH": "1"}
"""The same for the processes those start (TVM's RPC workers), through the environment they inherit."""


def identity(pid: int | None = None) -> dict[str, Any]:
    """``{"pid", "create_time"}`` of ``pid`` (default: this process), for a state file."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "create_time": psutil.Process(pid).create_time()}


def is_running(state: dict[str, Any] | None) -> bool:
    """Whether the process a state file names still runs: same pid, same start time (and not a zombie).

    A state without ``create_time`` cannot be checked and counts as not running: edgetune then never
    signals that pid.
    """
    if not state or "pid" not in state or "create_time" not in state:
        return False
    try:
        proc = psutil.Process(int(state["pid"]))
        return (abs(proc.create_time() - float(state["create_time"])) < 0.05
                and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, TypeError):
        return False


def group_alive(pgid: int) -> list[psutil.Process]:
    """The live (non-zombie) processes of process group ``pgid``."""
    out = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def kill_group(pgid: int, timeout: float = 5.0) -> None:
    """SIGKILL process group ``pgid`` until none of it runs (or ``timeout``): the delivery is asynchronous,
    and only a dead group has freed its ports."""
    deadline = time.monotonic() + timeout
    while group_alive(pgid) and time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)


def stop_group(pgid: int, timeout: float = 10.0) -> None:
    """Stop process group ``pgid``: SIGTERM it (the leader stops what it started), wait up to ``timeout`` for the
    leader to exit (collecting its status if it is our child), then SIGKILL what still runs (:func:`kill_group`)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _leader_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_group(pgid, timeout)
    _leader_alive(pgid)   # reaps the leader if it is our child


def _leader_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not; one that is our child is reaped)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
