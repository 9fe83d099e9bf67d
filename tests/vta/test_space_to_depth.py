"""The space-to-depth rewrite of a conv with few input channels: its workload, and the rewritten int8 graph's
tensors equal to the original's (the same sums), for strides 1 and 2, any kernel and padding."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.vta.graph import INPUT, Graph, Layer, check_arrays, execute
from toolkit.vta.quantize import Quantized, rewrite_space_to_depth
from toolkit.workloads import Conv2dWorkload
from toolkit.workloads.networks import space_to_depth


@pytest.mark.parametrize("wl, want", [
    (Conv2dWorkload(1, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3), "conv2d:N=1,H=115,W=115,CI=16,CO=64,K=4,S=1,P=0"),
    (Conv2dWorkload(1, 8, 8, 1, 16, 3, 3, 1, 1, 1, 1), "conv2d:N=1,H=8,W=8,CI=16,CO=16,K=3,S=1,P=1"),
    (Conv2dWorkload(1, 11, 13, 5, 16, 2, 2, 2, 2, 0, 0), "conv2d:N=1,H=5,W=6,CI=32,CO=16,K=1,S=1,P=0"),
    (Conv2dWorkload(1, 8, 8, 3, 16, 3, 3, 3, 3, 0, 0), None),          # stride 3
    (Conv2dWorkload(1, 8, 8, 3, 16, 3, 3, 2, 1, 0, 0), None),          # strides differ
    (Conv2dWorkload(1, 8, 8, 32, 16, 3, 3, 2, 2, 0, 0), None),         # a multiple of the block already
])
def test_the_rewritten_workload(wl, want):
    got = space_to_depth(wl, 16)
    assert (got.spec() if got else None) == want
    if got is not None:
        assert (got.oh, got.ow) == (wl.oh, wl.ow) and got.ci % 16 == 0


@pytest.mark.parametrize("ci, size, k, stride, pad", [(3, 224, 7, 2, 3), (3, 11, 3, 2, 1), (1, 8, 3, 1, 1),
                                                      (5, 9, 2, 2, 0), (2, 10, 1, 2, 0), (3, 12, 5, 2, 2),
                                                      (7, 9, 4, 2, 1)])
def test_the_rewritten_graph_computes_the_same_tensors(ci, size, k, stride, pad):
    rng = np.random.default_rng(ci * size + k)
    graph = Graph((1, ci, size, size), 5, [Layer("c", "conv", [INPUT], attrs={
        "stride": [stride, stride], "pad": [pad, pad], "groups": 1, "shift": 7, "relu": False, "exp": 3})], ["c"])
    arrays = {"c.weight": rng.integers(-127, 128, (16, ci, k, k)).astype(np.int8),
              "c.bias": rng.integers(-4000, 4000, 16).astype(np.int32)}
    x = rng.standard_normal((1, ci, size, size)).astype(np.float32) * 2
    want = execute(graph, arrays, x).tensors["c"].data
    q = Quantized(graph, dict(arrays), check_arrays(graph, arrays), {INPUT: 5, "c": 3})
    wl = Conv2dWorkload(1, size, size, ci, 16, k, k, stride, stride, pad, pad)
    s2d = rewrite_space_to_depth(q, graph.layer("c"), space_to_depth(wl, 16))
    assert [layer.name for layer in q.graph.layers] == [s2d.name, "c"] and s2d.op == "space_to_depth"
    assert check_arrays(q.graph, q.arrays)[s2d.name] == q.shapes[s2d.name]
    Graph.from_json(q.graph.to_json())
    assert np.array_equal(execute(q.graph, q.arrays, x).tensors["c"].data, want)
