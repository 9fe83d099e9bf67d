"""Hand-assembled VTA programs shared by the simulator and timing tests (no compiler involved)."""

from __future__ import annotations


import numpy as np

from toolkit.testing.shared_data import shared_data_dir
from toolkit.vta.config import VTAConfig
from toolkit.vta.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop
from toolkit.vta.program import Program, allocate_regions, parse_tvm_dump

DUMPS = shared_data_dir() / "vta_tvm018_programs"


def load_dump(name: str, hw: VTAConfig) -> Program:
    return parse_tvm_dump((DUMPS / f"{name}.txt").read_text(), hw)


def padded_gemm_alu(hw: VTAConfig, rng: np.random.Generator):
    """LOAD INP 2x3 with 1 pad row on top and 1 pad column each side, LOAD WGT, GEMM reset + GEMM,
    ALU SHR 2 / MIN 300 / MAX -200 (imm), STORE of the 4x5 padded tile. Returns (program, inputs, expected)."""
    b, bi, bo = hw.batch, hw.block_in, hw.block_out
    inp = rng.integers(-128, 128, (2, 3, b, bi), dtype=np.int8)
    wgt = rng.integers(-128, 128, (1, bo, bi), dtype=np.int8)
    regions = allocate_regions(hw, [("inp", inp.shape, "int8"), ("wgt", wgt.shape, "int8"),
                                    ("out", (3, 5, b, bo), "int8")], 3)
    ie, we, oe = (regions[n].offset // s for n, s in
                  (("inp", hw.inp_elem_bytes), ("wgt", hw.wgt_elem_bytes), ("out", hw.out_elem_bytes)))
    ue = regions["uop"].offset // hw.uop_bytes
    insns = [
        MemInsn(Opcode.LOAD, MemId.INP, 0, ie, 2, 3, 3, y_pad0=1, y_pad1=0, x_pad0=1, x_pad1=1),
        MemInsn(Opcode.LOAD, MemId.WGT, 0, we, 1, 1, 1, push_next=True),
        MemInsn(Opcode.LOAD, MemId.UOP, 0, ue, 1, 3, 3, pop_prev=True),
        GemmInsn(True, 0, 1, 3, 5, 5, 1, 0, 0, 0, 0),
        GemmInsn(False, 1, 2, 3, 5, 5, 1, 5, 1, 0, 0),
        AluInsn(False, 2, 3, 3, 5, 5, 1, 5, 1, AluOp.SHR, True, 2),
        AluInsn(False, 2, 3, 3, 5, 5, 1, 5, 1, AluOp.MIN, True, 300),
        AluInsn(False, 2, 3, 3, 5, 5, 1, 5, 1, AluOp.MAX, True, -200, push_next=True),
        MemInsn(Opcode.STORE, MemId.OUT, 1, oe, 3, 5, 5, pop_prev=True, push_prev=True),  # rows 1..3 of the tile
        FinishInsn(pop_next=True),
    ]
    uops = [Uop(0, 0, 0), Uop(0, 0, 0), Uop(0, 0, 0)]
    prog = Program(hw, insns, uops, regions, {"test": "padded_gemm_alu"})
    padded = np.zeros((3, 5, b, bi), np.int64)
    padded[1:, 1:4] = inp
    acc = np.einsum("yxbc,oc->yxbo", padded, wgt[0].astype(np.int64))
    acc = np.maximum(np.minimum(acc >> 2, 300), -200)
    expected = acc.reshape(15, b, bo)[1:].astype(np.int32)  # STORE starts at SRAM index 1
    out_full = np.zeros((15, b, bo), np.int8)
    out_full[:14] = expected.astype(np.int8)  # truncating int8 store
    return prog, {"inp": inp, "wgt": wgt}, out_full.reshape(3, 5, b, bo)


