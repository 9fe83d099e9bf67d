"""bench/bench_chameleon.py's metrics and target verdicts, from hand-made runs."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "bench_chameleon", Path(__file__).resolve().parents[2] / "bench" / "bench_chameleon.py")
bench_chameleon = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench_chameleon)
markdown, summarise, target_verdicts = (bench_chameleon.markdown, bench_chameleon.summarise,
                                        bench_chameleon.target_verdicts)


def _run(layer: str, tuner: str, seed: int, reach: int, best: float, fits: float, queries: float) -> dict:
    history = [2.0] * (reach - 1) + [best] * (10 - reach + 1)
    return {"layer": layer, "tuner": tuner, "seed": seed, "history": history, "tuner_s": fits, "cpu_s": fits / 2,
            "stats": {"fits": fits, "model_queries": queries}, "optimum_s": 1.0}


def test_summary_counts_trials_to_xgbs_best_and_verdicts_follow_the_targets() -> None:
    runs = []
    for layer in ("L1", "L2"):
        for seed in range(2):
            runs.append(_run(layer, "xgb", seed, 9, 1.0, 2, 2000))
            runs.append(_run(layer, "fast", seed, 3, 1.0, 4, 400))      # 3x fewer trials, 10x fewer queries
            runs.append(_run(layer, "slow", seed, 10, 1.5, 2, 2000))    # never reaches xgb's best
    s = summarise(runs, ["xgb", "fast", "slow"], ["L1", "L2"], budget=10)
    fast, slow = s["geomean"]["fast"], s["geomean"]["slow"]
    assert fast["reach_speedup"] == pytest.approx(3.0) and fast["query_ratio"] == pytest.approx(10.0)
    assert fast["censored"] == 0
    assert slow["censored"] == 4 and slow["worst_layer_rel_xgb"] == 1.5
    # latency equal to xgb's, not better: the one missed target
    assert [": met" in v for v in target_verdicts(fast)] == [True, False, True, True]
    assert not any(": met" in v for v in target_verdicts(slow)[:2])
    args = argparse.Namespace(seeds=2, budget=10, tuners="xgb fast slow", options="{}")
    text = markdown(s, ["xgb", "fast", "slow"], ["L1", "L2"], args)
    assert text.startswith("## Chameleon") and "- `fast`: trials to xgb's best: speedup 3.00x" in text
