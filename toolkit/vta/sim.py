"""Functional + timing simulator of a VTA :class:`~toolkit.vta.program.Program`, numpy-vectorised.

Semantics follow TVM's fsim (``sim_driver.cc``): zero-padding loads, int32 wrap-around, truncating
int8 stores, reset GEMM, ALU MIN/MAX/ADD/SHR/MUL with an int16 immediate or an ACC source, SRAM and
DRAM bounds checks, fsim's profiler counters. Instructions run in an order that respects every
dependency token, given by the timing model (:mod:`toolkit.vta.timing`), which also yields cycles.

>>> import numpy as np
>>> from toolkit.vta.config import get_preset
>>> from toolkit.vta.isa import FinishInsn
>>> from toolkit.vta.program import Program, allocate_regions
>>> hw = get_preset("pynq")
>>> r = simulate(Program(hw, [FinishInsn()], [], allocate_regions(hw, [], 0)))
>>> r.counters["gemm_counter"]
0
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from toolkit.vta.errors import FinishOrderError, SimulatorBoundsError, VTAError
from toolkit.vta.isa import AluInsn, AluOp, FinishInsn, GemmInsn, Insn, MemId, MemInsn, Opcode, queue_of
from toolkit.vta.program import Program, is_output
from toolkit.vta.timing import PYNQ_CALIBRATED, TimingParams, dram_elem_bytes, schedule, seconds

CHUNK = 1 << 18
"""Micro-op applications executed per vectorised step (bounds the index and value arrays)."""
_LOAD_SRAM = {MemId.UOP: "uop", MemId.WGT: "wgt", MemId.INP: "inp", MemId.ACC: "acc", MemId.ACC_8BIT: "acc"}
COUNTERS = ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes", "out_store_nbytes",
            "gemm_counter", "alu_counter")


@dataclass
class SimResult:
    """fsim counters, modelled device cycles, wall seconds (with host overhead), outputs, timing breakdown."""

    counters: dict[str, int]
    cycles: int
    seconds: float
    outputs: dict[str, np.ndarray] | None = None
    breakdown: dict = field(default_factory=dict)


class _Machine:
    """SRAMs, DRAM and counters; ``execute`` runs one instruction."""

    def __init__(self, program: Program, inputs: dict[str, np.ndarray] | None, timing_only: bool) -> None:
        hw = self.hw = program.hw
        self.program = program
        self.skip = timing_only
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.uop_dst = np.zeros(hw.uop_depth, np.int64)
        self.uop_src = np.zeros(hw.uop_depth, np.int64)
        self.uop_wgt = np.zeros(hw.uop_depth, np.int64)
        self.elem = {m: dram_elem_bytes(m, hw) for m in MemId}
        depth = {"uop": hw.uop_depth, "wgt": hw.wgt_depth, "inp": hw.inp_depth, "acc": hw.acc_depth}
        # memory type -> (SRAM name, counter, DRAM element bytes, counted bytes per element, SRAM depth)
        self.load_plan = {m: (key, f"{key}_load_nbytes", self.elem[m],
                              hw.acc_elem_bytes if m == MemId.ACC_8BIT else self.elem[m], depth[key])
                          for m, key in _LOAD_SRAM.items()}
        self.uop_max: dict[tuple[str, int, int], int] = {}  # max micro-op field over [bgn, end); reset by LOAD UOP
        self.uop_version = 0  # LOAD UOPs run so far
        self.dram_bytes = program.dram_bytes
        self.dram = np.zeros(program.dram_bytes, np.uint8)
        if "uop" in program.regions and program.uops:
            r = program.regions["uop"]
            words = program.uop_words().astype("<u%d" % hw.uop_bytes).view(np.uint8)
            if words.size > r.nbytes:
                raise VTAError(f"the uop region ({r.nbytes} B) is smaller than the micro-op image ({words.size} B)")
            self.dram[r.offset: r.offset + words.size] = words
        if not timing_only:
            self.inp = np.zeros((hw.inp_depth, hw.batch, hw.block_in), np.int8)
            self.wgt = np.zeros((hw.wgt_depth, hw.block_out, hw.block_in), np.int8)
            self.acc = np.zeros((hw.acc_depth, hw.batch, hw.block_out), np.int32)
            for name, arr in (inputs or {}).items():
                if name not in program.regions:
                    raise VTAError(f"input {name!r} has no DRAM region; regions: {', '.join(program.regions)}")
                r = program.regions[name]
                a = np.asarray(arr)
                if a.shape != r.shape or a.dtype != np.dtype(r.dtype):
                    raise VTAError(f"input {name!r} must be {r.dtype}{list(r.shape)}, got {a.dtype}{list(a.shape)}")
                raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
                self.dram[r.offset: r.offset + raw.size] = raw

    # ---- helpers --------------------------------------------------------------------------------
    def _check_dram(self, k: int, insn: MemInsn, elem: int) -> None:
        last = insn.dram_base + (insn.y_size - 1) * insn.x_stride + insn.x_size
        if last * elem > self.dram_bytes:
            raise SimulatorBoundsError(
                f"instruction {k}: DRAM access ends at byte {last * elem}, beyond the {self.dram_bytes}-byte image",
                resource="dram", needed=last * elem, available=self.dram_bytes)

    @staticmethod
    def _dram_rows(insn: MemInsn) -> np.ndarray:
        """Element indices (y_size, x_size) of a 2-D DRAM access."""
        return insn.dram_base + np.arange(insn.y_size)[:, None] * insn.x_stride + np.arange(insn.x_size)[None, :]

    @staticmethod
    def _check_sram(k: int, what: str, end: int, depth: int) -> None:
        if end > depth:
            raise SimulatorBoundsError(f"instruction {k}: {what} SRAM index {end - 1} out of bounds (depth {depth})",
                                       resource=what, needed=end, available=depth)

    @staticmethod
    def _chunks(insn) -> list[tuple[int, int]]:
        """Ranges of ``iter_out`` holding at most ~2^18 micro-op applications each (bounds memory)."""
        per = max(1, insn.iter_in * (insn.uop_end - insn.uop_bgn))
        step = max(1, CHUNK // per)
        return [(i0, min(i0 + step, insn.iter_out)) for i0 in range(0, insn.iter_out, step)]

    def _loop_indices(self, insn, which: tuple[str, ...], i0: int, i1: int) -> list[np.ndarray]:
        """Flattened (iter_out in [i0, i1), iter_in, uop) index arrays for ``which`` of ("dst", "src", "wgt")."""
        b, e = insn.uop_bgn, insn.uop_end
        i = np.arange(i0, i1)[:, None, None]
        j = np.arange(insn.iter_in)[None, :, None]
        out = []
        for name in which:
            base = getattr(self, f"uop_{name}")[b:e][None, None, :]
            fo = getattr(insn, f"{name}_factor_out")
            fi = getattr(insn, f"{name}_factor_in")
            out.append((base + i * fo + j * fi).reshape(-1))
        return out

    def _max_index(self, insn, name: str) -> int:
        b, e = insn.uop_bgn, insn.uop_end
        top = self.uop_max.get((name, b, e))
        if top is None:
            top = self.uop_max[name, b, e] = int(getattr(self, f"uop_{name}")[b:e].max())
        return top + (insn.iter_out - 1) * getattr(insn, f"{name}_factor_out") + (insn.iter_in - 1) * getattr(
            insn, f"{name}_factor_in")

    # ---- execution ------------------------------------------------------------------------------
    def execute(self, k: int) -> None:
        insn = self.program.insns[k]
        if isinstance(insn, MemInsn):
            if insn.x_size == 0:
                return
            (self._store if insn.opcode == Opcode.STORE else self._load)(k, insn)
        elif isinstance(insn, GemmInsn):
            self._gemm(k, insn)
        elif isinstance(insn, AluInsn):
            self._alu(k, insn)

    def check_all(self) -> dict[int, Exception]:
        """Timing-only: run every instruction's checks and counters in program order, without the
        timing model; returns ``{instruction index: the error it raises when it starts}``.

        Equivalent to executing in the scheduler's order: with data movement skipped, the only state
        is the micro-op SRAM, written and read by the compute queue alone, which runs in program order
        (after its first failing instruction none of its later ones can start, so they are not run).
        A LOAD/STORE (not UOP) has no state, a GEMM/ALU depends only on the micro-op SRAM, so an
        instruction object shared between cloned iterations is checked once (per micro-op SRAM state).
        """
        insns = self.program.insns
        counters = self.counters
        errors: dict[int, Exception] = {}
        seen: dict[int, tuple[str, int]] = {}  # id(stateless MemInsn) -> (counter, bytes)
        seen_compute: dict[int, tuple[int, str, int]] = {}  # id(GEMM/ALU) -> (uop_version, counter, work)
        compute_failed = False
        for k, insn in enumerate(insns):
            if type(insn) is MemInsn:
                done = seen.get(id(insn))
                if done is not None:
                    counters[done[0]] += done[1]
                    continue
                if insn.x_size == 0:
                    continue
                stateless = insn.opcode == Opcode.STORE or insn.mem != MemId.UOP
                if not stateless and compute_failed:
                    continue
                try:
                    done = (self._store if insn.opcode == Opcode.STORE else self._load)(k, insn)
                except Exception as exc:  # noqa: BLE001 - raised when the scheduler starts instruction k
                    errors[k] = exc
                    compute_failed = compute_failed or not stateless
                    continue
                if stateless:
                    seen[id(insn)] = done
            elif not compute_failed:
                t = type(insn)
                if t is not GemmInsn and t is not AluInsn:  # FINISH (no checks, no counters) or a subclass
                    try:
                        self.execute(k)
                    except Exception as exc:  # noqa: BLE001 - raised when the scheduler starts instruction k
                        errors[k] = exc
                        compute_failed = queue_of(insn) == "compute"
                    continue
                done = seen_compute.get(id(insn))
                if done is not None and done[0] == self.uop_version:
                    counters[done[1]] += done[2]
                    continue
                try:
                    counter, work = (self._gemm if t is GemmInsn else self._alu)(k, insn)
                except Exception as exc:  # noqa: BLE001 - raised when the scheduler starts instruction k
                    errors[k] = exc
                    compute_failed = True
                    continue
                seen_compute[id(insn)] = (self.uop_version, counter, work)
        return errors

    def _load(self, k: int, insn: MemInsn) -> tuple[str, int]:
        """Returns the counter it increased and by how much."""
        hw, mem = self.hw, insn.mem
        plan = self.load_plan.get(mem)
        if plan is None:
            if MemId(mem) == MemId.OUT:
                raise VTAError(f"instruction {k}: LOAD from memory type OUT is not supported; "
                               "load INP, WGT, ACC or UOP")
        key, counter, elem, counted, depth = plan
        nbytes = insn.x_size * insn.y_size * counted
        self.counters[counter] += nbytes
        width = insn.x_pad0 + insn.x_size + insn.x_pad1
        total = (insn.y_pad0 + insn.y_size + insn.y_pad1) * width
        self._check_sram(k, key, insn.sram_base + total, depth)
        self._check_dram(k, insn, elem)
        if self.skip and mem != MemId.UOP:
            return counter, nbytes
        idx = self._dram_rows(insn)
        raw = self.dram[: (self.dram.size // elem) * elem].reshape(-1, elem)[idx]  # (y, x, elem) uint8
        if mem == MemId.UOP:
            words = raw.reshape(-1, elem).copy().view("<u%d" % elem).reshape(insn.y_size, insn.x_size).astype(np.int64)
            w = hw.field_widths
            fields = {"dst": words & ((1 << w["uop_dst"]) - 1),
                      "src": (words >> w["uop_dst"]) & ((1 << w["uop_src"]) - 1),
                      "wgt": (words >> (w["uop_dst"] + w["uop_src"])) & ((1 << w["uop_wgt"]) - 1)}
            for name, vals in fields.items():
                block = np.zeros((insn.y_pad0 + insn.y_size + insn.y_pad1, width), np.int64)
                block[insn.y_pad0: insn.y_pad0 + insn.y_size, insn.x_pad0: insn.x_pad0 + insn.x_size] = vals
                getattr(self, f"uop_{name}")[insn.sram_base: insn.sram_base + total] = block.reshape(-1)
            self.uop_max.clear()
            self.uop_version += 1
            return counter, nbytes
        if mem == MemId.INP:
            sram, data = self.inp, raw.view(np.int8).reshape(insn.y_size, insn.x_size, hw.batch, hw.block_in)
        elif mem == MemId.WGT:
            sram, data = self.wgt, raw.view(np.int8).reshape(insn.y_size, insn.x_size, hw.block_out, hw.block_in)
        elif mem == MemId.ACC:
            sram = self.acc
            data = raw.reshape(-1).copy().view("<i4").reshape(insn.y_size, insn.x_size, hw.batch, hw.block_out)
        else:  # ACC_8BIT: int8 in DRAM, sign-extended into the int32 accumulator
            sram = self.acc
            data = raw.view(np.int8).astype(np.int32).reshape(insn.y_size, insn.x_size, hw.batch, hw.block_out)
        block = np.zeros((insn.y_pad0 + insn.y_size + insn.y_pad1, width) + sram.shape[1:], sram.dtype)
        block[insn.y_pad0: insn.y_pad0 + insn.y_size, insn.x_pad0: insn.x_pad0 + insn.x_size] = data
        sram[insn.sram_base: insn.sram_base + total] = block.reshape((-1,) + sram.shape[1:])
        return counter, nbytes

    def _store(self, k: int, insn: MemInsn) -> tuple[str, int]:
        """Returns the counter it increased and by how much."""
        hw = self.hw
        if insn.y_pad0 or insn.y_pad1 or insn.x_pad0 or insn.x_pad1:
            raise VTAError(f"instruction {k}: STORE with padding is not supported; padding must be 0")
        if insn.mem != MemId.OUT:
            raise VTAError(f"instruction {k}: STORE from memory type {MemId(insn.mem).name}; only OUT is supported")
        elem = hw.out_elem_bytes
        nbytes = insn.x_size * insn.y_size * elem
        self.counters["out_store_nbytes"] += nbytes
        n = insn.x_size * insn.y_size
        self._check_sram(k, "out", insn.sram_base + n, hw.out_depth)
        self._check_dram(k, insn, elem)
        if self.skip:
            return "out_store_nbytes", nbytes
        idx = self._dram_rows(insn)
        vals = self.acc[insn.sram_base: insn.sram_base + n].astype(np.int8)  # truncating, no saturation
        view = self.dram[: (self.dram.size // elem) * elem].reshape(-1, elem)
        view[idx.reshape(-1)] = vals.view(np.uint8).reshape(n, elem)
        return "out_store_nbytes", nbytes

    def _gemm(self, k: int, insn: GemmInsn) -> tuple[str, int]:
        """Returns the counter it increased and by how much."""
        hw = self.hw
        n_uop = insn.uop_end - insn.uop_bgn
        work = insn.iter_out * insn.iter_in * n_uop
        counted = 0 if insn.reset else work
        self.counters["gemm_counter"] += counted
        if work <= 0:
            return "gemm_counter", counted
        self._check_sram(k, "uop", insn.uop_end, hw.uop_depth)
        self._check_sram(k, "acc", self._max_index(insn, "dst") + 1, hw.acc_depth)
        if not insn.reset:
            self._check_sram(k, "inp", self._max_index(insn, "src") + 1, hw.inp_depth)
            self._check_sram(k, "wgt", self._max_index(insn, "wgt") + 1, hw.wgt_depth)
        if self.skip:
            return "gemm_counter", counted
        if insn.reset:
            for i0, i1 in self._chunks(insn):
                (a,) = self._loop_indices(insn, ("dst",), i0, i1)
                self.acc[a] = 0
            return "gemm_counter", counted
        inp = self.inp.astype(np.float32)
        for i0, i1 in self._chunks(insn):
            a, x, w = self._loop_indices(insn, ("dst", "src", "wgt"), i0, i1)
            # group applications by weight tile: one BLAS matmul per distinct weight index (exact in
            # float32: |sum of BLOCK_IN int8 products| < 2^24)
            order = np.argsort(w, kind="stable")
            cuts = np.flatnonzero(np.diff(w[order])) + 1
            vals = np.empty((a.size, hw.batch, hw.block_out), np.int32)
            for grp in np.split(order, cuts):
                wt = self.wgt[w[grp[0]]].astype(np.float32)  # (block_out, block_in)
                vals[grp] = (inp[x[grp]] @ wt.T).astype(np.int32)
            np.add.at(self.acc, a, vals)  # int32 wrap-around; repeated destinations accumulate
        return "gemm_counter", counted

    def _alu(self, k: int, insn: AluInsn) -> tuple[str, int]:
        """Returns the counter it increased and by how much."""
        hw = self.hw
        n_uop = insn.uop_end - insn.uop_bgn
        work = insn.iter_out * insn.iter_in * n_uop
        self.counters["alu_counter"] += work
        if work <= 0:
            return "alu_counter", work
        self._check_sram(k, "uop", insn.uop_end, hw.uop_depth)
        self._check_sram(k, "acc", self._max_index(insn, "dst") + 1, hw.acc_depth)
        # checked with an immediate too, as fsim checks it (the index is computed, then not read)
        self._check_sram(k, "acc", self._max_index(insn, "src") + 1, hw.acc_depth)
        if self.skip:
            return "alu_counter", work
        op, imm = AluOp(insn.op), int(insn.imm)  # reset_reg is ignored by ALU, as in fsim and HLS
        for i0, i1 in self._chunks(insn):
            d, s = self._loop_indices(insn, ("dst", "src"), i0, i1)
            n = d.size
            # vectorised when the sequential order cannot matter: distinct destinations and no source
            # reading a destination written earlier in the same chunk (chunks run in program order)
            uniq = np.unique(d).size == n
            hazard = False
            if uniq and not insn.use_imm:
                first = np.full(hw.acc_depth, n, np.int64)
                first[d] = np.arange(n)
                hazard = bool((first[s] < np.arange(n)).any())
            if uniq and not hazard:
                src = imm if insn.use_imm else self.acc[s].astype(np.int64)
                self.acc[d] = _alu_apply(op, self.acc[d].astype(np.int64), src)
            else:
                for t in range(n):
                    src = imm if insn.use_imm else self.acc[s[t]].astype(np.int64)
                    self.acc[d[t]] = _alu_apply(op, self.acc[d[t]].astype(np.int64), src)
        return "alu_counter", work

    def outputs(self) -> dict[str, np.ndarray]:
        """The ``out`` region and a merged program's ``out:`` tensors."""
        out = {}
        for name, r in self.program.regions.items():
            if is_output(name):
                nb = int(np.prod(r.shape, dtype=np.int64)) * np.dtype(r.dtype).itemsize
                out[name] = self.dram[r.offset: r.offset + nb].copy().view(r.dtype).reshape(r.shape)
        return out


