"""Event-driven timing model of the VTA pipeline (fetch, load, compute, store) with dependency tokens.

Model (``docs/vta.md``, section "Timing model"):

* fetch reads 16-byte instructions (``hw.insn_bytes``) over the shared bus and routes each one to
  its module's command queue (depth 8); a full queue stalls fetch;
* load, compute and store each execute their queue in order, pop tokens before and push after an
  instruction; a token FIFO holds at most 8 tokens and a push into a full FIFO stalls the pusher;
* GEMM costs ``iter_out * iter_in * (n_uops + gemm_fill)`` cycles (II = 1), ALU
  ``iter_out * iter_in * (2 * n_uops + alu_fill)`` (II = 2);
* every DMA (LOAD, STORE, LOAD UOP, instruction fetch) moves ``ceil(row_bytes / bus_bytes)`` beats
  per row over ONE bus shared by all masters, plus ``dma_latency`` cycles per row that do not hold
  the bus; zero-padding elements cost one SRAM write cycle each and no beats;
* every instruction costs ``insn_overhead`` cycles of its module; the host adds ``launch_us`` per
  kernel call plus ``host_ns_per_insn`` per instruction (JIT instruction generation).

The free constants in :data:`PYNQ_CALIBRATED` were fitted to four of the five Pynq measurements of
``vta.md`` 6.2, the fifth (C8) held out (see ``docs/benchmarks.md``).

>>> from toolkit.vta.config import get_preset
>>> from toolkit.vta.isa import GemmInsn
>>> insn_cost(GemmInsn(False, 0, 48, 56, 3, 1, 0, 1, 1, 0, 1), get_preset("pynq"), PYNQ_CALIBRATED)
(8068.0, 0.0)
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

from toolkit.vta.config import VTAConfig
from toolkit.vta.errors import DeadlockError, LeftoverTokenError, ProgramFormatError
from toolkit.vta.isa import AluInsn, FinishInsn, GemmInsn, Insn, MemId, MemInsn, Opcode, queue_of

FIFO_DEPTH = 8
QUEUE_DEPTH = 8
MODULES = ("load", "compute", "store")
# (pop prev, pop next) and (push prev, push next) FIFOs of each module
_POPS = {"load": (None, "g2l"), "compute": ("l2g", "s2g"), "store": ("g2s", None)}
_PUSHES = {"load": (None, "l2g"), "compute": ("g2l", "g2s"), "store": ("s2g", None)}
_CONSUMER = {"l2g": "compute", "g2l": "load", "s2g": "compute", "g2s": "store"}
_PRODUCER = {"l2g": "load", "g2l": "compute", "s2g": "store", "g2s": "compute"}


@dataclass(frozen=True)
class TimingParams:
    """Free constants of the timing model (cycles unless named otherwise).

    ``bus_efficiency`` scales every DMA's beat rate; ``wgt_efficiency`` additionally scales WGT loads
    (the weight SRAM write path, 2048-bit words in 1024-bit banks, is slower than the bus on Pynq).
    """

    gemm_fill: float = 0.0
    alu_fill: float = 0.0
    dma_latency: float = 28.0
    bus_efficiency: float = 1.0
    wgt_efficiency: float = 0.45
    insn_overhead: float = 4.0
    launch_us: float = 150.0
    host_ns_per_insn: float = 0.0


PYNQ_MEASUREMENTS: dict[str, tuple[dict, float]] = {
    "C2": ({"tile_h": [7, 8], "tile_w": [1, 56], "tile_ci": [4, 1], "tile_co": [2, 2], "oc_nthread": 2,
            "h_nthread": 1}, 5.699),
    "C4": ({"tile_h": [4, 7], "tile_w": [1, 28], "tile_ci": [4, 1], "tile_co": [2, 4], "oc_nthread": 1,
            "h_nthread": 2}, 1.349),
    "C5": ({"tile_h": [2, 14], "tile_w": [1, 28], "tile_ci": [8, 1], "tile_co": [4, 2], "oc_nthread": 1,
            "h_nthread": 2}, 5.183),
    "C8": ({"tile_h": [1, 14], "tile_w": [1, 14], "tile_ci": [16, 1], "tile_co": [4, 4], "oc_nthread": 2,
            "h_nthread": 1}, 4.934),
    "C11": ({"tile_h": [1, 7], "tile_w": [1, 7], "tile_ci": [32, 1], "tile_co": [2, 16], "oc_nthread": 2,
             "h_nthread": 1}, 7.348),
}
"""The calibration points (vta.md 6.2: TopHub vta_v0.06, Pynq, July 2019): per ResNet-18 layer,
the best AutoTVM schedule config and its measured milliseconds (kernel call included)."""

PYNQ_CALIBRATED = TimingParams()
"""Constants fitted to the Pynq calibration points of ``vta.md`` 6.2 (TVM v0.18 programs of C2, C4, C5,
C11; fit: shared GEMM/ALU fill, DMA row latency, WGT efficiency and launch time, ``insn_overhead`` fixed
at 4; see ``bench/bench_vta_sim.py`` and ``docs/benchmarks.md``)."""


@dataclass
class Timeline:
    """Result of :func:`schedule`: device cycles, per-module busy/stall cycles and bus use."""

    cycles: int
    breakdown: dict[str, int] = field(default_factory=dict)


def dram_elem_bytes(mem: MemId, hw: VTAConfig) -> int:
    """Bytes of one DRAM element of memory type ``mem`` (``dram_base`` and ``x_stride`` unit)."""
    return _elem_table(hw)[mem]


@lru_cache(maxsize=64)
def _elem_table(hw: VTAConfig) -> dict[int, int]:
    return {
        MemId.UOP: hw.uop_bytes,
        MemId.WGT: hw.wgt_elem_bytes,
        MemId.INP: hw.inp_elem_bytes,
        MemId.ACC: hw.acc_elem_bytes,
        MemId.OUT: hw.out_elem_bytes,
        MemId.ACC_8BIT: hw.batch * hw.block_out,
    }


def insn_cost(insn: Insn, hw: VTAConfig, p: TimingParams,
              elem: dict[int, int] | None = None) -> tuple[float, float]:
    """``(module cycles excluding bus beats, bus beats)`` of one instruction (``elem``: element bytes)."""
    if isinstance(insn, MemInsn):
        if not insn.x_size:
            return p.insn_overhead, 0.0
        row_bytes = insn.x_size * (elem or _elem_table(hw))[insn.mem]
        eff = p.bus_efficiency * (p.wgt_efficiency if insn.mem == MemId.WGT else 1.0)
        beats = insn.y_size * -(-row_bytes // hw.bus_bytes) / eff
        pad = 0
        if insn.opcode == Opcode.LOAD:
            width = insn.x_pad0 + insn.x_size + insn.x_pad1
            pad = (insn.y_pad0 + insn.y_pad1) * width + insn.y_size * (insn.x_pad0 + insn.x_pad1)
        return p.insn_overhead + insn.y_size * p.dma_latency + pad, float(beats)
    if isinstance(insn, GemmInsn):
        n = insn.uop_end - insn.uop_bgn
        return p.insn_overhead + insn.iter_out * insn.iter_in * (n + p.gemm_fill), 0.0
    if isinstance(insn, AluInsn):
        n = insn.uop_end - insn.uop_bgn
        return p.insn_overhead + insn.iter_out * insn.iter_in * (2 * n + p.alu_fill), 0.0
    return p.insn_overhead, 0.0


_MODULE_ID = {m: i for i, m in enumerate(MODULES)}
_FIFOS = ("l2g", "g2l", "s2g", "g2s")
_FIFO_ID = {n: i for i, n in enumerate(_FIFOS)}
_FIFO_CONSUMER = tuple(_MODULE_ID[_CONSUMER[n]] for n in _FIFOS)
_FIFO_PRODUCER = tuple(_MODULE_ID[_PRODUCER[n]] for n in _FIFOS)
# why a module waits, as a small int: 0 nothing, 1 fetch, 2 + f space in FIFO f, 6 + f token f
_WAIT_FETCH, _WAIT_SPACE, _WAIT_TOKEN = 1, 2, 6
_FETCH_ACTOR = len(MODULES)
# module -> FIFO ids popped / pushed, indexed by 2 * prev flag + next flag
_POP_IDS = {m: tuple(tuple(_FIFO_ID[n] for n, f in zip(_POPS[m], (i >> 1, i & 1)) if f and n) for i in range(4))
            for m in MODULES}
_PUSH_IDS = {m: tuple(tuple(_FIFO_ID[n] for n, f in zip(_PUSHES[m], (i >> 1, i & 1)) if f and n) for i in range(4))
             for m in MODULES}


def _why(code: int) -> str | None:
    if code == 0:
        return None
    if code == _WAIT_FETCH:
        return "fetch"
    if code < _WAIT_TOKEN:
        return f"space in FIFO {_FIFOS[code - _WAIT_SPACE]}"
    return f"token {_FIFOS[code - _WAIT_TOKEN]}"


def _plan(insns: list[Insn], hw: VTAConfig, params: TimingParams) -> list[tuple]:
    """Per instruction ``(module id, cycles, beats, FIFO ids to pop, FIFO ids to push)``; instructions
    shared between cloned iterations (same object) are planned once."""
    elem = _elem_table(hw)
    memo: dict[int, tuple] = {}
    plan = []
    for insn in insns:
        entry = memo.get(id(insn))
        if entry is None:
            m = queue_of(insn)
            cycles, beats = insn_cost(insn, hw, params, elem)
            pops = _POP_IDS[m][(2 if insn.pop_prev else 0) + (1 if insn.pop_next else 0)]
            pushes = _PUSH_IDS[m][(2 if insn.push_prev else 0) + (1 if insn.push_next else 0)]
            entry = memo[id(insn)] = (_MODULE_ID[m], cycles, beats, pops, pushes)
        plan.append(entry)
    return plan


def schedule(insns: list[Insn], hw: VTAConfig, params: TimingParams,
             on_execute: Callable[[int], None] | None = None) -> Timeline:
    """Run the event-driven model; ``on_execute(k)`` is called when instruction ``k`` starts.

    The call order respects every dependency token, so a functional simulator can execute the
    instruction in the callback. Raises :class:`DeadlockError` when modules wait for tokens (or
    FIFO space) that never come and :class:`LeftoverTokenError` when a FIFO is not empty at the end.

    Actors (fetch and the three modules) run from one event heap ordered by (time, wake-up order);
    fetch dispatches instructions back to back while no other event is due earlier.
    """
    if not any(isinstance(i, FinishInsn) for i in insns):
        raise ProgramFormatError("VTA program has no FINISH instruction; append one")
    plan = _plan(insns, hw, params)
    route = [e[0] for e in plan]
    queues: tuple[list[int], ...] = tuple([] for _ in MODULES)
    for k, m in enumerate(route):
        queues[m].append(k)
    qlen = [len(q) for q in queues]
    insn_beats = hw.insn_bytes / hw.bus_bytes / params.bus_efficiency
    n_insns = len(insns)
    consumer, producer = _FIFO_CONSUMER, _FIFO_PRODUCER
    fetch_actor = _FETCH_ACTOR
    heappush, heappop = heapq.heappush, heapq.heappop

    avail: tuple[list[float], ...] = tuple([] for _ in MODULES)  # fetch arrival time per queue slot
    n_avail = [0] * len(MODULES)
    pos = [0] * len(MODULES)
    busy = [0.0] * len(MODULES)
    blocked = [_WAIT_FETCH] * len(MODULES)
    pending: list[list[int]] = [[] for _ in MODULES]  # FIFO ids the last instruction still has to push
    fifo = [0] * len(_FIFOS)
    fetch, fetch_blocked = 0, -1
    bus_free = bus_busy = end = 0.0
    seq = 1
    heap: list[tuple[float, int, int]] = [(0.0, seq, fetch_actor)]

    while heap:
        t, _, m = heappop(heap)
        if m == fetch_actor:
            while fetch < n_insns:
                q = route[fetch]
                if n_avail[q] - pos[q] >= QUEUE_DEPTH:
                    fetch_blocked = q
                    break
                start = bus_free if bus_free > t else t
                bus_free = arrive = start + insn_beats
                bus_busy += insn_beats
                avail[q].append(arrive)
                n_avail[q] += 1
                fetch += 1
                if blocked[q] == _WAIT_FETCH:
                    blocked[q] = 0
                    seq += 1
                    heappush(heap, (arrive, seq, q))
                if heap and heap[0][0] < arrive:
                    seq += 1
                    heappush(heap, (arrive, seq, fetch_actor))
                    break
                t = arrive
            continue
        # finish pending pushes of the previous instruction
        pend = pending[m]
        while pend:
            f = pend[0]
            if fifo[f] >= FIFO_DEPTH:
                blocked[m] = _WAIT_SPACE + f
                break
            fifo[f] += 1
            del pend[0]
            c = consumer[f]
            if blocked[c] == _WAIT_TOKEN + f:
                blocked[c] = 0
                seq += 1
                heappush(heap, (t, seq, c))
        if pend:
            continue
        blocked[m] = 0
        if t > end:
            end = t
        p = pos[m]
        if p >= qlen[m]:
            continue
        if p >= n_avail[m]:
            blocked[m] = _WAIT_FETCH
            continue
        a = avail[m][p]
        if a > t:
            seq += 1
            heappush(heap, (a, seq, m))
            continue
        k = queues[m][p]
        _, cycles, beats, pops, pushes = plan[k]
        if pops:
            waiting = [f for f in pops if fifo[f] == 0]
            if waiting:
                blocked[m] = _WAIT_TOKEN + waiting[0]
                continue
            for f in pops:
                fifo[f] -= 1
                c = producer[f]
                if blocked[c] == _WAIT_SPACE + f:
                    blocked[c] = 0
                    seq += 1
                    heappush(heap, (t, seq, c))
        pos[m] = p + 1
        if fetch_blocked == m:
            fetch_blocked = -1
            seq += 1
            heappush(heap, (t, seq, fetch_actor))
        if on_execute is not None:
            on_execute(k)
        if beats:
            start = bus_free if bus_free > t else t
            bus_free = start + beats
            bus_busy += beats
            done = bus_free + cycles
        else:
            done = t + cycles
        busy[m] += done - t
        if pushes:
            pending[m] = list(pushes)
        seq += 1
        heappush(heap, (done, seq, m))

    stuck = [i for i in range(len(MODULES)) if pos[i] < qlen[i] or pending[i]]
    if stuck:
        parts = []
        for i in stuck:
            if pending[i]:
                k = queues[i][pos[i] - 1]
                parts.append(f"{MODULES[i]} instruction {k} cannot push into full FIFO {_FIFOS[pending[i][0]]}")
            else:
                k = queues[i][pos[i]]
                why = _why(blocked[i]) or "its turn"
                parts.append(f"{MODULES[i]} instruction {k} waits for {why}")
        raise DeadlockError("VTA program deadlocks: " + "; ".join(parts) +
                            "; add the missing dependency push/pop", resource="token")
    left = {n: c for n, c in zip(_FIFOS, fifo) if c}
    if left:
        raise LeftoverTokenError(
            "VTA program finished with tokens left in FIFO " +
            ", ".join(f"{n} ({c})" for n, c in left.items()) + "; remove the extra pushes",
            resource="token", needed=0, available=sum(left.values()))
    breakdown = {f"{m}_busy": int(round(busy[i])) for i, m in enumerate(MODULES)}
    breakdown.update({f"{m}_stall": int(round(end - busy[i])) for i, m in enumerate(MODULES)})
    breakdown["bus_busy"] = int(round(bus_busy))
    breakdown["fetch_beats"] = int(round(insn_beats * len(insns)))
    return Timeline(int(round(end)), breakdown)


def host_seconds(n_insns: int, params: TimingParams) -> float:
    """Host-side time of one kernel call (launch + JIT instruction generation)."""
    return params.launch_us * 1e-6 + params.host_ns_per_insn * 1e-9 * n_insns


def seconds(cycles: int, n_insns: int, hw: VTAConfig, params: TimingParams) -> float:
    """Wall time of one kernel call: device cycles at the config's clock plus host overhead."""
    return cycles / (hw.clock_mhz * 1e6) + host_seconds(n_insns, params)
