"""Several VTA programs as one: consecutive layers of a model in one kernel call over one DRAM arena.

Each layer's program keeps its instructions; what changes is where they point and how they end:

* **DRAM**: every region of every layer gets a place in one arena. A region bound to a model tensor (a layer's
  ``out``, the next layer's ``inp``, a later layer's ``res``) is one region for all of them, so an activation
  stays where its producer stored it until its last reader loaded it: no copy, no repack between layers. Each
  load and store is moved by its region's new offset (its DRAM address in elements of its memory type).
* **Micro-ops**: the layers' micro-op images one after another in one ``uop`` region; each LOAD UOP is moved
  by its layer's place there (every layer loads its kernels into the micro-op SRAM itself).
* **Between layers** a barrier replaces each FINISH but the last: a compute NOP with FINISH's pops (the layer's
  last load and store are done) that pushes a token to the load module, and a load NOP that pops it, so the
  next layer's first load reads what this layer stored.

One kernel call instead of one per layer saves the host's launch per layer (150 us each on a Pynq, timing model).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from toolkit.vta.errors import VTAError
from toolkit.vta.isa import FinishInsn, Insn, MemId, MemInsn, Opcode
from toolkit.vta.program import Program, Region, allocate_regions
from toolkit.vta.segments import Segment, arena_regions
from toolkit.vta.timing import dram_elem_bytes


@dataclass
class Step:
    """One layer of a merged program: its program and, per region of it but ``uop``, the arena region it uses
    (regions of several steps bound to one name are one tensor)."""

    name: str
    program: Program
    regions: dict[str, str]


def merge(steps: Sequence[Step], meta: dict | None = None) -> Program:
    """One program running ``steps`` in order over one arena (see the module docstring); :class:`VTAError` when
    the steps disagree on a shared tensor's shape or a load or store leaves its region."""
    if not steps:
        raise VTAError("nothing to merge: no program given")
    hw = steps[0].program.hw
    tensors: dict[str, tuple[tuple, str]] = {}
    for step in steps:
        if step.program.hw != hw:
            raise VTAError(f"layer {step.name}'s program is built for VTA {step.program.hw.bitstream}, the first "
                           f"for {hw.bitstream}")
        for region, target in step.regions.items():
            r = step.program.regions[region]
            if tensors.setdefault(target, (r.shape, r.dtype)) != (r.shape, r.dtype):
                raise VTAError(f"layer {step.name}'s {region} region is {r.dtype}{list(r.shape)}; {target} is "
                               f"{tensors[target][1]}{list(tensors[target][0])} elsewhere")
    uops = [u for step in steps for u in step.program.uops]
    arena = allocate_regions(hw, [(name, shape, dtype) for name, (shape, dtype) in tensors.items()], len(uops))
    insns: list[Insn] = []
    uop_at = 0
    for k, step in enumerate(steps):
        moved = [_relocate(insn, step, arena, uop_at) for insn in step.program.insns]
        if k + 1 < len(steps):
            moved = _barrier(moved, step.name)
        insns += moved
        uop_at += len(step.program.uops)
    return Program(hw, insns, uops, arena, {**(meta or {}), "layers": [s.name for s in steps]})


def merge_segment(segment: Segment, programs: dict[str, Program], constants: dict[str, dict[str, Any]]) -> Program:
    """The program of a model's segment of VTA layers: each layer's program (``programs``, by layer) merged over
    the arena :func:`toolkit.vta.segments.arena_regions` names (``constants``: each layer's packed arrays)."""
    regions = arena_regions(segment, constants)
    return merge([Step(layer.name, programs[layer.name], regions[layer.name]) for layer in segment.layers],
                 {"segment": segment.name})


def _relocate(insn: Insn, step: Step, arena: dict[str, Region], uop_at: int) -> Insn:
    if not isinstance(insn, MemInsn) or not insn.x_size:
        return insn
    prog = step.program
    elem = dram_elem_bytes(insn.mem, prog.hw)
    if insn.mem == MemId.UOP:
        base = insn.dram_base - prog.regions["uop"].offset // elem + arena["uop"].offset // elem + uop_at
        return replace(insn, dram_base=base)
    first = insn.dram_base * elem
    last = (insn.dram_base + (insn.y_size - 1) * insn.x_stride + insn.x_size) * elem
    for name, target in step.regions.items():
        r = prog.regions[name]
        if r.offset <= first and last <= r.offset + r.nbytes:
            return replace(insn, dram_base=(arena[target].offset + first - r.offset) // elem)
    raise VTAError(f"layer {step.name}: a {insn.opcode.name} of {insn.mem.name} at bytes {first}..{last} is in no "
                   "region of its program")


def _barrier(insns: list[Insn], name: str) -> list[Insn]:
    """``insns`` with its FINISH made a compute NOP that waits as FINISH did and frees the load module through a
    token, which a load NOP after it takes."""
    if not insns or not isinstance(insns[-1], FinishInsn):
        raise VTAError(f"layer {name}'s program does not end with FINISH")
    end = insns[-1]
    wait = MemInsn(Opcode.LOAD, MemId.UOP, 0, 0, 0, 0, 0, pop_prev=end.pop_prev, pop_next=end.pop_next,
                   push_prev=True)
    return [*insns[:-1], wait, MemInsn(Opcode.LOAD, MemId.INP, 0, 0, 0, 0, 0, pop_next=True)]