def _alu_apply(op: AluOp, x: np.ndarray, y) -> np.ndarray:
    """fsim ALU semantics on int64 operands, result wrapped to int32."""
    if op == AluOp.MIN:
        r = np.minimum(x, y)
    elif op == AluOp.MAX:
        r = np.maximum(x, y)
    elif op == AluOp.ADD:
        r = x + y
    elif op == AluOp.MUL:
        r = x * y
    else:  # SHR: arithmetic right shift for s >= 0, left shift by -s for s < 0 (shift amounts clipped to 63)
        s = np.broadcast_to(np.asarray(y, np.int64), np.shape(x))
        r = np.where(s >= 0, x >> np.clip(s, 0, 63), x << np.clip(-s, 0, 63))
    return (np.asarray(r, np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def _raiser(errors: dict[int, Exception]):
    """``on_execute`` callback raising the error recorded for an instruction when it starts."""
    def on_execute(k: int) -> None:
        if k in errors:
            raise errors[k]
    return on_execute


def simulate(program: Program, inputs: dict[str, np.ndarray] | None = None, *, timing_only: bool = False,
             params: TimingParams | None = None) -> SimResult:
    """Simulate ``program``; ``inputs`` maps region names ("inp", "wgt", "bias") to arrays.

    ``timing_only`` skips data movement and arithmetic (fsim's DEBUG_SKIP_EXEC) but keeps every check,
    the counters and the cycles. ``params`` overrides the calibrated timing constants.
    """
    params = params or PYNQ_CALIBRATED
    machine = _Machine(program, inputs, timing_only)
    if timing_only:
        errors = machine.check_all()
        timeline = schedule(program.insns, program.hw, params, _raiser(errors) if errors else None)
    else:
        timeline = schedule(program.insns, program.hw, params, machine.execute)
    check_finish_last(program.insns)
    return SimResult(
        counters=dict(machine.counters),
        cycles=timeline.cycles,
        seconds=seconds(timeline.cycles, len(program.insns), program.hw, params),
        outputs=None if timing_only else machine.outputs(),
        breakdown=timeline.breakdown,
    )


_NEIGHBOURS = {"load": (None, "compute"), "compute": ("load", "store"), "store": ("compute", None)}


def check_finish_last(insns: list[Insn]) -> None:
    """Refuse a program in which some instruction may run after FINISH (:class:`FinishOrderError`).

    fsim's scheduler (``TlppVerify``) stops only when the last instruction it executed was FINISH, in
    whatever order it runs the three modules: every other instruction must come before FINISH in its queue or
    reach it through dependency tokens (the k-th pop of a channel waits for its k-th push)."""
    finishes = [k for k, insn in enumerate(insns) if isinstance(insn, FinishInsn)]
    if not finishes:
        return      # refused by the scheduler (ProgramFormatError)
    queue = [queue_of(insn) for insn in insns]
    pushes: dict[tuple[str, str], list[int]] = {}
    for k, insn in enumerate(insns):
        prev, nxt = _NEIGHBOURS[queue[k]]
        for flag, other in ((insn.push_prev, prev), (insn.push_next, nxt)):
            if flag and other is not None:
                pushes.setdefault((queue[k], other), []).append(k)
    preds: list[list[int]] = [[] for _ in insns]
    last: dict[str, int] = {}
    pops: dict[tuple[str, str], int] = {}
    for k, insn in enumerate(insns):
        me = queue[k]
        if me in last:
            preds[k].append(last[me])
        last[me] = k
        prev, nxt = _NEIGHBOURS[me]
        for flag, other in ((insn.pop_prev, prev), (insn.pop_next, nxt)):
            if flag and other is not None:
                i = pops.get((other, me), 0)
                pops[(other, me)] = i + 1
                sources = pushes.get((other, me), [])
                if i < len(sources):
                    preds[k].append(sources[i])
    finish = finishes[-1]
    before = {finish}
    stack = [finish]
    while stack:
        for j in preds[stack.pop()]:
            if j not in before:
                before.add(j)
                stack.append(j)
    after = [k for k in range(len(insns)) if k not in before]
    if after:
        k = after[-1]
        raise FinishOrderError(f"instruction {k} ({queue[k]} queue) may run after FINISH (instruction {finish}): "
                               "fsim and the hardware would never report the program done; make FINISH wait for it "
                               "through a dependency token")
