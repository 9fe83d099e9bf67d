"""The pieces of VTA whole-model exports: every requantisation epilogue bit-exact in the simulator, the int8
graph's hostile-input checks, quantisation of a float graph, and the untuned config of a model conv."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from toolkit.backends.vta.model import default_config
from toolkit.errors import ExportError
from toolkit.vta.compiler import compile_conv2d
from toolkit.vta.config import get_preset
from toolkit.vta.graph import Graph, execute
from toolkit.vta.merge import merge_segment
from toolkit.vta.ops import OPS
from toolkit.vta.segments import vta_segments
from toolkit.vta.reference import FLOAT32_EXACT_TERMS, conv2d_int32, run_conv2d
from toolkit.workloads import parse_workload

HW = get_preset("pynq")
WL = parse_workload("conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1")
CFG = {"tile_h": [2, 4], "tile_w": [1, 8], "tile_ci": [2, 1], "tile_co": [1, 2], "oc_nthread": 1, "h_nthread": 1}


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("acc_bias", [True, False])
@pytest.mark.parametrize("shift", [0, 5, 8])
def test_every_epilogue_is_bit_exact_in_the_simulator(relu, acc_bias, shift):
    r = run_conv2d(WL, CFG, HW, bias=True, shift=shift, relu=relu, acc_bias=acc_bias, rng=np.random.default_rng(3))
    assert r["correct"]
    out = r["output"]
    assert (out.min() < 0) == (not relu)      # without ReLU the clip is [-128, 127] and negatives occur


def test_default_programs_are_unchanged_by_the_epilogue_options():
    a = compile_conv2d(WL, CFG, HW, bias=True).program.to_bytes()
    b = compile_conv2d(WL, CFG, HW, bias=True, shift=8, relu=True, acc_bias=False).program.to_bytes()
    assert a == b
    assert compile_conv2d(WL, CFG, HW, bias=True, acc_bias=True).program.to_bytes() != a
    with pytest.raises(ValueError, match="bias=True"):
        compile_conv2d(WL, CFG, HW, acc_bias=True)


def _direct_conv(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pad: tuple[int, int], groups: int
                 ) -> np.ndarray:
    """The convolution's definition, one output at a time in Python integers, wrapped to int32."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad[0], wd + 2 * pad[1]), np.int64)
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    oh, ow = (h + 2 * pad[0] - kh) // stride[0] + 1, (wd + 2 * pad[1] - kw) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for co in range(o):
        g = co // (o // groups)
        for y in range(oh):
            for xx in range(ow):
                win = xp[:, g * cg:(g + 1) * cg, y * stride[0]:y * stride[0] + kh, xx * stride[1]:xx * stride[1] + kw]
                out[:, co, y, xx] = (win * w[co].astype(np.int64)).sum(axis=(1, 2, 3))
    return out.astype(np.int32)


