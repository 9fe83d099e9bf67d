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
    if isinstance(insn, GemmInsn):
        n = insn.uop_end - insn.uop_bgn
        return p.insn_overhead + insn.iter_out * insn.iter_in * (n + p.gemm_fill), 0.0
    if isinstance(insn, AluInsn):
        n = insn.uop_end - insn.uop_bgn
        return p.insn_overhead + insn.iter_out * insn.iter_in * (2 * n + p.alu_fill), 0.0
    if isinstance(insn, MemInsn) and insn.x_size:
        row_bytes = insn.x_size * (elem or _elem_table(hw))[insn.mem]
        eff = p.bus_efficiency * (p.wgt_efficiency if insn.mem == MemId.WGT else 1.0)
        beats = insn.y_size * -(-row_bytes // hw.bus_bytes) / eff
        pad = 0
        if insn.opcode == Opcode.LOAD:
            width = insn.x_pad0 + insn.x_size + insn.x_pad1
            pad = (insn.y_pad0 + insn.y_pad1) * width + insn.y_size * (insn.x_pad0 + insn.x_pad1)
        return p.insn_overhead + insn.y_size * p.dma_latency + pad, float(beats)
    return p.insn_overhead, 0.0


def schedule(insns: list[Insn], hw: VTAConfig, params: TimingParams,
             on_execute: Callable[[int], None] | None = None) -> Timeline:
    """Run the event-driven model; ``on_execute(k)`` is called when instruction ``k`` starts.

    The call order respects every dependency token, so a functional simulator can execute the
    instruction in the callback. Raises :class:`DeadlockError` when modules wait for tokens (or
    FIFO space) that never come and :class:`LeftoverTokenError` when a FIFO is not empty at the end.
    """
    if not any(isinstance(i, FinishInsn) for i in insns):
        raise ProgramFormatError("VTA program has no FINISH instruction; append one")
    queues: dict[str, list[int]] = {m: [] for m in MODULES}
    route = [queue_of(i) for i in insns]
    for k, m in enumerate(route):
        queues[m].append(k)
    insn_beats = hw.insn_bytes / hw.bus_bytes / params.bus_efficiency
    elem = _elem_table(hw)
    n_insns = len(insns)
    flags = [(i.pop_prev, i.pop_next, i.push_prev, i.push_next) for i in insns]

    avail: dict[str, list[float]] = {m: [] for m in MODULES}  # fetch arrival time per queue slot
    pos = dict.fromkeys(MODULES, 0)
    busy = dict.fromkeys(MODULES, 0.0)
    blocked: dict[str, str | None] = dict.fromkeys(MODULES, "fetch")  # reason a module waits
    pending_push: dict[str, list[str]] = {m: [] for m in MODULES}
    fifo = dict.fromkeys(_CONSUMER, 0)
    state = {"fetch": 0, "fetch_blocked": None, "bus_free": 0.0, "bus_busy": 0.0, "end": 0.0}
    heap: list[tuple[float, int, str]] = []
    seq = [0]

    def wake(actor: str, t: float) -> None:
        seq[0] += 1
        heapq.heappush(heap, (t, seq[0], actor))

    def bus(t: float, beats: float) -> float:
        start = max(t, state["bus_free"])
        state["bus_free"] = start + beats
        state["bus_busy"] += beats
        return start + beats

    def run_fetch(t: float) -> None:
        # dispatch instructions back to back while no other event is due earlier (fewer heap events)
        while True:
            f = state["fetch"]
            if f >= n_insns:
                return
            m = route[f]
            if len(avail[m]) - pos[m] >= QUEUE_DEPTH:
                state["fetch_blocked"] = m
                return
            arrive = bus(t, insn_beats)
            avail[m].append(arrive)
            state["fetch"] = f + 1
            if blocked[m] == "fetch":
                blocked[m] = None
                wake(m, arrive)
            if heap and heap[0][0] < arrive:
                wake("fetch", arrive)
                return
            t = arrive

    def run_module(m: str, t: float) -> None:
        # finish pending pushes of the previous instruction
        while pending_push[m]:
            name = pending_push[m][0]
            if fifo[name] >= FIFO_DEPTH:
                blocked[m] = f"space in FIFO {name}"
                return
            fifo[name] += 1
            pending_push[m].pop(0)
            consumer = _CONSUMER[name]
            if blocked[consumer] == f"token {name}":
                blocked[consumer] = None
                wake(consumer, t)
        blocked[m] = None
        state["end"] = max(state["end"], t)
        if pos[m] >= len(queues[m]):
            return
        if pos[m] >= len(avail[m]):
            blocked[m] = "fetch"
            return
        if avail[m][pos[m]] > t:
            wake(m, avail[m][pos[m]])
            return
        k = queues[m][pos[m]]
        insn = insns[k]
        pop_prev, pop_next, push_prev, push_next = flags[k]
        pops = [n for n, flag in zip(_POPS[m], (pop_prev, pop_next)) if flag and n]
        for name in pops:
            if fifo[name] == 0:
                blocked[m] = f"token {name}"
                return
        for name in pops:
            fifo[name] -= 1
            producer = _PRODUCER[name]
            if blocked[producer] == f"space in FIFO {name}":
                blocked[producer] = None
                wake(producer, t)
        pos[m] += 1
        if state["fetch_blocked"] == m:
            state["fetch_blocked"] = None
            wake("fetch", t)
        if on_execute is not None:
            on_execute(k)
        cycles, beats = insn_cost(insn, hw, params, elem)
        done = (bus(t, beats) if beats else t) + cycles
        busy[m] += done - t
        pending_push[m] = [n for n, flag in zip(_PUSHES[m], (push_prev, push_next)) if flag and n]
        wake(m, done)

    wake("fetch", 0.0)
    while heap:
        t, _, actor = heapq.heappop(heap)
        if actor == "fetch":
            run_fetch(t)
        else:
            run_module(actor, t)

    stuck = [m for m in MODULES if pos[m] < len(queues[m]) or pending_push[m]]
    if stuck:
        parts = []
        for m in stuck:
            if pending_push[m]:
                k = queues[m][pos[m] - 1]
                parts.append(f"{m} instruction {k} cannot push into full FIFO {pending_push[m][0]}")
            else:
                k = queues[m][pos[m]]
                why = blocked[m] or "its turn"
                parts.append(f"{m} instruction {k} waits for {why}")
        raise DeadlockError("VTA program deadlocks: " + "; ".join(parts) +
                            "; add the missing dependency push/pop", resource="token")
    left = {n: c for n, c in fifo.items() if c}
    if left:
        raise LeftoverTokenError(
            "VTA program finished with tokens left in FIFO " +
            ", ".join(f"{n} ({c})" for n, c in left.items()) + "; remove the extra pushes",
            resource="token", needed=0, available=sum(left.values()))
    end = state["end"]
    breakdown = {f"{m}_busy": int(round(busy[m])) for m in MODULES}
    breakdown.update({f"{m}_stall": int(round(end - busy[m])) for m in MODULES})
    breakdown["bus_busy"] = int(round(state["bus_busy"]))
    breakdown["fetch_beats"] = int(round(insn_beats * len(insns)))
    return Timeline(int(round(end)), breakdown)


def host_seconds(n_insns: int, params: TimingParams) -> float:
    """Host-side time of one kernel call (launch + JIT instruction generation)."""
    return params.launch_us * 1e-6 + params.host_ns_per_insn * 1e-9 * n_insns


def seconds(cycles: int, n_insns: int, hw: VTAConfig, params: TimingParams) -> float:
    """Wall time of one kernel call: device cycles at the config's clock plus host overhead."""
    return cycles / (hw.clock_mhz * 1e6) + host_seconds(n_insns, params)
