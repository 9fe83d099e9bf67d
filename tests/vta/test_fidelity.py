"""Fidelity of edgetune's VTA conv2d compiler to the real TVM v0.18 VTA stack.

Ground truth: ``tests/data/vta_tvm018_programs/*.txt`` (TVM runtime debug dumps) and
``vta_tvm018_resnet18_truth.jsonl`` (411 configs: TVM's verdicts and fsim counters).
"""

from __future__ import annotations

import json
import re

import pytest

from toolkit.testing.shared_data import shared_data_dir
from toolkit.vta.checks import AccHazardError, SRAMCapacityError, TVMCompatError
from toolkit.vta.compiler import compile_conv2d, tvm_compat_violation
from toolkit.vta.config import get_preset
from toolkit.vta.errors import VTAError
from toolkit.vta.isa import MemId, MemInsn, insn_kind
from toolkit.vta.program import parse_tvm_dump
from toolkit.vta.sim import simulate
from toolkit.backends.vta.space import vta_conv2d_space
from toolkit.workloads import parse_workload

DATA = shared_data_dir()
DUMPS = DATA / "vta_tvm018_programs"
TRUTH = DATA / "vta_tvm018_resnet18_truth.jsonl"
HW = get_preset("pynq")
COUNTERS = ("inp_load_nbytes", "wgt_load_nbytes", "out_store_nbytes", "gemm_counter", "alu_counter")

pytestmark = pytest.mark.skipif(not TRUTH.exists(), reason="TVM v0.18 ground-truth data not present")


def _truth() -> list[dict]:
    return [json.loads(line) for line in TRUTH.read_text().splitlines() if line.strip()]


def _dump_config(text: str) -> dict:
    m = re.search(r"tile_b \[(\d+), (\d+)\], tile_h \[(\d+), (\d+)\], tile_w \[(\d+), (\d+)\], "
                  r"tile_ci \[(\d+), (\d+)\], tile_co \[(\d+), (\d+)\], oc_nthread (\d), h_nthread (\d)", text)
    v = [int(x) for x in m.groups()]
    return {"tile_b": v[0:2], "tile_h": v[2:4], "tile_w": v[4:6], "tile_ci": v[6:8], "tile_co": v[8:10],
            "oc_nthread": v[10], "h_nthread": v[11]}


def _normalised(program) -> list[tuple]:
    """Instructions with DRAM addresses relative to each memory type's lowest address (dumps use absolute ones)."""
    base: dict[int, int] = {}
    for i in program.insns:
        if isinstance(i, MemInsn) and i.x_size:
            base[int(i.mem)] = min(base.get(int(i.mem), 1 << 62), i.dram_base)
    out = []
    for i in program.insns:
        d = dict(vars(i))
        if isinstance(i, MemInsn):
            if not i.x_size:  # a NOP: only its kind and tokens matter
                d = {k: d[k] for k in ("pop_prev", "pop_next", "push_prev", "push_next")}
            elif i.mem == MemId.UOP:
                d.pop("dram_base")
            else:
                d["dram_base"] -= base[int(i.mem)]
        out.append((insn_kind(i), tuple(sorted(d.items()))))
    return out


@pytest.mark.parametrize("name,layer", [("c2", "C2"), ("c4", "C4"), ("c5", "C5"), ("c11", "C11"),
                                        ("tutorial_c8", "C8")])
def test_tvm_dump_reproduced_instruction_for_instruction(name, layer):
    text = (DUMPS / f"{name}.txt").read_text()
    tvm = parse_tvm_dump(text[text.index("RUNTIME DEBUG OUTPUT"):], HW)
    ours = compile_conv2d(parse_workload(f"resnet18.{layer}"), _dump_config(text), HW, tvm_compat=True).program
    assert _normalised(ours) == _normalised(tvm)
    assert ours.uops == tvm.uops  # every micro-op kernel, in TVM's recording order and SRAM placement


