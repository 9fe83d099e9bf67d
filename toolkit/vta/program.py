"""A VTA program: instructions, micro-ops and the DRAM layout of its tensors; binary file and listing.

File format (little-endian), version 1::

    magic   b"EDGEVTA\\0"                       8 bytes
    header  version, hw_len, layout_len, n_insns, n_uops    5 x uint32
    hw      the VTAConfig JSON (vta_config.json keys)        hw_len bytes, UTF-8
    layout  {"regions": [...], "meta": {...}} JSON           layout_len bytes, UTF-8
    insns   n_insns x hw.insn_bytes, exactly as the FPGA fetches them
    uops    n_uops x hw.uop_bytes, exactly as LOAD UOP reads them from the "uop" region
    crc32   of everything above                              uint32

>>> from toolkit.vta.config import get_preset
>>> from toolkit.vta.isa import FinishInsn
>>> p = Program(get_preset("pynq"), [FinishInsn()], [], allocate_regions(get_preset("pynq"), [], 0), {})
>>> Program.from_bytes(p.to_bytes()) == p
True
"""

from __future__ import annotations

import json
import math
import re
import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.errors import ConfigError
from toolkit.vta.config import VTAConfig
from toolkit.vta.errors import ProgramFormatError, VTAError
from toolkit.vta.isa import (
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    Insn,
    MemId,
    MemInsn,
    Opcode,
    Uop,
    decode_insn,
    decode_uop,
    encode_insns,
    encode_uop,
    insn_kind,
    queue_of,
)

MAGIC = b"EDGEVTA\0"
VERSION = 1
ALIGN = 256
_HEADER = struct.Struct("<5I")
DTYPES = ("int8", "int32", "uint32", "uint64")


@dataclass
class Region:
    """A tensor in DRAM: byte ``offset`` (multiple of 256), size, numpy shape and dtype."""

    name: str
    offset: int
    nbytes: int
    shape: tuple
    dtype: str

    def __post_init__(self) -> None:
        self.shape = tuple(int(s) for s in self.shape)
        if self.dtype not in DTYPES:
            raise VTAError(f"region {self.name!r} has dtype {self.dtype!r}; use one of {', '.join(DTYPES)}")
        if self.offset % ALIGN or self.offset < 0:
            raise VTAError(f"region {self.name!r} offset {self.offset} is not a multiple of {ALIGN}")
        if self.nbytes < int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize:
            raise VTAError(f"region {self.name!r} of {self.nbytes} bytes is smaller than its shape {self.shape}")


def region_align(hw: VTAConfig, name: str) -> int:
    """The byte alignment of a region: 256 and a whole number of its DRAM elements (instructions address
    DRAM in elements: a weight element of a 32x32 block is 1024 bytes). A merged program's regions are named
    ``KIND:OWNER`` (:mod:`toolkit.vta.merge`); its tensors (``in:``, ``out:``) are stored and loaded alike."""
    kind, _, owner = name.partition(":")
    if owner and kind in ("in", "out"):
        return math.lcm(ALIGN, hw.inp_elem_bytes, hw.out_elem_bytes)
    elem = {"inp": hw.inp_elem_bytes, "wgt": hw.wgt_elem_bytes, "bias": hw.acc_elem_bytes, "out": hw.out_elem_bytes,
            "res": hw.inp_elem_bytes, "ident": hw.wgt_elem_bytes, "shift": hw.acc_elem_bytes,
            "uop": hw.uop_bytes}.get(kind, 1)
    return math.lcm(ALIGN, elem)


def is_output(name: str) -> bool:
    """A region read back after a run: ``out``, and a merged program's tensors ``out:NAME``."""
    return name == "out" or name.startswith("out:")


