"""Logs, a bench result and an export for the dashboard's tests: the demo's tuning run and export on the VTA
simulator (shorter), logs written with edgetune's own journal, and files a test damages on purpose."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from toolkit.backends import make_task
from toolkit.boards import resolve_board
from toolkit.tuning.journal import Journal, LogHeader, Record
from toolkit.workloads import parse_workload

SMALL = "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1"
TRIALS = 24


def task_dict() -> dict:
    return make_task(parse_workload(SMALL), resolve_board("vta-fsim")).describe()


def record(trial: int, seconds: float | None, task: dict, when: float | None = None) -> Record:
    """A record of ``task``'s workload: valid with ``seconds``, or a runtime error."""
    return Record(workload=task["workload"], board=task["board"], tuner="random", trial=trial, index=trial,
                  config={"tile": trial}, costs=[] if seconds is None else [seconds],
                  error=None if seconds is not None else "runtime_error",
                  timestamp=time.time() if when is None else when)


def write_lines(path: Path, task: dict, n: int, *, seconds=lambda i: 1e-3 * (1 + (i * 7919) % 997 / 100)) -> None:
    """A log of ``n`` records written at once (as a long run leaves it), without a journal's fsync per record."""
    base = record(0, 1.0, task).to_json()
    with path.open("w") as f:
        f.write(json.dumps(LogHeader(task).to_json()) + "\n")
        for i in range(n):
            s = seconds(i)
            base.update(trial=i, index=i, timestamp=1000.0 + i, costs=[] if s is None else [s],
                        error=None if s is not None else "runtime_error")
            f.write(json.dumps(base) + "\n")


@pytest.fixture(scope="package")
def runs_dir(tmp_path_factory) -> Path:
    """A folder as a user's logs folder looks: a finished tuning run on vta-fsim, a corrupt log, a log whose
    writer died mid-record, a bench result and an export of the run."""
    from toolkit.demo import run_export_demo, run_tuning_demo

    root = tmp_path_factory.mktemp("runs")
    log = Path(run_tuning_demo(root, trials=TRIALS, workload=SMALL).log)     # what `make demo` writes, shorter
    run_export_demo(log, root / "export")
    task = make_task(parse_workload(SMALL), resolve_board("vta-fsim"))
    corrupt = root / "logs" / "corrupt.jsonl"
    write_lines(corrupt, task.describe(), 5)
    with corrupt.open("a") as f:
        f.write("{not json\n")
    cut = root / "logs" / "cut.jsonl"
    write_lines(cut, task.describe(), 3)
    with cut.open("a") as f:
        f.write('{"workload": {"n": 1')
    bench = {"environment": {"cpu": "test"}, "settings": {"trials": 4},
             "workloads": {"w": {"optimum": 1e-3}},
             "runs": [{"workload": "w", "tuner": t, "seed": s, "trials": 4, "invalid": 0,
                       "best_seconds": h[-1], "history": h}
                      for t, hs in {"random": [[3e-3, 2e-3, 2e-3, 1e-3], [3e-3, 3e-3, 2e-3, 2e-3]],
                                    "xgb": [[2e-3, 1e-3, 1e-3, 1e-3], [3e-3, 1e-3, 1e-3, 1e-3]]}.items()
                      for s, h in enumerate(hs)]}
    (root / "bench.json").write_text(json.dumps(bench))
    return root


def demo_log(root: Path) -> Path:
    """The demo's tuning log in a :func:`runs_dir` folder."""
    return next((root / "logs" / "vta-fsim").glob("*.jsonl"))


@pytest.fixture
def live_log(tmp_path) -> tuple[Path, Journal, dict]:
    """A log a run is writing: its journal open (and so its lock held), two records in it."""
    task = task_dict()
    path = tmp_path / "live.jsonl"
    journal = Journal(path, LogHeader(task))
    journal.open()
    for i in range(2):
        journal.append(record(i, 2e-3 - i * 1e-4, task))
    yield path, journal, task
    journal.close()
