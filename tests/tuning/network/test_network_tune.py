"""Whole-network tuning on vta-fsim: one log for all tasks, the end table's total, resume after SIGKILL."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import pytest

from toolkit.boards import resolve_board
from toolkit.errors import LogError
from toolkit.workloads.extract import extract
from toolkit.backends import network_tasks
from toolkit.tuning.network import tune_network
from toolkit.tuning.journal import read_log
from toolkit.tuning.scheduler import GradientScheduler, RoundRobinScheduler
from toolkit.workloads import Conv2dWorkload

EDGETUNE = str(Path(sys.executable).parent / "edgetune")

TINY = textwrap.dedent("""
    import torch
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, 2, 1)
            self.a1 = nn.Conv2d(16, 16, 3, padding=1)
            self.a2 = nn.Conv2d(16, 16, 3, padding=1)
            self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
            self.down = nn.Conv2d(16, 32, 1, stride=2)

        def forward(self, x):
            x = self.stem(x)
            x = self.a2(torch.relu(self.a1(x)))
            return self.down(self.dw(x))

    def make():
        return Tiny()
""")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.py"
    path.write_text(TINY)
    return path


def _per_task(log):
    header, records = read_log(log)
    by_wl = defaultdict(list)
    for r in records:
        by_wl[Conv2dWorkload.from_dict(r.workload)].append(r)
    return header, records, by_wl


def test_network_tune_api_one_log(tiny, tmp_path):
    plan, tasks = network_tasks(extract(f"{tiny}:make", (1, 3, 32, 32)).network, resolve_board("vta-fsim"),
                                first_conv="cpu")
    assert [t.count for t in plan.tasks] == [2, 1]                # a1 + a2 merged; stem on CPU; dw skipped
    log = tmp_path / "net.jsonl"
    s = tune_network(plan, tasks, "random", 32, log=log,
                     scheduler=RoundRobinScheduler(trials_per_round=8))
    assert [t.trials for t in s.tasks] == [16, 16]
    header, records, by_wl = _per_task(log)
    assert header.task["network"] == "make" and len(records) == 32 and len(by_wl) == 2
    for t, p in zip(s.tasks, plan.tasks):
        assert t.best_seconds == min(r.seconds for r in by_wl[p.workload])
    assert s.total_seconds == pytest.approx(2 * s.tasks[0].best_seconds + s.tasks[1].best_seconds)
    assert s.curve[-1] == (32, s.total_seconds)
    with pytest.raises(LogError, match="already exists"):
        tune_network(plan, tasks, "random", 40, log=log, scheduler=GradientScheduler())
    more = tune_network(plan, tasks, "random", 40, log=log, resume=True,
                        scheduler=GradientScheduler(trials_per_round=8))
    assert (more.resumed, more.trials) == (32, 40)
    _, records, by_wl = _per_task(log)
    assert all(len({r.index for r in rs}) == len(rs) for rs in by_wl.values())   # nothing measured twice


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", [GradientScheduler, RoundRobinScheduler])
def test_a_small_budget_tries_every_task_before_any_gets_a_second_round(tiny, tmp_path, scheduler):
    """48 trials, rounds of 32, three tasks: each task's first round is a third of the budget (was 32, 16, 0)."""
    plan, tasks = network_tasks(extract(f"{tiny}:make", (1, 3, 32, 32)).network, resolve_board("vta-fsim"),
                                first_conv="pad")
    assert len(plan.tasks) == 3
    s = tune_network(plan, tasks, "random", 48, log=tmp_path / "small.jsonl",
                     scheduler=scheduler(trials_per_round=32))
    assert [t.trials for t in s.tasks] == [16, 16, 16]
    s = tune_network(plan, tasks, "random", 2, log=tmp_path / "tiny.jsonl", scheduler=scheduler(trials_per_round=32))
    assert [t.trials for t in s.tasks] == [1, 1, 0]        # fewer trials than tasks: one each while they last


