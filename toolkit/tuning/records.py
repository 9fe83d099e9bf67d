"""Tuning logs as data: the header, the records, and reading them back.

A log is JSON lines: the first line is a header naming the schema, the edgetune and TVM versions and the task
(workload, board, target, template, hardware config); every further line is one measurement. Reading skips a
truncated last line (a crash mid-write) with a :class:`TruncatedLogWarning`; any other unreadable line (bad JSON,
nesting too deep, wrong field types, a cost outside [1e-12, 1e6] seconds, a feature that is not finite or beyond
1e18), or a bad header, is a :class:`~toolkit.errors.LogError` naming the file and line.
:mod:`toolkit.tuning.journal` writes logs.
"""

from __future__ import annotations

import hashlib
import json
import math
import stat
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from toolkit.version import __version__
from toolkit.boards import resolve_board
from toolkit.errors import BoardError, LogError
from toolkit.tuning.core.result import ErrorClass, Measured, MeasureResult

SCHEMA_VERSION = 1
"""Version of the log format written here."""

HEADER_KEY = "edgetune_log"

ERROR_VALUES = frozenset(e.value for e in ErrorClass)


class DuplicateRecordWarning(UserWarning):
    """A record line that repeats an earlier one exactly (it is read once)."""


class TruncatedLogWarning(UserWarning):
    """A log's last line was cut short (the writer crashed mid-record); the line was skipped."""


def tvm_version() -> str:
    """Installed apache-tvm version (without importing TVM)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("apache-tvm")
    except PackageNotFoundError:
        return "none"


@dataclass(frozen=True)
class TunedOn:
    """The board a log was tuned on, as its header records it."""

    board: str
    board_type: str
    target: Any
    """The TVM target (a dict), or ``None`` for a VTA board."""
    hw: Any
    """The VTA hardware config the log was tuned for (``None`` elsewhere)."""


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
        if obj[HEADER_KEY] != SCHEMA_VERSION or isinstance(obj[HEADER_KEY], bool):
            raise LogError(f"{where}: log schema {obj[HEADER_KEY]!r} is not supported (this edgetune reads "
                           f"schema {SCHEMA_VERSION}); tune again or use the edgetune version that wrote it")
        created = obj.get("created", 0.0)
        if not _is_number(created):
            raise LogError(f"{where}: header field 'created' must be a number; fix the header or tune again")
        return cls(task=obj["task"], schema=SCHEMA_VERSION, edgetune=str(obj.get("edgetune", "?")),
                   tvm=str(obj.get("tvm", "?")), created=float(created))

    def tuned_on(self) -> TunedOn:
        """The board of the header's task (one task, or a network's tasks: the first one's target and hardware);
        :class:`LogError` when it names a board that is not registered here and no board type."""
        first = self.task.get("tasks", [self.task])[0] if self.task.get("tasks") else self.task
        board = str(self.task.get("board") or first.get("board") or "")
        board_type = first.get("board_type")
        if not board_type:
            try:
                board_type = resolve_board(board).profile.name
            except BoardError:
                raise LogError(f"the log header names board {board!r} but no board type; pass --board TYPE") from None
        return TunedOn(board, str(board_type), first.get("target"), first.get("hw"))

    def mismatch(self, task: dict[str, Any]) -> list[str]:
        """Task keys whose values differ from ``task`` (empty when the log belongs to it); a workload's name
        does not count (``resnet18.C4`` and its spec are one task)."""
        keys = sorted(set(self.task) | set(task))
        same = {"workload": lambda a, b: (isinstance(a, dict) and isinstance(b, dict)
                                          and workload_key(a) == workload_key(b))}
        return [k for k in keys if _canon(self.task.get(k)) != _canon(task.get(k))
                and not same.get(k, lambda a, b: False)(self.task.get(k), task.get(k))]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def workload_key(workload: dict[str, Any]) -> str:
    """A workload dict as a canonical string (spec fields, name ignored): records of one workload share it."""
    return _canon({k: v for k, v in workload.items() if k != "name"})


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "workload": (dict,), "board": (str,), "tuner": (str,), "trial": (int,), "config": (dict,),
    "index": (int, type(None)), "costs": (list,), "error": (str, type(None)), "message": (str,),
    "features": (dict,), "template": (dict,), "timestamp": (int, float), "build_s": (int, float),
    "run_s": (int, float)}
"""JSON types of a record's fields (``target`` is free-form)."""


