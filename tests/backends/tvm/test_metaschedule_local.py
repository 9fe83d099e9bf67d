"""The ``metaschedule`` tuner on ``local``: a real MetaSchedule search measured through a real
loopback tracker + RPC server, journalled as edgetune records that ``export`` rebuilds from the
trace and ``run`` checks against the numpy reference; plus the driver's contract."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from toolkit.boards import resolve_board
from toolkit.cli.app import app
from toolkit.errors import ConfigError
from toolkit.rpc.tracker import ensure_local_rpc
from toolkit.tuning.session import tune
from toolkit.backends.tvm.metaschedule import KIND, MetaScheduleTuner, is_trace_config, rebuild
from toolkit.tuning.journal import read_log
from toolkit.tuning.core.template import BuildError
from toolkit.tuning.tuners.base import Driver, make_tuner, tuner_classes
from toolkit.workloads import parse_workload
from toolkit.backends import make_task

WL = "conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1"
TRIALS = 4
POPULATION = 32
"""The evolutionary search's population here (MetaSchedule's 512 spends minutes per round on 2 cores)."""
cli = CliRunner()


def _invoke(*args):
    return cli.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def local_rpc():
    host, port, stop = ensure_local_rpc("local")
    yield host, port
    stop()


@pytest.fixture(scope="module")
def ms_log(tmp_path_factory, local_rpc):
    """`edgetune tune --tuner metaschedule` on local: MetaSchedule's RPCRunner on the loopback tracker."""
    log = tmp_path_factory.mktemp("ms") / "local.jsonl"
    r = _invoke("tune", "-b", "local", "-w", WL, "-t", "metaschedule", "-n", TRIALS, "-o", f"trials_per_iter={TRIALS}",
                "-o", f"population={POPULATION}", "--log", log, "--json")
    assert r.exit_code == 0, r.output
    return log, json.loads(r.output[r.output.index("{"):])


@pytest.mark.slow
def test_metaschedule_tune_writes_trace_records(ms_log):
    log, summary = ms_log
    header, records = read_log(log)
    assert header.task["board"] == "local" and header.task["template"]["template"] == "cpu-conv2d"
    assert len(records) == summary["trials"] == TRIALS
    assert [r.trial for r in records] == list(range(TRIALS))
    assert all(r.tuner == KIND and r.index is None and is_trace_config(r.config) for r in records)
    valid = [r for r in records if r.valid]
    assert valid, [r.message for r in records]
    assert summary["best_seconds"] == pytest.approx(min(r.seconds for r in valid))
    assert summary["best_gops"] > 0


@pytest.mark.slow
def test_export_rebuilds_the_best_trace_and_run_matches_the_reference(ms_log, tmp_path, local_rpc):
    log, _ = ms_log
    out = tmp_path / "export"
    r = _invoke("export", "--log", log, "--out", out)
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    kernel = manifest["kernels"][0]
    assert kernel["tuner"] == KIND and kernel["index"] is None and kernel["config"]["kind"] == KIND
    r = _invoke("run", out, "--board", "local", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["results"][0]["correct"] is True


def test_metaschedule_is_a_registered_driver_not_ask_tell():
    assert "metaschedule" in tuner_classes()
    tuner = make_tuner("metaschedule", seed=3, trials_per_iter=8)
    assert isinstance(tuner, Driver) and tuner.params["trials_per_iter"] == 8
    assert not hasattr(tuner, "propose")
    with pytest.raises(ConfigError, match="cost_model"):
        make_tuner("metaschedule", cost_model="gbdt")


def test_vta_boards_are_refused_before_anything_runs():
    task = make_task(parse_workload("resnet18.C5"), resolve_board("vta-fsim"))
    with pytest.raises(ConfigError, match="TVM CPU/CUDA boards"):
        tune(task, MetaScheduleTuner(), 4)


def test_rebuild_refuses_a_config_that_is_not_a_trace():
    task = make_task(parse_workload(WL), resolve_board("local"))
    with pytest.raises(BuildError, match="not a MetaSchedule config"):
        rebuild(task.template, {"tile_co": [2, 16]})


@pytest.mark.slow
def test_report_reads_metaschedule_records(ms_log, tmp_path):
    log, _ = ms_log
    out = tmp_path / "report.html"
    r = _invoke("report", log, "--out", out)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "metaschedule" in page and "<img" in page


@pytest.mark.slow
def test_resume_counts_the_log_and_seeds_metaschedule(ms_log, tmp_path, local_rpc, capsys):
    import shutil

    log = tmp_path / "resumed.jsonl"
    shutil.copyfile(ms_log[0], log)
    task = make_task(parse_workload(WL), resolve_board("local"))
    summary = tune(task, MetaScheduleTuner(seed=1, trials_per_iter=2, population=POPULATION), TRIALS + 2, log=log,
                   resume=True)
    assert (summary.resumed, summary.trials) == (TRIALS, TRIALS + 2)
    records = read_log(log)[1]
    assert [r.trial for r in records] == list(range(TRIALS + 2))
    assert all(is_trace_config(r.config) for r in records)
    assert "[INFO]" not in capsys.readouterr().out   # MetaSchedule's tables stay off stdout on a 2nd run too
