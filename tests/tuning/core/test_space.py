"""Config spaces: enumeration in AutoTVM order, index round trips, vectorised helpers."""

import numpy as np
import pytest

from toolkit.errors import ConfigError
from toolkit.tuning.core.space import CategoricalKnob, ConfigSpace, SplitKnob


def _vta_like_c2() -> ConfigSpace:
    return ConfigSpace([SplitKnob("tile_b", 1), SplitKnob("tile_h", 56), SplitKnob("tile_w", 56),
                        SplitKnob("tile_ci", 4), SplitKnob("tile_co", 4),
                        CategoricalKnob("oc_nthread", [1, 2]), CategoricalKnob("h_nthread", [1, 2])])


C2_TUTORIAL = {"tile_b": [1, 1], "tile_h": [7, 8], "tile_w": [1, 56], "tile_ci": [4, 1], "tile_co": [2, 2],
               "oc_nthread": 2, "h_nthread": 1}


def test_split_options_follow_autotvm_factor_order():
    assert SplitKnob("h", 56).options == [[56, 1], [28, 2], [14, 4], [8, 7], [7, 8], [4, 14], [2, 28], [1, 56]]
    # AutoTVM: [-1] + reversed(stack), the first stacked factor varies slowest.
    assert SplitKnob("x", 4, 3).options == [[4, 1, 1], [2, 2, 1], [1, 4, 1], [2, 1, 2], [1, 2, 2], [1, 1, 4]]
    assert all(np.prod(o) == 36 for o in SplitKnob("y", 36, 3).options)


def test_autotvm_index_of_the_c2_schedule():
    space = _vta_like_c2()
    assert space.size == 2304
    assert space.index_of(C2_TUTORIAL) == 828
    assert space.get(828).values == C2_TUTORIAL


def test_vta_c2_space_matches_autotvm_indexing():
    from toolkit.boards import load_profile
    from toolkit.vta.config import get_preset
    from toolkit.backends.vta.space import vta_conv2d_space
    from toolkit.workloads import parse_workload

    space = vta_conv2d_space(parse_workload("resnet18.C2"), get_preset(load_profile("vta-fsim").vta["preset"]))
    assert space.size == 2304
    assert space.index_of(C2_TUTORIAL) == 828


def test_round_trips_over_the_whole_space():
    space = _vta_like_c2()
    idx = np.arange(space.size)
    ki = space.knob_indices_array(idx)
    assert np.array_equal(space.from_knob_indices_array(ki), idx)
    for i in (0, 1, 7, 828, 1500, space.size - 1):
        assert space.from_knob_indices(space.knob_indices(i)) == i
        assert space.index_of(space.get(i).values) == i
        assert list(ki[i]) == space.knob_indices(i)
    feats = space.features([0, 828])
    assert feats.shape == (2, len(space.feature_names))
    assert list(feats[1][2:4]) == [7.0, 8.0]      # tile_h of config 828


def test_neighbours_and_sampling():
    space = _vta_like_c2()
    nb = space.neighbours(828)
    assert len(nb) == len(set(nb)) and 828 not in nb
    assert all(sum(a != b for a, b in zip(space.knob_indices(n), space.knob_indices(828))) == 1 for n in nb)
    rng = np.random.default_rng(0)
    exclude = set(range(0, 2304, 2))
    got = space.sample(1000, rng, exclude=exclude)
    assert len(got) == len(set(got)) == 1000 and not exclude & set(got)
    assert len(space.sample(5000, rng, exclude=exclude)) == 1152


def test_bad_values_are_one_line_errors():
    space = _vta_like_c2()
    with pytest.raises(ConfigError, match="outside the space"):
        space.get(2304)
    with pytest.raises(ConfigError, match="is not an option of knob 'tile_h'"):
        space.index_of({**C2_TUTORIAL, "tile_h": [5, 11]})
    with pytest.raises(ConfigError, match="missing knob"):
        space.index_of({"tile_h": [7, 8]})
