"""Measures of a search that luck cannot win, computed from a run's best-so-far history.

A history holds the best latency after each trial (``None`` or ``inf`` before the first valid config); the
optimum is the space's exact best (from an exhaustive log). Trials are counted from 1.

>>> h = [None, 4.0, 2.0, 2.0, 1.0]
>>> trials_to_optimum(h, 1.0), trials_to_optimum(h, 1.0, tolerance=1.0), trials_to_optimum(h, 0.5)
(5, 3, None)
>>> regret(h, 1.0).tolist()
[10.0, 3.0, 1.0, 1.0, 0.0]
>>> regret_at(h, 1.0, 3), mean_regret(h, 1.0)
(1.0, 3.0)
>>> d = paired_difference([3.0, 5.0, 4.0], [1.0, 2.0, 2.0])
>>> round(d.mean, 4), round(d.se, 4), d.n
(2.3333, 0.3333, 3)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

EXACT = 1e-9
"""Relative tolerance of "the exact optimum" (floating-point noise of the same cost, nothing more)."""

NO_VALID_REGRET = 10.0
"""The regret a trial counts before the run has any valid config (as if it ran 11x slower than the optimum):
finite, so a mean over trials stays a number, and worse than almost any valid config."""


def _values(history: Sequence[float | None]) -> np.ndarray:
    return np.array([math.inf if h is None else float(h) for h in history], dtype=np.float64)


def trials_to_optimum(history: Sequence[float | None], optimum: float, tolerance: float = EXACT) -> int | None:
    """First trial whose best-so-far is within ``tolerance`` (relative) of ``optimum``; ``None`` if never."""
    hit = np.flatnonzero(_values(history) <= optimum * (1 + tolerance))
    return int(hit[0]) + 1 if len(hit) else None


MATCH_TOLERANCE = 0.01
"""A run matches a reference once its best is within this fraction of the reference's final best."""


def trials_to_match(history: Sequence[float | None], target: float | None,
                    tolerance: float = MATCH_TOLERANCE) -> int | None:
    """First trial whose best-so-far is within ``tolerance`` of ``target`` (another run's final best);
    ``None`` if never or when there is no target.

    >>> trials_to_match([3.0, 2.0, 1.005, 1.0], 1.0), trials_to_match([3.0], None)
    (3, None)
    """
    if target is None or not math.isfinite(target):
        return None
    return trials_to_optimum(history, target, tolerance)


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive finite values (``None`` when there are none).

    >>> round(geomean([1.0, 4.0, None]), 6)
    2.0
    """
    vs = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in vs) / len(vs)) if vs else None


def regret(history: Sequence[float | None], optimum: float, no_valid: float = NO_VALID_REGRET) -> np.ndarray:
    """Regret after each trial: best-so-far / optimum - 1 (``no_valid`` before the first valid config)."""
    values = _values(history)
    out = values / optimum - 1.0
    return np.where(np.isfinite(out), np.maximum(out, 0.0), no_valid)


def regret_at(history: Sequence[float | None], optimum: float, trial: int,
              no_valid: float = NO_VALID_REGRET) -> float:
    """Regret after ``trial`` trials (a run that stopped earlier keeps its last value)."""
    r = regret(history, optimum, no_valid)
    return float(r[min(trial, len(r)) - 1]) if len(r) else no_valid


def mean_regret(history: Sequence[float | None], optimum: float, upto: int | None = None,
                no_valid: float = NO_VALID_REGRET) -> float:
    """Mean regret over the first ``upto`` trials (all of them by default): the area under the regret curve
    per trial, which rewards finding good configs early and cannot be won by one lucky trial."""
    r = regret(history, optimum, no_valid)[:upto]
    return float(r.mean()) if len(r) else no_valid


@dataclass(frozen=True)
class PairedDifference:
    """Mean of per-pair differences ``a - b`` (same workload and seed), its standard error and the pair count."""

    mean: float
    se: float
    n: int


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """Paired differences of two tuners' figures on the same runs (workload, seed): mean and standard error."""
    if len(a) != len(b):
        raise ValueError(f"paired figures need equal lengths, got {len(a)} and {len(b)}")
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) == 0:
        return PairedDifference(math.nan, math.nan, 0)
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else math.nan
    return PairedDifference(float(d.mean()), se, len(d))
