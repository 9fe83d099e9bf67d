"""A tuning log as the dashboard shows it, read incrementally while a run appends to it.

:class:`LogView` keeps what it has read of one log and, on :meth:`LogView.refresh`, reads only the complete lines
appended since (a line still being written waits for its newline). A log that was replaced (another inode) or cut
shorter is read again from the start. It opens the file read-only and takes no lock: whether a run is writing it
is read from ``/proc/locks`` (the writer's ``flock``), so the dashboard never delays or blocks a tuning run.

A corrupt line stops the view at that line with the reader's own one-line error; the records before it still
show. The JSON a page gets (:meth:`LogView.summary`, :meth:`LogView.detail`) is bounded whatever the log's
length: scatter points are downsampled (:func:`downsample`), every best-so-far point is kept.
"""

from __future__ import annotations

import hashlib
import math
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.errors import LogError
from toolkit.tuning.journal import flock_pid
from toolkit.tuning.records import HEADER_KEY, LogHeader, Record, line_json, workload_key

MAX_POINTS = 1000
"""The most valid-trial points a scatter gets (every best-so-far point is kept beyond it)."""
MAX_INVALID_POINTS = 500
"""The most invalid-trial points a page gets."""
TOP_CONFIGS = 10


def downsample(n: int, keep: set[int], limit: int) -> list[int]:
    """Indices ``0..n-1`` to draw: every index in ``keep`` and, when ``n`` is over ``limit``, evenly spaced
    others up to ``limit`` in all (all of them otherwise).

    >>> downsample(10, {7}, 4)
    [0, 4, 7, 9]
    >>> downsample(3, set(), 4)
    [0, 1, 2]
    """
    if n <= limit:
        return list(range(n))
    room = max(limit - len(keep), 2)
    step = (n - 1) / (room - 1)
    picked = {round(i * step) for i in range(room)}
    return sorted(picked | keep)


def writer_pid(path: Path) -> int | None:
    """The pid holding a ``flock`` on ``path`` (a tuning run's journal); ``None`` if none."""
    try:
        return flock_pid(path.stat())
    except OSError:
        return None


@dataclass
class TaskTrace:
    """One workload's trials in a log, in file order."""

    workload: dict[str, Any]
    trials: list[int] = field(default_factory=list)
    seconds: list[float | None] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    best: float = math.inf
    best_points: set[int] = field(default_factory=set)

    def add(self, record: Record) -> None:
        i = len(self.trials)
        self.trials.append(record.trial)
        self.times.append(record.timestamp)
        self.records.append(record)
        if record.valid:
            s = record.seconds
            self.seconds.append(s)
            self.errors.append(None)
            if s < self.best:
                self.best = s
                self.best_points.add(i)
        else:
            self.seconds.append(None)
            self.errors.append(record.error or "no_cost")


