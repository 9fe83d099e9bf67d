"""The int8 quantiser's pieces: exponents, each op's quantisation against its float reference (one conformance
test over every op of the table), the conv's shift and bias limits, and the torch converters' argument reading."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toolkit.errors import ExportError
from toolkit.vta.graph import INPUT, Graph, Layer, check_arrays
from toolkit.vta.ops import ACC_EXP_MAX, OPS, PER_CHANNEL, Tensor, conv_shift, exponent
from toolkit.vta.quantize import FloatModel, quantize, run_float

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("peak, exp", [(1.0, 6), (127.0, 0), (127.1, -1), (0.5, 7), (1e-30, 32), (1e30, -32),
                                       (0.0, 0), (math.inf, -32), (math.nan, 0)])
def test_the_exponent_is_the_largest_that_fits_int8(peak, exp):
    assert exponent(peak) == exp
    if 0 < peak < math.inf and abs(exp) < 32:
        assert peak * 2.0 ** exp <= 127 < peak * 2.0 ** (exp + 1)


# one float layer per op: (layer, float arrays, input shapes)
LAYERS = {
    "conv": (Layer("c", "conv", [INPUT], attrs={"stride": [1, 1], "pad": [1, 1], "groups": 1, "relu": True}),
             {"c.weight": RNG.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2,
              "c.bias": RNG.standard_normal(16).astype(np.float32) * 0.1}, [(1, 8, 6, 6)]),
    "add": (Layer("a", "add", [INPUT, INPUT], attrs={"relu": False}), {}, [(1, 8, 6, 6)] * 2),
    "relu": (Layer("r", "relu", [INPUT]), {}, [(1, 8, 6, 6)]),
    "maxpool": (Layer("m", "maxpool", [INPUT], attrs={"kernel": [3, 3], "stride": [2, 2], "pad": [1, 1]}), {},
                [(1, 8, 6, 6)]),
    "space_to_depth": (Layer("s", "space_to_depth", [INPUT], attrs={"block": 2, "pad": [1, 1], "size": [4, 4],
                                                                    "channels": 48}), {}, [(1, 8, 6, 6)]),
    "avgpool": (Layer("g", "avgpool", [INPUT]), {}, [(1, 8, 6, 6)]),
    "flatten": (Layer("f", "flatten", [INPUT]), {}, [(1, 8, 6, 6)]),
    "linear": (Layer("l", "linear", [INPUT]), {"l.weight": RNG.standard_normal((10, 32)).astype(np.float32),
                                               "l.bias": RNG.standard_normal(10).astype(np.float32)}, [(1, 32)]),
}


FUSED = {"conv_add"}
"""Ops made from int8 layers, not quantised from a float one (tests/vta/test_fusion.py)."""


def test_every_op_of_the_table_has_a_conformance_case():
    assert set(LAYERS) | FUSED == set(OPS)


@pytest.mark.parametrize("op", sorted(set(OPS) - FUSED))
def test_each_op_quantised_stays_within_its_scale_of_the_float_op(op):
    """quantize -> shape -> run (int8) against run_float on int8-representable inputs: within a few steps of
    the output's scale (the conv: plus its weights' rounding), and without a bias (round to nearest)."""
    layer, floats, shapes = LAYERS[op]
    spec = OPS[op]
    ein = 6
    xs = [RNG.integers(-128, 128, s).astype(np.int8) for s in shapes]     # the whole int8 range
    real = [x.astype(np.float32) * 2.0 ** -ein for x in xs]
    want = spec.run_float(layer, real, floats)
    q = Layer(layer.name, op, list(layer.inputs), "cpu", dict(layer.attrs))
    arrays: dict[str, np.ndarray] = {}
    eo = spec.quantize(q, [ein] * len(xs), float(np.max(np.abs(want))), floats, arrays)
    assert spec.shape(q, [tuple(s) for s in shapes], arrays) == want.shape
    got = spec.run(q, [Tensor(x, ein) for x in xs], arrays, None)
    assert got.exp == eo and got.data.shape == want.shape
    assert got.data.dtype == (np.int8 if eo is not None else np.float32)
    step = 2.0 ** -eo if eo is not None else 1e-5
    tolerance = {"conv": 8 * step, "linear": 1e-4}.get(op, step / 2 + 1e-6)
    err = got.real(None) - want
    assert np.max(np.abs(err)) <= tolerance, (op, eo)
    assert abs(float(np.mean(err))) <= 0.3 * step, (op, eo)      # rounded to nearest, not truncated


def test_a_conv_keeps_its_bias_within_int32_and_its_shift_within_the_alu():
    layer, floats, _ = LAYERS["conv"]
    big = dict(floats, **{"c.bias": np.full(16, 3e8, np.float32)})      # a bias VTA's int32 cannot hold at 2^6
    for ein, peak in ((6, 10.0), (20, 1e-6), (-30, 1e6)):
        q = Layer("c", "conv", [INPUT], attrs=dict(layer.attrs))
        arrays: dict[str, np.ndarray] = {}
        eo = OPS["conv"].quantize(q, [ein], peak, big, arrays)
        shifts = np.atleast_1d(conv_shift(q, arrays))
        assert np.all((0 <= shifts) & (shifts <= 31)) and eo == q.attrs["exp"]
        assert np.all(np.abs(arrays["c.bias"].astype(np.int64)) < 2 ** 31)
        assert np.all(eo + shifts <= ACC_EXP_MAX)     # the accumulator exponent
    with pytest.raises(ExportError, match="after the model left int8"):
        OPS["conv"].quantize(Layer("c", "conv", [INPUT], attrs=dict(layer.attrs)), [None], 1.0, floats, {})


def test_the_rounding_offset_is_folded_into_the_bias():
    layer, floats, _ = LAYERS["conv"]
    zero = dict(floats, **{"c.bias": np.zeros(16, np.float32)})
    q = Layer("c", "conv", [INPUT], attrs=dict(layer.attrs))
    arrays: dict[str, np.ndarray] = {}
    OPS["conv"].quantize(q, [6], 4.0, zero, arrays)
    shift = conv_shift(q, arrays)
    assert np.all(shift > 0) and np.all(arrays["c.bias"] == np.left_shift(1, shift - 1))


def test_weights_take_per_channel_exponents_where_a_channel_is_small():
    """Channels 4x smaller than the largest get two more bits each (their own shift, the same output scale), and
    the conv's error shrinks; a conv whose channels all take the same exponent keeps one shift."""
    from toolkit.vta.graph import execute

    layer, floats, _ = LAYERS["conv"]
    w = floats["c.weight"] / np.max(np.abs(floats["c.weight"]), axis=(1, 2, 3), keepdims=True) * 0.9
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    errors = {}
    for name, weight in (("one shift", w), ("per channel", w * np.where(np.arange(16) < 8, 1.0, 0.25)
                                                             .reshape(-1, 1, 1, 1).astype(np.float32))):
        model = dict(floats, **{"c.weight": weight.astype(np.float32)})
        q = Layer("c", "conv", [INPUT], attrs=dict(layer.attrs))
        arrays: dict[str, np.ndarray] = {}
        want = OPS["conv"].run_float(q, [x], model)
        OPS["conv"].quantize(q, [5], float(np.max(np.abs(want))), model, arrays)
        graph = Graph((1, 8, 6, 6), 5, [q], ["c"])
        assert check_arrays(graph, arrays)["c"] == (1, 16, 6, 6)
        errors[name] = float(np.mean(np.abs(execute(graph, arrays, x).outputs[0] - want))) / float(np.std(want))
        if name == "one shift":
            assert q.attrs["shift"] != PER_CHANNEL and "c.shift" not in arrays
        else:
            assert q.attrs["shift"] == PER_CHANNEL and sorted(set(arrays["c.shift"].tolist()))[1:] == \
                [sorted(set(arrays["c.shift"].tolist()))[0] + 2]
    assert errors["per channel"] < 0.05 and errors["one shift"] < 0.05


