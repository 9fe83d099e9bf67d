"""Rules the real TVM v0.18 simulator (fsim) and hardware enforce, enforced the same way here: DRAM regions on
whole elements, the micro-op ``src`` field width of every HW_VER, FINISH last, ALU source indices in bounds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from toolkit.vta.config import VTAConfig, get_preset
from toolkit.vta.errors import FinishOrderError, ProgramFormatError, SimulatorBoundsError
from toolkit.vta.isa import AluInsn, AluOp, FinishInsn
from toolkit.vta.program import Program, region_align
from toolkit.vta.reference import run_conv2d
from toolkit.vta.sim import simulate
from toolkit.workloads import parse_workload
from vta_programs import padded_gemm_alu

HW = get_preset("pynq")


def _config(**changes) -> VTAConfig:
    return VTAConfig.from_json({**HW.to_json(), **changes})


def test_a_32x32_block_conv_is_correct_its_regions_on_whole_elements():
    hw = _config(LOG_BLOCK=5, LOG_ACC_BUFF_SIZE=18)
    cfg = {"tile_b": [1, 1], "tile_h": [7, 1], "tile_w": [7, 1], "tile_ci": [16, 1], "tile_co": [4, 4],
           "oc_nthread": 2, "h_nthread": 1}
    r = run_conv2d(parse_workload("resnet18.C11"), cfg, hw)
    assert r["correct"]
    regions = r["compiled"].program.regions
    assert hw.wgt_elem_bytes == 1024 and regions["wgt"].offset % 1024 == 0
    assert all(reg.offset % region_align(hw, name) == 0 for name, reg in regions.items())


def test_pynq_regions_keep_their_offsets():
    """256-byte alignment already holds whole elements on the Pynq: its programs do not move."""
    assert all(region_align(HW, n) == 256 for n in ("inp", "wgt", "bias", "out", "uop"))


def test_a_program_file_with_a_region_off_an_element_boundary_is_refused():
    hw = _config(LOG_BLOCK=5, LOG_ACC_BUFF_SIZE=18)
    prog, _, _ = padded_gemm_alu(hw, np.random.default_rng(0))
    wgt = prog.regions["wgt"]
    bad = dataclasses.replace(wgt, offset=wgt.offset + 256)
    data = Program(hw, prog.insns, prog.uops, {**prog.regions, "wgt": bad}, prog.meta).to_bytes()
    with pytest.raises(ProgramFormatError, match="not on a whole wgt element"):
        Program.from_bytes(data)


@pytest.mark.parametrize("hw_ver", ["0.0.1", "0.0.2"])
def test_the_micro_op_src_field_is_as_wide_as_the_wider_buffer_whatever_the_hw_ver(hw_ver):
    hw = _config(HW_VER=hw_ver, LOG_INP_BUFF_SIZE=14)
    w = hw.field_widths
    assert w["uop_src"] == max(hw.log_inp_depth, hw.log_acc_depth) > hw.log_inp_depth
    r = run_conv2d(parse_workload("conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1"),
                   {"tile_h": [2, 4], "tile_w": [1, 8], "tile_ci": [2, 1], "tile_co": [1, 2], "oc_nthread": 1,
                    "h_nthread": 1}, hw)
    assert r["correct"]


def test_finish_that_does_not_wait_for_the_store_is_refused():
    prog, inputs, _ = padded_gemm_alu(HW, np.random.default_rng(0))
    insns = list(prog.insns)
    insns[-2] = dataclasses.replace(insns[-2], push_prev=False)    # the STORE no longer tells compute
    insns[-1] = FinishInsn()                                        # FINISH waits for nothing
    with pytest.raises(FinishOrderError, match="may run after FINISH"):
        simulate(dataclasses.replace(prog, insns=insns), inputs)
    with pytest.raises(ProgramFormatError, match="no FINISH"):
        simulate(dataclasses.replace(prog, insns=insns[:-1]), inputs)
    simulate(prog, inputs)      # the original, FINISH after a pop of the STORE's token, runs


def test_an_alu_immediate_with_a_source_index_out_of_bounds_is_refused():
    prog, inputs, _ = padded_gemm_alu(HW, np.random.default_rng(0))
    insns = list(prog.insns)
    k = next(i for i, insn in enumerate(insns) if isinstance(insn, AluInsn) and insn.op == AluOp.MIN)
    insns[k] = dataclasses.replace(insns[k], src_factor_out=HW.acc_depth)    # src index past the buffer
    with pytest.raises(SimulatorBoundsError, match="acc SRAM index"):
        simulate(dataclasses.replace(prog, insns=insns), inputs)
    with pytest.raises(SimulatorBoundsError):
        simulate(dataclasses.replace(prog, insns=insns), timing_only=True)
