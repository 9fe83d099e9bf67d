"""bench.bench_tuner_time: per tuner, wall and CPU seconds per trial over all its runs, the worst layer by the
mean over seeds, and the parts from the tuners' stats; `ml2tuner:transfer=pretrained` is shown as ml2tuner+."""

from __future__ import annotations

import bench.bench_cpu_transfer as ct
import bench.bench_tuner_time as tt
from toolkit.harness import BenchResult, BenchRun, save_checkpoint


def _run(layer: str, tuner: str, seed: int, trials: int, tuner_s: float, fit_s: float) -> BenchRun:
    return BenchRun(workload=layer, tuner=tuner, seed=seed, trials=trials, invalid=0, best_seconds=1.0, wall_s=9.0,
                    tuner_s=tuner_s, history=[1.0] * trials, cpu_s=tuner_s / 2, stats={"fit_s": fit_s})


def test_the_report_averages_over_trials_and_names_the_worst_layer(tmp_path, monkeypatch):
    res = BenchResult({"machine": "m", "date": "d", "command": "c"},
                      {"trials": 100, "seeds": 2, "imports_s": 3.5}, {})
    res.runs = [_run("pynq/a", "ml2tuner", 0, 100, 2.0, 1.0), _run("pynq/a", "ml2tuner", 1, 100, 4.0, 1.0),
                _run("zcu102/b", "ml2tuner", 0, 50, 4.0, 0.5), _run("zcu102/b", "ml2tuner", 1, 50, 4.0, 0.5),
                _run("pynq/a", "ml2tuner:transfer=pretrained", 0, 10, 1.0, 0.0)]
    monkeypatch.setattr(tt, "RESULT", tmp_path / "tt.json")
    monkeypatch.setattr(ct, "OUT", tmp_path / "no-local-runs")
    save_checkpoint(tt.RESULT, res.to_json())
    text = tt.report()
    row = next(line for line in text.splitlines() if line.startswith("| `ml2tuner` |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # 14 s over 300 trials; worst layer by the mean over seeds: b (0.08) over a (0.03); CPU half; fits 3/300
    assert cells[1:5] == ["0.047", "0.080 (zcu102/b)", "0.023", "0.010"]
    assert "| `ml2tuner+` | 0.100 |" in text and "3.5 s here" in text
    assert "chameleon-ml2" not in text.split("|---|")[-1]   # a tuner without runs has no row
    assert "Over 0.1 s per trial (mean): VTA: none." in text      # ml2tuner+ at 0.100 is not over
