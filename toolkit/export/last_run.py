"""The last ``edgetune run`` of each export, kept in the state folder (an export folder is never written to).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from toolkit.errors import EdgetuneError
from toolkit.state import read_state, write_state


def _name(folder: Path) -> str:
    return "runs/" + hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]


def record_run(folder: Path, board: str, result: dict[str, Any]) -> Path:
    """Keep ``result`` (a run's JSON) as the last run of the export ``folder`` on ``board``."""
    return write_state(_name(folder), {"export": str(folder.resolve()), "board": board, "when": time.time(),
                                       "result": result})


def last_run(folder: Path) -> dict[str, Any] | None:
    """The last run recorded for ``folder`` (``None``: never run, or its state file is unreadable)."""
    try:
        return read_state(_name(folder))
    except EdgetuneError:
        return None
