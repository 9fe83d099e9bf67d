"""TVM v0.18's VTA runtime instruction queue, emulated: dependency tokens (``InsnQueue::DepPush/DepPop``, pending
pops, push folding, NOPs, ``Synchronize``) and the micro-op cache, so an emitted stream is TVM's instruction for
instruction; and :func:`emit_all`, which emits a program's outer iterations through it, cloning the steady state.
"""

from __future__ import annotations

from collections import Counter

from toolkit.vta.config import VTAConfig
from toolkit.vta.isa import FinishInsn, Insn, MemId, MemInsn, Opcode

LOAD, COMPUTE, STORE = 1, 2, 3  # runtime pipeline stages (kLoadStage ...)
_NONE = 0


class InsnQueue:
    """Instruction list with ``InsnQueue``'s dependency-token bookkeeping and ``UopQueue``'s cache."""

    def __init__(self, hw: VTAConfig, uop_base: int) -> None:
        self.insns: list[Insn] = []
        self.stage = _NONE  # pipeline stage of the last instruction (load NOPs count as none)
        self.pop_prev = [0, 0, 0, 0]
        self.pop_next = [0, 0, 0, 0]
        self.kinds: Counter = Counter()
        # micro-op cache
        self.uop_depth = hw.uop_depth
        self.uop_base = uop_base
        self.uop_end = 0
        self.cache: list[list] = []  # [kernel record] in SRAM order; record = [offset, size, begin, end]
        self.uop_loaded = 0  # micro-ops moved by LOAD UOP

    # -- tokens
    def _new(self, insn: Insn, stage: int, kind: str) -> Insn:
        insn.pop_prev = bool(self.pop_prev[stage])
        insn.pop_next = bool(self.pop_next[stage])
        self.pop_prev[stage] = self.pop_next[stage] = 0
        self.insns.append(insn)
        self.stage = stage
        self.kinds[kind] += 1
        return insn

    def noop(self, stage: int, push_prev=False, push_next=False, pop_prev=False, pop_next=False) -> None:
        if stage == STORE:
            insn = MemInsn(Opcode.STORE, MemId.OUT, 0, 0, 0, 0, 0)
            kind = "nop_store"
        else:
            insn = MemInsn(Opcode.LOAD, MemId.INP if stage == LOAD else MemId.UOP, 0, 0, 0, 0, 0)
            kind = "nop_load" if stage == LOAD else "nop_compute"
        insn.push_prev, insn.push_next, insn.pop_prev, insn.pop_next = push_prev, push_next, pop_prev, pop_next
        self.insns.append(insn)
        self.stage = STORE if stage == STORE else _NONE
        self.kinds[kind] += 1

    def commit(self, stage: int) -> None:
        if self.pop_prev[stage] or self.pop_next[stage]:
            self.noop(stage, pop_prev=bool(self.pop_prev[stage]), pop_next=bool(self.pop_next[stage]))
            self.pop_prev[stage] = self.pop_next[stage] = 0

    def pop(self, frm: int, to: int) -> None:
        self.kinds["token_pop"] += 1
        pend = self.pop_prev if frm < to else self.pop_next
        if pend[to]:
            self.commit(to)
        pend[to] = 1

    def push(self, frm: int, to: int) -> None:
        self.kinds["token_push"] += 1
        self.commit(frm)
        if self.insns and self.stage == frm:
            last = self.insns[-1]
            if frm < to and not last.push_next:
                last.push_next = True
                return
            if frm > to and not last.push_prev:
                last.push_prev = True
                return
        if frm < to:
            self.noop(frm, push_next=True)
        else:
            self.noop(frm, push_prev=True)

    # -- instructions
    def mem(self, op: Opcode, mem: MemId, sram: int, dram: int, y: int, x: int, stride: int,
            pads: tuple[int, int, int, int], kind: str) -> None:
        stage = STORE if op == Opcode.STORE else (LOAD if mem in (MemId.INP, MemId.WGT) else COMPUTE)
        self._new(MemInsn(op, mem, sram, dram, y, x, stride, *pads), stage, kind)

    def use_kernel(self, rec: list) -> None:
        """``UopQueue::Push`` + ``FlushUopLoad``: load the kernel if it is not cached."""
        offset, size, begin, end = rec
        if begin != end:
            return
        if self.uop_end + size > self.uop_depth:  # the cache wraps: evict everything
            for r in self.cache:
                r[2] = r[3] = 0
            self.cache = []
            self.uop_end = 0
        rec[2], rec[3] = self.uop_end, self.uop_end + size
        # kernels overwritten by this one lose their place
        for r in self.cache:
            if r is not rec and r[2] < rec[3] and r[3] > rec[2]:
                r[2] = r[3] = 0
        self.cache.append(rec)
        self.uop_end += size
        self._new(MemInsn(Opcode.LOAD, MemId.UOP, rec[2], self.uop_base + offset, 1, size, size),
                  COMPUTE, "load_uop")
        self.uop_loaded += size

    def finish(self) -> None:
        """``CommandQueue::Synchronize``."""
        self.push(STORE, COMPUTE)
        self.push(LOAD, COMPUTE)
        self.pop(STORE, COMPUTE)
        self.pop(LOAD, COMPUTE)
        self.commit(COMPUTE)
        self._new(FinishInsn(), COMPUTE, "finish")