def allocate_regions(hw: VTAConfig, tensors: list[tuple[str, tuple, str]], n_uops: int) -> dict[str, Region]:
    """Lay out ``tensors`` ``(name, shape, dtype)`` one after another, each at a multiple of 256 bytes and of its
    element size (:func:`region_align`), then the "uop" region.

    >>> from toolkit.vta.config import get_preset
    >>> r = allocate_regions(get_preset("pynq"), [("inp", (1, 4, 56, 56, 1, 16), "int8")], 10)
    >>> (r["inp"].offset, r["uop"].offset, r["uop"].nbytes)
    (0, 200704, 40)
    """
    regions: dict[str, Region] = {}
    offset = 0
    uop_dtype = "uint32" if hw.uop_bytes == 4 else "uint64"
    for name, shape, dtype in [*tensors, ("uop", (n_uops,), uop_dtype)]:
        align = region_align(hw, name)
        offset = -(-offset // align) * align
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        regions[name] = Region(name, offset, nbytes, tuple(shape), dtype)
        offset += nbytes
    return regions


MAX_DRAM_BYTES = 1 << 32
"""The most DRAM a program's regions may span (VTA addresses DRAM with 32 bits)."""

def _region(r: Any) -> Region:
    """A DRAM region of a program file's layout, checked: names and dtypes known, sizes that agree and
    fit in :data:`MAX_DRAM_BYTES` (a hostile file never makes the simulator allocate more)."""
    if not isinstance(r, dict):
        raise ValueError("a region is not an object")
    name, offset, nbytes, shape, dtype = r["name"], r["offset"], r["nbytes"], r["shape"], r["dtype"]
    if not isinstance(name, str) or dtype not in DTYPES or not isinstance(shape, list):
        raise ValueError(f"region {str(name)[:20]!r} has a bad name, dtype or shape")
    ints = [offset, nbytes, *shape]
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_DRAM_BYTES for v in ints):
        raise ValueError(f"region {name!r} has a size or offset out of range")
    if offset + nbytes > MAX_DRAM_BYTES or math.prod(shape) * np.dtype(dtype).itemsize > nbytes:
        raise ValueError(f"region {name!r} does not fit its bytes or the DRAM")
    return Region(name, offset, nbytes, tuple(shape), dtype)