def test_every_tvm_correct_config_has_tvm_counters():
    rows = [d for d in _truth() if d["correct"]]
    assert len(rows) == 42
    mismatches = []
    for d in rows:
        compiled = compile_conv2d(parse_workload(d["workload"]), d["config"], HW)
        got = simulate(compiled.program, timing_only=True).counters
        if any(got[k] != d["counters"][k] for k in COUNTERS) or got["acc_load_nbytes"] != 0:
            mismatches.append((d["workload"], d["config"], {k: (got[k], d["counters"][k]) for k in COUNTERS}))
    assert not mismatches


def test_tvm_correct_configs_have_tvm_uop_bytes_too():
    """Not required (the micro-op cache is the runtime's business) but holds: no eviction in these programs."""
    for d in (d for d in _truth() if d["correct"]):
        compiled = compile_conv2d(parse_workload(d["workload"]), d["config"], HW)
        assert compiled.features["bytes.uop"] == d["counters"]["uop_load_nbytes"]


def test_convolution_opt_tutorial_counters():
    cfg = {"tile_h": [2, 7], "tile_w": [1, 14], "tile_ci": [16, 1], "tile_co": [2, 8], "oc_nthread": 2,
           "h_nthread": 1}
    got = simulate(compile_conv2d(parse_workload("resnet18.C8"), cfg, HW).program, timing_only=True).counters
    assert {k: got[k] for k in COUNTERS} == {"inp_load_nbytes": 114688, "wgt_load_nbytes": 1179648,
                                             "out_store_nbytes": 50176, "gemm_counter": 451584, "alu_counter": 9408}


def test_tvm_hardware_rejections_are_edgetune_errors_naming_the_resource():
    seen = 0
    for d in _truth():
        msg = d["compile_error"] or d["runtime_error"] or ""
        if "Allocation exceed bound" in msg:
            tag = msg.split("memory tag ")[1].strip()
            with pytest.raises(SRAMCapacityError) as exc:
                compile_conv2d(parse_workload(d["workload"]), d["config"], HW)
            assert tag in exc.value.resources and exc.value.needed > exc.value.available
            seen += 1
        elif "dst_idx != dst_index" in msg:
            with pytest.raises(AccHazardError) as exc:
                compile_conv2d(parse_workload(d["workload"]), d["config"], HW)
            assert exc.value.resource == "acc_write_hazard"
            seen += 1
    assert seen == 47


def test_tvm_compat_rule_reproduces_tvm_verdicts():
    rows = _truth()
    agree = 0
    for d in rows:
        try:
            compile_conv2d(parse_workload(d["workload"]), d["config"], HW, tvm_compat=True)
            ours = True
        except VTAError:
            ours = False
        agree += ours == bool(d["correct"])
    assert agree / len(rows) >= 0.99, f"{agree}/{len(rows)}"


def test_tvm_software_rejections_are_tvm_compat_errors():
    for d in _truth():
        msg = d["compile_error"] or d["runtime_error"] or ""
        if any(s in msg for s in ("innermost block", "2d pattern", "Cannot match copy", "nbytes == 0")):
            wl = parse_workload(d["workload"])
            assert tvm_compat_violation(wl, d["config"], HW) is not None
            try:
                compile_conv2d(wl, d["config"], HW, tvm_compat=True)
            except TVMCompatError:
                continue
            except VTAError:  # a hardware limit found first is fine too
                continue
            pytest.fail(f"{d['workload']} {d['config']} compiled in tvm_compat mode but TVM said: {msg}")


def test_space_index_matches_autotvm():
    space = vta_conv2d_space(parse_workload("resnet18.C2"), HW)
    assert space.size == 2304
    assert space.get(828).values == {"tile_b": [1, 1], "tile_h": [7, 8], "tile_w": [1, 56], "tile_ci": [4, 1],
                                     "tile_co": [2, 2], "oc_nthread": 2, "h_nthread": 1}
    c4 = vta_conv2d_space(parse_workload("resnet18.C4"), HW)
    assert c4.index_of({"tile_b": [1, 1], "tile_h": [4, 7], "tile_w": [1, 28], "tile_ci": [4, 1],
                        "tile_co": [2, 4], "oc_nthread": 1, "h_nthread": 2}) == 1113
