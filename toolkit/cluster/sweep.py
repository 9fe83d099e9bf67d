"""Exhaustive simulator sweeps on a Ray cluster: the space in chunks over the workers, the driver alone writing the log.

Each chunk is built and measured on a worker as a trial would be (the board's own builder and runner); the driver
appends every chunk's records to the log as it comes back, so the log keeps every journal guarantee (one writer
under its lock, durable appends, ``--resume``). A chunk whose worker or node died is run again elsewhere by Ray
and recorded once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

from toolkit.cluster.client import ClusterClient
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.core.task import Task
from toolkit.tuning.journal import Record, open_journal
from toolkit.tuning.session import measure_indices

CHUNK = 16
"""Configs per cluster task: large enough that Ray's overhead per task (about 1 ms) is small beside a chunk's
simulation, small enough that a lost node costs little work."""
SWEEP_TUNER = "grid"
"""The tuner name the records of a sweep carry (the same enumeration as a ``grid`` run)."""


def _measure_chunk(task: Task, indices: Sequence[int]) -> list[MeasureResult]:
    return measure_indices(task, indices)


def sweep(task: Task, log: str | Path, address: str, *, chunk: int = CHUNK,
          callback: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Measure every config of ``task`` not yet in ``log`` on the cluster at ``address`` (resuming the log);
    ``callback(done, total)`` after each round. Returns ``{"measured", "resumed", "chunks", "wall_s"}``.

    Rounds of two chunks per CPU go out at once; each round's records are appended before the next starts.
    """
    t0 = time.perf_counter()
    desc = task.describe()
    journal, earlier = open_journal(log, desc, resume=True)
    assert journal is not None
    client = None
    try:
        client = ClusterClient(address)
        done = {r.index for r in earlier if r.index is not None}
        trial = len(earlier)
        todo = [i for i in range(task.space.size) if i not in done]
        chunks = [todo[k:k + chunk] for k in range(0, len(todo), chunk)]
        width = 2 * client.cpus
        measured = 0
        if callback is not None:
            callback(len(done), task.space.size)
        for first in range(0, len(chunks), width):
            for results in client.map(_measure_chunk, task, chunks[first:first + width], timeout_s=None,
                                      n_parallel=client.cpus):
                for r in results:
                    journal.append(Record.from_result(r, trial=trial, tuner=SWEEP_TUNER, task=desc))
                    trial += 1
                measured += len(results)
            if callback is not None:
                callback(len(done) + measured, task.space.size)
    finally:
        journal.close()
        if client is not None:
            client.close()
    return {"measured": measured, "resumed": len(done), "chunks": len(chunks), "wall_s": time.perf_counter() - t0}
