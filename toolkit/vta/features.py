"""Compile-time features of a compiled VTA conv2d (flat ``dict[str, float]``, same keys for every config).

Computed from the compile plan and the emitter's instruction counts, without simulating:
instructions by kind, micro-ops, DMA bytes/rows by memory type, tiles, loop extents, padding,
dependency tokens and buffer occupancy (fraction of each SRAM's capacity).

``time.*`` are the program's **additive time terms** in hardware units, derived from the counts
and the config's bus and instruction widths (:func:`time_terms`): bus beats per memory type and
for instruction fetch, DMA rows (each pays a row latency), zero-padding writes, instructions, and
GEMM+ALU cycles at their initiation intervals. The device time is close to a weighted sum of
them (serialised without virtual threads, overlapped with), weights the compiler does not know;
ModelA (:class:`~toolkit.tuning.models.advanced.AdvancedCostModel`) learns them per task.
"""

from __future__ import annotations

from collections import Counter

from toolkit.vta.config import VTAConfig
from toolkit.workloads import Conv2dWorkload

INSN_KINDS = ("load_uop", "load_inp", "load_wgt", "load_acc", "store", "gemm", "gemm_reset", "alu_shr",
              "alu_add", "alu_min", "alu_max", "nop_load", "nop_compute", "nop_store", "finish")


TIME_TERMS = ("bus_inp", "bus_wgt", "bus_out", "bus_uop", "bus_acc", "bus_fetch", "rows_inp", "rows_wgt",
              "rows_out", "pad", "insns", "compute")
"""Names of the ``time.*`` features (see :func:`time_terms`)."""


def time_terms(f: dict[str, float], hw: VTAConfig) -> dict[str, float]:
    """The ``time.*`` features from a feature dict's counts (also for records compiled before they existed).

    >>> from toolkit.vta.config import get_preset
    >>> f = {"bytes.inp": 64.0, "bytes.wgt": 256.0, "bytes.out": 16.0, "bytes.uop": 8.0, "bytes.acc": 0.0,
    ...      "insn.total": 10.0, "rows.inp": 4.0, "rows.wgt": 1.0, "rows.out": 1.0, "pad.elems": 2.0,
    ...      "work.gemm": 9.0, "work.alu": 3.0}
    >>> t = time_terms(f, get_preset("pynq"))
    >>> t["time.bus_wgt"], t["time.bus_fetch"], t["time.compute"]
    (32.0, 20.0, 15.0)
    """
    bb = hw.bus_bytes
    terms = [f["bytes.inp"] / bb, f["bytes.wgt"] / bb, f["bytes.out"] / bb, f["bytes.uop"] / bb,
             f["bytes.acc"] / bb, f["insn.total"] * hw.insn_bytes / bb, f["rows.inp"], f["rows.wgt"],
             f["rows.out"], f["pad.elems"], f["insn.total"], f["work.gemm"] + 2 * f["work.alu"]]
    return {f"time.{k}": float(v) for k, v in zip(TIME_TERMS, terms)}


def with_time_terms(f: dict[str, float], hw: VTAConfig) -> dict[str, float]:
    """``f`` plus its ``time.*`` features when it has the counts they derive from (else ``f`` unchanged)."""
    if "work.alu" not in f or "time.compute" in f:
        return f
    return {**f, **time_terms(f, hw)}


def _axis_pads(n_tiles: int, tile: int, stride: int, k: int, pad: int, size: int) -> tuple[int, int]:
    """Sum over tiles of (real elements, pad elements) read along one axis."""
    real = padded = 0
    ext = (tile - 1) * stride + k
    for i in range(n_tiles):
        r0 = i * tile * stride - pad
        p = max(0, -r0) + max(0, r0 + ext - size)
        real += ext - p
        padded += p
    return real, padded


