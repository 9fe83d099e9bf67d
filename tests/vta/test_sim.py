"""VTA simulator: hand-built programs vs numpy, fsim counters, token and bounds errors, TVM programs."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from toolkit.vta.config import get_preset
from toolkit.vta.errors import DeadlockError, LeftoverTokenError, SimulatorBoundsError, VTAError
from toolkit.vta.isa import AluInsn, AluOp, FinishInsn, MemId, MemInsn, Opcode, Uop
from toolkit.vta.program import Program, allocate_regions
from toolkit.vta.sim import COUNTERS, simulate
from vta_programs import DUMPS, load_dump, matrix_multiply_tutorial, padded_gemm_alu

HW = get_preset("pynq")


def test_padded_load_gemm_alu_store_matches_numpy():
    prog, inputs, expected = padded_gemm_alu(HW, np.random.default_rng(0))
    res = simulate(prog, inputs)
    np.testing.assert_array_equal(res.outputs["out"], expected)
    # padding not counted: 2x3 INP elements of 16 B, 15 STORE elements of 16 B
    assert res.counters == {"inp_load_nbytes": 96, "wgt_load_nbytes": 256, "acc_load_nbytes": 0,
                            "uop_load_nbytes": 12, "out_store_nbytes": 240, "gemm_counter": 15,
                            "alu_counter": 45}


def test_batch4_block8_preset_matches_numpy():
    hw = get_preset("pynq-4x8")
    prog, inputs, expected = padded_gemm_alu(hw, np.random.default_rng(3))
    np.testing.assert_array_equal(simulate(prog, inputs).outputs["out"], expected)


def test_matrix_multiply_tutorial_counters_and_result():
    prog, inputs, expected = matrix_multiply_tutorial(HW, np.random.default_rng(1))
    res = simulate(prog, inputs)
    assert res.counters == {"inp_load_nbytes": 256, "wgt_load_nbytes": 65536, "acc_load_nbytes": 0,
                            "uop_load_nbytes": 8, "out_store_nbytes": 256, "gemm_counter": 256, "alu_counter": 0}
    np.testing.assert_array_equal(res.outputs["out"], expected)


def _alu_program(op, use_imm, imm, acc_in, uops, iters=(1, 4), factors=(0, 1, 0, 1), load8=False):
    """LOAD ACC (or ACC_8BIT) from "bias", one ALU instruction, STORE of the first 4 entries."""
    hw = HW
    n = acc_in.shape[0]
    regions = allocate_regions(hw, [("bias", acc_in.shape, acc_in.dtype.name), ("out", (n, 1, 16), "int8")],
                               len(uops))
    mem, elem = (MemId.ACC_8BIT, 16) if load8 else (MemId.ACC, 64)
    insns = [
        MemInsn(Opcode.LOAD, MemId.UOP, 0, regions["uop"].offset // 4, 1, len(uops), len(uops)),
        MemInsn(Opcode.LOAD, mem, 0, regions["bias"].offset // elem, 1, n, n),
        AluInsn(False, 0, len(uops), *iters, *factors, op, use_imm, imm, push_next=True),
        MemInsn(Opcode.STORE, MemId.OUT, 0, regions["out"].offset // 16, 1, n, n, pop_prev=True, push_prev=True),
        FinishInsn(pop_next=True),
    ]
    return Program(hw, insns, uops, regions)


def _acc_after(prog, acc_in):
    """Accumulator contents after the ALU, read back via a widened view: rerun with STORE of int8 only."""
    return simulate(prog, {"bias": acc_in}).outputs["out"]


@pytest.mark.parametrize("op,imm,fn", [
    (AluOp.SHR, 3, lambda x: x >> 3),
    (AluOp.SHR, -4, lambda x: x << 4),            # negative shift = left shift
    (AluOp.MIN, -7, lambda x: np.minimum(x, -7)),
    (AluOp.MAX, 100, lambda x: np.maximum(x, 100)),
    (AluOp.ADD, -32768, lambda x: x - 32768),
    (AluOp.MUL, 300, lambda x: x * 300),
])
def test_alu_immediate_ops(op, imm, fn):
    rng = np.random.default_rng(int(op) * 10 + (imm & 7))
    acc = rng.integers(-2**31, 2**31, (4, 1, 16), dtype=np.int64).astype(np.int32)
    prog = _alu_program(op, True, imm, acc, [Uop(0, 0)])
    expected = (fn(acc.astype(np.int64)) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int8)
    np.testing.assert_array_equal(_acc_after(prog, acc), expected)


def test_alu_tensor_add_wraps_and_shr_by_tensor():
    acc = np.zeros((4, 1, 16), np.int32)
    acc[0] = 2**31 - 1
    acc[1] = 5
    acc[2] = -(2**20)
    acc[3] = 3
    # dst 0 += src 1 (wraps); dst 2 >>= src 3 via two single-uop instructions in one kernel
    prog = _alu_program(AluOp.ADD, False, 0, acc, [Uop(0, 1)], iters=(1, 1), factors=(0, 0, 0, 0))
    out = _acc_after(prog, acc)
    assert (out[0] == np.int8(np.int32(-(2**31) + 4) & 0xFF)).all()
    prog = _alu_program(AluOp.SHR, False, 0, acc, [Uop(2, 3)], iters=(1, 1), factors=(0, 0, 0, 0))
    assert (_acc_after(prog, acc)[2] == np.int8((-(2**20) >> 3) & 0xFF)).all()


def test_alu_sequential_semantics_when_destinations_repeat():
    # dst 0 = max(dst 0, src k) for k = 1..3 in one instruction (a max-pool pattern): order matters only
    # through repeated destinations, which the simulator must apply in sequence
    acc = np.arange(4 * 16, dtype=np.int32).reshape(4, 1, 16) * np.array([1, -1, 1, -1], np.int32)[:, None, None]
    prog = _alu_program(AluOp.ADD, False, 0, acc, [Uop(0, 1)], iters=(1, 3), factors=(0, 0, 0, 1))
    out = _acc_after(prog, acc)
    np.testing.assert_array_equal(out[0], (acc[0] + acc[1] + acc[2] + acc[3]).astype(np.int8))


def test_acc_8bit_load_sign_extends():
    acc8 = np.array([-128, -1, 0, 127] * 16, np.int8).reshape(4, 1, 16)
    prog = _alu_program(AluOp.SHR, True, 0, acc8, [Uop(0, 0)], load8=True)
    res = simulate(prog, {"bias": acc8})
    np.testing.assert_array_equal(res.outputs["out"], acc8)
    assert res.counters["acc_load_nbytes"] == 4 * 64  # counted with the 64-byte ACC element


def test_timing_only_keeps_counters_and_cycles():
    prog, inputs, _ = padded_gemm_alu(HW, np.random.default_rng(0))
    full, fast = simulate(prog, inputs), simulate(prog, timing_only=True)
    assert fast.outputs is None
    assert (fast.counters, fast.cycles) == (full.counters, full.cycles)


def test_removed_token_deadlocks_with_instruction_index():
    prog, inputs, _ = padded_gemm_alu(HW, np.random.default_rng(0))
    prog.insns[1] = dataclasses.replace(prog.insns[1], push_next=False)  # LOAD WGT no longer signals compute
    with pytest.raises(DeadlockError, match=r"compute instruction 2 waits for token l2g"):
        simulate(prog, inputs)


def test_leftover_token_raises():
    prog, inputs, _ = padded_gemm_alu(HW, np.random.default_rng(0))
    prog.insns[9] = FinishInsn()  # FINISH no longer pops the token the STORE pushes
    with pytest.raises(LeftoverTokenError, match="s2g"):
        simulate(prog, inputs, timing_only=True)


def test_more_tokens_than_fifo_depth_stall_but_complete():
    # load pushes 12 tokens through NOPs before compute pops any: the depth-8 FIFO stalls load, no deadlock
    nop = lambda **f: MemInsn(Opcode.LOAD, MemId.INP, 0, 0, 0, 0, 0, **f)  # noqa: E731
    cnop = lambda **f: MemInsn(Opcode.LOAD, MemId.UOP, 0, 0, 0, 0, 0, **f)  # noqa: E731
    insns = [nop(push_next=True) for _ in range(12)] + [cnop(pop_prev=True) for _ in range(12)] + [FinishInsn()]
    res = simulate(Program(HW, insns, [], allocate_regions(HW, [], 0)), timing_only=True)
    assert res.counters == dict.fromkeys(COUNTERS, 0)


@pytest.mark.parametrize("field,value,match", [
    ("sram_base", 2040, "inp SRAM index"),
    ("dram_base", 10**6, "DRAM access"),
])
def test_load_bounds(field, value, match):
    prog, inputs, _ = padded_gemm_alu(HW, np.random.default_rng(0))
    prog.insns[0] = dataclasses.replace(prog.insns[0], **{field: value})
    with pytest.raises(SimulatorBoundsError, match=match) as exc:
        simulate(prog, timing_only=True)
    assert exc.value.needed > exc.value.available


def test_gemm_and_store_bounds():
    prog, _, _ = padded_gemm_alu(HW, np.random.default_rng(0))
    prog.insns[4] = dataclasses.replace(prog.insns[4], dst_factor_out=1100)
    with pytest.raises(SimulatorBoundsError, match="acc SRAM index 2204"):
        simulate(prog, timing_only=True)
    prog, _, _ = padded_gemm_alu(HW, np.random.default_rng(0))
    prog.insns[8] = dataclasses.replace(prog.insns[8], sram_base=2040)
    with pytest.raises(SimulatorBoundsError, match="out SRAM"):
        simulate(prog, timing_only=True)


def test_bad_inputs_and_store_padding_raise():
    prog, inputs, _ = padded_gemm_alu(HW, np.random.default_rng(0))
    with pytest.raises(VTAError, match="must be int8"):
        simulate(prog, {"inp": inputs["inp"].astype(np.int32)})
    with pytest.raises(VTAError, match="no DRAM region"):
        simulate(prog, {"bias": inputs["inp"]})
    prog.insns[8] = dataclasses.replace(prog.insns[8], x_pad0=1)
    with pytest.raises(VTAError, match="padding"):
        simulate(prog, inputs)


@pytest.mark.parametrize("name", ["c2", "c4", "c5", "c11", "tutorial_c8"])
def test_tvm_programs_reproduce_fsim_counters(name):
    text = (DUMPS / f"{name}.txt").read_text()
    truth = {k: int(re.search(rf"^  {k}\s+(\d+)$", text, re.M).group(1)) for k in COUNTERS}
    assert simulate(load_dump(name, HW), timing_only=True).counters == truth


def _conv_reference(data, kern, pad):
    x = np.pad(data.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, _, kh, kw = kern.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((1, o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + oh, j:j + ow], kern[:, :, i, j].astype(np.int64))
    return np.clip(out >> 8, 0, 127).astype(np.int8)


def test_tvm_conv2d_program_is_bit_exact():
    """TVM's own C8 tutorial program (14x14, 256->256, 3x3) on random data vs a numpy conv2d."""
    prog = load_dump("tutorial_c8", HW)
    rng = np.random.default_rng(0)
    data = rng.integers(-128, 128, (1, 256, 14, 14), dtype=np.int8)
    kern = rng.integers(-128, 128, (256, 256, 3, 3), dtype=np.int8)
    dp = data.reshape(1, 1, 16, 16, 14, 14).transpose(0, 2, 4, 5, 1, 3)
    kp = kern.reshape(16, 16, 16, 16, 3, 3).transpose(0, 2, 4, 5, 1, 3)
    inputs = {"inp": np.ascontiguousarray(dp).reshape(prog.regions["inp"].shape),
              "wgt": np.ascontiguousarray(kp).reshape(prog.regions["wgt"].shape)}
    out = simulate(prog, inputs).outputs["out"]
    out = out.reshape(1, 16, 14, 14, 1, 16).transpose(0, 4, 1, 5, 2, 3).reshape(1, 256, 14, 14)
    np.testing.assert_array_equal(out, _conv_reference(data, kern, 1))


