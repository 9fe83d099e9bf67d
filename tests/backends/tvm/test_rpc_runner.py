"""RPC tracker/server processes and the RPC runner, against a real TVM tracker and servers on loopback."""

import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

from toolkit.boards import load_profile, resolve_board
from toolkit.errors import BoardError, BoardGoneError
from toolkit.procs import group_alive
from toolkit.rpc.tracker import ensure_local_rpc, start_server, start_tracker, tracker_summary
from toolkit.backends.tvm.cpu import CPUConv2dTemplate
from toolkit.tuning.core.result import ErrorClass
from toolkit.backends.tvm.rpc_runner import RPCRunner
from toolkit.backends.tvm.rpc_session import answers
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.workloads import parse_workload
from toolkit.backends import make_task

WL = parse_workload("conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1")


@pytest.fixture(scope="module")
def tracker():
    with start_tracker() as t:
        yield t


@pytest.fixture(scope="module")
def server(tracker):
    with start_server(tracker.address, key="measure") as s:
        yield s


@pytest.fixture(scope="module")
def template():
    return CPUConv2dTemplate(WL, load_profile("local"))


@pytest.fixture(scope="module")
def items(template):
    space = template.space()
    return [(space.get(i), template.build(space.get(i))) for i in space.sample(3, np.random.default_rng(5))]


def test_server_registers_under_its_key_on_loopback(tracker, server):
    host, port = tracker.address
    assert host == "127.0.0.1" and server.host == "127.0.0.1"
    info = tracker_summary(host, port)
    assert {"key": "server:measure", "addr": ["127.0.0.1", server.port]} in info["server_info"]


def test_runner_measures_and_checks_against_numpy(tracker, server, template, items):
    runner = RPCRunner(*tracker.address, "measure")
    results = runner.run(template, items, MeasureOptions(number=2, repeat=3))
    assert [r.index for r in results] == [c.index for c, _ in items]
    for r, (c, art) in zip(results, items):
        assert r.valid, r.message
        assert len(r.costs) == 3 and all(0 < x < 1 for x in r.costs)
        assert r.config == c.values and r.features == art.features


class _WrongReference(CPUConv2dTemplate):
    """The real template with a reference that is off by one."""

    def reference(self, inputs):
        return super().reference(inputs) + 1.0


def test_wrong_output_is_a_wrong_answer(tracker, server, items):
    runner = RPCRunner(*tracker.address, "measure")
    (r,) = runner.run(_WrongReference(WL, load_profile("local")), items[:1], MeasureOptions(check=True))
    assert r.error == ErrorClass.WRONG_ANSWER and not r.costs and "differ from the reference" in r.message


def test_a_corrupt_library_is_a_runtime_error(tracker, server, template, items):
    config, art = items[0]
    broken = type(art)(index=art.index, kind=art.kind, payload=b"\x7fELF not really a library")
    (r,) = RPCRunner(*tracker.address, "measure").run(template, [(config, broken)], MeasureOptions())
    assert r.error == ErrorClass.RUNTIME_ERROR and not r.costs and r.message


def test_a_run_longer_than_its_timeout_is_a_timeout(tracker, server, template, items):
    # the server ends the abandoned session after session_timeout, freeing the board
    runner = RPCRunner(*tracker.address, "measure", session_timeout=3)
    (r,) = runner.run(template, items[:1], MeasureOptions(number=1, repeat=50, min_repeat_ms=100, timeout_s=0.5))
    assert r.error == ErrorClass.TIMEOUT and not r.costs and "within 0.5 s" in r.message
    (again,) = RPCRunner(*tracker.address, "measure").run(template, items[:1], MeasureOptions())
    assert again.valid


class _KillOnceRunner(RPCRunner):
    """The real runner, which calls ``kill(box)`` in a thread as its first measurement starts (``box`` is the
    measurement's state: ``run_started`` appears once the kernel runs on the board)."""

    def __init__(self, *args, kill, **kwargs):
        super().__init__(*args, **kwargs)
        self.kill, self.killer = kill, None

    def _run_in_session(self, live, template, artifact, options, ref, box):
        if self.killer is None:
            self.killer = threading.Thread(target=self.kill, args=(box,))
            self.killer.start()
        return super()._run_in_session(live, template, artifact, options, ref, box)


def test_server_killed_mid_measurement_is_waited_for_and_measured_again(tracker, template, items):
    server = start_server(tracker.address, key="flaky")
    replacement = {}

    def kill_while_running(box):
        deadline = time.monotonic() + 60
        while "run_started" not in box and time.monotonic() < deadline:   # the kernel is being timed
            time.sleep(0.005)
        os.killpg(server.pid, signal.SIGKILL)
        time.sleep(1.0)
        replacement["server"] = start_server(tracker.address, key="flaky", wait=None)

    runner = _KillOnceRunner(*tracker.address, "flaky", wait_s=60, kill=kill_while_running)
    try:
        # long enough per item (>= 3 x 150 ms) that the kill lands inside the first measurement
        results = runner.run(template, items[:2], MeasureOptions(number=1, repeat=3, min_repeat_ms=150))
    finally:
        if runner.killer is not None:
            runner.killer.join()
        server.stop()
        if "server" in replacement:
            replacement["server"].stop()
    assert runner.lost_sessions >= 1, [(r.error, r.message) for r in results]
    assert all(r.valid and len(r.costs) == 3 for r in results), [r.message for r in results]