@dataclass
class Record(Measured):
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
    def workload_key(self) -> str:
        """The workload as a canonical string (spec fields, name ignored)."""
        return workload_key(self.workload)

    def to_result(self) -> MeasureResult:
        """The record as a :class:`MeasureResult` (for ``Tuner.load_history``)."""
        return MeasureResult(index=-1 if self.index is None else self.index, config=self.config,
                             costs=list(self.costs), error=None if self.error is None else ErrorClass(self.error),
                             message=self.message, features=self.features, build_s=self.build_s,
                             run_s=self.run_s, timestamp=self.timestamp)

    @classmethod
    def from_result(cls, result: MeasureResult, *, trial: int, tuner: str, task: dict[str, Any]) -> Record:
        """A record of ``result`` for the task description ``task`` (a header's task dict), every cost and
        feature within what :meth:`from_json` reads back (costs clamped to [MIN_COST_S, MAX_COST_S], features
        that are not finite and below MAX_FEATURE in magnitude left out)."""
        costs = [min(max(float(c), MIN_COST_S), MAX_COST_S) for c in result.costs if math.isfinite(c)]
        features = {k: float(v) for k, v in result.features.items() if math.isfinite(v) and abs(v) <= MAX_FEATURE}
        return cls(workload=task["workload"], board=task["board"], target=task.get("target"),
                   template=task.get("template", {}), tuner=tuner, trial=trial, index=result.index,
                   config=result.config, costs=costs,
                   error=None if result.error is None else ErrorClass(result.error).value,
                   message=result.message, features=features, timestamp=result.timestamp,
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
        for key, types in RECORD_TYPES.items():
            if key in obj and (not isinstance(obj[key], types) or isinstance(obj[key], bool)):
                raise LogError(f"{where}: malformed record (field {key!r} is a {type(obj[key]).__name__}); "
                               "fix or delete that line")
        if obj.get("error") is not None and obj["error"] not in ERROR_VALUES:
            raise LogError(f"{where}: malformed record (unknown error {str(obj['error'])[:40]!r}); fix or delete "
                           "that line")
        costs = obj.get("costs", [])
        if not all(_is_number(c) and MIN_COST_S <= c <= MAX_COST_S for c in costs):
            raise LogError(f"{where}: malformed record (every cost must be between {MIN_COST_S:g} and {MAX_COST_S:g} "
                           "seconds); fix or delete that line")
        if not all(isinstance(k, str) and _is_number(v) and abs(v) <= MAX_FEATURE
                   for k, v in obj.get("features", {}).items()):
            raise LogError(f"{where}: malformed record (features must map names to finite numbers of magnitude at "
                           f"most {MAX_FEATURE:g}); fix or delete that line")
        if obj.get("index") is not None and obj["index"] < 0 or obj["trial"] < 0:
            raise LogError(f"{where}: malformed record (negative trial or index); fix or delete that line")
        known = set(cls.__dataclass_fields__)
        rec = cls(**{k: v for k, v in obj.items() if k in known})
        rec.costs = [float(c) for c in rec.costs]
        rec.features = {sys.intern(k): float(v) for k, v in rec.features.items()}   # one copy of each name
        return rec


MIN_COST_S = 1e-12
"""The shortest cost a record may hold (a picosecond): below it the models' logs and ratios overflow."""
MAX_COST_S = 1e6
"""The longest cost a record may hold (11 days)."""
MAX_FEATURE = 1e18
"""The largest magnitude of a recorded feature (the cost models' arithmetic stays finite)."""


def read_log(path: str | Path) -> tuple[LogHeader, list[Record]]:
    """The header and records of one log (see the module docstring for error handling)."""
    header, records = stream_log(path)
    return header, list(records)


def stream_log(path: str | Path) -> tuple[LogHeader, Iterator[Record]]:
    """The header of one log, and its records one at a time as they are read (bounded memory for logs of
    hundreds of thousands of records: ``best``, ``export``). Errors and warnings as :func:`read_log`'s; a record
    line is read when the iterator reaches it."""
    path = Path(path)
    try:
        check_log_path(path, must_exist=True)
        f = path.open("rb")
    except OSError as exc:
        raise LogError(f"cannot read tuning log {path}: {exc.strerror or exc}") from None
    try:
        first = f.readline()
        if not first.strip():
            raise LogError(f"{path}:1: empty tuning log (no header); delete it and tune again")
        obj = line_json(first, f"{path}:1", header=True, truncated=False)
        header = LogHeader.from_json(obj, f"{path}:1")
    except BaseException:
        f.close()
        raise
    return header, _records(f, path)


def line_json(raw: bytes, where: str, *, header: bool, truncated: bool) -> Any:
    """One line's JSON; :class:`LogError` saying where the log is corrupt (``None`` for a truncated last line)."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise LogError(f"{where}: JSON nested too deeply for a tuning log; the log is corrupt there (fix or "
                       "delete that line)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):   # ValueError: an int of > 4300 digits
        if header:
            raise LogError(f"{where}: not an edgetune tuning log (its first line is no JSON header); choose "
                           "another --log") from None
        if truncated:
            warnings.warn(f"{where}: last line is truncated (interrupted write); skipped it",
                          TruncatedLogWarning, stacklevel=4)
            return None
        raise LogError(f"{where}: not valid JSON; the log is corrupt there (fix or delete that line)") from None


def _records(f: Any, path: Path) -> Iterator[Record]:
    """The records of an open log after its header; a line repeated verbatim is one record (warned)."""
    seen: set[bytes] = set()
    with f:
        for no, raw in enumerate(f, start=2):
            if not raw.strip():
                continue
            where = f"{path}:{no}"
            obj = line_json(raw, where, header=False, truncated=not raw.endswith(b"\n"))
            if obj is None:
                return
            record = Record.from_json(obj, where)
            key = hashlib.blake2b(raw.strip(), digest_size=16).digest()
            if key in seen:     # a line copied twice (by hand, or a sync tool) is one measurement
                warnings.warn(f"{where}: repeats an earlier record line; counted once", DuplicateRecordWarning,
                              stacklevel=3)
                continue
            seen.add(key)
            yield record


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


def check_log_path(path: Path, *, must_exist: bool = False) -> None:
    """Refuse a log path that is not a regular file (a directory, a device, a FIFO), or whose folder is
    a file; :class:`LogError` saying what to pass instead."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if must_exist:
            raise LogError(f"tuning log {path} does not exist") from None
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if parent.exists() and not parent.is_dir():
            raise LogError(f"cannot create tuning log {path}: {parent} is a file, not a folder; choose another "
                           "--log") from None
        return
    except NotADirectoryError:
        raise LogError(f"cannot create tuning log {path}: a folder on its path is a file; choose another --log") \
            from None
    if stat.S_ISDIR(st.st_mode):
        raise LogError(f"tuning log {path} is a folder; give a file path such as {path / 'log.jsonl'}")
    if not stat.S_ISREG(st.st_mode):
        raise LogError(f"tuning log {path} is not a regular file (a device or a pipe); give a file path for --log")