@pytest.mark.parametrize("preset,batch", [("zcu102", 1), ("pynq-4x8", 4)])
def test_compiled_conv_through_program_file_on_other_presets(tmp_path, preset, batch):
    """Widened (zcu102) and batch-4 programs: compile, save, load, simulate, compare with numpy."""
    from toolkit.vta.compiler import compile_conv2d
    from toolkit.vta.reference import packed_reference, random_inputs
    from toolkit.workloads import parse_workload

    hw = get_preset(preset)
    wl = parse_workload(f"conv2d:N={batch},H=14,W=14,CI=32,CO=32,K=3,S=1,P=1")
    blk_ci, blk_co = 32 // hw.block_in, 32 // hw.block_out
    cfg = {"tile_h": [2, 7], "tile_w": [1, 14], "tile_ci": [blk_ci, 1], "tile_co": [2, blk_co // 2],
           "oc_nthread": 2, "h_nthread": 1}
    prog = Program.load(compile_conv2d(wl, cfg, hw, bias=True).program.save(tmp_path / "conv.vtaprog"))
    assert prog.hw == hw and len(prog.to_bytes()) > len(prog.insns) * hw.insn_bytes
    inputs = random_inputs(wl, hw, np.random.default_rng(2), bias=True)
    out = simulate(prog, dict(zip(("inp", "wgt", "bias"), inputs))).outputs["out"]
    ref = packed_reference(wl, hw, inputs)
    np.testing.assert_array_equal(out.reshape(ref.shape), ref)


def test_chunked_execution_matches(monkeypatch):
    """Instructions split into several vectorised chunks give the same results as one chunk."""
    import toolkit.vta.sim as sim

    monkeypatch.setattr(sim, "CHUNK", 4)
    prog, inputs, expected = padded_gemm_alu(HW, np.random.default_rng(0))
    np.testing.assert_array_equal(simulate(prog, inputs).outputs["out"], expected)
    prog, inputs, expected = matrix_multiply_tutorial(HW, np.random.default_rng(1))
    np.testing.assert_array_equal(simulate(prog, inputs).outputs["out"], expected)
