"""The FPGA driver's real code path on the register-level simulated device."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.errors import BoardError
from toolkit.rpc.vta_driver import (
    AUTORESTART, COMPUTE, COMPUTE_DONE_RD, CONTROL, DONE, FETCH, FETCH_INSN_ADDR, FETCH_INSN_COUNT, LOAD,
    REGISTER_BASE, STORE, SimulatedVTADevice, VTADriver, make_executor,
)
from toolkit.vta.compiler import compile_conv2d
from toolkit.vta.config import get_preset
from toolkit.vta.sim import simulate
from toolkit.workloads import parse_workload

HW = get_preset("pynq")
CFG = {"tile_h": [2, 4], "tile_w": [1, 8], "tile_ci": [2, 1], "tile_co": [2, 1], "oc_nthread": 2, "h_nthread": 1}


def _compiled():
    wl = parse_workload("conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1")
    prog = compile_conv2d(wl, CFG, HW).program
    rng = np.random.default_rng(0)
    inputs = {name: rng.integers(-8, 8, size=r.shape).astype(r.dtype) for name, r in prog.regions.items()
              if name in ("inp", "wgt", "bias")}
    return prog, inputs


def test_driver_matches_simulate_through_registers():
    prog, inputs = _compiled()
    expected = simulate(prog, inputs)
    device = SimulatedVTADevice(HW)
    result = VTADriver(device, HW).run(prog, inputs, repeat=2)
    np.testing.assert_array_equal(result.outputs["out"], expected.outputs["out"])
    assert np.any(result.outputs["out"] != 0)
    assert device.runs == 2 and result.seconds == [pytest.approx(expected.seconds)] * 2
    assert {k: v for k, v in result.counters.items() if k != "cycles"} == expected.counters
    base = REGISTER_BASE["pynq"]
    regs = device.regs
    assert regs[base + FETCH + FETCH_INSN_COUNT] == len(prog.insns)
    assert regs[base + FETCH + FETCH_INSN_ADDR] >= 0x1000_0000  # the instruction buffer's physical address
    assert [regs[base + m + CONTROL] for m in (LOAD, COMPUTE, STORE)] == [AUTORESTART] * 3
    assert regs[base + COMPUTE + COMPUTE_DONE_RD] == DONE
    assert not device.buffers  # every DMA buffer freed


def test_executor_runs_program_bytes_and_refuses_other_hardware():
    prog, inputs = _compiled()
    ex = make_executor("fsim", config="pynq")
    out = ex.run(prog.to_bytes(), inputs, 1)
    np.testing.assert_array_equal(out.outputs["out"], simulate(prog, inputs).outputs["out"])
    other = make_executor("fsim", config=next(n for n in __import__("toolkit.vta.config", fromlist=["x"]).PRESETS
                                              if get_preset(n) != HW))
    with pytest.raises(BoardError, match="recompile"):
        other.run(prog.to_bytes(), inputs, 1)


def test_a_loaded_program_keeps_its_weights_on_the_device_across_inputs():
    """``load_program`` writes the weights once; each ``run`` writes its input alone and answers as a whole run
    would; ``close`` frees the arena and the instruction stream."""
    prog, inputs = _compiled()
    device = SimulatedVTADevice(HW)
    loaded = VTADriver(device, HW).load_program(prog, {"wgt": inputs["wgt"]})
    held = dict(device.buffers)
    for seed in (1, 2):
        x = np.random.default_rng(seed).integers(-8, 8, size=prog.regions["inp"].shape).astype(np.int8)
        got = loaded.run({"inp": x})
        want = simulate(prog, {**inputs, "inp": x})
        np.testing.assert_array_equal(got.outputs["out"], want.outputs["out"])
        assert dict(device.buffers) == held          # nothing allocated per input
    with pytest.raises(BoardError, match="has no DRAM region"):
        loaded.run({"nope": x})
    loaded.close()
    assert not device.buffers


def test_a_program_that_never_finishes_times_out():
    prog, inputs = _compiled()

    class Stuck(SimulatedVTADevice):
        def write_reg(self, addr, value):
            self.regs[addr] = value  # never runs, never sets done

    with pytest.raises(BoardError, match="did not finish"):
        VTADriver(Stuck(HW), HW, wait_polls=100).run(prog, inputs)
