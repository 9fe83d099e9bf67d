"""The instruction layout: VTA's fixed ISA field widths and where each field of an instruction sits
(GCC's bit-field packing of ``hw_spec.h``), given a config's depth-dependent widths.

It needs only ``hw.field_widths`` of a :class:`~toolkit.vta.config.VTAConfig`, so the config (whose
``insn_bytes`` follows from the layout) and the ISA (which encodes with it) both build on it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolkit.vta.config import VTAConfig

# Fixed ISA widths (hw_spec_const.h); the depth-dependent ones come from the config.
OPCODE_BITS = 3
ALU_OPCODE_BITS = 3
MEMID_BITS = 3
SRAM_ADDR_BITS = 16
DRAM_ADDR_BITS = 32
SIZE_BITS = 16
STRIDE_BITS = 16
PAD_BITS = 4
LOOP_ITER_BITS = 14
IMM_BITS = 16
RESIDUAL_SCALE_MAX = 6
"""The largest ``k`` of a residual's identity weight block ``2**k * I`` (an int8 weight holds 64, not 128)."""
POST_SHIFT_MAX = IMM_BITS - 1
"""The largest shift after a residual add: its rounding offset ``2**(shift-1)`` is an int16 ALU immediate."""


_HEADER = [("opcode", OPCODE_BITS, False), ("pop_prev", 1, False), ("pop_next", 1, False),
           ("push_prev", 1, False), ("push_next", 1, False)]


def _fields(kind: str, hw: "VTAConfig") -> list[tuple[str, int, bool]]:
    w = hw.field_widths
    if kind == "mem":
        body = [("mem", MEMID_BITS, False), ("sram_base", SRAM_ADDR_BITS, False),
                ("dram_base", DRAM_ADDR_BITS, False), ("y_size", SIZE_BITS, False),
                ("x_size", SIZE_BITS, False), ("x_stride", STRIDE_BITS, False), ("y_pad0", PAD_BITS, False),
                ("y_pad1", PAD_BITS, False), ("x_pad0", PAD_BITS, False), ("x_pad1", PAD_BITS, False)]
        return _HEADER + body
    # hw_spec.h: GEMM's src_factor indexes the input buffer, ALU's the accumulator buffer
    src = w["alu_src_factor"] if kind == "alu" else w["src_factor"]
    loop = [("reset", 1, False), ("uop_bgn", w["uop_bgn"], False), ("uop_end", w["uop_end"], False),
            ("iter_out", w["iter"], False), ("iter_in", w["iter"], False),
            ("dst_factor_out", w["dst_factor"], False), ("dst_factor_in", w["dst_factor"], False),
            ("src_factor_out", src, False), ("src_factor_in", src, False)]
    if kind == "gemm":
        return _HEADER + loop + [("wgt_factor_out", w["wgt_factor"], False),
                                 ("wgt_factor_in", w["wgt_factor"], False)]
    if kind == "alu":
        return _HEADER + loop + [("op", ALU_OPCODE_BITS, False), ("use_imm", 1, False), ("imm", IMM_BITS, True)]
    return list(_HEADER)


def _place(flds: list[tuple[str, int, bool]]) -> tuple[list[tuple[str, int, int, bool]], int]:
    """GCC packing: (name, lsb, width, signed) per field and the number of 64-bit words used."""
    pos, out = 0, []
    for name, width, signed in flds:
        if pos % 64 + width > 64:
            pos = (pos // 64 + 1) * 64
        out.append((name, pos, width, signed))
        pos += width
    return out, (pos + 63) // 64


@lru_cache(maxsize=64)
def field_layout(kind: str, hw: "VTAConfig") -> list[tuple[str, int, int, bool]]:
    return _place(_fields(kind, hw))[0]


def layout_words(hw: "VTAConfig") -> int:
    """64-bit words needed by the widest instruction kind for ``hw`` (2 for the stock layout)."""
    return max(_place(_fields(k, hw))[1] for k in ("mem", "gemm", "alu"))


def layout_table(hw: "VTAConfig") -> dict[str, list[tuple[str, int, int]]]:
    """``{kind: [(field, lsb, width), ...]}`` for documentation and listings."""
    return {k: [(n, lsb, w) for n, lsb, w, _ in field_layout(k, hw)] for k in ("mem", "gemm", "alu", "finish")}
