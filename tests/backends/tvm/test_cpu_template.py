"""The CPU conv2d template: its space, real LLVM builds that compute the right conv, and features."""

import concurrent.futures as cf
import multiprocessing
import re

import numpy as np
import pytest
import torch
import tvm

from toolkit.boards import load_profile
from toolkit.backends import template_for
from toolkit.backends.tvm.cpu import PACK_WEIGHT, CPUConv2dTemplate, conv2d_nchw_reference
from toolkit.backends.tvm.epilogue import Epilogue
from toolkit.backends.tvm.tir_features import FEATURE_NAMES
from toolkit.workloads import parse_workload

LOCAL = load_profile("local")
SMALL = [
    parse_workload("conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1"),
    parse_workload("conv2d:H=15,W=15,CI=8,CO=24,K=3,S=2,P=0"),
    parse_workload("conv2d:H=9,W=9,CI=12,CO=16,K=1,S=1,P=0"),
]


@pytest.mark.parametrize("layer", ["resnet18.C2", "resnet18.C5", "resnet18.C8"])
def test_space_of_resnet_layers_is_large(layer):
    space = CPUConv2dTemplate(parse_workload(layer), LOCAL).space()
    assert space.size >= 10_000
    assert space.knob_names == ["tile_co", "tile_oh", "tile_ow", "tile_ci", "reorder", "acc_rows", "vec",
                                "unroll_tile", "auto_unroll_max_step", "parallel", "pack_weight"]
    assert space.get(0).values["pack_weight"] == "none"   # appended last: earlier indices keep their meaning


def test_template_for_a_cpu_board_is_this_template():
    assert isinstance(template_for(SMALL[0], LOCAL), CPUConv2dTemplate)


def test_reference_is_torch_conv2d():
    wl = SMALL[1]
    t = CPUConv2dTemplate(wl, LOCAL)
    data, weight = t.make_inputs(np.random.default_rng(3))
    assert weight.shape == (wl.ci, wl.kh, wl.kw, wl.co)          # IHWO
    expected = torch.nn.functional.conv2d(torch.from_numpy(data), torch.from_numpy(t.weight_oihw(weight).copy()),
                                          stride=wl.sh, padding=wl.ph).numpy()
    np.testing.assert_allclose(t.reference([data, weight]), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(conv2d_nchw_reference(data, t.weight_oihw(weight), wl), expected, rtol=1e-4, atol=1e-4)


def _run_library(payload: bytes, path, inputs, out_shape):
    path.write_bytes(payload)
    mod = tvm.runtime.load_module(str(path))
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(np.zeros(out_shape, np.float32), dev)
    mod["main"](*args, out)
    return out.numpy()


@pytest.mark.parametrize("wl", SMALL, ids=lambda w: w.spec())
def test_random_configs_build_and_match_numpy(wl, tmp_path):
    t = CPUConv2dTemplate(wl, LOCAL)
    space = t.space()
    rng = np.random.default_rng(7)
    inputs = t.make_inputs(rng)
    ref = t.reference(inputs)
    for index in space.sample(4, rng):
        config = space.get(index)
        art = t.build(config)
        assert art.kind == "tvm-library" and art.index == index and art.payload[:4] == b"\x7fELF"
        assert list(art.features) == list(FEATURE_NAMES)
        got = _run_library(art.payload, tmp_path / f"k{index}.so", inputs, t.output_shape())
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3, err_msg=str(config.values))


NUMPY_ACTIVATIONS = {
    None: lambda v, b: v,
    "relu": lambda v, b: np.maximum(v, 0),
    "clip": lambda v, b: np.clip(v, *b),
    "sigmoid": lambda v, b: 1 / (1 + np.exp(-v)),
    "silu": lambda v, b: v / (1 + np.exp(-v)),
    "hardswish": lambda v, b: v * np.clip(v + 3, 0, 6) / 6,
    "hardsigmoid": lambda v, b: np.clip(v + 3, 0, 6) / 6,
}