def test_cli_network_tune_resumes_after_sigkill(tiny, tmp_path):
    log = tmp_path / "tiny.jsonl"
    cmd = [EDGETUNE, "tune", "--board", "vta-fsim", "--model", f"{tiny}:make", "--input-shape", "1,3,32,32",
           "--trials", "150", "--tuner", "random", "--round-trials", "8", "--log", str(log)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        while proc.poll() is None and (not log.exists() or log.read_bytes().count(b"\n") < 13):
            time.sleep(0.02)
        assert proc.poll() is None, f"finished before the kill: {proc.stderr.read().decode()[-500:]}"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    _, before, _ = _per_task(log)
    assert 12 <= len(before) < 150
    r = subprocess.run(cmd + ["--resume", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    assert summary["trials"] == 150 and summary["resumed"] == len(before)
    _, records, by_wl = _per_task(log)
    assert len(records) == 150
    assert [r.index for r in records[:len(before)]] == [r.index for r in before]      # kept as written
    for task in summary["tasks"]:
        rs = by_wl[Conv2dWorkload.from_dict(_spec_dict(task["spec"]))]
        assert len({r.index for r in rs}) == len(rs) == task["trials"]
        assert task["best_seconds"] == min(r.seconds for r in rs)
    total = sum(t["best_seconds"] * t["count"] for t in summary["tasks"])
    assert math.isclose(summary["total_seconds"], total)
    assert {s["layer"] for s in summary["skipped"]} == {"make.L3"}        # the stem by space-to-depth, dw skipped
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "--resume" in again.stderr


def _spec_dict(spec):
    from toolkit.workloads import parse_workload

    return parse_workload(spec).to_dict()


def test_cli_network_tune_refuses_what_it_cannot_honour_and_uses_the_measurement_options(tiny, tmp_path):
    from typer.testing import CliRunner

    from toolkit.cli.app import app

    cli = CliRunner()
    base = ["tune", "--model", f"{tiny}:make", "--input-shape", "1,3,32,32", "-t", "random", "-n", "2"]
    for flag, value in (("--early-stopping", "1"), ("--time-budget", "5"), ("--more", "2")):
        args = [a for a in base if a not in ("-n", "2")] if flag == "--more" else base
        r = cli.invoke(app, [*args, flag, value, "--log", str(tmp_path / "x.jsonl")])
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and flag in lines[0] and "one workload" in lines[0], r.output
    r = cli.invoke(app, [*base, "-b", "local", "--tracker", "127.0.0.1:1", "--log", str(tmp_path / "t.jsonl")])
    assert r.exit_code == 2 and "127.0.0.1:1" in r.output, r.output      # the tracker asked for is the one used
    log = tmp_path / "local.jsonl"
    r = cli.invoke(app, [*base, "-b", "local", "--repeat", "2", "--number", "2", "--log", str(log)])
    assert r.exit_code == 0, r.output
    valid = [rec for rec in read_log(log)[1] if rec.valid]
    assert valid and all(len(rec.costs) == 2 for rec in valid)        # --repeat 2: two measurements each


def test_tune_model_is_the_whole_network_command_and_tune_model_flag_the_same_run(tiny, tmp_path):
    """``edgetune tune-model MODEL`` takes only what a network run honours (``--more`` is no option of it) and
    gives the same log as ``tune --model`` with the same seed."""
    from typer.testing import CliRunner

    from toolkit.cli.app import app

    cli = CliRunner()
    common = ["--input-shape", "1,3,32,32", "-t", "random", "-n", "16", "--seed", "3", "--json"]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    r = cli.invoke(app, ["tune-model", f"{tiny}:make", *common, "--log", str(a)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["trials"] == 16
    r = cli.invoke(app, ["tune", "--model", f"{tiny}:make", *common, "--log", str(b)])
    assert r.exit_code == 0, r.output
    assert [(x.workload, x.index) for x in read_log(a)[1]] == [(x.workload, x.index) for x in read_log(b)[1]]
    r = cli.invoke(app, ["tune-model", f"{tiny}:make", "--more", "2"])
    assert r.exit_code == 2 and "--more" in r.output


def test_export_takes_the_labels_a_network_log_prints(tiny, tmp_path):
    """``export -w LABEL`` with a model layer's label (``make.L2``: no catalog name) picks that kernel."""
    from typer.testing import CliRunner

    from toolkit.cli.app import app

    cli = CliRunner()
    log = tmp_path / "net.jsonl"
    r = cli.invoke(app, ["tune-model", f"{tiny}:make", "--input-shape", "1,3,32,32", "-t", "random", "-n", "16",
                         "--log", str(log)])
    assert r.exit_code == 0, r.output
    labels = sorted({Conv2dWorkload.from_dict(rec.workload).label for rec in read_log(log)[1] if rec.valid})
    assert labels and all("." in lb for lb in labels)
    r = cli.invoke(app, ["export", "--log", str(log), "-w", labels[0], "--out", str(tmp_path / "x"), "--json"])
    assert r.exit_code == 0, r.output
    assert [k["label"] for k in json.loads(r.stdout)["kernels"]] == [labels[0]]
    r = cli.invoke(app, ["export", "--log", str(log), "-w", "nosuch.L9", "--out", str(tmp_path / "y")])
    assert r.exit_code == 2 and "has no workload 'nosuch.L9'" in r.output and labels[0] in r.output
