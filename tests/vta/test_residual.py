"""Residual adds inside a conv's program: the conv, its shift, ``+ 2**k * I x res`` by GEMM, the rounding shift
and the clip, bit-exact with the NumPy reference over drawn schedules; the limits refused before emitting."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.backends.vta.space import vta_conv2d_space
from toolkit.vta import reference as ref
from toolkit.vta.checks import FieldWidthError
from toolkit.vta.compiler import Residual, compile_conv2d
from toolkit.vta.config import get_preset
from toolkit.vta.errors import VTAError
from toolkit.vta.isa import MemId, MemInsn
from toolkit.vta.sim import simulate
from toolkit.workloads import parse_workload


def identity(hw, scale: int) -> np.ndarray:
    eye = (np.eye(hw.block_out, dtype=np.int8) * (1 << scale)).reshape(hw.block_out, hw.block_in, 1, 1)
    return ref.pack_weight(eye, hw)


@pytest.mark.parametrize("preset", ["pynq", "pynq-4x8", "zcu102"])
@pytest.mark.parametrize("spec", ["conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1", "conv2d:H=14,W=14,CI=32,CO=64,K=1,S=2,P=0"])
def test_a_residual_program_equals_the_reference(preset, spec):
    hw, wl = get_preset(preset), parse_workload(spec)
    wl = parse_workload(f"{spec},N={hw.batch}") if hw.batch > 1 else wl
    rng = np.random.default_rng(len(spec) + hw.batch)
    space = vta_conv2d_space(wl, hw)
    checked = 0
    for i in rng.permutation(len(space))[:60]:
        res, shift, relu = Residual(int(rng.integers(0, 7)), int(rng.integers(0, 9))), int(rng.integers(0, 9)), \
            bool(rng.integers(0, 2))
        try:
            c = compile_conv2d(wl, space.get(int(i)).values, hw, bias=True, acc_bias=True, shift=shift, relu=relu,
                               residual=res)
        except VTAError:
            continue
        x, w, b = ref.random_inputs(wl, hw, rng, bias=True)
        r = rng.integers(-128, 128, size=(wl.n, wl.co, wl.oh, wl.ow), dtype=np.int8)
        got = simulate(c.program, {"inp": x, "wgt": w, "bias": b, "res": ref.pack_output(r, hw),
                                   "ident": identity(hw, res.scale)}).outputs["out"]
        acc = ref.conv2d_int32(ref.unpack_input(x, hw), ref.unpack_weight(w), (wl.sh, wl.sw), (wl.ph, wl.pw))
        acc = (acc.astype(np.int64) + ref.unpack_bias(b).reshape(1, -1, 1, 1)).astype(np.int32) >> shift
        want = ref.pack_output(ref.add_residual(acc, r, res.scale, res.post_shift, relu=relu), hw)
        assert np.array_equal(got.reshape(want.shape), want), (space.get(int(i)).values, res)
        assert c.program.meta["residual"] == {"scale": res.scale, "post_shift": res.post_shift}
        checked += 1
        if checked == 6:
            break
    assert checked >= 3


def loads(program, mem: MemId) -> int:
    return sum(1 for i in program.insns if isinstance(i, MemInsn) and i.mem == mem and i.x_size)


def test_the_identity_is_loaded_once_and_the_residual_once_per_output_tile():
    hw, wl = get_preset("pynq"), parse_workload("conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1")
    cfg = {"tile_h": [2, 4], "tile_w": [1, 8], "tile_ci": [2, 1], "tile_co": [2, 1], "oc_nthread": 1,
           "h_nthread": 1}
    plain = compile_conv2d(wl, cfg, hw, bias=True, acc_bias=True)
    fused = compile_conv2d(wl, cfg, hw, bias=True, acc_bias=True, residual=Residual(3, 2))
    assert loads(fused.program, MemId.WGT) - loads(plain.program, MemId.WGT) == 1
    assert loads(fused.program, MemId.INP) - loads(plain.program, MemId.INP) == 2 * 2    # h tiles x co tiles
    assert set(fused.program.regions) - set(plain.program.regions) == {"res", "ident"}


@pytest.mark.parametrize("res, what", [(Residual(7, 0), "scale"), (Residual(-1, 0), "scale"),
                                       (Residual(0, 16), "post_shift")])
def test_a_residual_the_isa_cannot_hold_is_refused(res, what):
    hw, wl = get_preset("pynq"), parse_workload("conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1")
    cfg = vta_conv2d_space(wl, hw).get(0).values
    with pytest.raises(FieldWidthError, match=what):
        compile_conv2d(wl, cfg, hw, bias=True, acc_bias=True, residual=res)


@pytest.mark.parametrize("preset", ["pynq", "pynq-4x8"])
@pytest.mark.parametrize("with_residual", [False, True])
def test_per_channel_shifts_equal_the_reference(preset, with_residual):
    """Each output channel's own shift (the "shift" tensor, loaded after the bias, a tensor-tensor ALU SHR)."""
    hw = get_preset(preset)
    wl = parse_workload(f"conv2d:N={hw.batch},H=8,W=8,CI=32,CO=32,K=3,S=1,P=1")
    rng = np.random.default_rng(7)
    space = vta_conv2d_space(wl, hw)
    checked = 0
    for i in rng.permutation(len(space))[:80]:
        res = Residual(int(rng.integers(0, 7)), int(rng.integers(0, 6))) if with_residual else None
        try:
            c = compile_conv2d(wl, space.get(int(i)).values, hw, bias=True, acc_bias=True, channel_shift=True,
                               relu=False, residual=res)
        except VTAError:
            continue
        x, w, b = ref.random_inputs(wl, hw, rng, bias=True)
        shifts = rng.integers(0, 14, wl.co).astype(np.int32)
        named = {"inp": x, "wgt": w, "bias": b, "shift": ref.pack_bias(shifts, hw, wl.n)}
        r = rng.integers(-128, 128, size=(wl.n, wl.co, wl.oh, wl.ow), dtype=np.int8)
        if res is not None:
            named.update(res=ref.pack_output(r, hw), ident=identity(hw, res.scale))
        got = simulate(c.program, named).outputs["out"]
        acc = ref.conv2d_int32(ref.unpack_input(x, hw), ref.unpack_weight(w), (1, 1), (1, 1))
        if res is None:
            want = ref.requantize(acc, ref.unpack_bias(b), shifts, relu=False, acc_bias=True)
        else:
            acc = ref.shift_right((acc.astype(np.int64) + ref.unpack_bias(b).reshape(1, -1, 1, 1)).astype(np.int32),
                                  shifts)
            want = ref.add_residual(acc, r, res.scale, res.post_shift, relu=False)
        assert np.array_equal(got.reshape(-1), ref.pack_output(want, hw).reshape(-1)), space.get(int(i)).values
        assert c.program.meta["channel_shift"] is True
        checked += 1
        if checked == 5:
            break
    assert checked >= 3
