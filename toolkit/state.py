"""Small JSON state files under the user's state dir (tracker pid/port, provisioned boards).

``$XDG_STATE_HOME/edgetune`` (default ``~/.local/state/edgetune``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any, Iterator

from toolkit.files import atomic_write_text
from toolkit.errors import EdgetuneError


def state_dir() -> Path:
    """``$XDG_STATE_HOME/edgetune`` (:class:`EdgetuneError` when a part of that path is a file, not a folder)."""
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    folder = base / "edgetune"
    for part in (folder, *folder.parents):
        if part.exists():
            if not part.is_dir():
                raise EdgetuneError(f"edgetune keeps its state in {folder}, but {part} is not a folder; point "
                                    "XDG_STATE_HOME at a folder (or move that file away)")
            break
    return folder


def read_state(name: str) -> dict[str, Any] | None:
    """The state file ``name`` (e.g. ``tracker`` or ``boards/pynq1``); ``None`` when absent."""
    path = state_dir() / f"{name}.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EdgetuneError(f"state file {path} is unreadable ({exc}); delete it and rerun") from None


def write_state(name: str, data: dict[str, Any]) -> Path:
    """Write the state file ``name`` atomically."""
    path = state_dir() / f"{name}.json"
    atomic_write_text(path, json.dumps(data, indent=2))
    return path


def remove_state(name: str) -> None:
    """Delete the state file ``name`` if present."""
    (state_dir() / f"{name}.json").unlink(missing_ok=True)


@contextlib.contextmanager
def state_lock(name: str) -> Iterator[None]:
    """An exclusive lock on ``<state dir>/<name>.lock`` while a state is read, acted on and written (two
    ``tracker start``s at once: one starts the tracker, the other finds it)."""
    path = state_dir() / f"{name}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise EdgetuneError(f"cannot lock {path}: {exc.strerror or exc}; check XDG_STATE_HOME") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