def matrix_multiply_tutorial(hw: VTAConfig, rng: np.random.Generator):
    """TVM's matrix_multiply.py: (1 x 256) int8 times (256 x 256) int8, 16x16 blocks, int8 truncating store."""
    n_blk = 256 // hw.block_in
    a = rng.integers(-128, 128, (1, n_blk, 1, hw.block_in), dtype=np.int8)      # (1, 16, 1, 16)
    w = rng.integers(-128, 128, (n_blk, n_blk, hw.block_out, hw.block_in), dtype=np.int8)  # (o, i, 16, 16)
    regions = allocate_regions(hw, [("inp", a.shape, "int8"), ("wgt", w.shape, "int8"),
                                    ("out", (1, n_blk, 1, hw.block_out), "int8")], 2)
    ie, we, oe = (regions[n].offset // s for n, s in
                  (("inp", hw.inp_elem_bytes), ("wgt", hw.wgt_elem_bytes), ("out", hw.out_elem_bytes)))
    ue = regions["uop"].offset // hw.uop_bytes
    insns = [
        MemInsn(Opcode.LOAD, MemId.INP, 0, ie, 1, n_blk, n_blk),
        MemInsn(Opcode.LOAD, MemId.WGT, 0, we, n_blk, n_blk, n_blk, push_next=True),
        MemInsn(Opcode.LOAD, MemId.UOP, 0, ue, 1, 2, 2, pop_prev=True),
        GemmInsn(True, 0, 1, n_blk, 1, 1, 0, 0, 0, 0, 0),
        GemmInsn(False, 1, 2, n_blk, n_blk, 1, 0, 0, 1, n_blk, 1, push_next=True),
        MemInsn(Opcode.STORE, MemId.OUT, 0, oe, 1, n_blk, n_blk, pop_prev=True, push_prev=True),
        FinishInsn(pop_next=True),
    ]
    prog = Program(hw, insns, [Uop(0, 0, 0), Uop(0, 0, 0)], regions, {"test": "matrix_multiply"})
    flat_a = a.reshape(256).astype(np.int64)
    flat_w = w.transpose(0, 2, 1, 3).reshape(256, 256).astype(np.int64)  # [out, in]
    ref = (flat_w @ flat_a).astype(np.int32).astype(np.int8).reshape(1, n_blk, 1, hw.block_out)
    return prog, {"inp": a, "wgt": w}, ref


def weight_stream(hw: VTAConfig, n_tiles: int, threads: int, wgt_rows: int = 64, gemm_iters: int = 4) -> Program:
    """Load-bound stream: each tile LOADs ``wgt_rows`` weight tiles, then a small GEMM reads them.

    With ``threads`` = 2 the tiles alternate between two weight-buffer halves (micro-op 0 or 1 points
    at each), so the load of tile t+1 may overlap the GEMM of tile t, as TVM's virtual threads do."""
    regions = allocate_regions(hw, [("inp", (1, 1, hw.block_in), "int8"),
                                    ("wgt", (n_tiles * wgt_rows, hw.block_out, hw.block_in), "int8")], 2)
    we = regions["wgt"].offset // hw.wgt_elem_bytes
    ue = regions["uop"].offset // hw.uop_bytes
    insns: list = [MemInsn(Opcode.LOAD, MemId.UOP, 0, ue, 1, 2, 2)]
    for t in range(n_tiles):
        b = t % threads
        insns.append(MemInsn(Opcode.LOAD, MemId.WGT, b * wgt_rows, we + t * wgt_rows, 1, wgt_rows, wgt_rows,
                             pop_next=t >= threads, push_next=True))
        insns.append(GemmInsn(False, b, b + 1, gemm_iters, wgt_rows, 1, 0, 0, 0, 0, 1,
                              pop_prev=True, push_prev=t + threads < n_tiles))
    insns.append(FinishInsn())
    return Program(hw, insns, [Uop(0, 0, 0), Uop(0, 0, wgt_rows)], regions, {"test": "weight_stream"})
