"""Whole-network tuning on several boards at once (``lanes``): one task per board at a time, one log, a board lost
while the others go on; end to end, three board agents behind one tracker key with one killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import defaultdict

import pytest
from typer.testing import CliRunner

from toolkit.backends import network_tasks
from toolkit.backends.vta.sim_runner import SimRunner
from toolkit.boards import BoardEntry, Inventory, resolve_board
from toolkit.cli.app import app
from toolkit.errors import BoardGoneError
from toolkit.rpc.tracker import ensure_local_rpc
from toolkit.testing.cli import one_line_error, sim_agent
from toolkit.tuning.core.builder import LocalBuilder
from toolkit.tuning.journal import read_log
from toolkit.tuning.network import tune_network
from toolkit.tuning.scheduler import GradientScheduler
from toolkit.workloads import Conv2dWorkload
from toolkit.workloads.networks import get_network


class _Watched(SimRunner):
    """The simulator, noting which task each lane measures and when; ``lose_after`` rounds: the board is gone."""

    def __init__(self, lane: int, spans: list, lose_after: int | None = None) -> None:
        super().__init__()
        self.lane, self.spans, self.lose_after, self.rounds = lane, spans, lose_after, 0

    def run(self, template, items, options):
        self.rounds += 1
        if self.lose_after is not None and self.rounds > self.lose_after:
            raise BoardGoneError(f"lane {self.lane}'s board did not come back")
        t0 = time.monotonic()
        time.sleep(0.01)       # long enough that the lanes' rounds overlap
        out = super().run(template, items, options)
        self.spans.append((self.lane, template.workload.spec(), t0, time.monotonic()))
        return out


def _tasks():
    return network_tasks(get_network("resnet18"), resolve_board("vta-fsim"))


def test_lanes_tune_one_task_each_at_a_time_into_one_log(tmp_path):
    plan, tasks = _tasks()
    spans: list = []
    lanes = [(LocalBuilder(n_parallel=0), _Watched(k, spans)) for k in range(3)]
    log = tmp_path / "net.jsonl"
    s = tune_network(plan, tasks, "random", 96, scheduler=GradientScheduler(trials_per_round=8), log=log,
                     lanes=lanes)
    _, records = read_log(log)
    assert s.trials == len(records) == 96
    per_task = defaultdict(list)
    for r in records:
        per_task[Conv2dWorkload.from_dict(r.workload)].append(r.index)
    assert all(len(set(v)) == len(v) for v in per_task.values())          # nothing measured twice
    assert {lane for lane, *_ in spans} == {0, 1, 2}                        # every board measured
    by_task = defaultdict(list)
    for lane, spec, t0, t1 in spans:
        by_task[spec].append((t0, t1, lane))
    for intervals in by_task.values():                                      # a task is on one board at a time
        intervals.sort()
        assert all(b[0] >= a[1] or a[2] == b[2] for a, b in zip(intervals, intervals[1:]))
    starts = sorted((t0, t1, lane) for lane, _, t0, t1 in spans)
    assert any(b[0] < a[1] and a[2] != b[2] for a, b in zip(starts, starts[1:]))   # boards worked at once


def test_a_lost_board_leaves_the_others_tuning_and_the_last_one_lost_is_raised(tmp_path):
    plan, tasks = _tasks()
    spans: list = []
    lost: list = []
    lanes = [(LocalBuilder(n_parallel=0), _Watched(k, spans, lose_after=2 if k == 1 else None)) for k in range(3)]
    s = tune_network(plan, tasks, "random", 80, scheduler=GradientScheduler(trials_per_round=8),
                     log=tmp_path / "net.jsonl", lanes=lanes, on_lane_lost=lambda k, exc: lost.append(k))
    assert s.trials == len(read_log(tmp_path / "net.jsonl")[1]) == 80 and lost == [1]
    gone = [(LocalBuilder(n_parallel=0), _Watched(k, spans, lose_after=1)) for k in range(2)]
    with pytest.raises(BoardGoneError):
        tune_network(plan, tasks, "random", 80, scheduler=GradientScheduler(trials_per_round=8),
                     log=tmp_path / "gone.jsonl", lanes=gone)
    first = min(8, 80 // len(tasks))                 # the first rounds share the budget among the tasks
    second = min(8, (80 - first) // (len(tasks) - 1))
    assert len(read_log(tmp_path / "gone.jsonl")[1]) == first + second      # what was measured is kept


@pytest.mark.slow
def test_cli_tunes_a_network_on_three_boards_behind_one_key_and_survives_one_lost(tmp_path):
    cli = CliRunner()
    host, port, stop = ensure_local_rpc("local")
    Inventory().add(BoardEntry("pz", "pynq-z1", host="127.0.0.1", rpc_key="fleet3"))
    log = tmp_path / "net.jsonl"
    args = ["tune-model", "resnet18", "-b", "pz", "--tracker", f"{host}:{port}", "-t", "random", "--round-trials",
            "8", "--repeat", "1", "--wait-board", "3", "--log", str(log)]
    try:
        r = cli.invoke(app, [*args, "-n", "8", "--boards", "2"])
        assert "holds 0 board(s) under key 'fleet3'" in one_line_error(r)
        with sim_agent(host, port, "fleet3", "a", tmp_path / "a.log"), \
                sim_agent(host, port, "fleet3", "b", tmp_path / "b.log"), \
                sim_agent(host, port, "fleet3", "c", tmp_path / "c.log") as lost_agent:
            killed = threading.Event()

            def kill_one() -> None:
                while not log.exists() or len(log.read_text().splitlines()) < 12:
                    time.sleep(0.05)
                os.killpg(lost_agent.pid, signal.SIGKILL)
                killed.set()

            killer = threading.Thread(target=kill_one, daemon=True)
            killer.start()
            r = cli.invoke(app, [*args, "-n", "40", "--boards", "3", "--json"])
            assert r.exit_code == 0, r.output
            assert killed.is_set()                   # one board went away mid-run; the other two finished it
            summary = json.loads(r.stdout[r.stdout.index("{"):])
            _, records = read_log(log)
            assert summary["trials"] == 40 == len(records)
            assert len({(json.dumps(r.workload, sort_keys=True), r.index) for r in records}) == 40
    finally:
        stop()
