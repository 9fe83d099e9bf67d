"""One build of a cached folder at a time: :func:`build_lock`."""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import Callable, Iterator


@contextlib.contextmanager
def build_lock(folder: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the lock file beside ``folder`` (created with its parent) while ``folder`` is built; another process
    building it is waited for, and ``say`` says so. Check again inside: the other build may have made it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process building {folder.name} ...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
