"""Adaptive sampling: knee selection of k, sample synthesis, one measurement per cluster."""

import numpy as np
import pytest

from toolkit.errors import ConfigError
from toolkit.tuning.search.sampling import adaptive_sample, cardinal_knobs, select_k, spread_sample, synthesize
from toolkit.tuning.core.space import CategoricalKnob, ConfigSpace, SplitKnob


def planted_blobs(k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 100, (k, 2))
    return np.repeat(centres, 20, axis=0) + rng.normal(0, 0.5, (20 * k, 2))


@pytest.mark.parametrize("planted", [8, 16, 24, 32])
def test_select_k_finds_planted_clusters(planted: int) -> None:
    for seed in range(3):
        clus = select_k(planted_blobs(planted, seed), np.random.default_rng(seed))
        assert clus.k == planted
        assert len(np.unique(clus.labels)) == planted


def test_select_k_stop_rule_keeps_the_k_after_the_knee() -> None:
    clus = select_k(planted_blobs(16, 0), np.random.default_rng(0), rule="stop")
    assert clus.k == 24
    assert clus.inertias[16] < clus.inertias[8] / 2.5 and clus.inertias[24] * 2.5 >= clus.inertias[16]


def test_select_k_caps_k_at_distinct_points() -> None:
    pts = np.array([[0, 0], [0, 0], [5, 5], [9, 1], [9, 1]], dtype=float)
    assert select_k(pts, np.random.default_rng(0)).k == 3


def test_select_k_rejects_bad_ranges() -> None:
    with pytest.raises(ConfigError):
        select_k(planted_blobs(8, 0), np.random.default_rng(0), k_min=16, k_max=8)


def test_mode_synthesis_is_the_per_knob_mode() -> None:
    members = np.array([[3, 0, 7], [3, 2, 1], [1, 2, 7], [3, 2, 5]])
    assert synthesize(members, "mode", np.random.default_rng(0)).tolist() == [3, 2, 7]


def test_sample_synthesis_uses_centroid_and_candidate_values() -> None:
    pool = np.array([[0, 4, 1], [9, 5, 1], [2, 6, 3]])
    rng = np.random.default_rng(0)
    for _ in range(20):
        s = synthesize(pool[:1], "sample", rng, pool=pool, center=np.array([7.4, 2.6]), cardinal=np.array([0, 2]))
        assert s[0] == 7 and s[2] == 3 and s[1] in (4, 5, 6)


def test_cardinal_knobs_are_the_widest() -> None:
    assert cardinal_knobs([4, 9, 2, 9, 1]).tolist() == [1, 3]


SPACE = ConfigSpace([SplitKnob("a", 720, 2), SplitKnob("b", 360, 2), CategoricalKnob("c", [0, 1, 2, 3])])


def test_one_distinct_unmeasured_config_per_cluster() -> None:
    rng = np.random.default_rng(1)
    cands = SPACE.sample(64, rng)
    measured = set(cands[:20]) | set(SPACE.sample(50, rng))
    out = adaptive_sample(SPACE, cands, measured, np.random.default_rng(2))
    assert len(out.indices) == out.k == len(set(out.indices))
    assert not set(out.indices) & measured


def test_measured_representative_is_replaced_by_the_cluster_mode() -> None:
    # two tight clusters on the cardinal knobs (a, b); per-knob modes (0, 0, 3) and (25, 21, 1) are not candidates
    base = [(0, 1, 3), (1, 0, 3), (0, 0, 0), (2, 0, 3)]
    far = [(25, 20, 1), (24, 21, 1), (25, 21, 2)]
    cands = SPACE.from_knob_indices_array(np.array(base + far)).tolist()
    out = adaptive_sample(SPACE, cands, set(cands), np.random.default_rng(0), k_min=2, k_max=2)
    assert out.k == 2 and out.n_synthesized == 2
    got = sorted(SPACE.knob_indices_array(out.indices).tolist())
    assert got == [[0, 0, 3], [25, 21, 1]]


def test_falls_back_to_random_when_synthesis_is_taken() -> None:
    cands = SPACE.from_knob_indices_array(np.array([(0, 0, 0), (0, 0, 1), (0, 0, 0)])).tolist()
    out = adaptive_sample(SPACE, cands, set(cands), np.random.default_rng(0), k_min=1, k_max=1)
    assert out.n_random == 1 and out.indices[0] not in cands


@pytest.mark.parametrize("reduction", ["mode", "sample"])
def test_centroid_representatives_are_synthesised(reduction: str) -> None:
    base = [(0, 1, 3), (1, 0, 3), (0, 0, 0), (2, 0, 3)]
    far = [(25, 20, 1), (24, 21, 1), (25, 21, 2)]
    cands = SPACE.from_knob_indices_array(np.array(base + far)).tolist()
    out = adaptive_sample(SPACE, cands, set(), np.random.default_rng(0), k_min=2, k_max=2,
                          representative="centroid", reduction=reduction)
    got = sorted(SPACE.knob_indices_array(out.indices).tolist())
    assert out.n_synthesized == 2 and [g[:2] for g in got] == [[1, 0], [25, 21]]   # rounded centroids
    if reduction == "mode":
        assert [g[2] for g in got] == [3, 1]
    else:
        assert all(g[2] in (0, 1, 2, 3) for g in got)


def test_best_representative_is_each_clusters_top_candidate_in_predicted_order() -> None:
    # candidates best predicted first; two tight clusters on the cardinal knobs (a, b)
    base = [(0, 1, 3), (1, 0, 3), (0, 0, 0), (2, 0, 3)]
    far = [(25, 20, 1), (24, 21, 1), (25, 21, 2)]
    order = [far[1], base[2], base[0], far[0], base[1], far[2], base[3]]
    cands = SPACE.from_knob_indices_array(np.array(order)).tolist()
    out = adaptive_sample(SPACE, cands, set(), np.random.default_rng(0), k_min=2, k_max=2, representative="best")
    assert out.indices == [cands[0], cands[1]] and out.n_synthesized == 0
    # nearest-to-centroid picks differ: the model's top candidate is not guaranteed
    near = adaptive_sample(SPACE, cands, set(), np.random.default_rng(0), k_min=2, k_max=2)
    assert cands[0] not in near.indices


def test_spread_sample_covers_the_space() -> None:
    space = ConfigSpace([CategoricalKnob("a", list(range(20))), CategoricalKnob("b", list(range(20)))])
    for seed in range(3):
        picks = spread_sample(space, 4, np.random.default_rng(seed))
        assert len(set(picks)) == 4
        quadrants = {(a >= 10, b >= 10) for a, b in space.knob_indices_array(picks).tolist()}
        assert len(quadrants) == 4, space.knob_indices_array(picks).tolist()
