"""The tuning loop on the VTA simulator: journaling, resume, retries, builders, early stopping."""

import json
import os
import time

import pytest

from toolkit.boards import resolve_board
from toolkit.errors import LogError
from toolkit.backends import template_for
from toolkit.backends.vta.template import VTAConv2dTemplate
from toolkit.tuning.session import default_log_path, tune
from toolkit.backends import make_runner
from toolkit.backends.vta.sim_runner import SimRunner
from toolkit.tuning.core.builder import LocalBuilder
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.journal import read_log
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.tuners.base import make_tuner
from toolkit.workloads import parse_workload
from toolkit.backends import make_task

SIM = resolve_board("vta-fsim")
SMALL = "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1"     # 256 configs, ~30 ms a trial on the simulator


def _task(name=SMALL, **options):
    return make_task(parse_workload(name), SIM, **options)


def test_every_trial_is_journaled_and_summarised(tmp_path):
    task = _task()
    log = tmp_path / "small.jsonl"
    summary = tune(task, make_tuner("random", seed=0), 24, log=log)
    header, recs = read_log(log)
    assert header.task == json.loads(json.dumps(task.describe()))
    assert header.task["hw"]["LOG_BLOCK"] == 4 and header.task["template"]["template"] == "vta-conv2d"
    assert summary.trials == len(recs) == 24 and [r.trial for r in recs] == list(range(24))
    assert summary.invalid == sum(not r.valid for r in recs)
    valid = [r for r in recs if r.valid]
    assert valid, "no valid config among 24 random configs"
    best = min(valid, key=lambda r: r.seconds)
    assert summary.best_index == best.index and summary.best_seconds == best.seconds
    assert summary.best_gops == pytest.approx(task.workload.flops / best.seconds / 1e9)
    assert summary.history[-1] == best.seconds and len(summary.history) == 24
    assert best.features and best.tuner == "random" and best.board == "vta-fsim"
    for r in recs:
        assert task.space.get(r.index).values == r.config
        assert (r.error is None) == r.valid and (r.error is None or r.message)


def test_resume_never_remeasures_and_completes_the_budget(tmp_path):
    log = tmp_path / "small.jsonl"
    tune(_task(), make_tuner("xgb", seed=1, plan_size=8), 12, log=log)
    before = log.read_bytes()
    summary = tune(_task(), make_tuner("xgb", seed=1, plan_size=8), 30, log=log, resume=True)
    assert summary.resumed == 12 and summary.trials == 30
    assert log.read_bytes().startswith(before)
    recs = read_log(log)[1]
    assert len(recs) == 30 and len({r.index for r in recs}) == 30


def test_log_reuse_rules(tmp_path):
    log = tmp_path / "small.jsonl"
    tune(_task(), make_tuner("grid"), 3, log=log)
    with pytest.raises(LogError, match="already exists; pass --resume"):
        tune(_task(), make_tuner("grid"), 3, log=log)
    with pytest.raises(LogError, match="belongs to another task .different template, workload"):
        tune(_task("conv2d:H=14,W=14,CI=32,CO=16,K=3,S=1,P=1", bias=True), make_tuner("grid"), 3, log=log,
             resume=True)
    assert len(read_log(log)[1]) == 3
    header_only = tmp_path / "failed.jsonl"          # what a run that failed before its first trial leaves
    header_only.write_text(log.read_text().splitlines()[0] + "\n")
    assert tune(_task(), make_tuner("grid"), 3, log=header_only).trials == 3     # taken over, no --resume needed
    assert len(read_log(header_only)[1]) == 3
    assert default_log_path(_task("resnet18.C11")).as_posix() == "edgetune-logs/vta-fsim/resnet18.C11.jsonl"
    assert default_log_path(_task()).as_posix() == "edgetune-logs/vta-fsim/conv2d_N1_H14_W14_CI32_CO32_K3_S1_P1.jsonl"