def test_a_session_whose_server_died_no_longer_answers(tracker, template, items):
    """How the runner tells a lost session from a failed kernel when TVM's message does not say."""
    server = start_server(tracker.address, key="probe")
    try:
        runner = RPCRunner(*tracker.address, "probe")
        inputs, ref = runner._inputs(template, True)
        live = runner._open(template, MeasureOptions(), inputs, ref)
        assert answers(live)
        os.killpg(server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while group_alive(server.pid) and time.monotonic() < deadline:   # dead, not just signalled
            time.sleep(0.05)
        assert not answers(live)
    finally:
        server.stop()


def test_a_board_that_never_comes_back_is_board_lost(tracker, template, items):
    server = start_server(tracker.address, key="gone")
    runner = RPCRunner(*tracker.address, "gone", wait_s=2)
    (first,) = runner.run(template, items[:1], MeasureOptions())   # seen once ...
    assert first.valid
    server.stop()                                                  # ... then gone for good
    waits = []
    wait = runner.wait_for_board
    runner.wait_for_board = lambda timeout: (waits.append(timeout), wait(timeout))[1]
    with pytest.raises(BoardGoneError, match="did not come back within 2 s"):
        runner.run(template, items[:3], MeasureOptions())
    assert waits == [2]                                            # one wait for the batch, not one per item


def test_a_board_never_registered_fails_fast_naming_the_fix(tracker, template, items):
    with pytest.raises(BoardError, match=r"no board is registered .* under key 'never'.*board provision"):
        RPCRunner(*tracker.address, "never", wait_s=60).run(template, items[:1], MeasureOptions())
    with pytest.raises(BoardError, match="cannot reach the RPC tracker at 127.0.0.1:1"):
        RPCRunner("127.0.0.1", 1, "x").run(template, items[:1], MeasureOptions())


def _runs(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_direct_mode_measures_one_server_and_stop_frees_everything(template, items):
    server = start_server(None)
    runner = RPCRunner.direct(f"{server.address[0]}:{server.address[1]}")
    (r,) = runner.run(template, items[:1], MeasureOptions(repeat=2))
    assert r.valid and len(r.costs) == 2
    procs = group_alive(server.pid)
    assert procs
    server.stop()
    assert not group_alive(server.pid), "stop() returned with the server group alive"  # workers included
    # so none of them listens on its port any more (binding the port to check would race with other test
    # processes, which may take the freed port at once)
    assert not [p for p in procs if _runs(p)]


@pytest.mark.slow
def test_short_tune_on_the_local_board_shares_one_loopback_tracker_and_server(tmp_path):
    from toolkit.tuning.session import tune
    from toolkit.tuning.core.builder import LocalBuilder
    from toolkit.tuning.tuners.base import make_tuner

    host, port, stop = ensure_local_rpc("local")        # the tune's runner reuses these processes
    try:
        assert host == "127.0.0.1" and tracker_summary(host, port)["queue_info"]["local"]["free"] == 1
        task = make_task(WL, resolve_board("local"))
        summary = tune(task, make_tuner("xgb", seed=0, plan_size=4), 8, log=tmp_path / "local.jsonl",
                       builder=LocalBuilder(n_parallel=1, timeout_s=120),
                       measure_options=MeasureOptions(number=2, repeat=2))
        assert summary.trials == 8 and summary.valid >= 6
        assert 0 < summary.best_seconds < 1 and summary.best_gops > 0
        # the runner released its use; ours keeps the tracker and server up (the server re-registers
        # as free after the session ends: wait for it, on a loaded machine it takes a moment)
        deadline = time.monotonic() + 30
        while tracker_summary(host, port)["queue_info"]["local"]["free"] != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert tracker_summary(host, port)["queue_info"]["local"]["free"] == 1
    finally:
        stop()
    with pytest.raises(BoardError, match="cannot reach the RPC tracker"):
        tracker_summary(host, port)


@pytest.mark.slow
def test_local_rpc_processes_die_with_a_killed_owner():
    import subprocess
    import sys

    code = ("from toolkit.rpc.tracker import ensure_local_rpc, _LOCAL; import time; ensure_local_rpc('orphan'); "
            "t, s, _ = _LOCAL['orphan']; print(t.pid, s.pid, flush=True); time.sleep(600)")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in owner.stdout.readline().split()]
        assert len(pids) == 2 and all(group_alive(p) for p in pids)
    finally:
        owner.kill()                     # SIGKILL: no atexit, no cleanup code runs
        owner.wait()
    deadline = time.monotonic() + 10
    while any(group_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    # every process of both groups, the workers the tracker and server forked included
    assert not any(group_alive(p) for p in pids), [q.cmdline() for p in pids for q in group_alive(p)]


def test_the_local_boards_loopback_tracker_and_server_start_again_when_they_die(template, items):
    """``local``'s tracker and server are edgetune's own: when they die (a crash kills the process group) the
    runner starts them again instead of waiting for a board nobody will bring back."""
    from toolkit.boards import resolve_board
    from toolkit.rpc import tracker as trk

    board = resolve_board("local")
    runner = RPCRunner(board)
    said = []
    runner.waiting = said.append
    try:
        (first,) = runner.run(template, items[:1], MeasureOptions())
        _, server, _ = trk._LOCAL[board.rpc_key]
        os.killpg(server.pid, signal.SIGKILL)                      # the server and its workers die at once
        server.proc.wait(10)
        (again,) = runner.run(template, items[:1], MeasureOptions())
    finally:
        runner.close()
    assert first.valid and again.valid
    assert any("started them again" in s for s in said)
