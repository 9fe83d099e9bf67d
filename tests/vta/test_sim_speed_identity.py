"""The fast timing-only path of the VTA simulator gives exactly what the functional run and the original
event loop give: cycles, counters, seconds, breakdown, and the same error (class and message).

The reference is the original scheduler (one closure per actor, string states, costs computed when an
instruction starts) with the simulator executing each instruction when the scheduler starts it.
"""

from __future__ import annotations

import copy
import heapq
import random

import pytest

from toolkit.vta.compiler import check_config, compile_conv2d
from toolkit.vta.config import get_preset
from toolkit.vta.errors import DeadlockError, LeftoverTokenError, ProgramFormatError, VTAError
from toolkit.vta.isa import AluInsn, FinishInsn, GemmInsn, MemId, MemInsn, queue_of
from toolkit.vta.program import Program
from toolkit.vta.sim import _Machine, simulate
from toolkit.backends.vta.space import vta_conv2d_space
from toolkit.vta.timing import (
    _CONSUMER,
    _POPS,
    _PRODUCER,
    _PUSHES,
    FIFO_DEPTH,
    MODULES,
    PYNQ_CALIBRATED,
    QUEUE_DEPTH,
    _elem_table,
    insn_cost,
    seconds,
)
from toolkit.workloads import parse_workload

HW = get_preset("pynq")


def _reference_schedule(insns, hw, params, on_execute):
    """The original event loop of ``toolkit.vta.timing.schedule`` (before the speed-up), verbatim."""
    if not any(isinstance(i, FinishInsn) for i in insns):
        raise ProgramFormatError("VTA program has no FINISH instruction; append one")
    queues = {m: [] for m in MODULES}
    route = [queue_of(i) for i in insns]
    for k, m in enumerate(route):
        queues[m].append(k)
    insn_beats = hw.insn_bytes / hw.bus_bytes / params.bus_efficiency
    elem = _elem_table(hw)
    n_insns = len(insns)
    flags = [(i.pop_prev, i.pop_next, i.push_prev, i.push_next) for i in insns]
    avail = {m: [] for m in MODULES}
    pos = dict.fromkeys(MODULES, 0)
    busy = dict.fromkeys(MODULES, 0.0)
    blocked = dict.fromkeys(MODULES, "fetch")
    pending_push = {m: [] for m in MODULES}
    fifo = dict.fromkeys(_CONSUMER, 0)
    state = {"fetch": 0, "fetch_blocked": None, "bus_free": 0.0, "bus_busy": 0.0, "end": 0.0}
    heap, seq = [], [0]

    def wake(actor, t):
        seq[0] += 1
        heapq.heappush(heap, (t, seq[0], actor))

    def bus(t, beats):
        start = max(t, state["bus_free"])
        state["bus_free"] = start + beats
        state["bus_busy"] += beats
        return start + beats

    def run_fetch(t):
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

    def run_module(m, t):
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
        on_execute(k)
        cycles, beats = insn_cost(insns[k], hw, params, elem)
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
                parts.append(f"{m} instruction {queues[m][pos[m] - 1]} cannot push into full FIFO "
                             f"{pending_push[m][0]}")
            else:
                parts.append(f"{m} instruction {queues[m][pos[m]]} waits for {blocked[m] or 'its turn'}")
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
    return int(round(end)), breakdown


def _reference(program: Program):
    """(cycles, counters, seconds, breakdown) or (error class, message), the original way."""
    try:
        machine = _Machine(program, None, True)
        cycles, breakdown = _reference_schedule(program.insns, program.hw, PYNQ_CALIBRATED, machine.execute)
    except (VTAError, ValueError) as exc:
        return type(exc), str(exc)
    return cycles, dict(machine.counters), seconds(cycles, len(program.insns), program.hw, PYNQ_CALIBRATED), \
        breakdown


def _fast(program: Program, timing_only: bool = True):
    try:
        r = simulate(program, timing_only=timing_only)
    except (VTAError, ValueError) as exc:
        return type(exc), str(exc)
    return r.cycles, r.counters, r.seconds, r.breakdown


def _sample(layer: str, n: int) -> list[tuple[str, int]]:
    """``n`` config indices drawn at random (fixed seed) from the layer's space, valid or not (the seed
    keeps the sample's programs at about 150k instructions in all, a few seconds of simulation)."""
    size = vta_conv2d_space(parse_workload(f"resnet18.{layer}"), HW).size
    return [(layer, index) for index in sorted(random.Random(7).sample(range(size), n))]


