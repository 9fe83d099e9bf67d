"""edgetune's VTA conv2d compiler: TVM's ``conv2d_packed.vta`` schedule, lowered and JIT-ed as TVM v0.18 does.

For a workload and a schedule config (the AutoTVM knobs ``tile_b/h/w/ci/co``, ``oc_nthread``,
``h_nthread``) it emits the instruction stream and micro-op kernels TVM's VTA runtime would build:
loop order ``(b_o, h0, co0, w0 | co1, h1, w1)``, per output tile a GEMM reset, then per input-channel
step a padded 2-D ``LOAD INP`` and a ``LOAD WGT`` and the GEMM kernel (two loops folded into
``iter_out``/``iter_in``, the rest as micro-ops), then the requantisation on the ALU: ``SHR`` by the
layer's shift, an optional ``LOAD ACC`` bias + ``ADD`` (after the shift, as TVM's VTA tests build it, or
before it: a bias at the accumulator scale), ``MIN 127`` and ``MAX 0`` (``MAX -128`` without ReLU), and a
``STORE``. Virtual threads get their own SRAM regions and are
interleaved statement by statement; dependency tokens are placed by an emulation of the runtime's
``InsnQueue`` (pending pops, push folding, NOPs, ``Synchronize``), so the stream is TVM's
instruction for instruction (see ``tests/vta/test_fidelity.py``).

>>> from toolkit.vta.config import get_preset
>>> from toolkit.workloads import parse_workload
>>> cfg = {"tile_h": [7, 8], "tile_w": [1, 56], "tile_ci": [4, 1], "tile_co": [2, 2],
...        "oc_nthread": 2, "h_nthread": 1}
>>> c = compile_conv2d(parse_workload("resnet18.C2"), cfg, get_preset("pynq"))
>>> len(c.program.insns), c.features["insn.total"]
(270, 270.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolkit.vta import checks
from toolkit.vta.checks import TVMCompatError
from toolkit.vta.config import VTAConfig
from toolkit.vta.insn_queue import COMPUTE, LOAD, STORE, InsnQueue, emit_all
from toolkit.vta.isa import AluInsn, AluOp, GemmInsn, MemId, Opcode, Uop
from toolkit.vta.layout import (DRAM_ADDR_BITS, IMM_BITS, LOOP_ITER_BITS, PAD_BITS, SIZE_BITS, SRAM_ADDR_BITS,
                                STRIDE_BITS)
from toolkit.vta.program import Program, allocate_regions
from toolkit.vta.schedule import (Residual as Residual, Schedule, inp_pattern, out_pattern, parse_schedule,
                                  tvm_compat_violation)
from toolkit.vta.uops import Kernel, check_hazard
from toolkit.workloads import Conv2dWorkload

GEMM_KERNELS = ("reset", "gemm", "res")
"""Micro-op kernels run by GEMM instructions (the others by the ALU)."""


# --------------------------------------------------------------------------------------------------
# compiled result
# --------------------------------------------------------------------------------------------------
@dataclass
class CompiledConv2d:
    """A compiled conv2d: the program, its compile-time features, and what it was compiled from."""

    program: Program
    features: dict[str, float]
    workload: Conv2dWorkload
    config: dict
    hw: VTAConfig
    plan: dict = field(default_factory=dict, repr=False)


def compile_conv2d(workload: Conv2dWorkload, config: dict, hw: VTAConfig, *, bias: bool = False,
                   shift: int = 8, relu: bool = True, acc_bias: bool = False, residual: Residual | None = None,
                   channel_shift: bool = False, tvm_compat: bool = False) -> CompiledConv2d:
    """Compile ``workload`` under schedule ``config`` for ``hw``.

    The requantisation: ``out = clip((acc >> shift) + bias, lo, 127)``, or with ``acc_bias``
    ``clip((acc + bias) >> shift, lo, 127)`` (the bias at the accumulator scale); ``lo`` is 0 with ``relu``,
    -128 without. The defaults are the program TVM v0.18's VTA tests build. A ``residual`` adds the "res"
    tensor before the clip (:class:`Residual`). With ``channel_shift`` (and a bias) each output channel has its
    own shift, the int32 "shift" tensor (packed as the bias), loaded after the bias and applied by a
    tensor-tensor ALU ``SHR``; ``shift`` is then unused.

    Raises a :class:`~toolkit.vta.errors.VTAError` subclass from :mod:`toolkit.vta.checks` for any
    violated limit before emitting, and :class:`TVMCompatError` with ``tvm_compat=True`` for a
    schedule TVM v0.18 could not build or run (:func:`tvm_compat_violation`).
    """
    from toolkit.vta.features import compile_features

    wl = workload
    cfg = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in config.items()}
    sch = parse_schedule(wl, cfg, hw)
    cfg.setdefault("tile_b", list(sch.tb))
    if not -(1 << (IMM_BITS - 1)) <= shift < (1 << (IMM_BITS - 1)):
        raise checks.FieldWidthError(f"ALU immediate shift={shift} does not fit int16", resource="alu_imm",
                                     needed=shift, available=(1 << (IMM_BITS - 1)) - 1)
    if (acc_bias or channel_shift) and not bias:
        raise ValueError("acc_bias and channel_shift take a bias; pass bias=True with them")
    if residual is not None:
        residual.check()
    sch, plan = _checked_plan(wl, cfg, sch, hw, bias, tvm_compat, residual is not None, channel_shift)
    program, kinds, uop_loaded = _emit(wl, sch, hw, plan, bias, shift, relu, acc_bias, residual, channel_shift)
    plan["uop_load_elems"] = uop_loaded
    features = compile_features(wl, sch, hw, plan, kinds, bias)
    return CompiledConv2d(program, features, wl, cfg, hw, plan)


def check_config(workload: Conv2dWorkload, config: dict, hw: VTAConfig, *, bias: bool = False,
                 tvm_compat: bool = False, residual: bool = False, channel_shift: bool = False) -> None:
    """Every check of :func:`compile_conv2d` without emitting (fast validity test); raises the same errors."""
    cfg = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in config.items()}
    sch = parse_schedule(workload, cfg, hw)
    cfg.setdefault("tile_b", list(sch.tb))
    _checked_plan(workload, cfg, sch, hw, bias, tvm_compat, residual, channel_shift)


def _checked_plan(wl: Conv2dWorkload, cfg: dict, sch: Schedule, hw: VTAConfig, bias: bool, tvm_compat: bool,
                  residual: bool, channel_shift: bool = False):
    plan = _plan(wl, sch, hw, bias, residual, channel_shift)  # hardware limits first, in both modes
    if tvm_compat:
        why = tvm_compat_violation(wl, cfg, hw)
        if why:
            raise TVMCompatError(why + "; compile without tvm_compat to use edgetune's lowering",
                                 resource="tvm_lowering")
    return sch, plan


# --------------------------------------------------------------------------------------------------
# planning: buffers, kernels, DMA shapes and every check
# --------------------------------------------------------------------------------------------------
def _plan(wl: Conv2dWorkload, sch: Schedule, hw: VTAConfig, bias: bool, residual: bool = False,
          channel_shift: bool = False) -> dict:
    """Buffers, kernels and DMA shapes. A residual is loaded into the thread's input tile once its last GEMM has
    read it (the tile grows to an output tile if that is larger); the identity takes one weight block after every
    thread's weight tile (shared)."""
    T = sch.threads
    th, tw, tci, tco = sch.th[1], sch.tw[1], sch.tci[1], sch.tco[1]
    h_ext = (th - 1) * wl.sh + wl.kh
    w_ext = (tw - 1) * wl.sw + wl.kw
    inp_tile = tci * h_ext * w_ext
    wgt_tile = tco * tci * wl.kh * wl.kw
    out_tile = tco * th * tw
    acc_tile = out_tile + (tco if bias else 0) + (tco if channel_shift else 0)
    inp_total = max(inp_tile, out_tile) if residual else inp_tile
    checks.capacity([("local.inp_buffer", T * inp_total, hw.inp_depth),
                     ("local.wgt_buffer", T * wgt_tile + residual, hw.wgt_depth),
                     ("local.acc_buffer", T * acc_tile, hw.acc_depth),
                     ("local.out_buffer", T * out_tile, hw.out_depth)])

    kernels = []  # per thread: dict name -> Kernel
    for t in range(T):
        ib, wb, ab = t * inp_total, t * wgt_tile, t * acc_tile
        reset = Kernel.build([(tw, 1, 0, 0), (tco, th * tw, 0, 0), (th, tw, 0, 0)], (ab, 0, 0))
        gemm = Kernel.build([
            (tci, 0, h_ext * w_ext, wl.kh * wl.kw),
            (tw, 1, wl.sw, 0),
            (wl.kw, 0, 1, 1),
            (wl.kh, 0, w_ext, wl.kw),
            (tco, th * tw, 0, tci * wl.kh * wl.kw),
            (th, tw, wl.sh * w_ext, 0),
        ], (ab, ib, wb))
        alu = Kernel.single([(out_tile, 1, 1, 0)], ab, ab)
        ks = {"reset": reset, "gemm": gemm, "shr": alu, "min": alu, "max": alu}
        if residual:    # acc[co, h, w] += 2**k * I x res[co, h, w], block by block
            ks["res"] = Kernel.build([(tco, th * tw, th * tw, 0), (th, tw, tw, 0), (tw, 1, 1, 0)],
                                     (ab, ib, T * wgt_tile))
            ks["round"] = ks["shr_post"] = alu
        if bias:      # a per-channel tensor (bias, shifts) broadcast over the tile's pixels
            hw_ = th * tw
            loops = [(tco, hw_, 1, 0), (hw_, 1, 0, 0)] if hw_ > 1 else [(tco, 1, 1, 0)]
            loops = [lp for lp in loops if lp[0] > 1] or [(1, 0, 0, 0)]
            ks["add"] = Kernel.single(loops, ab, ab + out_tile)
            if channel_shift:
                ks["shr"] = Kernel.single(loops, ab, ab + out_tile + tco)
        kernels.append(ks)
    gemms = [name for name in GEMM_KERNELS if name in kernels[0]]
    for name in gemms:
        k = kernels[0][name]
        checks.need(checks.UopBufferError, "uop_buffer", len(k), hw.uop_depth, f"micro-ops for the {name} kernel")
    for name in gemms:
        check_hazard(kernels[0][name], f"{name} kernel")
    # ISA fields of the kernels (thread T-1 has the largest indices)
    fw = hw.field_widths
    for ks in (kernels[0], kernels[-1]):
        for name, k in ks.items():
            eo, ei, do, di, so, si, wo, wi = k.insn_loops(alu=name not in GEMM_KERNELS)
            checks.field("iter_out", eo, LOOP_ITER_BITS)
            checks.field("iter_in", ei, LOOP_ITER_BITS)
            checks.field("dst_factor", max(do, di), fw["dst_factor"])
            checks.field("src_factor", max(so, si), fw["src_factor"] if name in ("gemm", "res") else fw["dst_factor"])
            checks.field("wgt_factor", max(wo, wi), fw["wgt_factor"])
            checks.field("uop.dst", int(k.dst.max()), fw["uop_dst"])
            checks.field("uop.src", int(k.src.max()), fw["uop_src"])
            checks.field("uop.wgt", int(k.wgt.max()), fw["uop_wgt"])
    # DMA shapes (per thread, per tile), see _emit
    inp_dma = inp_pattern(wl, tci, h_ext, w_ext)
    out_dma = out_pattern(wl, tco, th, tw)
    cib = wl.ci // hw.block_in
    wgt_x = tci * wl.kh * wl.kw
    wgt_dma = (1, tco * wgt_x, tco * wgt_x) if tci == cib else (tco, wgt_x, cib * wl.kh * wl.kw)
    for name, (y, x, stride) in (("inp", inp_dma[1:]), ("wgt", wgt_dma), ("out", out_dma[1:])):
        checks.dma(f"{name}.y_size", y, (1 << SIZE_BITS) - 1)
        checks.dma(f"{name}.x_size", x, (1 << SIZE_BITS) - 1)
        checks.dma(f"{name}.x_stride", stride, (1 << STRIDE_BITS) - 1)
    pad_max = max(wl.ph, wl.pw, max(0, (sch.th[0] * th - 1) * wl.sh + wl.kh - wl.ph - wl.h),
                  max(0, (sch.tw[0] * tw - 1) * wl.sw + wl.kw - wl.pw - wl.w))
    checks.dma("pad", pad_max, (1 << PAD_BITS) - 1)
    checks.field("sram_base", max(T * inp_total, T * wgt_tile + residual, T * acc_tile), SRAM_ADDR_BITS)
    if min(h_ext, w_ext) <= max(wl.ph, wl.pw) and (wl.ph or wl.pw):
        # a tile could read padding only; hardware padding needs at least one real row and column
        for h0 in range(sch.th[0]):
            r0 = h0 * th * wl.sh - wl.ph
            if min(r0 + h_ext, wl.h) - max(r0, 0) <= 0:
                raise checks.DMALimitError("an input tile reads only padding rows; choose a larger tile_h inner",
                                           resource="inp.y_size", needed=0, available=1)
        for w0 in range(sch.tw[0]):
            c0 = w0 * tw * wl.sw - wl.pw
            if min(c0 + w_ext, wl.w) - max(c0, 0) <= 0:
                raise checks.DMALimitError("an input tile reads only padding columns; choose a larger tile_w inner",
                                           resource="inp.x_size", needed=0, available=1)
    return {"h_ext": h_ext, "w_ext": w_ext, "inp_tile": inp_tile, "inp_total": inp_total, "wgt_tile": wgt_tile,
            "out_tile": out_tile,
            "acc_tile": acc_tile, "kernels": kernels, "inp_dma": inp_dma, "out_dma": out_dma, "wgt_dma": wgt_dma}


