"""Who a stored process id is: a pid with the start time it had, so that a stale state file never leads
edgetune to signal an unrelated process that reuses the number."""

from __future__ import annotations

import os
from typing import Any

import psutil


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
