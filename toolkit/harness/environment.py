"""What a bench ran on: machine, command, date and versions, recorded with every result."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from pathlib import Path
from typing import Any

from toolkit.tuning.journal import tvm_version
from toolkit.version import __version__


MODEL_LIBRARIES = ("numpy", "scipy", "scikit-learn", "xgboost-cpu", "torch")
"""The libraries the tuners' models are built on: a replay reproduces a run bit for bit only with the same ones."""

def library_versions() -> dict[str, str]:
    """Installed versions of :data:`MODEL_LIBRARIES` (``-`` where one is missing)."""
    from importlib import metadata

    out = {}
    for name in MODEL_LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "-"
    return out

def cpu_name() -> str:
    """This machine's CPU model (``/proc/cpuinfo``), else its architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()

def environment(command: str | None = None) -> dict[str, Any]:
    """Machine, command, date and versions, for the header of every bench output."""
    cpu = cpu_name()
    return {"machine": f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
            "python": platform.python_version(), "edgetune": __version__, "tvm": tvm_version(),
            "libraries": library_versions(),
            "command": command or " ".join(["edgetune", *sys.argv[1:]]),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
