"""Max pooling as a VTA program: the input tile copied into the accumulator by a GEMM with the identity weight
block, then one ALU ``MAX`` per window position into a zeroed output tile.

VTA's ALU reads and writes only the accumulator, and ``LOAD`` fills it only from int32 data, so the int8 input
enters through the GEMM unit (``acc += I x inp``). The output starts at zero (the GEMM reset), so the program is
max pooling of a non-negative input (one after a ReLU) with zero padding, which is what it computes whatever
the padding value: the caller checks the input is non-negative. Per tile of ``tc`` channel blocks and ``th``
output rows (full width): ``LOAD INP`` of the rows the windows read (hardware padding at the edges), the GEMM
reset of the tile's accumulator, the identity GEMM, ``kh * kw`` ALU ``MAX`` instructions (one per window
position, each over ``(channel block, row | column)``), a ``STORE`` per channel block. Dependency tokens are
placed by the conv compiler's emulation of TVM's runtime queue (:class:`~toolkit.vta.insn_queue.InsnQueue`).
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.vta import checks
from toolkit.vta.insn_queue import COMPUTE, LOAD, STORE, InsnQueue
from toolkit.vta.config import VTAConfig
from toolkit.vta.isa import AluInsn, AluOp, GemmInsn, MemId, Opcode, Uop
from toolkit.vta.layout import LOOP_ITER_BITS, PAD_BITS, SIZE_BITS
from toolkit.vta.program import Program, allocate_regions
from toolkit.vta.uops import Kernel


@dataclass(frozen=True)
class Pooling:
    """A max pooling of NCHW ``shape`` (floor mode): window, stride and padding."""

    shape: tuple[int, int, int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]

    @property
    def out_hw(self) -> tuple[int, int]:
        (_, _, h, w), (kh, kw), (sh, sw), (ph, pw) = self.shape, self.kernel, self.stride, self.pad
        return (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1


def _divisors(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def pooling_tiles(p: Pooling, hw: VTAConfig) -> tuple[int, int]:
    """``(channel blocks, output rows)`` per tile: the most work per tile (then the most rows) whose input and
    accumulator tiles fit; :class:`~toolkit.vta.checks.SRAMCapacityError` when not even one row fits."""
    n, c, h, w = p.shape
    oh, ow = p.out_hw
    w_ext = (ow - 1) * p.stride[1] + p.kernel[1]
    best = None
    for tc in _divisors(c // hw.block_in):
        for th in _divisors(oh):
            h_ext = (th - 1) * p.stride[0] + p.kernel[0]
            inp, acc = tc * h_ext * w_ext, tc * (h_ext * w_ext + th * ow)
            if inp <= hw.inp_depth and acc <= hw.acc_depth and (best is None or (tc * th, th) > best[0]):
                best = ((tc * th, th), (tc, th))
    if best is None:
        h_ext = p.kernel[0]
        checks.capacity([("local.inp_buffer", h_ext * w_ext, hw.inp_depth),
                         ("local.acc_buffer", h_ext * w_ext + ow, hw.acc_depth)])
    return best[1]


def compile_maxpool(p: Pooling, hw: VTAConfig) -> Program:
    """The program of max pooling ``p`` on VTA ``hw`` (regions ``inp``, ``ident`` (the identity block), ``out``);
    raises a :class:`~toolkit.vta.errors.VTAError` for a limit it cannot meet."""
    n, c, h, w = p.shape
    (kh, kw), (sh, sw), (ph, pw) = p.kernel, p.stride, p.pad
    B, BI = hw.batch, hw.block_in
    if n % B or c % BI:
        raise checks.FieldWidthError(f"max pooling on VTA needs a batch multiple of {B} and channels of {BI}",
                                     resource="block_in", needed=c, available=BI)
    nb, cb = n // B, c // BI
    oh, ow = p.out_hw
    tc, th = pooling_tiles(p, hw)
    h_ext, w_ext = (th - 1) * sh + kh, (ow - 1) * sw + kw
    plane, out_plane = h_ext * w_ext, th * ow
    out_base = tc * plane
    checks.dma("pad", max(ph, pw, max(0, w_ext - pw - w), max(0, (oh - 1) * sh + kh - ph - h)), (1 << PAD_BITS) - 1)
    for name, v in (("inp.x_size", min(w, w_ext - pw)), ("out.x_size", ow), ("inp.y_size", h_ext)):
        checks.dma(name, v, (1 << SIZE_BITS) - 1)
    kernels = {"reset": Kernel.build([(tc * (plane + out_plane), 1, 0, 0)]),
               "copy": Kernel.build([(tc, plane, plane, 0), (h_ext, w_ext, w_ext, 0), (w_ext, 1, 1, 0)])}
    for dy in range(kh):
        for dx in range(kw):
            kernels[f"max{dy}_{dx}"] = Kernel.build(
                [(tc, out_plane, plane, 0), (th, ow, sh * w_ext, 0), (ow, 1, sw, 0)], (out_base, dy * w_ext + dx, 0))
    for name, k in kernels.items():
        eo, ei, *_ = k.insn_loops(alu=name.startswith("max"))
        checks.field("iter_out", eo, LOOP_ITER_BITS)
        checks.field("iter_in", ei, LOOP_ITER_BITS)
    uops: list[Uop] = []
    recs = {}
    for name, k in kernels.items():
        recs[name] = [len(uops), len(k), 0, 0]
        uops.extend(Uop(int(d), int(s), int(wt)) for d, s, wt in zip(k.dst, k.src, k.wgt))
    checks.need(checks.UopBufferError, "uop_buffer", max(len(k) for k in kernels.values()), hw.uop_depth,
                "micro-ops of a pooling kernel")
    regions = allocate_regions(hw, [("inp", (nb, cb, h, w, B, BI), "int8"), ("ident", (1, 1, 1, 1, BI, BI), "int8"),
                                    ("out", (nb, cb, oh, ow, B, BI), "int8")], len(uops))
    base = {"inp": regions["inp"].offset // hw.inp_elem_bytes, "ident": regions["ident"].offset // hw.wgt_elem_bytes,
            "out": regions["out"].offset // hw.out_elem_bytes}
    q = InsnQueue(hw, regions["uop"].offset // hw.uop_bytes)

    def run(name: str) -> None:
        rec = recs[name]
        q.use_kernel(rec)
        eo, ei, do, di, so, si, wo, wi = kernels[name].insn_loops(alu=name.startswith("max"))
        if name.startswith("max"):
            q._new(AluInsn(False, rec[2], rec[3], eo, ei, do, di, so, si, AluOp.MAX, False, 0), COMPUTE, "alu_max")
        else:
            q._new(GemmInsn(name == "reset", rec[2], rec[3], eo, ei, do, di, so, si, wo, wi), COMPUTE,
                   "gemm_reset" if name == "reset" else "gemm")

    tiles = [(b, ct, y0) for b in range(nb) for ct in range(cb // tc) for y0 in range(0, oh, th)]
    loop = len(tiles) > 1
    if loop:
        q.push(STORE, COMPUTE)
    for i, (b, ct, y0) in enumerate(tiles):
        if loop:
            q.pop(STORE, COMPUTE)
        run("reset")
        q.push(COMPUTE, LOAD)
        q.pop(COMPUTE, LOAD)
        if i == 0:
            q.mem(Opcode.LOAD, MemId.WGT, 0, base["ident"], 1, 1, 1, (0, 0, 0, 0), "load_wgt")
        r0 = y0 * sh - ph
        yp0, yp1 = max(0, -r0), max(0, r0 + h_ext - h)
        xs = min(w, w_ext - pw)
        for k in range(tc):
            dram = base["inp"] + ((b * cb + ct * tc + k) * h + r0 + yp0) * w
            q.mem(Opcode.LOAD, MemId.INP, k * plane, dram, h_ext - yp0 - yp1, xs, w,
                  (yp0, yp1, pw, w_ext - pw - xs), "load_inp")
        q.push(LOAD, COMPUTE)
        q.pop(LOAD, COMPUTE)
        run("copy")
        for name in kernels:
            if name.startswith("max"):
                run(name)
        q.push(COMPUTE, STORE)
        q.pop(COMPUTE, STORE)
        for k in range(tc):
            dram = base["out"] + ((b * cb + ct * tc + k) * oh + y0) * ow
            q.mem(Opcode.STORE, MemId.OUT, out_base + k * out_plane, dram, th, ow, ow, (0, 0, 0, 0), "store")
        if loop:
            q.push(STORE, COMPUTE)
    if loop:
        q.pop(STORE, COMPUTE)
    q.finish()
    meta = {"kind": "maxpool", "shape": list(p.shape), "kernel": list(p.kernel), "stride": list(p.stride),
            "pad": list(p.pad), "tiles": {"channel_blocks": tc, "rows": th}}
    return Program(hw, q.insns, uops, regions, meta)
