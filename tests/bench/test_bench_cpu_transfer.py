"""bench.bench_cpu_transfer: each CPU keeps its own logs and runs (records measured on one CPU say nothing about
another's times); the docs section reports the newest runs of any CPU and names that CPU."""

from __future__ import annotations

import json

import pytest

import bench.bench_cpu_transfer as ct
from toolkit.harness import BenchResult, BenchRun, save_checkpoint


def _save(folder, date: str, xgb: int, transfer: int) -> None:
    res = BenchResult({"machine": "vm", "date": date, "command": "c"}, {"trials": 200, "seeds": 1}, {})
    res.runs = [BenchRun(workload="w", tuner=tuner, seed=0, trials=200, invalid=0, best_seconds=1.0, wall_s=1.0,
                         tuner_s=2.0, history=[1.0] * 200, trials_to_match=n)
                for tuner, n in (("xgb", xgb), (ct.TRANSFER, transfer))]
    save_checkpoint(folder / ct.RESULT, res.to_json())


def test_the_report_shows_the_newest_runs_and_their_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(ct, "OUT", tmp_path)
    _save(tmp_path / "znver4", "2026-12-06 03:00 UTC", 100, 20)
    _save(tmp_path / "znver3", "2026-12-05 07:32 UTC", 100, 50)
    text = ct.report()
    assert "target CPU: `znver4`); 2026-12-06 03:00 UTC" in text
    assert "met (0.200x)" in text                       # znver4's 20 / 100, not znver3's 50 / 100
    assert "- `znver3` (2026-12-05 07:32 UTC, 1 seeds, `bench/out/cpu-transfer/znver3/test-local.json`): " \
           "`ml2tuner:transfer=development-logs` 0.500x (0 of 1 never got there)" in text
    assert "is not measured yet" in text                # no emulated ranking in either folder


def test_the_report_without_runs_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setattr(ct, "OUT", tmp_path)
    with pytest.raises(SystemExit, match="run the benchmark first"):
        ct.report()


def test_the_report_shows_how_far_one_measurement_moves(tmp_path, monkeypatch):
    monkeypatch.setattr(ct, "OUT", tmp_path)
    _save(tmp_path / "znver4", "2026-12-06 03:00 UTC", 100, 20)
    configs = [{"layer": "w", "seed": 0, "recorded_s": 1.0, "remeasured_s": [1.0, 1.2, 1.1]},
               {"layer": "w", "seed": 1, "recorded_s": 2.0, "remeasured_s": [2.0, 2.0, 3.0]}]
    (tmp_path / "znver4" / ct.NOISE).write_text(json.dumps({"environment": {"command": "c", "machine": "vm",
                                                                            "date": "d"},
                                                            "repeats": 3, "configs": configs}))
    text = ct.report()
    # spreads 1.2 and 1.5 (median 1.35); median re-measurement over recorded: 1.1 and 1.0
    assert "| w | 2 | 1.35x, 1.50x | 1.00 to 1.10 |" in text