# --------------------------------------------------------------------------------------------------
# emission
# --------------------------------------------------------------------------------------------------
def _emit(wl: Conv2dWorkload, sch: Schedule, hw: VTAConfig, plan: dict, bias: bool, shift: int, relu: bool,
          acc_bias: bool, residual: Residual | None = None, channel_shift: bool = False):
    B, BI, BO = hw.batch, hw.block_in, hw.block_out
    nb, cib, cob = wl.n // B, wl.ci // BI, wl.co // BO
    tensors = [("inp", (nb, cib, wl.h, wl.w, B, BI), "int8"),
               ("wgt", (cob, cib, wl.kh, wl.kw, BO, BI), "int8")]
    if bias:
        tensors.append(("bias", (nb, cob, 1, 1, B, BO), "int32"))
    if channel_shift:
        tensors.append(("shift", (nb, cob, 1, 1, B, BO), "int32"))
    if residual is not None:
        tensors += [("res", (nb, cob, wl.oh, wl.ow, B, BO), "int8"), ("ident", (1, 1, 1, 1, BO, BI), "int8")]
    tensors.append(("out", (nb, cob, wl.oh, wl.ow, B, BO), "int8"))
    kernels = plan["kernels"]
    T = sch.threads
    alu_ops = [(AluOp.SHR, not channel_shift, 0 if channel_shift else shift, "shr")]
    if bias:
        alu_ops.insert(0 if acc_bias else 1, (AluOp.ADD, False, 0, "add"))
    if residual is not None:    # "res" is the GEMM that adds the residual
        alu_ops.append((AluOp.ADD, False, 0, "res"))
        if residual.post_shift:
            alu_ops += [(AluOp.ADD, True, 1 << (residual.post_shift - 1), "round"),
                        (AluOp.SHR, True, residual.post_shift, "shr_post")]
    alu_ops += [(AluOp.MIN, True, 127, "min"), (AluOp.MAX, True, 0 if relu else -128, "max")]
    names = ["reset", "gemm"] + [name for *_, name in alu_ops]
    # micro-op image: kernels in recording order (reset t*, gemm t*, ALU ops per thread)
    order = [(t, "reset") for t in range(T)] + [(t, "gemm") for t in range(T)] + \
            [(t, n) for t in range(T) for n in names[2:]]
    uops: list[Uop] = []
    recs: dict[tuple[int, str], list] = {}
    for key in order:
        k = kernels[key[0]][key[1]]
        recs[key] = [len(uops), len(k), 0, 0]
        uops.extend(Uop(int(d), int(s), int(w)) for d, s, w in zip(k.dst, k.src, k.wgt))
    regions = allocate_regions(hw, tensors, len(uops))
    base = {"inp": regions["inp"].offset // hw.inp_elem_bytes, "wgt": regions["wgt"].offset // hw.wgt_elem_bytes,
            "out": regions["out"].offset // hw.out_elem_bytes}
    if bias:
        base["bias"] = regions["bias"].offset // hw.acc_elem_bytes
    if channel_shift:
        base["shift"] = regions["shift"].offset // hw.acc_elem_bytes
    if residual is not None:
        base["res"] = regions["res"].offset // hw.inp_elem_bytes
        base["ident"] = regions["ident"].offset // hw.wgt_elem_bytes
    checks.field("dram_base", regions["uop"].offset // hw.uop_bytes + len(uops), DRAM_ADDR_BITS)
    q = InsnQueue(hw, regions["uop"].offset // hw.uop_bytes)

    th, tw, tci, tco = sch.th[1], sch.tw[1], sch.tci[1], sch.tco[1]
    h_ext, w_ext = plan["h_ext"], plan["w_ext"]
    inp_total, wgt_tile, acc_tile, out_tile = plan["inp_total"], plan["wgt_tile"], plan["acc_tile"], plan["out_tile"]
    n_ci0 = sch.tci[0]
    n_inp, iy, ix, istride = plan["inp_dma"]
    n_out, oy, ox, ostride = plan["out_dma"]
    wy, wx, wstride = plan["wgt_dma"]
    padded = bool(wl.ph or wl.pw)

    gemm_insn = {}
    for t in range(T):
        for name in names:
            k = kernels[t][name]
            gemm_insn[(t, name)] = k.insn_loops(alu=name not in GEMM_KERNELS)

    # per-thread coordinates
    threads = [(vo, vh) for vo in range(sch.oc_nthread) for vh in range(sch.h_nthread)]
    # a thread split that does not divide its axis leaves threads idle in the last iterations
    outer = [(b, h0o, c0o, w0) for b in range(nb) for h0o in range(-(-sch.th[0] // sch.h_nthread))
             for c0o in range(-(-sch.tco[0] // sch.oc_nthread)) for w0 in range(sch.tw[0])]
    loop = len(outer) > 1

    def active(h0o: int, c0o: int) -> list[tuple[int, int, int]]:
        """``(thread, h-tile, co-tile)`` of the threads with a tile in this iteration."""
        out = []
        for t, (vo, vh) in enumerate(threads):
            h0, co0 = h0o * sch.h_nthread + vh, c0o * sch.oc_nthread + vo
            if h0 < sch.th[0] and co0 < sch.tco[0]:
                out.append((t, h0, co0))
        return out

    # per-axis pieces of the DMA fields, precomputed once
    row_pads = []  # per h-tile: (first real row, y_size, y_pad0, y_pad1)
    for h0 in range(sch.th[0]):
        r0 = h0 * th * wl.sh - wl.ph
        yp0, yp1 = max(0, -r0), max(0, r0 + h_ext - wl.h)
        row_pads.append((r0 + yp0, h_ext - yp0 - yp1, yp0, yp1))
    col_pads = []
    for w0 in range(sch.tw[0]):
        c0 = w0 * tw * wl.sw - wl.pw
        xp0, xp1 = max(0, -c0), max(0, c0 + w_ext - wl.w)
        col_pads.append((c0 + xp0, w_ext - xp0 - xp1, xp0, xp1))
    per_dma_inp = padded or n_inp > 1
    n_inp_dma = n_inp if per_dma_inp else 1
    khw = wl.kh * wl.kw

    def tile_mem(b: int, h0o: int, c0o: int, w0: int) -> list[tuple]:
        """Address fields ``(sram, dram, y, x, stride, y_pad0, y_pad1, x_pad0, x_pad1)`` of every LOAD
        INP/WGT/ACC and STORE of one outer iteration, in emission order."""
        coords = active(h0o, c0o)
        out = []
        if bias:
            for t, h0, co0 in coords:
                out.append((t * acc_tile + out_tile, base["bias"] + b * cob + co0 * tco, 1, tco, tco, 0, 0, 0, 0))
                if channel_shift:
                    out.append((t * acc_tile + out_tile + tco, base["shift"] + b * cob + co0 * tco, 1, tco, tco,
                                0, 0, 0, 0))
        c_first, xs, xp0, xp1 = col_pads[w0]
        rows = [row_pads[h0] for _, h0, _ in coords]

        def out_tile_dma(tensor: str, t: int, h0: int, co0: int, sram: int) -> None:
            for c in range(n_out):
                dram = base[tensor] + ((b * cob + co0 * tco + c) * wl.oh + h0 * th) * wl.ow + w0 * tw
                out.append((sram + c * th * tw, dram, oy, ox, ostride, 0, 0, 0, 0))

        for ci0 in range(n_ci0):
            for (t, h0, co0), (r_first, ys, yp0, yp1) in zip(coords, rows):
                if residual is not None and ci0 == 0 and t == coords[0][0] and (b, h0o, c0o, w0) == outer[0]:
                    out.append((T * wgt_tile, base["ident"], 1, 1, 1, 0, 0, 0, 0))
                if per_dma_inp:
                    for c in range(n_inp):
                        dram = base["inp"] + ((b * cib + ci0 * tci + c) * wl.h + r_first) * wl.w + c_first
                        out.append((t * inp_total + c * h_ext * w_ext, dram, ys, xs, wl.w, yp0, yp1, xp0, xp1))
                else:
                    dram = base["inp"] + ((b * cib + ci0 * tci) * wl.h + r_first) * wl.w + c_first
                    out.append((t * inp_total, dram, iy, ix, istride, 0, 0, 0, 0))
                out.append((t * wgt_tile, base["wgt"] + (co0 * tco * cib + ci0 * tci) * khw, wy, wx, wstride,
                            0, 0, 0, 0))
        if residual is not None:
            for t, h0, co0 in coords:
                out_tile_dma("res", t, h0, co0, t * inp_total)
        for t, h0, co0 in coords:
            out_tile_dma("out", t, h0, co0, t * acc_tile)
        return out

    def gemm(t: int, name: str) -> None:
        rec = recs[(t, name)]
        q.use_kernel(rec)
        eo, ei, do, di, so, si, wo, wi = gemm_insn[(t, name)]
        q._new(GemmInsn(name == "reset", rec[2], rec[3], eo, ei, do, di, so, si, wo, wi), COMPUTE,
               {"reset": "gemm_reset", "res": "gemm_res"}.get(name, "gemm"))

    def emit_iteration(b: int, h0o: int, c0o: int, w0: int) -> None:
        """One outer iteration through the runtime emulation."""
        mem = iter(tile_mem(b, h0o, c0o, w0))

        def dma(op: Opcode, mid: MemId, kind: str) -> None:
            sram, dram, y, x, stride, *pads = next(mem)
            q.mem(op, mid, sram, dram, y, x, stride, tuple(pads), kind)

        # an idle thread (uneven split) keeps its token operations, as NOPs: tokens are counted, not
        # per buffer, so the alternation of the threads' pushes and pops is what protects each buffer
        on = {t for t, _, _ in active(h0o, c0o)}
        first = (b, h0o, c0o, w0) == outer[0]
        for t in range(T):
            if loop:
                q.pop(STORE, COMPUTE)
            if t in on:
                if bias:
                    dma(Opcode.LOAD, MemId.ACC, "load_acc")
                if channel_shift:
                    dma(Opcode.LOAD, MemId.ACC, "load_acc")
                gemm(t, "reset")
            q.push(COMPUTE, LOAD)
        for ci0 in range(n_ci0):
            for t in range(T):
                q.pop(COMPUTE, LOAD)
                if t in on:
                    if residual is not None and first and ci0 == 0 and t == min(on):
                        dma(Opcode.LOAD, MemId.WGT, "load_wgt")     # the identity block, once
                    for _c in range(n_inp_dma):
                        dma(Opcode.LOAD, MemId.INP, "load_inp")
                    dma(Opcode.LOAD, MemId.WGT, "load_wgt")
                q.push(LOAD, COMPUTE)
            for t in range(T):
                q.pop(LOAD, COMPUTE)
                if t in on:
                    gemm(t, "gemm")
                if n_ci0 > 1 or residual is not None:
                    q.push(COMPUTE, LOAD)
        if n_ci0 > 1 or residual is not None:
            for t in range(T):      # the input tiles are read: the residual may take them
                q.pop(COMPUTE, LOAD)
                if residual is not None:
                    if t in on:
                        for _c in range(n_out):
                            dma(Opcode.LOAD, MemId.INP, "load_res")
                    q.push(LOAD, COMPUTE)
        for t in range(T):
            if residual is not None and t not in on:
                q.pop(LOAD, COMPUTE)
            if t in on:
                for op, use_imm, imm, name in alu_ops:
                    if name == "res":
                        q.pop(LOAD, COMPUTE)
                        gemm(t, "res")
                        continue
                    rec = recs[(t, name)]
                    q.use_kernel(rec)
                    eo, ei, do, di, so, si, _wo, _wi = gemm_insn[(t, name)]
                    q._new(AluInsn(False, rec[2], rec[3], eo, ei, do, di, so, si, op, use_imm, imm), COMPUTE,
                           f"alu_{op.name.lower()}")
            q.push(COMPUTE, STORE)
        for t in range(T):
            q.pop(COMPUTE, STORE)
            if t in on:
                for _c in range(n_out):
                    dma(Opcode.STORE, MemId.OUT, "store")
            if loop:
                q.push(STORE, COMPUTE)

    if loop:
        for _ in threads:
            q.push(STORE, COMPUTE)
    emit_all(q, outer, emit_iteration, tile_mem, [len(active(h0o, c0o)) == T for _, h0o, c0o, _ in outer])
    if loop:
        for _ in threads:
            q.pop(STORE, COMPUTE)
    q.finish()
    meta = {"kind": "conv2d", "workload": wl.to_dict(), "config": {
        "tile_b": list(sch.tb), "tile_h": list(sch.th), "tile_w": list(sch.tw), "tile_ci": list(sch.tci),
        "tile_co": list(sch.tco), "oc_nthread": sch.oc_nthread, "h_nthread": sch.h_nthread},
        "bias": bias, "shift": shift}
    if not relu or acc_bias:    # programs of the default requantisation keep their bytes
        meta.update(relu=relu, acc_bias=acc_bias)
    if residual is not None:
        meta["residual"] = {"scale": residual.scale, "post_shift": residual.post_shift}
    if channel_shift:
        meta["channel_shift"] = True
    return Program(hw, q.insns, uops, regions, meta), q.kinds, q.uop_loaded