@pytest.mark.parametrize("epilogue", [Epilogue(bias=True, act="relu"), Epilogue(True, True, "relu"),
                                      Epilogue(bias=True, residual=True), Epilogue(True, False, "clip", (0.0, 6.0)),
                                      Epilogue(True, False, "sigmoid"), Epilogue(True, True, "silu"),
                                      Epilogue(True, False, "hardswish"), Epilogue(False, False, "hardsigmoid")],
                         ids=lambda e: "+".join(e.describe()))
def test_epilogue_is_computed_in_the_write_back(epilogue):
    """A model's kernel: the conv, then its epilogue on each element as it leaves the accumulator (a random config
    and the fallback config; the model tests run more)."""
    wl = SMALL[0]
    t = CPUConv2dTemplate(wl, LOCAL)
    rng = np.random.default_rng(5)
    data, weight = t.make_inputs(rng)
    bias = rng.standard_normal(wl.co).astype(np.float32)
    residual = rng.standard_normal(t.output_shape()).astype(np.float32)
    want = t.reference([data, weight]) + (bias[None, :, None, None] if epilogue.bias else 0) + (
        residual if epilogue.residual else 0)
    want = NUMPY_ACTIVATIONS[epilogue.act](want, epilogue.bounds)
    inputs = [data, weight] + [bias] * epilogue.bias + [residual] * epilogue.residual
    for index in [*t.space().sample(1, rng), t.fallback_config().index]:
        mod = t.schedule(t.space().get(index), epilogue)
        assert len(mod["main"].params) == len(inputs) + 1          # the inputs, then the output
        lib = tvm.compile(mod, target=t.target())
        args = [tvm.runtime.tensor(x, tvm.cpu()) for x in inputs]
        out = tvm.runtime.tensor(np.zeros(t.output_shape(), np.float32), tvm.cpu())
        lib["main"](*args, out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-3, atol=1e-3, err_msg=str(index))


def test_an_epilogue_leaves_no_intermediate_conv_buffer():
    """The epilogue is inlined where the accumulator is written back: no NCHW conv buffer between the two."""
    t = CPUConv2dTemplate(SMALL[0], LOCAL)
    conv_buffer = re.compile(r"\bconv = T\.\w*alloc_buffer")
    unscheduled = tvm.IRModule({"main": t._compute(Epilogue(True, True, "relu"))}).script()
    fused = t.schedule(t.fallback_config(), Epilogue(True, True, "relu")).script()
    assert conv_buffer.search(unscheduled) and not conv_buffer.search(fused)
    assert "T.max(" in fused and "T.max(" not in t.schedule(t.fallback_config()).script()


@pytest.mark.parametrize("template, board", [("cpu", "local"), ("cuda", "jetson-nano")])
def test_schedules_without_tvms_type_checks_are_the_checked_ones(template, board, monkeypatch):
    """Templates schedule through ``new_schedule`` (TVM's argument checks skipped, a third of the time) and share one
    PrimFunc per shape and epilogue; both leave the schedule as TVM's checked primitives make it."""
    from tvm import s_tir

    from toolkit.backends.tvm import cpu, cuda

    assert hasattr(s_tir.Schedule.split, "__wrapped__")      # else new_schedule runs the checked primitives
    cls = {"cpu": CPUConv2dTemplate, "cuda": cuda.CUDAConv2dTemplate}[template]
    t = cls(parse_workload("resnet18.C5"), load_profile(board))
    configs = [t.space().get(i) for i in t.space().sample(6, np.random.default_rng(1))] + [t.fallback_config()]
    epilogues = [None, Epilogue(True, True, "relu")]
    fast = [t.schedule(c, e) for c in configs for e in epilogues]
    pristine = t._compute().script()
    assert t._compute() is t._compute() and pristine == cpu._conv_prim_func.__wrapped__(
        t.workload, t.weight_layout, Epilogue()).script()                       # shared, and left unchanged
    monkeypatch.setattr(cpu, "new_schedule", lambda func: s_tir.Schedule(tvm.IRModule({"main": func})))
    monkeypatch.setattr(cuda, "new_schedule", cpu.new_schedule)
    for got, (c, e) in zip(fast, [(c, e) for c in configs for e in epilogues]):
        tvm.ir.assert_structural_equal(got, t.schedule(c, e))


