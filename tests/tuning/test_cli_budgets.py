"""What a tvmc/AutoTVM/Optuna user expects of budgets and results: ``--more``, what ``-n`` means on resume,
``--time-budget``, measurement settings, ``best`` and ``report`` without a file."""

from __future__ import annotations

import json
import math

from typer.testing import CliRunner

from toolkit.harness import BenchResult, BenchRun
from toolkit.cli.app import app
from toolkit.report import plot_bench
from toolkit.tuning.journal import read_log

runner = CliRunner()
SMALL = "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1"


def _tune(*args: str, workload: str = SMALL):
    return runner.invoke(app, ["tune", "-w", workload, "-t", "random", *args])


def test_more_continues_the_log_and_n_counts_the_log(tmp_path):
    log = str(tmp_path / "a.jsonl")
    assert _tune("-n", "4", "--log", log).exit_code == 0
    r = _tune("--more", "4", "--log", log, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["trials"] == 8 and len(read_log(log)[1]) == 8
    r = _tune("-n", "5", "--log", log, "--resume")
    assert r.exit_code == 0 and "already holds 8 trials" in " ".join(r.output.split()) and "--more" in r.output
    assert len(read_log(log)[1]) == 8
    r = _tune("-n", "5", "--more", "2", "--log", log)
    assert r.exit_code == 2 and "one of them" in r.output


def test_time_budget_stops_starting_rounds(tmp_path):
    # 2304 configs: far more than a second's worth
    r = _tune("-n", "2000", "--time-budget", "1", "--json", "--log", str(tmp_path / "b.jsonl"), workload="resnet18.C2")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["stopped"] == "time_budget" and 0 < out["trials"] < 2000


def test_best_and_report_without_out_print_the_best_configs(tmp_path):
    log = tmp_path / "a.jsonl"
    assert _tune("-n", "12", "--log", str(log), "--seed", "1").exit_code == 0
    r = runner.invoke(app, ["best", str(log), "--top", "3", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    recs = read_log(log)[1]
    fastest = min(x.seconds for x in recs if x.valid)
    assert [row["rank"] for row in rows] == [1, 2, 3] and rows[0]["seconds"] == fastest
    assert all(1 <= row["trial"] <= 12 for row in rows) and rows[0]["trials"] == 12
    text = runner.invoke(app, ["report", str(log)])
    assert text.exit_code == 0 and "best configs" in text.stdout and f"{fastest * 1e3:.4f} ms" in text.stdout


def test_the_bench_median_counts_a_seed_without_a_valid_config_as_infinitely_slow():
    runs = [BenchRun("w", "xgb", 0, 3, 1, 2e-3, 0.0, 0.0, [None, None, 2e-3]),
            BenchRun("w", "xgb", 1, 3, 0, 1e-3, 0.0, 0.0, [4e-3, 1e-3, 1e-3]),
            BenchRun("w", "xgb", 2, 3, 1, 3e-3, 0.0, 0.0, [None, 3e-3, 3e-3])]
    result = BenchResult({}, {"board": "vta-fsim", "tuners": ["xgb"], "trials": 3, "seeds": 3},
                         {"w": {"optimum": None}}, runs)
    median = plot_bench(result).axes[0].lines[0].get_ydata()
    assert math.isnan(median[0])                 # 2 of 3 seeds have nothing yet: no median
    assert median[1] == 3.0 and median[2] == 2.0  # ms: median(inf, 1, 3) and median(2, 1, 3)