@dataclass
class Program:
    """Instructions + micro-ops + DRAM regions ("uop", "inp", "wgt", optional "bias", "shift", "res" and "ident",
    "out") + free metadata."""

    hw: VTAConfig
    insns: list[Insn]
    uops: list[Uop]
    regions: dict[str, Region]
    meta: dict = field(default_factory=dict)

    @property
    def dram_bytes(self) -> int:
        """Bytes of DRAM the program's regions span."""
        return max((r.offset + r.nbytes for r in self.regions.values()), default=0)

    def uop_words(self) -> np.ndarray:
        """The micro-op image as the hardware reads it (uint32, or uint64 for widened micro-ops)."""
        dtype = np.uint32 if self.hw.uop_bytes == 4 else np.uint64
        return np.array([encode_uop(u, self.hw) for u in self.uops], dtype=dtype)

    # ---- binary file ------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The binary program file (see the module docstring)."""
        hw_json = json.dumps(self.hw.to_json(), sort_keys=True).encode()
        layout = {
            "regions": [{"name": r.name, "offset": r.offset, "nbytes": r.nbytes, "shape": list(r.shape),
                         "dtype": r.dtype} for r in self.regions.values()],
            "meta": self.meta,
        }
        layout_json = json.dumps(layout, sort_keys=True).encode()
        body = b"".join([
            MAGIC,
            _HEADER.pack(VERSION, len(hw_json), len(layout_json), len(self.insns), len(self.uops)),
            hw_json,
            layout_json,
            encode_insns(self.insns, self.hw),
            self.uop_words().astype("<u%d" % self.hw.uop_bytes).tobytes(),
        ])
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def from_bytes(cls, data: bytes) -> "Program":
        """Parse a program file; :class:`ProgramFormatError` if it is truncated, corrupt or of another version."""
        fixed = len(MAGIC) + _HEADER.size
        if len(data) < fixed + 4 or data[: len(MAGIC)] != MAGIC:
            raise ProgramFormatError("not an edgetune VTA program file (bad magic or truncated); recompile it")
        body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
        if zlib.crc32(body) != crc:
            raise ProgramFormatError("VTA program file is corrupt or truncated (checksum mismatch); recompile it")
        version, hw_len, layout_len, n_insns, n_uops = _HEADER.unpack_from(data, len(MAGIC))
        if version != VERSION:
            raise ProgramFormatError(f"VTA program file version {version} is not supported (expected {VERSION})")
        pos = fixed
        if pos + hw_len + layout_len > len(body):
            raise ProgramFormatError("VTA program file length does not match its header; recompile it")
        try:
            hw = VTAConfig.from_json(json.loads(body[pos: pos + hw_len]))
            pos += hw_len
            layout = json.loads(body[pos: pos + layout_len])
            pos += layout_len
            regions = {r["name"]: _region(r) for r in layout["regions"]}
            for r in regions.values():
                if r.offset % region_align(hw, r.name):
                    raise ValueError(f"region {r.name!r} at byte {r.offset} is not on a whole {r.name} element")
            if not isinstance(layout.get("meta", {}), dict):
                raise ValueError("meta is not an object")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, ConfigError) as exc:
            raise ProgramFormatError(f"VTA program file has a corrupt header ({str(exc)[:120]}); recompile it") \
                from None
        ib, ub = hw.insn_bytes, hw.uop_bytes
        if len(body) != pos + n_insns * ib + n_uops * ub:
            raise ProgramFormatError("VTA program file length does not match its header; recompile it")
        insns = [decode_insn(body[pos + k * ib: pos + (k + 1) * ib], hw) for k in range(n_insns)]
        pos += n_insns * ib
        words = np.frombuffer(body[pos: pos + n_uops * ub], dtype="<u%d" % ub)
        uops = [decode_uop(int(w), hw) for w in words]
        return cls(hw, insns, uops, regions, layout.get("meta", {}))

    def save(self, path: str | Path) -> Path:
        """Write the binary file to ``path``."""
        path = Path(path)
        path.write_bytes(self.to_bytes())
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Program":
        """Read a file written by :meth:`save`."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ProgramFormatError(f"cannot read VTA program {path}: {exc.strerror}") from None
        return cls.from_bytes(data)

    # ---- views --------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Instructions by kind (``LOAD INP``, ``GEMM``, ``ALU SHR IMM``, ``NOP-...``, ``FINISH``) and ``total``."""
        c = Counter(insn_kind(i) for i in self.insns)
        return {**dict(sorted(c.items())), "total": len(self.insns)}

    def listing(self) -> str:
        """Readable dump, one block per instruction, in the spirit of TVM's ``VTA_DEBUG_DUMP_INSN``."""
        lines = [f"VTA program for {self.hw.model}: {len(self.insns)} instructions, {len(self.uops)} micro-ops"]
        for r in self.regions.values():
            lines.append(f"  region {r.name:<5} offset 0x{r.offset:08x} {r.nbytes:>9} B {r.dtype} {list(r.shape)}")
        tokens = dict.fromkeys(("l2g", "g2l", "s2g", "g2s"), 0)
        for k, insn in enumerate(self.insns):
            lines.append(f"INSTRUCTION {k}: {insn_kind(insn)}")
            if not isinstance(insn, FinishInsn):
                lines.append(f"\tdep - pop prev: {int(insn.pop_prev)}, pop next: {int(insn.pop_next)}, "
                             f"push prev: {int(insn.push_prev)}, push next: {int(insn.push_next)}")
            if isinstance(insn, MemInsn) and insn.x_size:
                lines.append(f"\tDRAM: 0x{insn.dram_base:08x}, SRAM:0x{insn.sram_base:04x}")
                lines.append(f"\ty: size={insn.y_size}, pad=[{insn.y_pad0}, {insn.y_pad1}]")
                lines.append(f"\tx: size={insn.x_size}, stride={insn.x_stride}, pad=[{insn.x_pad0}, {insn.x_pad1}]")
            elif isinstance(insn, GemmInsn):
                lines.append(f"\treset_out: {int(insn.reset)}")
                lines.append(f"\trange ({insn.uop_bgn}, {insn.uop_end})")
                lines.append(f"\touter loop - iter: {insn.iter_out}, wgt: {insn.wgt_factor_out}, "
                             f"inp: {insn.src_factor_out}, acc: {insn.dst_factor_out}")
                lines.append(f"\tinner loop - iter: {insn.iter_in}, wgt: {insn.wgt_factor_in}, "
                             f"inp: {insn.src_factor_in}, acc: {insn.dst_factor_in}")
            elif isinstance(insn, AluInsn):
                lines.append(f"\treset_out: {int(insn.reset)}" + (f", imm: {insn.imm}" if insn.use_imm else ""))
                lines.append(f"\trange ({insn.uop_bgn}, {insn.uop_end})")
                lines.append(f"\touter loop - iter: {insn.iter_out}, dst: {insn.dst_factor_out}, "
                             f"src: {insn.src_factor_out}")
                lines.append(f"\tinner loop - iter: {insn.iter_in}, dst: {insn.dst_factor_in}, "
                             f"src: {insn.src_factor_in}")
            q = queue_of(insn)
            pops = {"load": ("", "g2l"), "compute": ("l2g", "s2g"), "store": ("g2s", "")}[q]
            pushes = {"load": ("", "l2g"), "compute": ("g2l", "g2s"), "store": ("s2g", "")}[q]
            for flag, name in zip((insn.pop_prev, insn.pop_next), pops):
                if flag and name:
                    tokens[name] -= 1
            for flag, name in zip((insn.push_prev, insn.push_next), pushes):
                if flag and name:
                    tokens[name] += 1
            lines.append(f"\tl2g_queue = {tokens['l2g']}, g2l_queue = {tokens['g2l']}")
            lines.append(f"\ts2g_queue = {tokens['s2g']}, g2s_queue = {tokens['g2s']}")
        if self.uops:
            lines.append(f"There are {len(self.uops)} uops")
            lines += [f"[{k:04d}]\t acc={u.dst}, inp={u.src}, wgt={u.wgt}" for k, u in enumerate(self.uops)]
        return "\n".join(lines)