@pytest.mark.parametrize("pack", [p for p in PACK_WEIGHT if p != "none"])
def test_weight_packing_configs_build_and_match_numpy(pack, tmp_path):
    """Each packing, with a fused parallel loop (the slice's region depends on a floordiv) and both vec axes."""
    wl = SMALL[0]
    t = CPUConv2dTemplate(wl, LOCAL)
    inputs = t.make_inputs(np.random.default_rng(11))
    ref = t.reference(inputs)
    for extra in ({"parallel": "co.oh", "vec": "co", "tile_co": [2, 16]},
                  {"parallel": "co", "vec": "ow", "tile_co": [4, 8]}):
        values = {"tile_oh": [7, 2], "tile_ow": [2, 7], "tile_ci": [2, 8], "reorder": "ci.ci.kh.kw", "acc_rows": 1,
                  "unroll_tile": 1, "auto_unroll_max_step": 0, "pack_weight": pack, **extra}
        config = t.space().get(t.space().index_of(values))
        got = _run_library(t.build(config).payload, tmp_path / f"k{config.index}.so", inputs, t.output_shape())
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3, err_msg=str(values))


def test_weight_packing_allocates_the_blocked_weights():
    from toolkit.backends.tvm import tir_features

    t = CPUConv2dTemplate(parse_workload("resnet18.C8"), LOCAL)
    base = {"tile_co": [8, 32], "tile_oh": [14, 1], "tile_ow": [2, 7], "tile_ci": [256, 1], "reorder": "ci.ci.kh.kw",
            "acc_rows": 1, "vec": "co", "unroll_tile": 1, "auto_unroll_max_step": 0, "parallel": "co"}
    staged = {}
    for pack in PACK_WEIGHT:
        mod = t.schedule(t.space().get(t.space().index_of({**base, "pack_weight": pack})))
        features = tir_features.extract(tir_features.lower(mod, t.target()))
        staged[pack] = features["alloc_bytes_global"] - 256 * 16 * 16 * 4
    assert staged == {"none": 0,                              # only the padded input
                      "root": 256 * 256 * 9 * 4,              # the whole tensor, [8, 256, 3, 3, 32]
                      "block": 256 * 9 * 32 * 4}              # one channel block's slice, per parallel task


def test_features_follow_the_config():
    wl = parse_workload("resnet18.C5")
    t = CPUConv2dTemplate(wl, LOCAL)
    space = t.space()
    config = space.get(space.index_of({
        "tile_co": [8, 16], "tile_oh": [28, 1], "tile_ow": [2, 14], "tile_ci": [16, 8], "reorder": "ci.ci.kh.kw",
        "acc_rows": 1, "vec": "co", "unroll_tile": 1, "auto_unroll_max_step": 64, "parallel": "co.oh",
        "pack_weight": "none"}))
    from toolkit.backends.tvm import tir_features

    f = tir_features.extract(tir_features.lower(t.schedule(config), t.target()))
    assert f["main_vector_width"] == 16                  # the channel block
    assert f["parallel_extent"] >= 8 * 28                # co outer x oh outer (and the padding loop)
    assert f["alloc_bytes_local"] == 16 * 14 * 4         # the register accumulator tile
    assert f["alloc_bytes_global"] == 128 * 30 * 30 * 4  # the padded input
    assert f["auto_unroll_max_step"] == 64 and f["unroll_product"] >= 14


def test_build_runs_in_a_worker_process():
    t = CPUConv2dTemplate(SMALL[2], LOCAL)
    config = t.space().get(5)
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver")) as pool:
        art = pool.submit(t.build, config).result(timeout=120)
    assert art.kind == "tvm-library" and art.payload[:4] == b"\x7fELF" and art.build_s > 0
