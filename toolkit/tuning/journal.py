"""Tuning logs: append-only JSON lines, one header line, one record per measurement.

The first line is a header naming the schema, the edgetune and TVM versions and the task
(workload, board, target, template, hardware config); every further line is one measurement.
:class:`Journal` writes a line, flushes and fsyncs it before returning, so a crash loses at
most the measurement in flight. Reading skips a truncated last line (a crash mid-write) with a
:class:`TruncatedLogWarning`; any other unreadable line, or a bad header, is a
:class:`~toolkit.errors.LogError` naming the file and line.

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

import json
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from toolkit.version import __version__
from toolkit.errors import LogError
from toolkit.tuning.core.result import ErrorClass, MeasureResult

SCHEMA_VERSION = 1
"""Version of the log format written here."""

HEADER_KEY = "edgetune_log"


class TruncatedLogWarning(UserWarning):
    """A log's last line was cut short (the writer crashed mid-record); the line was skipped."""


def tvm_version() -> str:
    """Installed apache-tvm version (without importing TVM)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("apache-tvm")
    except PackageNotFoundError:
        return "none"


@dataclass
class LogHeader:
    """The first line of a log: what was tuned, with which versions."""

    task: dict[str, Any]
    schema: int = SCHEMA_VERSION
    edgetune: str = __version__
    tvm: str = field(default_factory=tvm_version)
    created: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {HEADER_KEY: self.schema, "edgetune": self.edgetune, "tvm": self.tvm,
                "created": self.created, "task": self.task}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> LogHeader:
        if not isinstance(obj, dict) or HEADER_KEY not in obj or not isinstance(obj.get("task"), dict):
            raise LogError(f"{where}: not an edgetune log header; is this an edgetune tuning log?")
        if obj[HEADER_KEY] != SCHEMA_VERSION:
            raise LogError(f"{where}: log schema {obj[HEADER_KEY]!r} is not supported (this edgetune reads "
                           f"schema {SCHEMA_VERSION}); tune again or use the edgetune version that wrote it")
        return cls(task=obj["task"], schema=obj[HEADER_KEY], edgetune=str(obj.get("edgetune", "?")),
                   tvm=str(obj.get("tvm", "?")), created=float(obj.get("created", 0.0)))

    def mismatch(self, task: dict[str, Any]) -> list[str]:
        """Task keys whose values differ from ``task`` (empty when the log belongs to it)."""
        keys = sorted(set(self.task) | set(task))
        return [k for k in keys if _canon(self.task.get(k)) != _canon(task.get(k))]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@dataclass
class Record:
    """One measurement. ``config`` is free-form (knob values, or another tool's schedule)."""

    workload: dict[str, Any]
    board: str
    tuner: str
    trial: int
    config: dict[str, Any]
    index: int | None = None
    costs: list[float] = field(default_factory=list)
    error: str | None = None
    message: str = ""
    features: dict[str, float] = field(default_factory=dict)
    target: Any = None
    template: dict[str, Any] = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)
    build_s: float = 0.0
    run_s: float = 0.0

    @property
    def valid(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def seconds(self) -> float:
        """Mean cost; ``inf`` when the measurement failed."""
        return sum(self.costs) / len(self.costs) if self.valid else math.inf

    @property
    def workload_key(self) -> str:
        """The workload as a canonical string (spec fields, name ignored)."""
        return _canon({k: v for k, v in self.workload.items() if k != "name"})

    def to_result(self) -> MeasureResult:
        """The record as a :class:`MeasureResult` (for ``Tuner.load_history``)."""
        return MeasureResult(index=-1 if self.index is None else self.index, config=self.config,
                             costs=list(self.costs), error=None if self.error is None else ErrorClass(self.error),
                             message=self.message, features=dict(self.features), build_s=self.build_s,
                             run_s=self.run_s, timestamp=self.timestamp)

    @classmethod
    def from_result(cls, result: MeasureResult, *, trial: int, tuner: str, task: dict[str, Any]) -> Record:
        """A record of ``result`` for the task description ``task`` (a header's task dict)."""
        return cls(workload=task["workload"], board=task["board"], target=task.get("target"),
                   template=task.get("template", {}), tuner=tuner, trial=trial, index=result.index,
                   config=result.config, costs=list(result.costs),
                   error=None if result.error is None else ErrorClass(result.error).value,
                   message=result.message, features=dict(result.features), timestamp=result.timestamp,
                   build_s=result.build_s, run_s=result.run_s)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Record:
        if not isinstance(obj, dict):
            raise LogError(f"{where}: a record must be a JSON object; fix or delete that line")
        missing = [k for k in ("workload", "board", "tuner", "trial", "config") if k not in obj]
        if missing:
            raise LogError(f"{where}: record lacks {', '.join(missing)}; fix or delete that line")
        known = set(cls.__dataclass_fields__)
        try:
            rec = cls(**{k: v for k, v in obj.items() if k in known})
            if rec.error is not None:
                ErrorClass(rec.error)
            rec.costs = [float(c) for c in rec.costs]
        except (TypeError, ValueError) as exc:
            raise LogError(f"{where}: malformed record ({exc}); fix or delete that line") from None
        return rec


def read_log(path: str | Path) -> tuple[LogHeader, list[Record]]:
    """The header and records of one log (see the module docstring for error handling)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise LogError(f"tuning log {path} does not exist") from None
    except OSError as exc:
        raise LogError(f"cannot read tuning log {path}: {exc}") from None
    lines = data.split(b"\n")
    complete = data.endswith(b"\n")
    if complete:
        lines = lines[:-1]
    if not lines or not lines[0].strip():
        raise LogError(f"{path}:1: empty tuning log (no header); delete it and tune again")
    header: LogHeader | None = None
    records: list[Record] = []
    for no, raw in enumerate(lines, start=1):
        where = f"{path}:{no}"
        last = no == len(lines)
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if last and not complete and no > 1:
                warnings.warn(f"{where}: last line is truncated (interrupted write); skipped it",
                              TruncatedLogWarning, stacklevel=2)
                break
            raise LogError(f"{where}: not valid JSON; the log is corrupt there (fix or delete that line)") from None
        if header is None:
            header = LogHeader.from_json(obj, where)
        else:
            records.append(Record.from_json(obj, where))
    assert header is not None
    return header, records


def load_records(paths: str | Path | Iterable[str | Path]) -> list[Record]:
    """Records of one or several logs, merged in file order."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out: list[Record] = []
    for p in paths:
        out.extend(read_log(p)[1])
    return out


def best_per_workload(records: Iterable[Record], *, board: str | None = None) -> dict[str, Record]:
    """The fastest valid record of each workload (keyed by :attr:`Record.workload_key`).

    ``board`` keeps only that board's records; ties keep the earlier record.
    """
    best: dict[str, Record] = {}
    for r in records:
        if not r.valid or (board is not None and r.board != board):
            continue
        key = r.workload_key
        if key not in best or r.seconds < best[key].seconds:
            best[key] = r
    return best


def open_journal(log: str | Path | None, task: dict[str, Any], *, resume: bool) -> tuple[Journal | None, list[Record]]:
    """The :class:`Journal` of ``log`` for the task description ``task`` (a header's task), opened for
    appending, and the records already in it; ``(None, [])`` without a log. An existing, non-empty log
    is continued only with ``resume`` (else :class:`LogError`)."""
    if log is None:
        return None, []
    path = Path(log)
    if path.exists() and path.stat().st_size > 0 and not resume:
        raise LogError(f"tuning log {path} already exists; pass --resume to continue it or choose another --log")
    journal = Journal(path, LogHeader(task))
    return journal, journal.open()


class Journal:
    """Append-only writer of one log; every :meth:`append` is on disk when it returns.

    A new file gets ``header``; an existing one must have a header whose task matches (else
    :class:`LogError`), and a truncated last line left by a crash is cut off before appending.
    """

    def __init__(self, path: str | Path, header: LogHeader) -> None:
        self.path = Path(path)
        self.header = header
        self._fh = None

    def open(self) -> list[Record]:
        """Open for appending; returns the records already in the file."""
        existing: list[Record] = []
        if self.path.exists() and b"\n" in self.path.read_bytes():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", TruncatedLogWarning)
                old, existing = read_log(self.path)
            for w in caught:
                warnings.warn(w.message, w.category, stacklevel=2)
            diff = old.mismatch(self.header.task)
            if diff:
                raise LogError(f"{self.path} belongs to another task (different {', '.join(diff)}); "
                               "pass another --log file or tune that task")
            self.header = old
            self._cut_partial_line()
            self._fh = open(self.path, "a", encoding="utf-8")
        else:   # new, or a crash cut its very first (header) line: start afresh
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "w", encoding="utf-8")
            self._write(self.header.to_json())
        return existing

    def _cut_partial_line(self) -> None:
        data = self.path.read_bytes()
        if data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        try:
            json.loads(tail)
        except (json.JSONDecodeError, UnicodeDecodeError):
            with open(self.path, "r+b") as fh:
                fh.truncate(cut)
                os.fsync(fh.fileno())
            return
        with open(self.path, "ab") as fh:      # a complete last record without its newline
            fh.write(b"\n")
            os.fsync(fh.fileno())

    def _write(self, obj: dict[str, Any]) -> None:
        assert self._fh is not None, "Journal.open() first"
        self._fh.write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, record: Record) -> None:
        """Write one record durably."""
        self._write(record.to_json())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> Journal:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
