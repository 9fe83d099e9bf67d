"""``edgetune tune --transfer``: logs, folders, model files, the shipped model, and what it refuses."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from toolkit.backends import make_task
from toolkit.boards import resolve_board
from toolkit.cli.app import app
from toolkit.tuning.journal import read_log
from toolkit.tuning.network import tune_network
from toolkit.tuning.scheduler import RoundRobinScheduler
from toolkit.tuning.tuners.ml2tuner import ML2Tuner
from toolkit.workloads import parse_workload

runner = CliRunner()
SMALL = "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1"
OTHER = "conv2d:H=14,W=14,CI=64,CO=32,K=3,S=1,P=1"


@pytest.fixture(scope="module")
def earlier_logs(tmp_path_factory):
    """A folder with a log of another workload (random trials on the simulator)."""
    folder = tmp_path_factory.mktemp("logs")
    res = runner.invoke(app, ["tune", "-w", OTHER, "-t", "random", "-n", "40", "--log", str(folder / "other.jsonl")])
    assert res.exit_code == 0, res.output
    return folder


@pytest.mark.parametrize("source", ["folder", "log", "pretrained"])
def test_tune_with_transfer(tmp_path, earlier_logs, source):
    arg = {"folder": str(earlier_logs), "log": str(earlier_logs / "other.jsonl"), "pretrained": "pretrained"}[source]
    log = tmp_path / "t.jsonl"
    res = runner.invoke(app, ["tune", "-w", SMALL, "-t", "ml2tuner", "-n", "16", "--log", str(log), "--transfer", arg,
                              "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trials"] == 16 and len(read_log(log)[1]) == 16


@pytest.fixture(scope="module")
def local_log(tmp_path_factory):
    """A log of another workload on ``local`` (random trials, real builds and measurements on this CPU)."""
    path = tmp_path_factory.mktemp("local") / "other.jsonl"
    res = runner.invoke(app, ["tune", "-w", OTHER, "-b", "local", "-t", "random", "-n", "12", "--log", str(path)])
    assert res.exit_code == 0, res.output
    return path


def test_local_logs_transfer_to_another_workload_on_a_cpu_board(tmp_path, local_log):
    """On a CPU board the transfer model learns from TIR features: it ranks the records it was fitted on, and
    ``--transfer LOG`` starts a tune of another workload from it."""
    from scipy.stats import spearmanr

    from toolkit.tuning.models.transfer import transfer_model_from

    records = [r for r in read_log(local_log)[1] if r.valid]
    model = transfer_model_from(local_log)
    assert spearmanr(model.predict_seconds([r.features for r in records]), [r.seconds for r in records]).statistic > 0.5
    log = tmp_path / "t.jsonl"
    res = runner.invoke(app, ["tune", "-w", SMALL, "-b", "local", "-t", "ml2tuner", "-n", "8", "--log", str(log),
                              "--transfer", str(local_log), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trials"] == 8 and len(read_log(log)[1]) == 8


@pytest.mark.parametrize("args, message", [
    (["-t", "xgb", "--transfer", "pretrained"], "does not learn from other tasks"),
    (["-t", "ml2tuner", "--transfer", "no/such/folder"], "does not exist"),
    (["-t", "ml2tuner", "--transfer", "/dev/null"], "not a regular file"),
    (["-t", "ml2tuner", "-b", "local", "--transfer", "pretrained"], "ships no pretrained model"),
])
def test_transfer_refusals_are_one_line(tmp_path, args, message):
    res = runner.invoke(app, ["tune", "-w", SMALL, "-n", "4", "--log", str(tmp_path / "t.jsonl"), *args])
    assert res.exit_code != 0
    assert message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "t.jsonl").exists()


def test_a_corrupt_log_as_transfer_source_names_the_file(tmp_path, earlier_logs):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.jsonl").write_text((earlier_logs / "other.jsonl").read_text().splitlines()[0] + "\n{not json}\nmore\n")
    res = runner.invoke(app, ["tune", "-w", SMALL, "-t", "ml2tuner", "-n", "4", "--log", str(tmp_path / "t.jsonl"),
                              "--transfer", str(bad)])
    assert res.exit_code != 0 and "a.jsonl" in res.output and "Traceback" not in res.output


def test_whole_network_tuning_hands_its_tasks_a_model_of_the_others(tmp_path):
    """Tasks started after enough records of other tasks tune with a model fitted on them."""
    from toolkit.workloads.networks import ConvLayer, Network, plan_tasks

    board = resolve_board("vta-fsim")
    layers = tuple(ConvLayer(parse_workload(spec)) for spec in (SMALL, OTHER))
    plan = plan_tasks(Network("two", (1, 32, 14, 14), layers))
    tasks = [make_task(t.workload, board) for t in plan.tasks]
    tuners: list[ML2Tuner] = []

    def factory(i: int) -> ML2Tuner:
        tuners.append(ML2Tuner(seed=i, plan_size=8, alpha=1, sa_chains=16, sa_steps=50, max_rounds=50))
        return tuners[-1]

    summary = tune_network(plan, tasks, factory, 96, scheduler=RoundRobinScheduler(trials_per_round=16),
                           log=tmp_path / "net.jsonl")
    assert summary.trials == 96
    assert all(t.resolved_transfer() is not None for t in tuners)   # both got the network's model


def test_the_default_tuner_starts_from_the_shipped_model(tmp_path):
    from toolkit.tuning.tuners.base import DEFAULT_TUNER, make_tuner

    res = runner.invoke(app, ["tune", "-w", SMALL, "-n", "8", "--log", str(tmp_path / "t.jsonl"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["tuner"] == DEFAULT_TUNER == "ml2tuner+"
    assert make_tuner(DEFAULT_TUNER).params["transfer"] == "pretrained"


def _header_only_log(path, board: str, workload: str = OTHER) -> str:
    """A log of ``board`` (its header and one valid record with features), as a tune there writes it."""
    from toolkit.tuning.core.result import MeasureResult
    from toolkit.tuning.journal import Journal, LogHeader, Record

    from toolkit.backends.vta.backend import with_vta_preset

    brd = with_vta_preset(resolve_board("vta-fsim"), "zcu102") if board == "vta-fsim-zcu102" else resolve_board(board)
    task = make_task(parse_workload(workload), brd).describe()
    with Journal(path, LogHeader(task)) as j:
        j.append(Record.from_result(MeasureResult(0, {"t": 1}, costs=[1e-3], features={"f": 1.0}), trial=0,
                                    tuner="random", task=task))
    return str(path)


@pytest.mark.parametrize("board,words", [("local", "was tuned on a cpu board (local); vta-fsim is a vta board"),
                                         ("vta-fsim-zcu102", "was tuned for VTA")])
def test_logs_of_another_family_or_vta_config_are_refused_as_transfer_data(tmp_path, board, words):
    log = _header_only_log(tmp_path / "other.jsonl", board)
    res = runner.invoke(app, ["tune", "-w", SMALL, "-b", "vta-fsim", "-t", "ml2tuner", "-n", "2", "--log",
                              str(tmp_path / "t.jsonl"), "--transfer", log])
    assert res.exit_code == 2 and words in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "t.jsonl").exists()