CLONE_MIN_ITERATIONS = 5
"""Outer iterations from which :func:`emit_all` clones the steady-state iteration (tests raise it)."""
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
_ADDR = ("sram_base", "dram_base", "y_size", "x_size", "x_stride", "y_pad0", "y_pad1", "x_pad0", "x_pad1")


def emit_all(q: InsnQueue, outer: list[tuple], emit_iteration, tile_mem, full: list[bool]) -> None:
    """Emit every outer iteration through the runtime emulation, except that an iteration with all
    threads busy (``full``) that follows another such iteration is cloned from the steady-state
    iteration with its DMA addresses patched (identical result, several times faster).

    The steady state is taken from iterations 1 and 2, which must be full, leave the emulator in the same
    state and have the same instructions up to addresses; otherwise every iteration is emulated.
    """
    n = len(outer)
    if n < CLONE_MIN_ITERATIONS or not all(full[:3]):
        for it in outer:
            emit_iteration(*it)
        return

    def state() -> tuple:
        return tuple(q.pop_prev), tuple(q.pop_next), q.stage, q.uop_end, q.uop_loaded

    emit_iteration(*outer[0])
    s1 = len(q.insns)
    emit_iteration(*outer[1])
    e1 = len(q.insns)
    snap1 = [dict(i.__dict__) for i in q.insns[s1:e1]]
    state1 = state()
    kinds1 = Counter(q.kinds)
    emit_iteration(*outer[2])
    e2 = len(q.insns)
    state2 = state()
    length = e1 - s1
    steady = state1 == state2 and e2 - e1 == length
    if steady:
        for a, b, d in zip(q.insns[e1:e2], q.insns[s1:e1], snap1):
            da = a.__dict__
            if type(a) is not type(b) or any(da[k] != d[k] for k in d if k not in _ADDR) or (
                    "x_size" in d and (da["x_size"] == 0) != (d["x_size"] == 0)):
                steady = False
                break
    if not steady:
        for it in outer[3:]:
            emit_iteration(*it)
        return
    # what iteration 2 changed in iteration 1 (token flags folded onto its last instructions)
    mods = [(k, f, q.insns[s1 + k].__dict__[f]) for k, d in enumerate(snap1) for f in _FLAGS
            if q.insns[s1 + k].__dict__[f] != d[f]]
    types = [type(i) for i in q.insns[s1:e1]]
    mem_pos = [k for k, (t, d) in enumerate(zip(types, snap1))
               if t is MemInsn and d["x_size"] and d["mem"] != MemId.UOP]
    fresh = set(mem_pos) | {k for k, _, _ in mods}
    # address-free instructions no later iteration modifies are shared between the cloned iterations
    shared = {k: q.insns[e1 + k] for k in range(length) if k not in fresh}
    per_iter = Counter({k: v - kinds1.get(k, 0) for k, v in q.kinds.items()})
    insns = q.insns
    new = object.__new__
    layout = [(k, types[k], snap1[k], shared.get(k)) for k in range(length)]
    mem_set = set(mem_pos)
    cloned = 0
    last_cloned = False
    can_clone = True  # the previous iteration was full and left the steady state
    for idx in range(3, n):
        it = outer[idx]
        if full[idx] and can_clone:
            prev = len(insns) - length
            for k, f, v in mods:
                setattr(insns[prev + k], f, v)
            params = iter(tile_mem(*it))
            for k, t, d, obj in layout:
                if obj is None:
                    obj = new(t)
                    if k in mem_set:
                        obj.__dict__ = {**d, **dict(zip(_ADDR, next(params)))}
                    else:
                        obj.__dict__ = d.copy()
                insns.append(obj)
            cloned += 1
            last_cloned = True
            continue
        if last_cloned:  # the emulation may fold a token onto the previous iteration: un-share its tail
            for j in range(len(insns) - length, len(insns)):
                copy = new(type(insns[j]))
                copy.__dict__ = dict(insns[j].__dict__)
                insns[j] = copy
            last_cloned = False
        emit_iteration(*it)
        can_clone = full[idx] and state() == state2
    for k, v in per_iter.items():
        q.kinds[k] += v * cloned
