"""The outcome of measuring one configuration, shared by runners, records and tuners."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ErrorClass(str, Enum):
    """Why a measurement failed (AutoTVM's MeasureErrorNo, named)."""

    INVALID_CONFIG = "invalid_config"   # rejected before building (a hardware or template limit)
    COMPILE_ERROR = "compile_error"     # the build failed
    RUNTIME_ERROR = "runtime_error"     # the program failed on the board
    TIMEOUT = "timeout"                 # build or run exceeded its time limit
    WRONG_ANSWER = "wrong_answer"       # ran, output differs from the reference
    BOARD_LOST = "board_lost"           # the board went away mid-measurement (retried, never recorded)


class Measured:
    """What a measurement's ``costs`` and ``error`` say; shared by :class:`MeasureResult` and a log's record."""

    costs: list[float]
    error: Any

    @property
    def valid(self) -> bool:
        """True when the config ran and gave the right answer."""
        return self.error is None and bool(self.costs)

    @property
    def seconds(self) -> float:
        """Mean cost in seconds; ``inf`` for a failed measurement."""
        return sum(self.costs) / len(self.costs) if self.valid else math.inf


@dataclass
class MeasureResult(Measured):
    """One measured (or failed) configuration.

    ``costs`` are seconds per run (``repeat`` values); empty when ``error`` is set.
    ``features`` are what the build revealed (compile-time features), possibly empty.
    """

    index: int
    config: dict[str, Any]
    costs: list[float] = field(default_factory=list)
    error: ErrorClass | None = None
    message: str = ""
    features: dict[str, float] = field(default_factory=dict)
    build_s: float = 0.0
    run_s: float = 0.0
    timestamp: float = field(default_factory=time.time)

