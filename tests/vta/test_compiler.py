"""edgetune's VTA conv2d compiler: bit-exact outputs, limit checks, features."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.vta.checks import (
    AccHazardError,
    DMALimitError,
    FieldWidthError,
    ScheduleConfigError,
    SRAMCapacityError,
    TVMCompatError,
    UopBufferError,
)
from toolkit.vta.compiler import check_config, compile_conv2d, tvm_compat_violation
from toolkit.vta.config import VTAConfig, get_preset
from toolkit.vta.errors import VTAError
from toolkit.vta.isa import MemId, MemInsn, Opcode
from toolkit.vta.reference import run_conv2d
from toolkit.vta.sim import simulate
from toolkit.backends.vta.space import vta_conv2d_space
from toolkit.workloads import parse_workload

HW = get_preset("pynq")
LAYERS = [f"C{i}" for i in range(2, 12)]
C2_TOPHUB = {"tile_h": [7, 8], "tile_w": [1, 56], "tile_ci": [4, 1], "tile_co": [2, 2], "oc_nthread": 2,
             "h_nthread": 1}


def _pick(layer: str) -> list[tuple[dict, bool]]:
    """Three small valid configs of a layer: TVM-compatible oc_nthread=2, h_nthread=2 (+bias), and one
    only edgetune can compile (+bias when the second had none)."""
    wl = parse_workload(f"resnet18.{layer}")
    space = vta_conv2d_space(wl, HW)
    rng = np.random.default_rng(hash(layer) % 2**32)
    wanted = [lambda c, compat: compat and c["oc_nthread"] == 2,
              lambda c, compat: c["h_nthread"] == 2,
              lambda c, compat: not compat]
    found: list[tuple[dict, bool]] = []
    for index in rng.permutation(space.size):
        if not any(wanted):
            break
        cfg = space.get(int(index)).values
        try:
            check_config(wl, cfg, HW, bias=True)
        except VTAError:
            continue
        compat = tvm_compat_violation(wl, cfg, HW) is None
        for k, pred in enumerate(wanted):
            if pred is not None and pred(cfg, compat):
                if compile_conv2d(wl, cfg, HW).features["insn.total"] <= 2500:
                    found.append((cfg, k == 1 or (k == 2 and wanted[1] is not None)))
                    wanted[k] = None
                break
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_resnet18_layer_bit_exact(layer):
    wl = parse_workload(f"resnet18.{layer}")
    picks = _pick(layer)
    assert len(picks) >= 2
    for cfg, bias in picks:
        r = run_conv2d(wl, cfg, HW, bias=bias, rng=np.random.default_rng(1))
        assert r["correct"], (layer, cfg, bias)


@pytest.mark.parametrize("cfg,bias", [
    (C2_TOPHUB, False),
    # beyond TVM: 4 virtual threads, a padded load per channel block, a store per channel block
    ({"tile_h": [14, 4], "tile_w": [2, 28], "tile_ci": [2, 2], "tile_co": [2, 2], "oc_nthread": 2,
      "h_nthread": 2}, True),
])
def test_c2_bit_exact_with_and_without_bias(cfg, bias):
    r = run_conv2d(parse_workload("resnet18.C2"), cfg, HW, bias=bias, rng=np.random.default_rng(7))
    assert r["correct"]
    assert r["counters"]["acc_load_nbytes"] == (r["compiled"].features["bytes.acc"])


def test_beyond_tvm_patterns_compile_only_without_tvm_compat():
    wl = parse_workload("resnet18.C2")
    cfg = {"tile_h": [14, 4], "tile_w": [2, 28], "tile_ci": [2, 2], "tile_co": [2, 2], "oc_nthread": 1,
           "h_nthread": 2}
    with pytest.raises(TVMCompatError, match="innermost block"):
        compile_conv2d(wl, cfg, HW, tvm_compat=True)
    program = compile_conv2d(wl, cfg, HW).program
    inp = [i for i in program.insns if isinstance(i, MemInsn) and i.mem == MemId.INP and i.x_size]
    stores = [i for i in program.insns if isinstance(i, MemInsn) and i.opcode == Opcode.STORE and i.x_size]
    assert len(inp) == 2 * len([i for i in program.insns if isinstance(i, MemInsn) and i.mem == MemId.WGT])
    assert len(stores) == 2 * 14 * 2 * 2  # one store per output-channel block of every tile


@pytest.mark.parametrize("cfg", [
    {"tile_h": [7, 8], "tile_w": [2, 28], "tile_ci": [4, 1], "tile_co": [4, 1], "oc_nthread": 1, "h_nthread": 2},
    {"tile_h": [7, 8], "tile_w": [4, 14], "tile_ci": [2, 2], "tile_co": [1, 4], "oc_nthread": 2, "h_nthread": 2},
])
def test_uneven_thread_split_bit_exact(cfg):
    """Beyond TVM: a thread split that does not divide its axis; idle threads keep their tokens as NOPs."""
    wl = parse_workload("resnet18.C2")
    with pytest.raises(TVMCompatError, match="Cannot match copy pattern"):
        compile_conv2d(wl, cfg, HW, tvm_compat=True)
    r = run_conv2d(wl, cfg, HW, bias=True, rng=np.random.default_rng(3))
    assert r["correct"] and r["compiled"].features["threads.idle_slots"] > 0


def test_stride2_and_1x1_without_padding_bit_exact():
    for layer, cfg in [("C3", {"tile_h": [4, 7], "tile_w": [1, 28], "tile_ci": [4, 1], "tile_co": [2, 4],
                               "oc_nthread": 2, "h_nthread": 1}),
                       ("C4", {"tile_h": [14, 2], "tile_w": [2, 14], "tile_ci": [1, 4], "tile_co": [2, 4],
                               "oc_nthread": 1, "h_nthread": 2})]:
        assert run_conv2d(parse_workload(f"resnet18.{layer}"), cfg, HW, bias=True)["correct"]


def test_batch_two_bit_exact():
    wl = parse_workload("conv2d:N=2,H=8,W=8,CI=32,CO=32,K=3,S=1,P=1")
    cfg = {"tile_b": [2, 1], "tile_h": [2, 4], "tile_w": [1, 8], "tile_ci": [2, 1], "tile_co": [2, 1],
           "oc_nthread": 2, "h_nthread": 1}
    assert run_conv2d(wl, cfg, HW, bias=True)["correct"]


@pytest.mark.parametrize("layer,cfg,bias", [
    ("C2", {"tile_h": [28, 2], "tile_w": [2, 28], "tile_ci": [2, 2], "tile_co": [2, 2], "oc_nthread": 2,
            "h_nthread": 2}, True),
    ("C4", {"tile_h": [14, 2], "tile_w": [4, 7], "tile_ci": [1, 4], "tile_co": [4, 2], "oc_nthread": 1,
            "h_nthread": 2}, False),
    ("C8", {"tile_h": [7, 2], "tile_w": [1, 14], "tile_ci": [16, 1], "tile_co": [4, 4], "oc_nthread": 1,
            "h_nthread": 1}, True),
    ("C2", {"tile_h": [7, 8], "tile_w": [4, 14], "tile_ci": [4, 1], "tile_co": [1, 4], "oc_nthread": 1,
            "h_nthread": 2}, True),  # last h-tiles leave thread 1 idle
    ("conv2d:H=14,W=14,CI=32,CO=48,K=3,S=1,P=1", {"tile_h": [2, 7], "tile_w": [2, 7], "tile_ci": [2, 1],
                                                  "tile_co": [3, 1], "oc_nthread": 2, "h_nthread": 1}, False),
])
def test_cloned_iterations_equal_full_emulation(monkeypatch, layer, cfg, bias):
    from toolkit.vta import insn_queue

    wl = parse_workload(layer if layer.startswith("conv2d") else f"resnet18.{layer}")
    fast = compile_conv2d(wl, cfg, HW, bias=bias)
    monkeypatch.setattr(insn_queue, "CLONE_MIN_ITERATIONS", 10**9)
    slow = compile_conv2d(wl, cfg, HW, bias=bias)
    assert fast.program.insns == slow.program.insns
    assert fast.features == slow.features


# ---- limit checks -----------------------------------------------------------------------------------
def _c2(**over) -> dict:
    return {**C2_TOPHUB, **over}


def test_sram_capacity_error_names_resource_needed_available():
    with pytest.raises(SRAMCapacityError) as exc:
        compile_conv2d(parse_workload("resnet18.C2"), _c2(tile_h=[1, 56], oc_nthread=1), HW)
    e = exc.value
    assert e.resource == "local.inp_buffer" and e.needed == 58 * 58 and e.available == 2048
    assert "local.acc_buffer" in e.resources


def test_bias_counts_against_the_accumulator():
    wl = parse_workload("conv2d:H=64,W=64,CI=16,CO=32,K=1,S=1,P=0")
    cfg = {"tile_h": [4, 16], "tile_w": [1, 64], "tile_ci": [1, 1], "tile_co": [1, 2], "oc_nthread": 1,
           "h_nthread": 1}  # 2 x 16 x 64 = 2048 accumulator entries: full without bias
    compile_conv2d(wl, cfg, HW)
    with pytest.raises(SRAMCapacityError) as exc:
        compile_conv2d(wl, cfg, HW, bias=True)
    assert exc.value.resource == "local.acc_buffer" and exc.value.needed == 2050


def test_acc_hazard_error_like_tvm_runtime():
    with pytest.raises(AccHazardError) as exc:
        compile_conv2d(parse_workload("resnet18.C2"), _c2(tile_h=[28, 2], tile_co=[4, 1], oc_nthread=1), HW)
    assert exc.value.resource == "acc_write_hazard"


def test_uop_buffer_error():
    small = VTAConfig(target="pynq", log_uop_buff_size=7)  # 32 micro-ops
    with pytest.raises(UopBufferError) as exc:
        compile_conv2d(parse_workload("resnet18.C2"), C2_TOPHUB, small)
    assert exc.value.resource == "uop_buffer" and exc.value.needed == 48 and exc.value.available == 32


def test_dma_limit_errors():
    with pytest.raises(DMALimitError) as exc:  # 16 rows of padding do not fit the 4-bit pad field
        compile_conv2d(parse_workload("conv2d:H=8,W=8,CI=16,CO=16,K=31,S=1,P=16"),
                       {"tile_h": [10, 1], "tile_w": [10, 1], "tile_ci": [1, 1], "tile_co": [1, 1],
                        "oc_nthread": 1, "h_nthread": 1}, HW)
    assert exc.value.resource == "pad" and exc.value.available == 15
    with pytest.raises(DMALimitError, match="x_stride"):  # channel-plane stride > 65535 elements
        compile_conv2d(parse_workload("conv2d:H=256,W=512,CI=32,CO=16,K=1,S=1,P=0"),
                       {"tile_h": [256, 1], "tile_w": [1, 512], "tile_ci": [1, 2], "tile_co": [1, 1],
                        "oc_nthread": 1, "h_nthread": 1}, HW)


def test_field_width_error():
    with pytest.raises(FieldWidthError) as exc:
        compile_conv2d(parse_workload("resnet18.C2"), C2_TOPHUB, HW, shift=40000)
    assert exc.value.resource == "alu_imm"


@pytest.mark.parametrize("cfg,match", [
    ({**C2_TOPHUB, "tile_x": [1, 56]}, "unknown knob"),
    ({**C2_TOPHUB, "tile_h": [7, 7]}, "does not split 56"),
    ({**C2_TOPHUB, "oc_nthread": 3}, "1 or 2"),
    ({k: v for k, v in C2_TOPHUB.items() if k != "tile_w"}, "missing knob"),
    ({**C2_TOPHUB, "tile_b": [1, 2]}, "does not split 1"),
])
def test_schedule_config_errors(cfg, match):
    with pytest.raises(ScheduleConfigError, match=match):
        compile_conv2d(parse_workload("resnet18.C2"), cfg, HW)


def test_errors_come_before_emission_and_match_check_config():
    wl = parse_workload("resnet18.C2")
    space = vta_conv2d_space(wl, HW)
    for index in range(0, space.size, 97):
        cfg = space.get(index).values
        try:
            check_config(wl, cfg, HW)
            ok = True
        except VTAError:
            ok = False
        try:
            compile_conv2d(wl, cfg, HW)
            assert ok
        except VTAError:
            assert not ok


# ---- features -----------------------------------------------------------------------------------------
def test_features_same_keys_and_consistent_with_program():
    wl = parse_workload("resnet18.C5")
    cfgs = [{"tile_h": [2, 14], "tile_w": [1, 28], "tile_ci": [8, 1], "tile_co": [4, 2], "oc_nthread": 1,
             "h_nthread": 2},
            {"tile_h": [28, 1], "tile_w": [1, 28], "tile_ci": [8, 1], "tile_co": [2, 4], "oc_nthread": 2,
             "h_nthread": 1}]
    feats = []
    for cfg in cfgs:
        c = compile_conv2d(wl, cfg, HW)
        f = c.features
        counters = simulate(c.program, timing_only=True).counters
        assert f["insn.total"] == len(c.program.insns)
        assert f["tokens.push"] == sum(i.push_prev + i.push_next for i in c.program.insns)
        assert f["tokens.pop"] == sum(i.pop_prev + i.pop_next for i in c.program.insns)
        assert f["bytes.inp"] == counters["inp_load_nbytes"]
        assert f["bytes.wgt"] == counters["wgt_load_nbytes"]
        assert f["bytes.out"] == counters["out_store_nbytes"]
        assert f["bytes.uop"] == counters["uop_load_nbytes"]
        assert f["work.gemm"] == counters["gemm_counter"]
        assert f["work.alu"] == counters["alu_counter"]
        assert all(0 < f[k] <= 1 for k in ("occ.inp", "occ.wgt", "occ.acc", "occ.out"))
        assert all(isinstance(v, float) for v in f.values())
        feats.append(f)
    assert feats[0].keys() == feats[1].keys()
    assert feats[0] != feats[1]