SAMPLE = [s for layer, n in (("C2", 16), ("C4", 12), ("C11", 12)) for s in _sample(layer, n)]


def _compile(layer: str, index: int) -> Program | None:
    """The config's program, or None when the compiler checks reject it."""
    wl = parse_workload(f"resnet18.{layer}")
    cfg = vta_conv2d_space(wl, HW).get(index).values
    try:
        check_config(wl, cfg, HW)
    except VTAError as exc:
        with pytest.raises(type(exc)):
            compile_conv2d(wl, cfg, HW)
        return None
    return compile_conv2d(wl, cfg, HW).program


@pytest.fixture(scope="module")
def small_programs() -> list[Program]:
    """The three shortest valid programs of the C11 part of the sample (a few hundred instructions)."""
    programs = [p for layer, i in SAMPLE if layer == "C11" and (p := _compile(layer, i)) is not None]
    return sorted(programs, key=lambda p: len(p.insns))[:3]


@pytest.mark.parametrize("layer,index", SAMPLE, ids=[f"{layer}-{i}" for layer, i in SAMPLE])
def test_timing_only_equals_the_original_event_loop(layer, index):
    program = _compile(layer, index)
    if program is None:  # rejected before simulation: the compiler raised the checker's error
        return
    fast = _fast(program)
    assert not isinstance(fast[0], type), fast
    assert fast == _reference(program)


def test_the_sample_holds_valid_and_invalid_configs():
    valid = {layer: 0 for layer, _ in SAMPLE}
    for layer, i in SAMPLE:
        valid[layer] += _compile(layer, i) is not None
    assert len(SAMPLE) == 40 and valid == {"C2": 8, "C4": 11, "C11": 5}


def test_timing_only_equals_the_functional_run(small_programs):
    for program in small_programs[:2]:
        assert _fast(program, timing_only=True) == _fast(program, timing_only=False)


def _broken(program: Program, how: str) -> Program:
    """A copy of ``program`` with one defect (instructions copied, so shared objects stay intact)."""
    insns = [copy.copy(i) for i in program.insns]
    if how == "drop_push":  # a consumer waits forever for the token
        k = next(k for k, i in enumerate(insns) if queue_of(i) == "load" and i.push_next)
        insns[k].push_next = False
    elif how == "extra_push":  # one token too many: left in the FIFO at the end (or a full FIFO)
        k = max(k for k, i in enumerate(insns) if queue_of(i) == "load" and not i.push_next)
        insns[k].push_next = True
    elif how == "gemm_bounds":  # a late GEMM reads beyond the input SRAM
        k = max(k for k, i in enumerate(insns) if isinstance(i, GemmInsn) and not i.reset)
        insns[k].src_factor_out = HW.inp_depth
    elif how == "alu_bounds":
        k = max(k for k, i in enumerate(insns) if isinstance(i, AluInsn))
        insns[k].uop_end = HW.uop_depth + 1
    elif how == "load_dram":  # a late input load reads beyond the DRAM image
        k = max(k for k, i in enumerate(insns) if isinstance(i, MemInsn) and i.mem == MemId.INP and i.x_size)
        insns[k].dram_base = program.dram_bytes
    elif how == "store_sram":  # an early store and a late GEMM both fail: the first to start wins
        k = min(k for k, i in enumerate(insns) if queue_of(i) == "store" and i.x_size)
        insns[k].sram_base = HW.out_depth
        g = max(k for k, i in enumerate(insns) if isinstance(i, GemmInsn) and not i.reset)
        insns[g].wgt_factor_out = HW.wgt_depth
    elif how == "no_finish":
        insns = [i for i in insns if not isinstance(i, FinishInsn)]
    return Program(program.hw, insns, program.uops, program.regions, program.meta)


@pytest.mark.parametrize("how", ["drop_push", "extra_push", "gemm_bounds", "alu_bounds", "load_dram",
                                 "store_sram", "no_finish"])
def test_broken_programs_fail_the_same_way(how, small_programs):
    program = _broken(small_programs[0], how)
    ref = _reference(program)
    assert isinstance(ref[0], type) and issubclass(ref[0], VTAError), ref
    assert _fast(program) == ref
    assert _fast(program, timing_only=False) == ref