class LogView:
    """What the dashboard has read of one log (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        """Held while the view reads or is read (the server answers requests in threads)."""
        self._reset()

    def _reset(self) -> None:
        self.header: LogHeader | None = None
        self.error: str | None = None
        self.offset = 0
        self.line = 0
        self.inode: tuple[int, int] | None = None
        self.tasks: dict[str, TaskTrace] = {}
        self.order: list[str] = []
        self.n = 0
        self.invalid = 0
        self.tuners: dict[str, int] = {}
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.pending = b""
        self.version = ""
        self.seen: set[bytes] = set()
        self.keys: dict[tuple, str] = {}

    def refresh(self) -> bool:
        """Read what was appended since the last call; ``True`` when anything changed."""
        try:
            st = self.path.stat()
        except OSError as exc:
            changed = self.error is None
            self._reset()
            self.error = f"cannot read {self.path}: {exc.strerror or exc}"
            return changed
        inode = (st.st_dev, st.st_ino)
        if inode != self.inode or st.st_size < self.offset:
            self._reset()
            self.inode = inode
        version = f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{writer_pid(self.path)}"
        if version == self.version:
            return False
        self.version = version
        if self.error is None and st.st_size > self.offset:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                self._feed(f.read(st.st_size - self.offset))
        return True

    def _feed(self, data: bytes) -> None:
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()          # the part after the last newline: a line still being written
        self.offset += len(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for raw in lines:
                self.line += 1
                if self.error is not None:
                    return
                if not raw.strip():
                    continue
                try:
                    self._take(raw)
                except LogError as exc:
                    self.error = str(exc)

    def _take(self, raw: bytes) -> None:
        where = f"{self.path}:{self.line}"
        if self.header is None:
            obj = line_json(raw, where, header=True, truncated=False)
            if not isinstance(obj, dict) or HEADER_KEY not in obj:
                raise LogError(f"{where}: not an edgetune log header; is this an edgetune tuning log?")
            self.header = LogHeader.from_json(obj, where)
            return
        digest = hashlib.blake2b(raw.strip(), digest_size=16).digest()
        if digest in self.seen:     # a line copied twice is one measurement, as the log reader counts it
            return
        self.seen.add(digest)
        record = Record.from_json(line_json(raw, where, header=False, truncated=False), where)
        key = self._key(record.workload)
        if key not in self.tasks:
            self.tasks[key] = TaskTrace(record.workload)
            self.order.append(key)
        self.tasks[key].add(record)
        self.n += 1
        self.invalid += not record.valid
        self.tuners[record.tuner] = self.tuners.get(record.tuner, 0) + 1
        self.first_time = record.timestamp if self.first_time is None else min(self.first_time, record.timestamp)
        self.last_time = record.timestamp if self.last_time is None else max(self.last_time, record.timestamp)

    def _key(self, workload: dict[str, Any]) -> str:
        """:func:`workload_key`, worked out once per distinct workload of the log."""
        try:
            memo = tuple(workload.items())
            if memo not in self.keys:
                self.keys[memo] = workload_key(workload)
            return self.keys[memo]
        except TypeError:       # a value that is not hashable (a list): no shortcut
            return workload_key(workload)

    @property
    def truncated(self) -> bool:
        """A last line without its newline, left by a writer that is gone."""
        return bool(self.pending.strip()) and writer_pid(self.path) is None

    def state(self) -> str:
        """``running`` (a process holds the log's lock), ``stopped`` (its writer died mid-record, or it holds no
        record), ``corrupt`` or ``finished``."""
        if self.error is not None:
            return "corrupt"
        if writer_pid(self.path) is not None:
            return "running"
        return "stopped" if self.truncated or self.n == 0 else "finished"

    def board(self) -> str:
        if self.header is None:
            return "?"
        return str(self.header.task.get("board") or "?")

    def network(self) -> str | None:
        return self.header.task.get("network") if self.header is not None else None

    def best_seconds(self) -> float | None:
        bests = [t.best for t in self.tasks.values() if math.isfinite(t.best)]
        return min(bests) if len(self.tasks) == 1 and bests else None

    def summary(self) -> dict[str, Any]:
        """The run's card on the runs page."""
        labels = [_label(self.tasks[k].workload) for k in self.order]
        return {"path": str(self.path), "board": self.board(), "network": self.network(), "workloads": labels,
                "tuners": sorted(self.tuners), "trials": self.n, "invalid": self.invalid,
                "best_s": self.best_seconds(), "state": self.state(), "error": self.error,
                "truncated": self.truncated, "version": self.version,
                "created": self.header.created if self.header else None, "updated": self.last_time}


def _label(workload: dict[str, Any]) -> str:
    from toolkit.workloads import Conv2dWorkload

    try:
        return Conv2dWorkload.from_dict(workload).label
    except Exception:  # noqa: BLE001 - a workload this edgetune cannot parse still gets a name
        return str(workload.get("name") or workload_key(workload))[:60]