def test_the_int_conv_is_the_convolutions_definition():
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 32, 9, 7), dtype=np.int8)
    for groups, stride, pad in ((1, (1, 1), (1, 1)), (1, (2, 1), (0, 2)), (4, (1, 2), (1, 0)), (32, (1, 1), (1, 1))):
        w = rng.integers(-128, 128, (16 if groups < 32 else 32, 32 // groups, 3, 3), dtype=np.int8)
        assert np.array_equal(conv2d_int32(x, w, stride, pad, groups), _direct_conv(x, w, stride, pad, groups))
    # the extremes: every product +-2**14, in float32 at its limit of terms (2**10) and in float64 just past it
    assert FLOAT32_EXACT_TERMS <= 2 ** 10          # 2**10 products of at most 2**14: partial sums within 2**24
    for ci in (2 ** 10 // 9 // 8 * 8, 2 ** 10 // 9 // 8 * 8 + 8):
        x = np.full((1, ci, 3, 3), -128, np.int8)
        w = np.full((2, ci, 3, 3), -128, np.int8)
        w[1] = rng.choice(np.array([-128, 127], np.int8), (ci, 3, 3))
        assert np.array_equal(conv2d_int32(x, w, (1, 1), (0, 0)), _direct_conv(x, w, (1, 1), (0, 0), 1))
    # one term more: 2**10 products of 2**14 and one odd one (127**2) sum past 2**24 to an odd number, which float32
    # cannot hold: this must take float64
    big = np.full((1, 2 ** 10 + 1, 8, 8), -128, np.int8)
    big[0, -1] = 127
    wbig = np.full((16, 2 ** 10 + 1, 1, 1), -128, np.int8)
    wbig[:, -1] = 127
    assert np.all(conv2d_int32(big, wbig, (1, 1), (0, 0)) == 2 ** 10 * 2 ** 14 + 127 ** 2)


def test_default_config_is_the_largest_tile_that_compiles_with_the_model_epilogue():
    wl = parse_workload("resnet18.C2")
    cfg = default_config(wl, HW)
    v = cfg.values
    assert v["oc_nthread"] == v["h_nthread"] == 1
    compile_conv2d(wl, v, HW, bias=True, acc_bias=True)      # compiles
    r = run_conv2d(wl, v, HW, bias=True, acc_bias=True, shift=7, timing_only=True)
    first = run_conv2d(wl, {"tile_b": [1, 1], "tile_h": [56, 1], "tile_w": [56, 1], "tile_ci": [4, 1],
                            "tile_co": [4, 1], "oc_nthread": 1, "h_nthread": 1}, HW, timing_only=True)
    assert r["cycles"] * 10 < first["cycles"]     # AutoTVM's first config, TVM's fallback, is far slower


GOOD = {"input": {"shape": [1, 16, 4, 4], "exp": 5}, "outputs": ["p"],
        "layers": [{"name": "c", "op": "conv", "inputs": ["input"], "device": "cpu",
                    "attrs": {"stride": [1, 1], "pad": [1, 1], "groups": 1, "shift": 6, "relu": True, "exp": 4}},
                   {"name": "a", "op": "add", "inputs": ["c", "input"], "attrs": {"relu": False, "exp": 4}},
                   {"name": "p", "op": "avgpool", "inputs": ["a"]}]}


def _bad(path: str, value) -> dict:
    obj = copy.deepcopy(GOOD)
    *keys, last = path.split("/")
    node = obj
    for k in keys:
        node = node[int(k)] if k.isdigit() else node[k]
    node[int(last) if last.isdigit() else last] = value
    return obj


@pytest.mark.parametrize("obj,words", [
    ([], "not a JSON object"),
    (_bad("input/shape", [1, 16, 4]), "input must have"),
    (_bad("input/exp", "5"), "input must have"),
    (_bad("layers", []), "non-empty list"),
    (_bad("layers/1/name", "c"), "repeated name"),
    (_bad("layers/1/name", "input"), "repeated name"),
    (_bad("layers/1/op", "exec"), "unknown op"),
    (_bad("layers/1/inputs", ["c", "p"]), "earlier layer"),
    (_bad("layers/1/inputs", ["c"]), "two earlier"),
    (_bad("layers/1/device", "vta"), "bad device"),
    (_bad("layers/0/attrs/shift", 40), "bad shift"),
    (_bad("layers/0/attrs/stride", [0, 1]), "stride"),
    (_bad("layers/0/attrs/pad", [-1, 1]), "pad"),
    (_bad("layers/0/attrs/relu", 1), "relu"),
    (_bad("layers/0/attrs/exp", 10**9), "exp"),
    (_bad("layers/0/attrs", "x"), "attrs must be an object"),
    (_bad("outputs", ["nowhere"]), "outputs must name layers"),
])
def test_hostile_graphs_are_refused_with_what_is_wrong(obj, words):
    with pytest.raises(ExportError, match=words):
        Graph.from_json(obj)


def test_a_graph_runs_in_int8_with_its_residual_add():
    g = Graph.from_json(GOOD)
    rng = np.random.default_rng(0)
    arrays = {"c.weight": rng.integers(-20, 20, (16, 16, 3, 3), dtype=np.int8),
              "c.bias": rng.integers(-500, 500, 16).astype(np.int32)}
    x = rng.uniform(-1, 1, (1, 16, 4, 4)).astype(np.float32)
    run = execute(g, arrays, x)
    c, inp = run.tensors["c"], run.tensors["input"]
    assert c.data.dtype == np.int8 and c.data.min() >= 0                     # ReLU fused into the conv
    a = run.tensors["a"].data.astype(np.int32)
    expected = np.clip((c.data.astype(np.int32) * 2 + inp.data + 1) >> 1, -128, 127)   # exp 4 + exp 5 -> 4
    assert np.array_equal(a, expected)
    assert run.outputs[0].shape == (1, 16, 1, 1) and run.outputs[0].dtype == np.float32
    with pytest.raises(ExportError, match="input of shape"):
        execute(g, arrays, x[:, :8])


def test_the_work_left_to_the_cpu_is_counted_per_op():
    from toolkit.vta.graph import work_on_cpu

    g = Graph.from_json(GOOD)
    arrays = {"c.weight": np.zeros((16, 16, 3, 3), np.int8), "c.bias": np.zeros(16, np.int32)}
    out = 16 * 4 * 4
    conv_macs = out * 16 * 3 * 3                                     # output elements x (CI x KH x KW)
    everything = {"macs": {"total": conv_macs, "cpu": conv_macs},
                  "elementwise": {"total": out + out + out, "cpu": 3 * out}}    # requantise, add, pool's sum
    assert work_on_cpu(g, arrays) == everything
    obj = copy.deepcopy(GOOD)
    obj["layers"][0]["device"] = "vta"
    g = Graph.from_json(obj)
    OPS["conv"].to_vta(g.layer("c"), arrays, HW, batch=1)
    assert work_on_cpu(g, arrays) == {"macs": {"total": conv_macs, "cpu": 0},
                                      "elementwise": {"total": 3 * out, "cpu": 2 * out}}


def _vta_package():
    from toolkit.vta.graph import to_package

    obj = copy.deepcopy(GOOD)
    obj["layers"][0]["device"] = "vta"
    g = Graph.from_json(obj)
    rng = np.random.default_rng(1)
    arrays = {"c.weight": rng.integers(-20, 20, (16, 16, 3, 3), dtype=np.int8),
              "c.bias": rng.integers(-500, 500, 16).astype(np.int32)}
    wl = parse_workload("conv2d:H=4,W=4,CI=16,CO=16,K=3,S=1,P=1")
    program = compile_conv2d(wl, default_config(wl, HW).values, HW, bias=True, acc_bias=True, shift=6,
                             relu=True).program
    stored = dict(arrays)
    OPS["conv"].to_vta(g.layer("c"), stored, HW, batch=1)       # packed once, at export
    assert stored["c.weight"].shape == (1, 1, 3, 3, 16, 16) and stored["c.bias"].shape == (1, 1, 1, 1, 1, 16)
    segment = vta_segments(g)[0]
    merged = merge_segment(segment, {"c": program}, {"c": OPS["conv"].vta_arrays(g.layer("c"), stored)})
    return g, arrays, to_package(g, stored, {segment.name: merged.to_bytes()}, HW.to_json())


def test_a_packaged_model_runs_bit_exact_through_a_program_runner():
    """What the board agent's edgetune.vta.run_model does, with the simulator as the device."""
    from toolkit.vta.graph import run_package, tensor_digests
    from toolkit.vta.program import Program
    from toolkit.vta.sim import simulate

    g, arrays, package = _vta_package()
    calls = []

    def load_program(program: bytes, constants: dict):
        calls.append(("load", sorted(constants)))

        def run(named: dict) -> tuple[dict, float]:
            calls.append(("run", sorted(named)))
            res = simulate(Program.from_bytes(program), {**constants, **named})
            return res.outputs, res.seconds
        return run

    x = np.random.default_rng(2).uniform(-1, 1, (3, 16, 4, 4)).astype(np.float32)
    outputs, seconds, digests = run_package(package, x, load_program)
    # the weights go to the device once; each input only its own tensor
    assert calls == [("load", ["bias:c", "wgt:c"])] + [("run", ["in:input"])] * 3
    assert all(s["c"] > 0 for s in seconds)
    for i in range(3):
        ref = execute(g, arrays, x[i:i + 1])       # the reference from the unpacked (OIHW) arrays
        assert digests[i] == tensor_digests(ref, HW) and np.array_equal(outputs[i][0], ref.outputs[0])
        packed_ref = execute(g, {k.split(":", 1)[1]: v for k, v in package.items() if k.startswith("array:")},
                             x[i:i + 1])
        assert tensor_digests(packed_ref, HW) == digests[i]     # and from the packed ones, as a board reads them


@pytest.mark.parametrize("change,words", [
    (lambda p: p.pop("program:vta0"), "no program for VTA layers c..c"),
    (lambda p: p.update(graph=np.frombuffer(b"{not json", np.uint8)), "not JSON"),
    (lambda p: p.pop("hardware"), "no hardware"),
    (lambda p: p.update({"array:c.weight": np.zeros((1, 2, 3, 3, 16, 16), np.int8)}), "do not fit its input"),
    (lambda p: p.update({"array:c.weight": np.zeros((16, 16, 3, 3), np.int8)}), "no c.weight as a 6-D int8 array"),
    (lambda p: p.update({"array:c.weight": np.zeros((1, 1, 3, 3, 16, 16), np.int16)}), "no c.weight as a 6-D int8"),
    # packed for another VTA config's blocks (16 x 8): the same OIHW shape, not the program's layout
    (lambda p: p.update({"array:c.weight": np.zeros((1, 2, 3, 3, 16, 8), np.int8)}), "wgt region"),
    (lambda p: p.update({"array:c.bias": np.zeros(16, np.float32)}), "no c.bias as a 6-D int32"),
    (lambda p: p.update({"array:c.bias": np.zeros((1, 2, 1, 1, 1, 8), np.int32)}), "packed bias"),
])
def test_hostile_packages_are_refused_with_what_is_wrong(change, words):
    from toolkit.vta.graph import run_package

    package = _vta_package()[2]
    change(package)
    with pytest.raises(ExportError, match=words):
        run_package(package, np.zeros((1, 16, 4, 4), np.float32), lambda *a: None)
