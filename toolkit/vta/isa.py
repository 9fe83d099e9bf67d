"""The VTA instruction set: instruction/micro-op records and their bit-exact encoding.

The bit layout is ``hw_spec.h``'s (GCC bit-fields of ``uint64_t`` words: fields are packed from
bit 0 upwards and a field that would straddle a 64-bit word starts the next word). Depth-dependent
widths follow the config (:attr:`VTAConfig.field_widths`). When a config's fields need more than two
64-bit words the instruction is widened to 256 bits (same packing rule, 4 words), and when a
micro-op needs more than 32 bits it is widened to 64 bits; see ``docs/vta.md``.

>>> from toolkit.vta.config import get_preset
>>> hw = get_preset("pynq")
>>> insn = GemmInsn(reset=False, uop_bgn=0, uop_end=8, iter_out=56, iter_in=3, dst_factor_out=1,
...                 dst_factor_in=0, src_factor_out=1, src_factor_in=1, wgt_factor_out=0, wgt_factor_in=1)
>>> decode_insn(encode_insn(insn, hw), hw) == insn
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Sequence

from toolkit.vta.errors import EncodingError, ProgramFormatError
from toolkit.vta.layout import OPCODE_BITS
from toolkit.vta.layout import field_layout as _layout

if TYPE_CHECKING:
    from toolkit.vta.config import VTAConfig


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemId(IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC_8BIT = 5


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


@dataclass
class Insn:
    """Common header: dependency-token flags (keyword-only, so subclasses keep positional fields)."""

    pop_prev: bool = field(default=False, kw_only=True)
    pop_next: bool = field(default=False, kw_only=True)
    push_prev: bool = field(default=False, kw_only=True)
    push_next: bool = field(default=False, kw_only=True)


@dataclass
class MemInsn(Insn):
    """LOAD or STORE: a 2-D strided DMA with zero padding (loads only). ``x_size == 0`` is a NOP."""

    opcode: Opcode
    mem: MemId
    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad0: int = 0
    y_pad1: int = 0
    x_pad0: int = 0
    x_pad1: int = 0


@dataclass
class GemmInsn(Insn):
    """GEMM over micro-ops ``[uop_bgn, uop_end)`` in a 2-level affine loop."""

    reset: bool
    uop_bgn: int
    uop_end: int
    iter_out: int
    iter_in: int
    dst_factor_out: int
    dst_factor_in: int
    src_factor_out: int
    src_factor_in: int
    wgt_factor_out: int
    wgt_factor_in: int


@dataclass
class AluInsn(Insn):
    """Element-wise ALU op on the accumulator; ``imm`` is an int16, sign-extended by the hardware."""

    reset: bool
    uop_bgn: int
    uop_end: int
    iter_out: int
    iter_in: int
    dst_factor_out: int
    dst_factor_in: int
    src_factor_out: int
    src_factor_in: int
    op: AluOp
    use_imm: bool
    imm: int


@dataclass
class FinishInsn(Insn):
    """End of the program (compute queue)."""


@dataclass
class Uop:
    """Micro-op: ACC index ``dst``, INP (GEMM) or ACC (ALU) index ``src``, WGT index ``wgt``."""

    dst: int
    src: int
    wgt: int = 0


_KIND_OF = {Opcode.LOAD: "mem", Opcode.STORE: "mem", Opcode.GEMM: "gemm", Opcode.ALU: "alu",
            Opcode.FINISH: "finish"}


def _opcode(insn: Insn) -> Opcode:
    if isinstance(insn, MemInsn):
        return Opcode(insn.opcode)
    if isinstance(insn, GemmInsn):
        return Opcode.GEMM
    if isinstance(insn, AluInsn):
        return Opcode.ALU
    if isinstance(insn, FinishInsn):
        return Opcode.FINISH
    raise TypeError(f"not a VTA instruction: {insn!r}")


def encode_insn(insn: Insn, hw: "VTAConfig") -> bytes:
    """``hw.insn_bytes`` little-endian bytes; :class:`EncodingError` when a value does not fit (never truncates)."""
    op = _opcode(insn)
    if isinstance(insn, MemInsn) and op not in (Opcode.LOAD, Opcode.STORE):
        raise EncodingError("opcode", int(op), OPCODE_BITS)
    try:
        word = _word_encoder(_KIND_OF[op], hw)(insn, int(op))
    except _DoesNotFit:
        _raise_misfit(insn, op, hw)
    return word.to_bytes(hw.insn_bytes, "little")


_KIND_OF_CLASS: dict[type, tuple[str, int]] = {}   # filled below: exact class -> (layout kind, opcode)


def encode_insns(insns: Sequence[Insn], hw: "VTAConfig") -> bytes:
    """``b"".join(encode_insn(i, hw) for i in insns)``, with the encoders looked up once per kind."""
    encoders = {kind: _word_encoder(kind, hw) for kind in ("mem", "gemm", "alu", "finish")}
    size, out = hw.insn_bytes, []
    for insn in insns:
        kind, op = _KIND_OF_CLASS.get(type(insn), ("", -1))
        if kind == "mem":
            op = insn.opcode    # type: ignore[attr-defined]
            if op != Opcode.LOAD and op != Opcode.STORE:
                kind = ""
        try:
            word = encoders[kind](insn, int(op)) if kind else None
        except _DoesNotFit:
            word = None
        out.append(word.to_bytes(size, "little") if word is not None else encode_insn(insn, hw))
    return b"".join(out)


class _DoesNotFit(Exception):
    """A field of the instruction is out of its range (:func:`_raise_misfit` says which)."""


@lru_cache(maxsize=64)
def _word_encoder(kind: str, hw: "VTAConfig") -> Callable[[Insn, int], int]:
    """The instruction word of one kind and config, as straight-line Python generated from the field layout
    (a loop over the layout costs 5x more, and a program has tens of thousands of instructions)."""
    lines = ["def encode(insn, op):", "    w = 0"]
    for name, lsb, width, signed in _layout(kind, hw):
        lines.append("    v = op" if name == "opcode" else f"    v = int(insn.{name})")
        lo, hi = (-(1 << (width - 1)), 1 << (width - 1)) if signed else (0, 1 << width)
        lines.append(f"    if v < {lo} or v >= {hi}:\n        raise _DoesNotFit")
        lines.append(f"    w |= (v & {(1 << width) - 1}) << {lsb}" if signed else f"    w |= v << {lsb}")
    lines.append("    return w")
    namespace: dict[str, Any] = {"_DoesNotFit": _DoesNotFit}
    exec("\n".join(lines), namespace)   # noqa: S102 - the source is built from the layout table only
    return namespace["encode"]


def _raise_misfit(insn: Insn, op: Opcode, hw: "VTAConfig") -> NoReturn:
    """Raise the :class:`EncodingError` of the first field (in layout order) whose value does not fit."""
    for name, _, width, signed in _layout(_KIND_OF[op], hw):
        value = int(op) if name == "opcode" else int(getattr(insn, name))
        lo, hi = (-(1 << (width - 1)), 1 << (width - 1)) if signed else (0, 1 << width)
        if not lo <= value < hi:
            raise EncodingError(name, value, width, signed=signed)
    raise AssertionError("no field out of range")   # pragma: no cover - _word_encoder found one


_KIND_OF_CLASS.update({MemInsn: ("mem", 0), GemmInsn: ("gemm", int(Opcode.GEMM)), AluInsn: ("alu", int(Opcode.ALU)),
                       FinishInsn: ("finish", int(Opcode.FINISH))})


def decode_insn(data: bytes, hw: "VTAConfig") -> Insn:
    """Inverse of :func:`encode_insn`; :class:`ProgramFormatError` for an unknown opcode or memory id."""
    if len(data) != hw.insn_bytes:
        raise ProgramFormatError(f"an instruction is {hw.insn_bytes} bytes for {hw.bitstream}, got {len(data)}")
    word = int.from_bytes(data, "little")
    raw = word & ((1 << OPCODE_BITS) - 1)
    try:
        op = Opcode(raw)
    except ValueError:
        raise ProgramFormatError(f"unknown VTA opcode {raw}; the program file is corrupt") from None
    vals: dict[str, int] = {}
    for name, lsb, width, signed in _layout(_KIND_OF[op], hw):
        v = (word >> lsb) & ((1 << width) - 1)
        if signed and v >> (width - 1):
            v -= 1 << width
        vals[name] = v
    flags = {k: bool(vals.pop(k)) for k in ("pop_prev", "pop_next", "push_prev", "push_next")}
    vals.pop("opcode")
    if op in (Opcode.LOAD, Opcode.STORE):
        try:
            mem = MemId(vals.pop("mem"))
        except ValueError as exc:
            raise ProgramFormatError(f"unknown VTA memory id in instruction ({exc}); the program file is corrupt"
                                     ) from None
        return MemInsn(op, mem, **vals, **flags)
    if op == Opcode.GEMM:
        return GemmInsn(reset=bool(vals.pop("reset")), **vals, **flags)
    if op == Opcode.ALU:
        try:
            alu = AluOp(vals.pop("op"))
        except ValueError as exc:
            raise ProgramFormatError(f"unknown ALU opcode ({exc}); the program file is corrupt") from None
        return AluInsn(reset=bool(vals.pop("reset")), op=alu, use_imm=bool(vals.pop("use_imm")), **vals, **flags)
    return FinishInsn(**flags)


def _uop_fields(hw: "VTAConfig") -> list[tuple[str, int, int]]:
    w = hw.field_widths
    return [("dst", 0, w["uop_dst"]), ("src", w["uop_dst"], w["uop_src"]),
            ("wgt", w["uop_dst"] + w["uop_src"], w["uop_wgt"])]


def encode_uop(uop: Uop, hw: "VTAConfig") -> int:
    """The micro-op word (``hw.uop_bytes`` wide); :class:`EncodingError` when an index does not fit."""
    word = 0
    for name, lsb, width in _uop_fields(hw):
        value = int(getattr(uop, name))
        if not 0 <= value < (1 << width):
            raise EncodingError(f"uop.{name}", value, width)
        word |= value << lsb
    return word


def decode_uop(word: int, hw: "VTAConfig") -> Uop:
    """Inverse of :func:`encode_uop`."""
    return Uop(**{name: (word >> lsb) & ((1 << width) - 1) for name, lsb, width in _uop_fields(hw)})


def queue_of(insn: Insn) -> str:
    """The module that executes ``insn``: ``"load"``, ``"compute"`` or ``"store"`` (fetch routing rule)."""
    if isinstance(insn, MemInsn):
        if insn.opcode == Opcode.STORE:
            return "store"
        if insn.mem in (MemId.INP, MemId.WGT):
            return "load"
    return "compute"


def insn_kind(insn: Insn) -> str:
    """Short kind name as in TVM's dump: ``LOAD INP``, ``GEMM``, ``ALU SHR``, ``NOP-MEMORY-STAGE``, ..."""
    if isinstance(insn, MemInsn):
        if insn.x_size == 0:
            return {"load": "NOP-MEMORY-STAGE", "compute": "NOP-COMPUTE-STAGE", "store": "NOP-STORE-STAGE"}[
                queue_of(insn)]
        return "STORE" if insn.opcode == Opcode.STORE else f"LOAD {MemId(insn.mem).name}"
    if isinstance(insn, GemmInsn):
        return "GEMM RESET" if insn.reset else "GEMM"
    if isinstance(insn, AluInsn):
        return f"ALU {AluOp(insn.op).name}" + (" IMM" if insn.use_imm else "")
    return "FINISH"