def test_an_add_keeps_the_finer_input_scale_unless_its_sum_overflows():
    add = OPS["add"]
    q = Layer("a", "add", [INPUT, INPUT], attrs={"relu": False})
    assert add.quantize(q, [5, 3], 1.0, {}, {}) == 5 and q.attrs["exp"] == 5
    assert add.quantize(q, [5, 3], 10.0, {}, {}) == 3            # 10 * 2^5 > 127: the exponent drops
    assert add.quantize(q, [5, None], 1.0, {}, {}) is None       # a float operand: a float add
    x, y = (RNG.integers(-128, 128, (1, 8, 6, 6)).astype(np.int8) for _ in range(2))
    q.attrs["exp"] = 3                                              # 5 -> 3: two bits rounded away, half up
    got = add.run(q, [Tensor(x, 5), Tensor(y, 5)], {}, None).data
    want = np.clip(np.floor((x.astype(np.int64) + y) / 4 + 0.5), -128, 127)
    assert np.array_equal(got, want)


def test_a_quantised_graph_checks_and_runs_like_its_float_graph():
    """float graph -> quantize -> the int8 graph's own checks (check_arrays) and reference run."""
    from toolkit.vta.graph import execute

    conv, floats, _ = LAYERS["conv"]
    layers = [Layer("c", "conv", [INPUT], attrs=dict(conv.attrs)), Layer("a", "add", ["c", "c"], attrs={"relu": True}),
              Layer("m", "maxpool", ["a"], attrs={"kernel": [2, 2], "stride": [2, 2], "pad": [0, 0]}),
              Layer("g", "avgpool", ["m"]), Layer("f", "flatten", ["g"])]
    model = FloatModel(Graph((1, 8, 6, 6), 0, layers, ["f"]), dict(floats))
    x = RNG.standard_normal((4, 8, 6, 6)).astype(np.float32)
    q = quantize(model, x)
    assert check_arrays(q.graph, q.arrays)["f"] == (1, 16)
    for i in range(4):
        want = run_float(model, x[i:i + 1])["f"]
        got = execute(q.graph, q.arrays, x[i:i + 1]).outputs[0]
        cos = float(np.sum(want * got) / np.linalg.norm(want) / np.linalg.norm(got))
        assert cos > 0.99, cos