def compile_features(wl: Conv2dWorkload, sch, hw: VTAConfig, plan: dict, kinds: Counter,
                     bias: bool) -> dict[str, float]:
    """The feature dict of one compiled config (see module docstring)."""
    T = sch.threads
    th, tw, tci, tco = sch.th[1], sch.tw[1], sch.tci[1], sch.tco[1]
    nb = wl.n // hw.batch
    n_outer = nb * sch.th[0] * sch.tco[0] * sch.tw[0]  # output tiles, all threads
    f: dict[str, float] = {f"insn.{k}": float(kinds.get(k, 0)) for k in INSN_KINDS}
    f["insn.total"] = float(sum(v for k, v in kinds.items() if not k.startswith("token_")))
    # input rows/bytes: every (h-tile, w-tile) pair is loaded once per (co tile, ci step)
    h_real, h_pad = _axis_pads(sch.th[0], th, wl.sh, wl.kh, wl.ph, wl.h)
    w_real, w_pad = _axis_pads(sch.tw[0], tw, wl.sw, wl.kw, wl.pw, wl.w)
    reps = nb * sch.tco[0] * wl.ci // hw.block_in  # co tiles x ci blocks
    inp_elems = reps * h_real * w_real
    inp_rows = reps * h_real * sch.tw[0]
    h_ext, w_ext = plan["h_ext"], plan["w_ext"]
    pad_elems = reps * (sch.th[0] * h_ext * sch.tw[0] * w_ext) - inp_elems
    wgt_elems = n_outer * tco * (wl.ci // hw.block_in) * wl.kh * wl.kw
    out_elems = nb * (wl.co // hw.block_out) * wl.oh * wl.ow
    f.update({
        "bytes.inp": float(inp_elems * hw.inp_elem_bytes),
        "bytes.wgt": float(wgt_elems * hw.wgt_elem_bytes),
        "bytes.acc": float(n_outer * tco * hw.acc_elem_bytes if bias else 0),
        "bytes.out": float(out_elems * hw.out_elem_bytes),
        "bytes.uop": float(plan.get("uop_load_elems", 0) * hw.uop_bytes),
        "rows.inp": float(inp_rows),
        "rows.wgt": float(kinds.get("load_wgt", 0) * plan["wgt_dma"][0]),
        "rows.out": float(kinds.get("store", 0) * plan["out_dma"][1]),
        "pad.elems": float(pad_elems),
        "pad.rows": float(reps * sch.tw[0] * h_pad),
        "pad.fraction": float(pad_elems / max(1, pad_elems + inp_elems)),
    })
    k0 = plan["kernels"][0]
    gemm_uops = wl.n // hw.batch * (wl.co // hw.block_out) * wl.oh * wl.ow * (wl.ci // hw.block_in) * wl.kh * wl.kw
    f.update({
        "uop.gemm_kernel": float(len(k0["gemm"])),
        "uop.reset_kernel": float(len(k0["reset"])),
        "uop.image": float(sum(len(k) for ks in plan["kernels"] for n, k in ks.items())),
        "uop.loaded": float(plan.get("uop_load_elems", 0)),
        "uop.gemm_iter_out": float(k0["gemm"].insn_loops(False)[0]),
        "uop.gemm_iter_in": float(k0["gemm"].insn_loops(False)[1]),
        "work.gemm": float(gemm_uops),
        "work.alu": float(out_elems * (4 if bias else 3)),
        "work.gemm_per_insn": float(gemm_uops / max(1, kinds.get("gemm", 1))),
        # 1 if the GEMM kernel writes an accumulator entry again within 2 micro-ops across loop iterations
        # (harmless on the HLS design, which drains the pipeline per iteration; see docs/vta.md)
        "hazard.cross_iteration": float(k0["gemm"].hazard(across_iterations=True) is not None),
    })
    f.update({
        "tiles.total": float(n_outer),
        "tiles.partial": 0.0,  # factor splits only: every tile is full
        "tiles.per_thread": float(n_outer / T),
        "loop.b": float(nb), "loop.h0": float(sch.th[0]), "loop.w0": float(sch.tw[0]),
        "loop.ci0": float(sch.tci[0]), "loop.co0": float(sch.tco[0]),
        "loop.h1": float(th), "loop.w1": float(tw), "loop.ci1": float(tci), "loop.co1": float(tco),
        "threads.oc": float(sch.oc_nthread), "threads.h": float(sch.h_nthread), "threads.total": float(T),
        "threads.idle_slots": float(T * nb * -(-sch.th[0] // sch.h_nthread) * -(-sch.tco[0] // sch.oc_nthread)
                                    * sch.tw[0] - n_outer),
        "tile.h_ext": float(h_ext), "tile.w_ext": float(w_ext),
        "dma.inp_per_step": float(plan["inp_dma"][0]), "dma.out_per_tile": float(plan["out_dma"][0]),
    })
    f["tokens.push"] = float(kinds.get("token_push", 0))
    f["tokens.pop"] = float(kinds.get("token_pop", 0))
    f["tokens.nops"] = float(kinds.get("nop_load", 0) + kinds.get("nop_compute", 0) + kinds.get("nop_store", 0))
    f.update({
        "occ.inp": T * plan["inp_tile"] / hw.inp_depth,
        "occ.wgt": T * plan["wgt_tile"] / hw.wgt_depth,
        "occ.acc": T * plan["acc_tile"] / hw.acc_depth,
        "occ.out": T * plan["out_tile"] / hw.out_depth,
        "occ.uop": float(sum(len(k) for n, k in k0.items() if n in ("reset", "gemm")) * T / hw.uop_depth),
    })
    f.update(time_terms(f, hw))
    return f
