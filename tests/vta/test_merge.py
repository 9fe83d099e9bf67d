"""Merged programs: consecutive layers' programs as one kernel call over one DRAM arena, bit-exact with the
programs run one by one, one launch instead of several; a whole model's VTA layers in one program file."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.backends.vta.space import vta_conv2d_space
from toolkit.vta import reference as ref
from toolkit.vta.compiler import Residual, compile_conv2d
from toolkit.vta.config import get_preset
from toolkit.vta.errors import VTAError
from toolkit.vta.isa import FinishInsn
from toolkit.vta.merge import Step, merge
from toolkit.vta.pooling import Pooling, compile_maxpool
from toolkit.vta.program import Program
from toolkit.vta.sim import simulate
from toolkit.vta.timing import PYNQ_CALIBRATED
from toolkit.workloads import parse_workload


def _compiled(spec: str, hw, rng, **epilogue):
    wl = parse_workload(spec)
    space = vta_conv2d_space(wl, hw)
    for i in rng.permutation(len(space)):
        try:
            return wl, compile_conv2d(wl, space.get(int(i)).values, hw, bias=True, acc_bias=True, **epilogue).program
        except VTAError:
            continue
    raise AssertionError(f"no config of {spec} compiles")


@pytest.mark.parametrize("preset", ["pynq", "zcu102"])
def test_three_layers_merged_equal_their_programs_run_one_by_one(preset):
    """conv (ReLU) -> max pooling -> conv with the first conv's pooled output as residual: the merged program's
    every tensor equals the one-by-one runs', and it takes one launch where they took three."""
    hw, rng = get_preset(preset), np.random.default_rng(7)
    wl_a, a = _compiled("conv2d:H=16,W=16,CI=16,CO=32,K=3,S=1,P=1", hw, rng, shift=6, relu=True)
    pool = compile_maxpool(Pooling((1, 32, 16, 16), (3, 3), (2, 2), (1, 1)), hw)
    wl_c, c = _compiled("conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1", hw, rng, shift=7,
                        residual=Residual(2, 3))
    x, wa, ba = ref.random_inputs(wl_a, hw, rng, bias=True)
    _, wc, bc = ref.random_inputs(wl_c, hw, rng, bias=True)
    ident_pool = ref.pack_weight(np.eye(hw.block_out, hw.block_in, dtype=np.int8).reshape(
        hw.block_out, hw.block_in, 1, 1), hw)
    ident_res = ref.pack_weight((np.eye(hw.block_out, hw.block_in, dtype=np.int8) * 4).reshape(
        hw.block_out, hw.block_in, 1, 1), hw)
    consts = {"a": {"wgt": wa, "bias": ba}, "p": {"ident": ident_pool}, "c": {"wgt": wc, "bias": bc,
                                                                              "ident": ident_res}}
    one = {}
    one["a"] = simulate(a, {"inp": x, **consts["a"]})
    one["p"] = simulate(pool, {"inp": one["a"].outputs["out"].reshape(pool.regions["inp"].shape), **consts["p"]})
    pooled = one["p"].outputs["out"]
    one["c"] = simulate(c, {"inp": pooled.reshape(c.regions["inp"].shape),
                            "res": pooled.reshape(c.regions["res"].shape), **consts["c"]})
    steps = [Step("a", a, {"inp": "in:x", "out": "out:a", "wgt": "wgt:a", "bias": "bias:a"}),
             Step("p", pool, {"inp": "out:a", "out": "out:p", "ident": "ident:p"}),
             Step("c", c, {"inp": "out:p", "res": "out:p", "out": "out", "wgt": "wgt:c", "bias": "bias:c",
                           "ident": "ident:c"})]
    merged = Program.from_bytes(merge(steps).to_bytes())            # the file round trip keeps it
    assert merged.meta["layers"] == ["a", "p", "c"] and sum(isinstance(i, FinishInsn) for i in merged.insns) == 1
    got = simulate(merged, {"in:x": x, **{f"{r}:{k}": v for k, arrays in consts.items() for r, v in arrays.items()}})
    assert np.array_equal(got.outputs["out:a"], one["a"].outputs["out"])
    assert np.array_equal(got.outputs["out:p"], one["p"].outputs["out"])
    assert np.array_equal(got.outputs["out"], one["c"].outputs["out"])
    apart = sum(r.seconds for r in one.values())
    launch = PYNQ_CALIBRATED.launch_us * 1e-6
    assert got.seconds < apart - 1.5 * launch           # two launches saved, the barriers cost far less
    assert got.counters == {k: sum(r.counters[k] for r in one.values()) for k in got.counters}


def test_merging_refuses_tensors_that_disagree_and_programs_that_do_not_end():
    hw, rng = get_preset("pynq"), np.random.default_rng(1)
    _, a = _compiled("conv2d:H=8,W=8,CI=16,CO=16,K=3,S=1,P=1", hw, rng, shift=4)
    _, b = _compiled("conv2d:H=8,W=8,CI=32,CO=16,K=1,S=1,P=0", hw, rng, shift=4)
    with pytest.raises(VTAError, match="inp region is int8"):
        merge([Step("a", a, {"inp": "in:x", "out": "out:a", "wgt": "wgt:a", "bias": "bias:a"}),
               Step("b", b, {"inp": "out:a", "out": "out", "wgt": "wgt:b", "bias": "bias:b"})])
    cut = Program(hw, a.insns[:-1], a.uops, a.regions, a.meta)
    with pytest.raises(VTAError, match="does not end with FINISH"):
        merge([Step("a", cut, {"inp": "in:x", "out": "out:a", "wgt": "wgt:a", "bias": "bias:a"}),
               Step("b", a, {"inp": "out:a", "out": "out", "wgt": "wgt:b", "bias": "bias:b"})])
    with pytest.raises(VTAError, match="in no region"):
        merge([Step("a", a, {"inp": "in:x", "out": "out", "wgt": "wgt:a"})])     # the bias region left out
