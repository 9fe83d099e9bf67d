"""Writing tuning logs: :class:`Journal`, a log's one writer (the format and reading: :mod:`toolkit.tuning.records`).

:class:`Journal` holds an exclusive lock (``flock``) on the file for as long as it is open, so a second writer gets
a :class:`~toolkit.errors.LogError` naming the process that holds it; a new log is created with ``O_CREAT |
O_EXCL``, every write appends (``O_APPEND``) and is flushed and fsynced before :meth:`Journal.append` returns. The
tuning loop journals a batch's results when the batch's measurements return, so a crash loses at most the batch
being measured. The names of :mod:`toolkit.tuning.records` are importable from here too.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
>>> task = {"workload": {"h": 7}, "board": "vta-fsim", "target": {"kind": "llvm"}, "template": {}, "hw": None}
>>> with Journal(path, LogHeader(task)) as j:
...     j.append(Record(workload={"h": 7}, board="vta-fsim", tuner="random", trial=0, index=3,
...                     config={"t": 1}, costs=[2e-3]))
>>> header, records = read_log(path)
>>> (records[0].index, records[0].seconds)
(3, 0.002)
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import warnings
from pathlib import Path
from typing import Any

from toolkit.errors import LogError

from toolkit.tuning.records import (ERROR_VALUES, HEADER_KEY, MAX_COST_S, MAX_FEATURE, MIN_COST_S, SCHEMA_VERSION,
                                    DuplicateRecordWarning, LogHeader, Record, TruncatedLogWarning, TunedOn,
                                    best_per_workload, check_log_path, load_records, read_log, stream_log, tvm_version,
                                    workload_key)

__all__ = ["ERROR_VALUES", "HEADER_KEY", "MAX_COST_S", "MAX_FEATURE", "MIN_COST_S", "SCHEMA_VERSION",
           "DuplicateRecordWarning", "LogHeader", "Record", "TruncatedLogWarning", "TunedOn", "best_per_workload",
           "load_records", "read_log", "stream_log", "tvm_version", "workload_key", "Journal", "check_log_path",
           "flock_pid", "lock_holder", "open_journal"]


def flock_pid(st: os.stat_result) -> int | None:
    """The pid holding a ``flock`` on the file ``st`` describes, from ``/proc/locks`` (``None``: nobody)."""
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        for line in Path("/proc/locks").read_text().splitlines():
            parts = line.split()
            if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == want:
                return int(parts[4])
    except (OSError, ValueError):
        pass
    return None


def lock_holder(fd: int) -> str:
    """Who holds the ``flock`` on the file open as ``fd``: ``pid N (command)`` from ``/proc/locks``."""
    pid = flock_pid(os.fstat(fd))
    if pid is None:
        return "another process"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmd = ""
    return f"pid {pid}" + (f" ({cmd.strip()[:120]})" if cmd.strip() else "")


def open_journal(log: str | Path | None, task: dict[str, Any], *, resume: bool) -> tuple[Journal | None, list[Record]]:
    """The :class:`Journal` of ``log`` for the task description ``task`` (a header's task), opened for
    appending, and the records already in it; ``(None, [])`` without a log. An existing log holding records
    is continued only with ``resume`` (else :class:`LogError`); one holding only its header (a run that failed
    before its first trial) is taken over."""
    if log is None:
        return None, []
    path = Path(log)
    check_log_path(path)
    if path.exists() and path.stat().st_size > 0 and not resume and _holds_records(path):
        raise LogError(f"tuning log {path} already exists; pass --resume to continue it or choose another --log")
    journal = Journal(path, LogHeader(task))
    return journal, journal.open()


def _holds_records(path: Path) -> bool:
    """Whether a log holds any record (an unreadable one counts as holding some: it is never taken over)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TruncatedLogWarning)
            return bool(read_log(path)[1])
    except LogError:
        return True


class Journal:
    """Append-only writer of one log; every :meth:`append` is on disk when it returns.

    A new file gets ``header``; an existing one must have a header whose task matches (else
    :class:`LogError`), and a truncated last line left by a crash is cut off before appending.
    """

    def __init__(self, path: str | Path, header: LogHeader) -> None:
        self.path = Path(path)
        self.header = header
        self._fh = None
        self._failed = False

    def open(self) -> list[Record]:
        """Open for appending under an exclusive lock; returns the records already in the file."""
        check_log_path(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LogError(f"tuning log {self.path} is a symbolic link; edgetune writes logs only to plain files: "
                               "give the file it points to, or another --log") from None
            raise LogError(f"cannot open tuning log {self.path}: {exc.strerror or exc}; choose another --log") \
                from None
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                raise LogError(f"tuning log {self.path} belongs to another user; edgetune appends only to its own "
                               "files: choose another --log")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LogError(f"tuning log {self.path} is being written by {lock_holder(fd)}; wait for that run "
                               "to finish, or choose another --log") from None
            existing = self._take_over(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fh = os.fdopen(fd, "a", encoding="utf-8")
        if not existing and os.fstat(fd).st_size == 0:
            self._write(self.header.to_json())
        return existing

    def _take_over(self, fd: int) -> list[Record]:
        """Under the lock: the records in the file (header checked), its partial last line cut off."""
        data = self.path.read_bytes()
        if not data.strip():
            os.ftruncate(fd, 0)
            return []
        if b"\n" not in data:   # one line without its newline: a header cut by a crash, or not a log at all
            if data.lstrip().startswith(b'{"' + HEADER_KEY.encode()):
                os.ftruncate(fd, 0)
                return []
            raise LogError(f"{self.path} is not an edgetune tuning log (no header line); choose another --log")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TruncatedLogWarning)
            old, existing = read_log(self.path)
        for w in caught:
            warnings.warn(w.message, w.category, stacklevel=3)
        diff = old.mismatch(self.header.task)
        if diff:
            raise LogError(f"{self.path} belongs to another task (different {', '.join(diff)}); "
                           "pass another --log file or tune that task")
        self.header = old
        self._cut_partial_line(fd, data)
        return existing

    def _cut_partial_line(self, fd: int, data: bytes) -> None:
        if data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        try:
            json.loads(data[cut:])
        except (ValueError, UnicodeDecodeError, RecursionError):
            os.ftruncate(fd, cut)
            os.fsync(fd)
            return
        os.write(fd, b"\n")                 # a complete last record without its newline
        os.fsync(fd)

    def _write(self, obj: dict[str, Any]) -> None:
        assert self._fh is not None, "Journal.open() first"
        try:
            self._fh.write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            self._failed = True
            raise LogError(f"cannot write tuning log {self.path}: {exc.strerror or exc}; every record before "
                           "this one is in the log") from None

    def append(self, record: Record) -> None:
        """Write one record durably."""
        self._write(record.to_json())

    def close(self) -> None:
        """Close the file, which releases the lock. A write that failed was reported already (its buffered
        text is dropped, not written again); any other failure names the log."""
        fh, self._fh = self._fh, None
        if fh is None:
            return
        try:
            fh.close()
        except OSError as exc:
            if not self._failed:
                raise LogError(f"cannot close tuning log {self.path}: {exc.strerror or exc}; every record "
                               "appended before is in the log") from None

    def __enter__(self) -> Journal:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