class _FlakyBoard(SimRunner):
    """The simulator, but the board drops out on the first two calls (as an RPC session can)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def run(self, template, items, options):
        self.calls += 1
        if self.calls == 1:
            return [MeasureResult(c.index, c.values, error=ErrorClass.BOARD_LOST, message="gone") for c, _ in items]
        if self.calls == 2:
            from toolkit.tuning.core.runner import BoardLostError
            raise BoardLostError("tracker lost the session")
        return super().run(template, items, options)


def test_lost_board_is_retried_and_never_recorded(tmp_path):
    runner = _FlakyBoard()
    log = tmp_path / "small.jsonl"
    summary = tune(_task(), make_tuner("grid"), 8, log=log, runner=runner, batch_size=8)
    recs = read_log(log)[1]
    assert runner.calls >= 3 and summary.trials == 8
    assert all(r.error != "board_lost" for r in recs) and "board_lost" not in summary.errors


def test_early_stopping_stops_after_k_trials_without_improvement():
    summary = tune(_task(), make_tuner("grid"), 400, early_stopping=10, batch_size=1)
    assert summary.stopped == "early_stopping"
    assert summary.trials == summary.best_trial + 1 + 10


def test_functional_check_passes_for_valid_configs():
    summary = tune(_task(bias=True), make_tuner("random", seed=3), 12, measure_options=MeasureOptions(check=True))
    assert "wrong_answer" not in summary.errors and "runtime_error" not in summary.errors and summary.valid > 0


def test_functional_check_catches_a_wrong_program():
    from toolkit.vta.compiler import compile_conv2d

    task = _task()
    outcomes = LocalBuilder().build(task.template, [task.space.get(i) for i in range(task.space.size)])
    art = next(o for o in outcomes if not isinstance(o, MeasureResult))
    cfg = task.space.get(art.index)
    wrong = compile_conv2d(task.workload, cfg.values, task.template.hw, shift=3)   # requantises differently
    art.payload, art.obj = wrong.program.to_bytes(), None     # the runner decodes the payload
    [res] = SimRunner().run(task.template, [(cfg, art)], MeasureOptions(check=True))
    assert res.error is ErrorClass.WRONG_ANSWER and "outputs differ" in res.message


class _SlowOrCrashingTemplate(VTAConv2dTemplate):
    """Builds like VTA, but config 1 hangs and config 2 kills its worker (a compiler segfault)."""

    def build(self, config):
        if config.index == 1:
            time.sleep(60)
        if config.index == 2:
            os._exit(11)
        return super().build(config)


def test_parallel_builder_matches_in_process_and_handles_timeouts_and_crashes():
    wl = parse_workload(SMALL)
    tmpl = _SlowOrCrashingTemplate(wl, SIM.profile)
    space = tmpl.space()
    configs = [space.get(i) for i in (0, 1, 2, 3, 200)]
    builder = LocalBuilder(n_parallel=2, timeout_s=3)
    try:
        out = builder.build(tmpl, configs)
        again = builder.build(tmpl, [configs[0], configs[3]])     # the pool was restarted
    finally:
        builder.close()
    serial = LocalBuilder(n_parallel=0).build(template_for(wl, SIM.profile), [configs[0], configs[3], configs[4]])
    assert out[1].error is ErrorClass.TIMEOUT
    assert out[2].error is ErrorClass.COMPILE_ERROR and "crashed" in out[2].message
    for got, ref in ((out[0], serial[0]), (out[3], serial[1]), (out[4], serial[2]), (again[1], serial[1])):
        assert type(got) is type(ref)
        if hasattr(ref, "payload"):
            assert got.payload == ref.payload and got.features == ref.features
        else:
            assert got.error == ref.error


def test_a_pool_killed_while_a_worker_sends_its_result_is_dropped_without_waiting():
    """The state a worker killed mid-send leaves: part of a message in the pool's result pipe. Killing the pool
    must not wait for the rest of it (it never comes: this process holds the pipe's write end too)."""
    import struct
    import threading

    wl = parse_workload(SMALL)
    builder = LocalBuilder(n_parallel=1, timeout_s=30)
    tmpl = template_for(wl, SIM.profile)
    builder.build(tmpl, [tmpl.space().get(0)])                      # the pool and its reader thread run
    writer = builder._pool._result_queue._writer                     # noqa: SLF001 - the pipe the workers write
    os.write(writer.fileno(), struct.pack("!i", 1 << 20) + b"partial")   # a 1 MiB message cut after 7 bytes
    done = threading.Event()
    threading.Thread(target=lambda: (builder.close(), done.set()), daemon=True).start()
    assert done.wait(60), "killing the pool waited for a result that never comes"
    [again] = builder.build(tmpl, [tmpl.space().get(0)])            # a new pool builds
    builder.close()
    assert not isinstance(again, MeasureResult)


def test_runner_dispatch_names_missing_runners():
    assert isinstance(make_runner(SIM), SimRunner)


def test_registered_simulator_board_is_reached_over_rpc():
    from toolkit.boards import Board, BoardEntry
    from toolkit.backends.vta.rpc_runner import VTARPCRunner

    entry = BoardEntry("sim-agent", "vta-fsim", host="127.0.0.1")
    runner = make_runner(Board("sim-agent", entry.profile, entry), tracker=("127.0.0.1", 9190))
    assert isinstance(runner, VTARPCRunner)


def test_template_dispatch_options_and_invalid_configs():
    from toolkit.errors import ConfigError
    from toolkit.tuning.core.template import BuildError

    wl = parse_workload(SMALL)
    with pytest.raises(ConfigError, match="has no option"):
        template_for(wl, SIM.profile, warp=1)
    tmpl = template_for(wl, SIM.profile, bias=True)
    assert tmpl.describe() == {"template": "vta-conv2d", "tvm_compat": False, "bias": True}
    errors = []
    for i in range(0, tmpl.space().size, 5):
        try:
            art = tmpl.build(tmpl.space().get(i))
            assert art.kind == "vta-program" and art.payload and art.features
        except BuildError as exc:
            errors.append(exc)
    assert errors and all(e.error is ErrorClass.INVALID_CONFIG for e in errors)
