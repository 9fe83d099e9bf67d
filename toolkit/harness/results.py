"""Bench results: one run per (workload, tuner, seed), the bench's JSON, and the summary over runs.

Definitions (also in ``docs/benchmarks.md``):

* ``trials_to_match`` of a run: the first trial (1-based) whose best-so-far is within 1 % of the
  *reference* tuner's final best on the same workload **and the same seed**; ``None`` if never.
* ``summary[tuner]["best_vs_optimum"]``: geometric mean over (workload, seed) of best / optimum.
* ``summary[tuner]["trials_to_match_vs_reference"]``: geometric mean over (workload, seed) of
  trials_to_match / the reference's; a run that never matched counts with its whole budget
  (a lower bound; ``unmatched`` says how many).
* ``summary[tuner]["invalid_vs_reference"]``: geometric mean of (invalid + 1) / (reference invalid + 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from toolkit.errors import LogError
from toolkit.tuning.metrics import MATCH_TOLERANCE, geomean, trials_to_match

__all__ = ["MATCH_TOLERANCE", "BenchRun", "BenchResult", "assign_trials_to_match", "summarize", "shared_starts"]


@dataclass
class BenchRun:
    """One tuner on one workload with one seed (one JSON object of ``runs``)."""

    workload: str
    tuner: str
    seed: int
    trials: int
    invalid: int
    best_seconds: float | None
    wall_s: float
    tuner_s: float
    history: list[float | None]
    best_config: dict[str, Any] | None = None
    stopped: str = "budget"
    trials_to_match: int | None = None
    build_s: float = 0.0
    compiled: int = 0
    """Configs the tuner compiled to read their features (``stats()["compiled"]``), measured or not."""
    cpu_s: float = 0.0
    """This process's CPU seconds over the run (with replayed measurements: almost all of it the tuner's)."""
    stats: dict[str, float] = field(default_factory=dict)
    """The tuner's counters at the end of the run (``Tuner.stats()``: fits, model queries, compiled ...)."""

    def best(self) -> float:
        """Best seconds, ``inf`` if no valid trial."""
        return math.inf if self.best_seconds is None else self.best_seconds

@dataclass
class BenchResult:
    """Everything ``edgetune bench --json`` writes."""

    environment: dict[str, Any]
    settings: dict[str, Any]
    workloads: dict[str, dict[str, Any]]
    runs: list[BenchRun] = field(default_factory=list)
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"environment": self.environment, "settings": self.settings, "workloads": self.workloads,
                "runs": [asdict(r) for r in self.runs], "summary": self.summary}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BenchResult:
        return cls(d["environment"], d["settings"], d["workloads"], [BenchRun(**r) for r in d["runs"]],
                   d.get("summary", {}))

    @classmethod
    def load(cls, path: str | Path) -> BenchResult:
        """Read a bench JSON file; :class:`LogError` if it is not one."""
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LogError(f"{path} is not an edgetune bench JSON file ({exc}); write one with edgetune bench "
                           "--json") from None

def assign_trials_to_match(runs: Sequence[BenchRun], reference: str) -> None:
    """Set each run's ``trials_to_match`` against the reference run of the same workload and seed."""
    ref = {(r.workload, r.seed): r.best_seconds for r in runs if r.tuner == reference}
    for r in runs:
        r.trials_to_match = trials_to_match(r.history, ref.get((r.workload, r.seed)))

def summarize(runs: Sequence[BenchRun], optimum: dict[str, float | None], reference: str) -> dict[str, dict]:
    """Per tuner: geometric means against the optimum and the reference (see the module docstring)."""
    ref = {(r.workload, r.seed): r for r in runs if r.tuner == reference}
    out: dict[str, dict] = {}
    for tuner in dict.fromkeys(r.tuner for r in runs):
        mine = [r for r in runs if r.tuner == tuner]
        vs_opt = [r.best() / optimum[r.workload] for r in mine if optimum.get(r.workload)]
        pairs = [(r, ref[(r.workload, r.seed)]) for r in mine if (r.workload, r.seed) in ref]
        ttm = [(r.trials_to_match or r.trials) / p.trials_to_match for r, p in pairs if p.trials_to_match]
        out[tuner] = {
            "runs": len(mine),
            "best_vs_optimum": geomean(vs_opt),
            "found_optimum": sum(1 for v in vs_opt if v <= 1 + 1e-9),
            "trials_to_match_vs_reference": geomean(ttm),
            "unmatched": sum(1 for r, _ in pairs if r.trials_to_match is None),
            "invalid_vs_reference": geomean((r.invalid + 1) / (p.invalid + 1) for r, p in pairs),
            "invalid_share": sum(r.invalid for r in mine) / max(1, sum(r.trials for r in mine)),
            "wall_s": sum(r.wall_s for r in mine) / max(1, len(mine)),
            "tuner_s": sum(r.tuner_s for r in mine) / max(1, len(mine)),
        }
    return out

def shared_starts(runs: Sequence[BenchRun], at_least: int = 4) -> list[tuple[list[str], int]]:
    """Groups of tuners whose best-so-far curves are identical over their first K trials in every run
    (same workload, same seed), with K; only groups with K >= ``at_least``. Seeded random warm-ups make
    model-based tuners start alike, and a budget of K trials or fewer cannot tell them apart."""
    by_key: dict[tuple[str, int], dict[str, list[float | None]]] = {}
    for r in runs:
        by_key.setdefault((r.workload, r.seed), {})[r.tuner] = r.history
    tuners = list(dict.fromkeys(r.tuner for r in runs))

    def prefix(a: str, b: str) -> int:
        lengths = []
        for hist in by_key.values():
            if a not in hist or b not in hist:
                continue
            ha, hb = hist[a], hist[b]
            n = next((i for i, (x, y) in enumerate(zip(ha, hb)) if x != y), min(len(ha), len(hb)))
            lengths.append(n)
        return min(lengths, default=0)

    groups: list[tuple[list[str], int]] = []
    grouped: set[str] = set()
    for t in tuners:
        if t in grouped:
            continue
        mates = [u for u in tuners if u != t and u not in grouped and prefix(t, u) >= at_least]
        if mates:
            members = [t, *mates]
            k = min(prefix(a, b) for i, a in enumerate(members) for b in members[i + 1:])
            if k >= at_least:
                groups.append((members, k))
                grouped.update(members)
    return groups
