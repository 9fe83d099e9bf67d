"""`edgetune report` of a whole-network log: one curve and one best-configs block per task, and the network
total, not a minimum over different layers."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from typer.testing import CliRunner

from toolkit.cli.app import app
from toolkit.report import _load, network_total
from toolkit.tuning.journal import read_log

runner = CliRunner()


def _network_log(path, trials: int, round_trials: int):
    """A whole-network ResNet-18 log on vta-fsim tuned through the CLI, and its records."""
    r = runner.invoke(app, ["tune", "--model", "resnet18", "-b", "vta-fsim", "-t", "xgb", "-n", str(trials),
                            "--round-trials", str(round_trials), "--log", str(path)])
    assert r.exit_code == 0, r.output
    return path, read_log(path)[1]


def test_a_network_log_reports_each_task_and_the_network_total(tmp_path):
    log, records = _network_log(tmp_path / "net.jsonl", 150, 5)
    logs = _load([log])
    names = [name.split(" on ")[0] for name, _ in logs]
    assert names == [f"resnet18.C{i}" for i in range(1, 12)]          # one entry per task, whole labels
    assert sum(len(recs) for _, recs in logs) == len(records) == 150
    assert all([r.trial for r in recs] == sorted(r.trial for r in recs) for _, recs in logs)
    x, total = network_total(records)
    assert list(x) == list(range(1, 151))
    first = next(i for i, v in enumerate(total) if not math.isnan(v))
    valid_tasks = lambda n: len({r.workload_key for r in records[:n] if r.valid})  # noqa: E731
    assert valid_tasks(first) < 11 == valid_tasks(first + 1)          # NaN until every task has a valid config
    best = {}
    for rec in records:
        best[rec.workload_key] = min(best.get(rec.workload_key, math.inf), rec.seconds)
    assert math.isclose(total[-1], sum(best.values()) * 1e3)
    assert all(b >= a - 1e-12 for a, b in zip(total[first + 1:], total[first:]))   # never rises
    out = tmp_path / "net.html"
    r = runner.invoke(app, ["report", str(log), "--out", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert page.count("<h2>Best 5 configs: resnet18.C") == 11


def test_a_network_export_names_the_tasks_it_leaves_out(tmp_path):
    log, records = _network_log(tmp_path / "short.jsonl", 20, 2)
    with_valid = {rec.workload_key for rec in records if rec.valid}
    without = {rec.workload_key for rec in records} - with_valid
    assert with_valid and without, "the budget must leave some task without a valid config"
    r = subprocess.run([sys.executable, "-m", "toolkit", "export", "--log", str(log), "--out", str(tmp_path / "ex"),
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"warning: {len(without)} workload(s) of short.jsonl have no valid record" in " ".join(r.stderr.split())
    manifest = json.loads((tmp_path / "ex" / "manifest.json").read_text())
    assert len(manifest["kernels"]) == len(with_valid)