# ---- TVM v0.18 debug dumps ------------------------------------------------------------------------
_ALU_OPS = {"min": AluOp.MIN, "max": AluOp.MAX, "add": AluOp.ADD, "shr": AluOp.SHR, "mul": AluOp.MUL}
DEFAULT_DUMP_IMMS = {"shr": 8, "min": 127, "max": 0}
"""Immediates of the TVM v0.18 dumps in tests/data (right_shift 8, clip to [0, 127])."""


def parse_tvm_dump(text: str, hw: VTAConfig, imms: dict[str, int] | None = None) -> Program:
    """A :class:`Program` from a TVM ``VTA_DEBUG_DUMP_INSN | VTA_DEBUG_DUMP_UOP`` dump.

    Micro-op kernels are placed at the micro-op SRAM addresses their ``LOAD UOP`` instructions name.
    DRAM addresses are rebased: every memory type becomes one region ("inp", "wgt", "bias", "out",
    "uop") spanning the addresses the dump touches. The dump does not print ALU immediates; ``imms``
    maps ``shr``/``min``/``max``/``add``/``mul`` to them (default: this flow's 8, 127, 0) and ``shr``
    is taken to use its immediate.
    """
    imms = {**DEFAULT_DUMP_IMMS, **(imms or {})}
    kernels: list[list[Uop]] = []
    insns: list[Insn] = []
    blocks = re.split(r"\n(?=INSTRUCTION \d+: |There are \d+ uops)", text)
    for block in blocks:
        if block.startswith("There are") and "uops" in block.splitlines()[0]:
            kernels.append([Uop(int(a), int(b), int(c)) for a, b, c in
                            re.findall(r"acc=(\d+), inp=(\d+), wgt=(\d+)", block)])
            continue
        m = re.match(r"INSTRUCTION \d+: (.*)", block)
        if not m:
            continue
        kind = m.group(1).strip()
        dep = re.search(r"pop prev: (\d), pop next: (\d), push prev: (\d), push next: (\d)", block)
        flags = dict(zip(("pop_prev", "pop_next", "push_prev", "push_next"),
                         (bool(int(g)) for g in dep.groups()))) if dep else {}
        nums = lambda pat: [int(x, 0) for x in re.search(pat, block).groups()]  # noqa: E731
        if kind == "FINISH":
            insns.append(FinishInsn(**flags))
        elif kind.startswith("NOP-"):
            stage = kind.split("-")[1]
            op, mem = {"MEMORY": (Opcode.LOAD, MemId.INP), "COMPUTE": (Opcode.LOAD, MemId.UOP),
                       "STORE": (Opcode.STORE, MemId.OUT)}[stage]
            insns.append(MemInsn(op, mem, 0, 0, 0, 0, 0, **flags))
        elif kind.startswith("LOAD") or kind.startswith("STORE"):
            op = Opcode.STORE if kind.startswith("STORE") else Opcode.LOAD
            mem = MemId.OUT if op == Opcode.STORE else MemId[kind.split()[1]]
            dram, sram = nums(r"DRAM: (0x[0-9a-f]+), SRAM:(0x[0-9a-f]+)")
            ysize, ypad0, ypad1 = nums(r"y: size=(\d+), pad=\[(\d+), (\d+)\]")
            xsize, xstride, xpad0, xpad1 = nums(r"x: size=(\d+), stride=(\d+), pad=\[(\d+), (\d+)\]")
            insns.append(MemInsn(op, mem, sram, dram, ysize, xsize, xstride, ypad0, ypad1, xpad0, xpad1, **flags))
        elif kind == "GEMM" or kind.startswith("ALU"):
            reset = bool(nums(r"reset_out: (\d+)")[0])
            bgn, end = nums(r"range \((\d+), (\d+)\)")
            if kind == "GEMM":
                io, wo, so, do = nums(r"outer loop - iter: (\d+), wgt: (\d+), inp: (\d+), acc: (\d+)")
                ii, wi, si, di = nums(r"inner loop - iter: (\d+), wgt: (\d+), inp: (\d+), acc: (\d+)")
                insns.append(GemmInsn(reset, bgn, end, io, ii, do, di, so, si, wo, wi, **flags))
            else:
                name = kind.split("-", 1)[1].split()
                io, do, so = nums(r"outer loop - iter: (\d+), dst: (\d+), src: (\d+)")
                ii, di, si = nums(r"inner loop - iter: (\d+), dst: (\d+), src: (\d+)")
                use_imm = "imm" in name or name[0] == "shr"
                insns.append(AluInsn(reset, bgn, end, io, ii, do, di, so, si, _ALU_OPS[name[0]], use_imm,
                                     imms[name[0]] if use_imm else 0, **flags))
        else:
            raise ProgramFormatError(f"unknown instruction kind {kind!r} in TVM dump")
    # micro-ops: kernel k is loaded by the k-th LOAD UOP (each kernel loaded exactly once in these dumps)
    uop_loads = [i for i in insns if isinstance(i, MemInsn) and i.mem == MemId.UOP and i.x_size]
    if len(uop_loads) != len(kernels):
        raise ProgramFormatError(f"TVM dump has {len(kernels)} uop kernels but {len(uop_loads)} LOAD UOPs")
    uops = [Uop(0, 0, 0)] * max((i.sram_base + i.x_size for i in uop_loads), default=0)
    for ld, kern in zip(uop_loads, kernels):
        if len(kern) != ld.x_size:
            raise ProgramFormatError("TVM dump: a LOAD UOP size does not match its kernel")
        uops[ld.sram_base: ld.sram_base + ld.x_size] = kern
    # DRAM regions: one per memory type, rebased
    elem = {MemId.INP: hw.inp_elem_bytes, MemId.WGT: hw.wgt_elem_bytes, MemId.ACC: hw.acc_elem_bytes,
            MemId.OUT: hw.out_elem_bytes, MemId.UOP: hw.uop_bytes}
    names = {MemId.INP: ("inp", "int8"), MemId.WGT: ("wgt", "int8"), MemId.ACC: ("bias", "int32"),
             MemId.OUT: ("out", "int8"), MemId.UOP: ("uop", "uint32" if hw.uop_bytes == 4 else "uint64")}
    spans: dict[MemId, list[int]] = {}
    for i in insns:
        if isinstance(i, MemInsn) and i.x_size:
            lo, hi = i.dram_base, i.dram_base + (i.y_size - 1) * i.x_stride + i.x_size
            s = spans.setdefault(MemId(i.mem), [lo, hi])
            s[0], s[1] = min(s[0], lo), max(s[1], hi)
    if MemId.UOP in spans:
        spans[MemId.UOP] = [spans[MemId.UOP][0] - uop_loads[0].sram_base, spans[MemId.UOP][1]]
    regions: dict[str, Region] = {}
    offset = 0
    for mem in (MemId.INP, MemId.WGT, MemId.ACC, MemId.OUT, MemId.UOP):
        if mem not in spans:
            continue
        name, dtype = names[mem]
        n = spans[mem][1] - spans[mem][0]
        per = elem[mem] // np.dtype(dtype).itemsize
        regions[name] = Region(name, offset, n * elem[mem], (n, per) if per > 1 else (n,), dtype)
        offset += -(-n * elem[mem] // ALIGN) * ALIGN
    for i in insns:
        if isinstance(i, MemInsn) and i.x_size:
            mem = MemId(i.mem)
            i.dram_base = i.dram_base - spans[mem][0] + regions[names[mem][0]].offset // elem[mem]
    if "uop" in regions and len(uops) * hw.uop_bytes > regions["uop"].nbytes:
        raise ProgramFormatError("TVM dump: micro-op image larger than the LOAD UOP span")
    return Program(hw, insns, uops, regions, {"source": "tvm-v0.18-dump"})
