"""The runner interface: measure built artifacts on a board (or the simulator).

:class:`~toolkit.errors.BoardLostError` (re-exported here) is what a runner raises when the board went away and
the batch should be measured again; :class:`~toolkit.errors.BoardGoneError` when it waited the run's whole
``wait_s`` for the board and it did not come back: the run stops, it is not retried.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from toolkit.errors import BoardGoneError, BoardLostError
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Artifact, Template


@dataclass(frozen=True)
class MeasureOptions:
    """How to time one artifact (AutoTVM/TVM semantics).

    Each of ``repeat`` measurements runs the kernel ``number`` times (raised so that one
    measurement lasts at least ``min_repeat_ms``) and reports the mean; ``timeout_s`` bounds
    one artifact's whole run; ``check`` compares the output with the reference (off by default, as in
    AutoTVM: timing only; ``tune --check`` turns it on).

    ``hopeless_factor`` (0 = off) cuts hopeless configs short, as AutoTVM's timeouts do: the
    runner first times one run (``time_evaluator(number=1, repeat=1)``); a config slower than
    ``hopeless_factor`` x ``best_s`` (the best seconds so far, set by the tuning loop) keeps that
    one cost and is not timed ``repeat`` times (with a factor well above the run-to-run noise it does
    not change which config is best). ``bench`` leaves it off.
    """

    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 0.0
    timeout_s: float = 30.0
    check: bool = False
    hopeless_factor: float = 0.0
    best_s: float = math.inf

    def hopeless_after(self) -> float:
        """Seconds above which one timed run ends the measurement (``inf`` when the cut is off)."""
        if self.hopeless_factor <= 0 or not math.isfinite(self.best_s):
            return math.inf
        return self.hopeless_factor * self.best_s


class Runner(abc.ABC):
    """Measures artifacts. Implementations: the in-process simulator, TVM RPC boards.

    ``on_wait`` (set by whoever shows progress) is told, in one line, whenever the runner waits for a board.
    """

    on_wait: Callable[[str], None] | None = None

    def waiting(self, message: str) -> None:
        """Say what the runner waits for (through ``on_wait``; silent without one)."""
        if self.on_wait is not None:
            self.on_wait(message)

    def reach(self) -> None:
        """Before the first measurement: make sure the board is there, waiting for it as long as the runner waits
        (:class:`~toolkit.errors.BoardError` when it is not); called again, nothing. The default measures in this
        process: nothing to reach."""

    @abc.abstractmethod
    def run(self, template: Template, items: Sequence[tuple[Config, Artifact]],
            options: MeasureOptions) -> list[MeasureResult]:
        """One result per item, in order. A board lost mid-run is retried (never recorded as a result)."""

    def close(self) -> None:
        """Release connections; the default has none."""

__all__ = ["BoardGoneError", "BoardLostError", "MeasureOptions", "Runner"]
