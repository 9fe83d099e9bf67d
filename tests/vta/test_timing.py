"""VTA timing model: lower bounds, virtual-thread overlap, clock/bus scaling, Pynq calibration points."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from toolkit.vta.compiler import compile_conv2d
from toolkit.vta.config import get_preset
from toolkit.vta.sim import simulate
from toolkit.vta.timing import PYNQ_CALIBRATED, PYNQ_MEASUREMENTS, TimingParams, host_seconds
from toolkit.workloads import parse_workload
from vta_programs import load_dump, matrix_multiply_tutorial, padded_gemm_alu, weight_stream

HW = get_preset("pynq")
CALIBRATION = PYNQ_MEASUREMENTS  # vta.md 6.2: the Pynq calibration points


def _programs():
    rng = np.random.default_rng(0)
    yield padded_gemm_alu(HW, rng)[0]
    yield matrix_multiply_tutorial(HW, rng)[0]
    yield weight_stream(HW, 6, 2)
    for name in ("c2", "c4", "c5", "c11", "tutorial_c8"):
        yield load_dump(name, HW)


@pytest.mark.parametrize("prog", list(_programs()), ids=lambda p: p.meta.get("test", p.meta.get("source")))
def test_never_faster_than_compute_or_dma_bound(prog):
    res = simulate(prog, timing_only=True)
    c = res.counters
    assert res.cycles >= c["gemm_counter"] + 2 * c["alu_counter"]
    moved = sum(c[k] for k in ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes",
                               "out_store_nbytes")) + 16 * len(prog.insns)
    assert res.cycles >= moved / HW.bus_bytes
    assert res.breakdown["bus_busy"] >= moved / HW.bus_bytes
    assert res.seconds == pytest.approx(res.cycles / 100e6 + host_seconds(len(prog.insns), PYNQ_CALIBRATED))


def test_two_virtual_threads_hide_load_latency_in_hand_stream():
    one, two = (simulate(weight_stream(HW, 8, t), timing_only=True) for t in (1, 2))
    assert two.cycles < one.cycles
    assert two.breakdown["load_busy"] == one.breakdown["load_busy"]  # same work, more overlap


def test_two_virtual_threads_speed_up_load_bound_compiled_layer():
    cfg, _ = CALIBRATION["C11"]
    wl = parse_workload("resnet18.C11")
    one = simulate(compile_conv2d(wl, {**cfg, "oc_nthread": 1}, HW).program, timing_only=True)
    two = simulate(compile_conv2d(wl, cfg, HW).program, timing_only=True)
    assert one.breakdown["load_busy"] > one.breakdown["compute_busy"]  # load-bound
    assert two.cycles < 0.8 * one.cycles


def test_wider_bus_and_faster_clock_are_faster():
    slow = simulate(load_dump("c11", HW), timing_only=True)
    fast = simulate(load_dump("c11", get_preset("ultra96")), timing_only=True)
    assert fast.breakdown["bus_busy"] < slow.breakdown["bus_busy"]
    assert fast.cycles < slow.cycles and fast.seconds < slow.seconds


def test_gemm_cost_follows_pipeline_fill():
    prog = matrix_multiply_tutorial(HW, np.random.default_rng(0))[0]
    base = simulate(prog, timing_only=True).breakdown["compute_busy"]
    filled = simulate(prog, timing_only=True,
                      params=dataclasses.replace(PYNQ_CALIBRATED, gemm_fill=3.0)).breakdown["compute_busy"]
    # GEMM reset: 16 iterations, GEMM: 16 x 16 iterations, 3 extra cycles each
    assert filled - base == 3 * (16 + 256)


def test_serial_program_pays_dma_latency_per_row():
    prog = weight_stream(HW, 2, 1, wgt_rows=4)
    a = simulate(prog, timing_only=True, params=TimingParams(dma_latency=0.0))
    b = simulate(prog, timing_only=True, params=TimingParams(dma_latency=100.0))
    assert b.cycles - a.cycles >= 2 * 100  # two serialised single-row weight loads


@pytest.mark.parametrize("layer", sorted(CALIBRATION))
def test_compiled_calibration_layers_within_25_percent(layer):
    cfg, measured_ms = CALIBRATION[layer]
    prog = compile_conv2d(parse_workload(f"resnet18.{layer}"), cfg, HW).program
    predicted_ms = simulate(prog, timing_only=True).seconds * 1e3
    assert abs(predicted_ms / measured_ms - 1) < 0.25
