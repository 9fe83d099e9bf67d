"""The development set (ResNet-18 C2-C11) and the held-out test set are disjoint and cover the shapes asked."""

from __future__ import annotations

from toolkit.backends import make_task
from toolkit.boards import resolve_board
from toolkit.workloads.splits import DEVELOPMENT, development_set, split_of, test_set


def test_the_test_set_is_held_out_and_covers_kernels_strides_sizes_and_channels():
    dev, held = development_set(), test_set()
    assert [w.name for w in dev] == list(DEVELOPMENT)
    assert len(held) >= 20 and len({w.spec() for w in held}) == len(held)
    assert not {w.spec() for w in held} & {w.spec() for w in dev}
    assert {w.kh for w in held} == {1, 3} and {w.sh for w in held} == {1, 2}
    assert min(w.h for w in held) == 14 and max(w.h for w in held) == 56
    assert min(min(w.ci, w.co) for w in held) == 64 and max(max(w.ci, w.co) for w in held) == 512
    assert any(w.name is None for w in held)                     # synthetic shapes beside network layers
    assert all(split_of(w) == "test" for w in held) and all(split_of(w) == "development" for w in dev)


def test_every_test_layer_runs_on_vta_as_it_is():
    board = resolve_board("vta-fsim")
    for w in test_set():
        assert w.ci % 16 == 0 and w.co % 16 == 0
        assert make_task(w, board).space.size > 0
