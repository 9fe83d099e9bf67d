"""Folders built once and cached: one build at a time (:func:`build_lock`), and what a killed build left removed
safely (:func:`remove_partial`)."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
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


def remove_partial(folder: Path) -> None:
    """Remove what a killed build left in ``folder``, unmounting first whatever is still mounted below it (a
    killed ``mmdebstrap`` leaves the host's ``/proc``, ``/sys``, ``/dev/pts`` and ``/dev/shm`` mounted in its
    root: removing through them would reach the host's own)."""
    root = str(folder.resolve())
    for point in sorted((m for m in _mount_points() if m == root or m.startswith(root + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    if any(m == root or m.startswith(root + "/") for m in _mount_points()):
        raise OSError(f"{folder} still has file systems mounted below it; unmount them, then remove it")
    shutil.rmtree(folder, ignore_errors=True)


def _mount_points() -> list[str]:
    try:
        return [line.split()[1].encode().decode("unicode_escape") for line in open("/proc/self/mounts")]
    except OSError:
        return []