# -- the torch converters ----------------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


def _read(module: torch.nn.Module, shape=(1, 8, 8, 8)):
    from toolkit.vta.from_torch import float_graph

    program = torch.export.export(module.eval(), (torch.zeros(shape),))
    return float_graph(program, shape)


class _Functional(torch.nn.Module):
    """Convs, pooling and flatten written with keyword arguments and string padding."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 8, 3, 3))
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        y = torch.nn.functional.conv2d(x, self.w, padding="same", stride=1)
        y = torch.nn.functional.max_pool2d(y, kernel_size=2, stride=2)
        y = torch.relu(y)
        return self.fc(torch.flatten(y.mean(dim=(2, 3), keepdim=True), 1))


def test_converters_read_keyword_arguments_and_string_padding():
    module = _Functional()
    fm = _read(module)
    ops = [(layer.op, layer.attrs) for layer in fm.graph.layers]
    assert [op for op, _ in ops] == ["conv", "maxpool", "relu", "avgpool", "flatten", "linear"]
    assert ops[0][1]["pad"] == [1, 1] and ops[1][1] == {"kernel": [2, 2], "stride": [2, 2], "pad": [0, 0]}
    x = RNG.standard_normal((1, 8, 8, 8)).astype(np.float32)
    with torch.no_grad():
        ref = module(torch.from_numpy(x)).numpy()
    assert np.allclose(run_float(fm, x)[fm.graph.outputs[0]], ref, atol=1e-4)


class _Scaled(torch.nn.Module):
    def forward(self, x):
        return torch.add(x, x, alpha=2)


class _Reshaped(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], x.shape[1], -1)


class _Dilated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2)

    def forward(self, x):
        return self.conv(x)


@pytest.mark.parametrize("module, words", [(_Scaled(), "only the sum of two activations"),
                                           (_Reshaped(), "only a flatten to (batch, features)"),
                                           (_Dilated(), "no dilation"),
                                           (torch.nn.Sigmoid(), "aten.sigmoid")])
def test_ops_without_an_int8_lowering_are_refused_in_one_line(module, words):
    with pytest.raises(ExportError) as info:
        _read(module)
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("kernel, stride, pad", [((3, 3), (2, 2), (1, 1)), ((2, 2), (2, 2), (0, 0)),
                                                 ((3, 2), (1, 2), (1, 0)), ((1, 1), (1, 1), (0, 0))])
def test_max_pooling_is_torchs(kernel, stride, pad):
    from toolkit.vta.ops import maxpool

    x = RNG.standard_normal((2, 5, 9, 11)).astype(np.float32)
    want = torch.nn.functional.max_pool2d(torch.from_numpy(x), kernel, stride, pad).numpy()
    assert np.array_equal(maxpool(x, kernel, stride, pad, -np.inf), want)
    q = RNG.integers(-128, 128, (2, 5, 9, 11)).astype(np.int8)       # int8: padding at -128 never wins
    want = torch.nn.functional.max_pool2d(torch.from_numpy(q.astype(np.float32)), kernel, stride, pad).numpy()
    assert np.array_equal(maxpool(q, kernel, stride, pad, -128), want.astype(np.int8))
