"""The benchmark harness: tuners side by side on the same board, budget and seeds, with replayed measurements.

- :mod:`~toolkit.harness.run`: :func:`run_bench` (the workload x seed x tuner grid, resumable), :func:`run_one`
  (one tuner's run, what every bench script measures with) and :func:`save_checkpoint` (one atomic JSON write
  for every bench);
- :mod:`~toolkit.harness.caches`: exhaustive simulator logs replayed as measurements (and the optimum);
- :mod:`~toolkit.harness.results`: :class:`BenchRun`, :class:`BenchResult`, :func:`summarize`;
- :mod:`~toolkit.harness.environment`: machine, command and versions recorded with each result;
- :mod:`~toolkit.harness.workloads`, :mod:`~toolkit.harness.docs`: what a bench runs, where its tables go.

The measures themselves (trials to a match or to the optimum, regret, paired differences) live once, in
:mod:`toolkit.tuning.metrics`. ``edgetune bench`` and the scripts in ``bench/`` are thin layers over this.
"""

from __future__ import annotations

from toolkit.harness.caches import (CHECKED_CONFIGS, DEFAULT_CACHE_DIR, CompileReplayBuilder, StaleCacheWarning,
                                    cache_path, ensure_cache, exhaustive_cache, find_cache, set_aside_if_stale,
                                    stale_configs)
from toolkit.harness.docs import write_doc_section
from toolkit.harness.environment import MODEL_LIBRARIES, cpu_name, environment, library_versions
from toolkit.harness.results import (MATCH_TOLERANCE, BenchResult, BenchRun, assign_trials_to_match, shared_starts,
                                     summarize)
from toolkit.harness.run import RESUME_KEYS, Progress, run_bench, run_one, save_checkpoint
from toolkit.harness.workloads import expand_workloads
from toolkit.tuning.metrics import geomean, trials_to_match

__all__ = [
    "CHECKED_CONFIGS", "DEFAULT_CACHE_DIR", "CompileReplayBuilder", "StaleCacheWarning", "cache_path", "ensure_cache",
    "exhaustive_cache", "find_cache", "set_aside_if_stale", "stale_configs", "write_doc_section", "MODEL_LIBRARIES",
    "cpu_name", "environment", "library_versions", "MATCH_TOLERANCE", "BenchResult", "BenchRun",
    "assign_trials_to_match", "shared_starts", "summarize", "RESUME_KEYS", "Progress", "run_bench", "run_one",
    "save_checkpoint",
    "expand_workloads", "geomean", "trials_to_match",
]
