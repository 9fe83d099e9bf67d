"""bench.bench_time_to_tune: the milestones of a whole-network run, from its rounds, and the section they make."""

from __future__ import annotations

import pytest

import bench.bench_time_to_tune as ttt


def _run(tuner: str, seed: int, rounds: list[tuple[int, float, list[float]]]) -> dict:
    """Two tasks (optima 1 and 2 s, run 1x and 2x): the network's optimum is 5 s."""
    return {"setting": "pynq-own", "tuner": tuner, "seed": seed, "tasks": ["a", "b"], "counts": [1, 2],
            "optima": [1.0, 2.0], "rounds": [[n, s, best] for n, s, best in rounds]}


FAST = _run("ml2tuner+", 0, [(32, 60.0, [1.2, 2.0]), (64, 120.0, [1.005, 2.0]), (96, 180.0, [1.0, 2.0])])
SLOW = _run("xgb", 0, [(32, 60.0, [3.0, 2.5]), (64, 120.0, [1.5, 2.01]), (96, 180.0, [1.01, 2.01]),
                       (128, 240.0, [1.01, 2.01])])


def test_milestones_come_from_the_first_round_that_reaches_them():
    f = ttt.figures([FAST])
    # network: 1.2 + 4 = 5.2 (> 5.05) after round 1, 1.005 + 4 = 5.005 after round 2
    assert f["network within 1 %"] == {"reached": 1, "runs": 1, "minutes": 2.0, "trials": 64.0}
    assert f["every layer within 1 %"]["trials"] == 64.0
    assert f["every layer at its optimum"]["minutes"] == 3.0
    slow = ttt.figures([SLOW])
    assert slow["every layer within 1 %"]["trials"] == 96.0       # 1.01 is within 1 %, 2.01 too
    assert slow["every layer at its optimum"] == {"reached": 0, "runs": 1, "minutes": None, "trials": None}


def test_gap_at_a_time_is_the_last_round_ended_by_then():
    assert ttt.gap_at(SLOW, 180.0) == pytest.approx((1.01 + 4.02) / 5 - 1)
    assert ttt.gap_at(SLOW, 119.0) == pytest.approx((3.0 + 5.0) / 5 - 1)
    assert ttt.gap_at(SLOW, 10.0) == float("inf")


def test_the_section_sets_each_tuner_against_the_default_at_its_time():
    saved = {"board_s": 1.0, "board_src": "assumed", "trials": 128, "seeds": 1, "command": "cmd",
             "environment": {"machine": "m", "date": "d"}, "runs": [FAST, SLOW]}
    text = ttt.section(saved)
    assert text.startswith(ttt.SECTION)
    assert "| pynq-own | `ml2tuner+` | 2 min, 64 trials | 2 min, 64 trials | 3 min, 96 trials | +0.0 % (at 3 min) |" \
        in text
    assert "| pynq-own | `xgb` | 3 min, 96 trials | 3 min, 96 trials | not in 128 trials | +0.6 % (at 3 min) |" in text


def test_the_layers_xgb_leaves_behind_are_named_with_their_worst_ratio():
    behind = _run("xgb", 1, [(32, 60.0, [1.5, 2.0]), (64, 120.0, [1.2, 2.0])])
    assert ttt._left_behind([SLOW]) == "none"                       # 1.01 and 1.005 are within 1 %
    assert ttt._left_behind([SLOW, behind, FAST]) == "a (up to 1.20x)"


def test_the_local_table_reads_the_latency_reached_by_each_minute():
    local = {"trials": 64, "command": "cmd", "date": "d", "runs": [
        {"tuner": "ml2tuner+", "seed": 0, "tasks": 2, "curve": [[32, 50.0, float("inf")], [64, 170.0, 0.004]]},
        {"tuner": "xgb", "seed": 0, "tasks": 2, "curve": [[32, 40.0, float("inf")], [64, 100.0, 0.005]]}]}
    text = "\n".join(ttt.local_section(local))
    assert "| tuner | 2 min | 3 min |" in text                      # the marks end at the last minute
    assert "| `ml2tuner+` | - | 4.0 ms (64) |" in text               # no latency before every task has a best
    assert "| `xgb` | 5.0 ms (64) | 5.0 ms (64) |" in text
