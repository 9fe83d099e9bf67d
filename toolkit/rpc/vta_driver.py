"""The VTA FPGA driver: runs a compiled program through VTA's register map and contiguous DMA buffers.

It does what VTA's ``pynq_driver.cc`` (``VTADeviceRun``) does: copy micro-ops and tensors into one
physically contiguous buffer, relocate every LOAD/STORE's ``dram_base`` to its physical address,
write the instructions into another, then program the registers (fetch ``insn_count`` 0x10,
``insn_addr`` 0x18, control 0x0 = start; load/compute/store control 0x0 = auto-restart 0x81) and
poll compute's ``done`` register (0x18) until it reads 1.

The device is an interface (:class:`Device`): MMIO windows + buffer allocation + a clock.
On a board it is :class:`PynqDevice` (``pynq.MMIO``, ``pynq.allocate``); in CI it is
:class:`SimulatedVTADevice`, a register-level model that runs :func:`toolkit.vta.sim.simulate` on
the instructions it finds at ``insn_addr`` in its simulated DRAM, so the driver's code path runs here.

>>> import numpy as np
>>> from toolkit.vta.config import get_preset
>>> from toolkit.vta.isa import FinishInsn
>>> from toolkit.vta.program import Program, allocate_regions
>>> hw = get_preset("pynq")
>>> drv = VTADriver(SimulatedVTADevice(hw), hw)
>>> drv.run(Program(hw, [FinishInsn()], [], allocate_regions(hw, [], 0)), {}).counters["gemm_counter"]
0
"""

from __future__ import annotations

import abc
import copy
import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from toolkit.errors import BoardError

# Register map (VTA pkg_config.py / pynq_driver.cc)
FETCH, LOAD, COMPUTE, STORE = 0x0, 0x1000, 0x2000, 0x3000
CONTROL = 0x00
FETCH_INSN_COUNT, FETCH_INSN_ADDR = 0x10, 0x18
COMPUTE_DONE_WR, COMPUTE_DONE_RD = 0x10, 0x18
START, AUTORESTART, DONE = 0x1, 0x81, 0x1
REGISTER_BASE = {"pynq": 0x43C00000, "ultra96": 0xA0000000, "zcu104": 0xA0000000, "zcu102": 0xA0000000,
                 "de10nano": 0xFF220000}
WINDOW = 0x1000
DEFAULT_WAIT_POLLS = 1 << 31


class MMIO(Protocol):
    """A memory-mapped register window."""

    def read(self, offset: int) -> int: ...
    def write(self, offset: int, value: int) -> None: ...


class Device(abc.ABC):
    """What the driver needs from a board: register windows, DMA buffers, a clock, bitstream loading."""

    @abc.abstractmethod
    def mmio(self, base: int, length: int = WINDOW) -> MMIO:
        """The register window at physical address ``base``."""

    @abc.abstractmethod
    def allocate(self, nbytes: int) -> Any:
        """A contiguous uint8 buffer of ``nbytes`` (numpy array with ``physical_address``)."""

    @abc.abstractmethod
    def free(self, buf: Any) -> None:
        """Release a buffer."""

    def clock(self) -> float:
        """Seconds, for timing runs (wall clock on a board)."""
        return time.perf_counter()

    def program(self, bitstream: str | None) -> None:
        """Load a bitstream (boards); the simulator has nothing to load."""

    def counters(self) -> dict[str, int]:
        """Performance counters of the last run, where the device has them."""
        return {}


# -- on the board ---------------------------------------------------------------------------------

class PynqDevice(Device):
    """A Pynq-class board through the ``pynq`` package (needs root for /dev/mem and the CMA allocator)."""

    def __init__(self) -> None:
        try:
            import pynq  # noqa: F401
        except ImportError:
            raise BoardError("the fpga executor needs the `pynq` package: use the PYNQ image or "
                             "`pip install pynq` on the board") from None

    def mmio(self, base: int, length: int = WINDOW) -> MMIO:
        import pynq

        return pynq.MMIO(base, length)

    def allocate(self, nbytes: int) -> Any:
        import pynq

        return pynq.allocate(shape=(nbytes,), dtype=np.uint8)

    def free(self, buf: Any) -> None:
        buf.freebuffer()

    def program(self, bitstream: str | None) -> None:
        import pynq

        if bitstream:
            pynq.Bitstream(bitstream).download()


# -- in CI: a register-level model backed by the simulator ---------------------------------------

class _SimBuffer(np.ndarray):
    physical_address: int

    def flush(self) -> None:
        """Caches are coherent in the model."""

    def invalidate(self) -> None:
        """Caches are coherent in the model."""


class _SimMMIO:
    def __init__(self, device: "SimulatedVTADevice", base: int) -> None:
        self.device, self.base = device, base

    def read(self, offset: int) -> int:
        return self.device.regs.get(self.base + offset, 0)

    def write(self, offset: int, value: int) -> None:
        self.device.write_reg(self.base + offset, int(value))


class SimulatedVTADevice(Device):
    """VTA's register interface over simulated DRAM; starting fetch runs the simulator.

    Buffers live at fake physical addresses from ``dram_base`` on (page aligned). Writing START to
    fetch's control register decodes ``insn_count`` instructions at ``insn_addr``, runs them with
    :func:`toolkit.vta.sim.simulate` against the buffer they address, writes the DRAM back, sets
    compute's done register and advances the device clock by the simulated run time.
    """

    def __init__(self, hw: Any, register_base: int | None = None, dram_base: int = 0x1000_0000) -> None:
        self.hw = hw
        self.base = REGISTER_BASE.get(hw.target, REGISTER_BASE["pynq"]) if register_base is None else register_base
        self.regs: dict[int, int] = {}
        self.buffers: dict[int, _SimBuffer] = {}
        self._next = dram_base
        self._clock = 0.0
        self._counters: dict[str, int] = {}
        self.runs = 0
        self.bitstream: str | None = None

    def program(self, bitstream: str | None) -> None:
        """Nothing to load; a named bitstream must exist (as on a board) and is remembered by its file name."""
        if bitstream:
            if not os.path.isfile(bitstream):
                raise BoardError(f"bitstream {bitstream} is not on the board; run `edgetune board provision`")
            self.bitstream = os.path.basename(bitstream)

    def mmio(self, base: int, length: int = WINDOW) -> MMIO:
        return _SimMMIO(self, base)

    def allocate(self, nbytes: int) -> Any:
        buf = np.zeros(max(1, nbytes), np.uint8).view(_SimBuffer)
        buf.physical_address = self._next
        self.buffers[self._next] = buf
        self._next += -(-max(1, nbytes) // 4096) * 4096 + 4096  # a guard page between buffers
        return buf

    def free(self, buf: Any) -> None:
        self.buffers.pop(buf.physical_address, None)

    def clock(self) -> float:
        return self._clock

    def counters(self) -> dict[str, int]:
        return dict(self._counters)

    def _buffer_at(self, addr: int, nbytes: int, what: str) -> _SimBuffer:
        for phys, buf in self.buffers.items():
            if phys <= addr and addr + nbytes <= phys + buf.size:
                return buf
        raise BoardError(f"VTA {what} at physical 0x{addr:08x} (+{nbytes} B) is outside every DMA buffer")

    def write_reg(self, addr: int, value: int) -> None:
        self.regs[addr] = value
        if addr == self.base + FETCH + CONTROL and value & START:
            self.regs[self.base + COMPUTE + COMPUTE_DONE_RD] = 0
            self._run()
            self.regs[self.base + COMPUTE + COMPUTE_DONE_RD] = DONE

    def _run(self) -> None:
        from toolkit.vta.isa import MemInsn, decode_insn
        from toolkit.vta.program import Program, Region
        from toolkit.vta.sim import simulate
        from toolkit.vta.timing import dram_elem_bytes

        hw = self.hw
        count = self.regs.get(self.base + FETCH + FETCH_INSN_COUNT, 0)
        addr = self.regs.get(self.base + FETCH + FETCH_INSN_ADDR, 0)
        ib = hw.insn_bytes
        ibuf = self._buffer_at(addr, count * ib, "instruction stream")
        off = addr - ibuf.physical_address
        raw = bytes(ibuf[off: off + count * ib])
        insns = [decode_insn(raw[k * ib:(k + 1) * ib], hw) for k in range(count)]
        mems = [i for i in insns if isinstance(i, MemInsn) and i.x_size]
        data = self._buffer_at(min((i.dram_base * dram_elem_bytes(i.mem, hw) for i in mems), default=addr), 1,
                               "data") if mems else ibuf
        for i in mems:  # rebase physical element addresses onto the data buffer
            elem = dram_elem_bytes(i.mem, hw)
            rel = i.dram_base * elem - data.physical_address
            if rel < 0 or rel % elem:
                raise BoardError(f"VTA DMA address 0x{i.dram_base * elem:08x} is not inside one aligned buffer")
            i.dram_base = rel // elem
        region = {"out": Region("out", 0, data.size, (data.size,), "int8")}
        result = simulate(Program(hw, insns, [], region), {"out": np.asarray(data).view(np.int8)})
        data[:] = result.outputs["out"].view(np.uint8)
        self._counters = dict(result.counters, cycles=result.cycles)
        self._clock += result.seconds
        self.runs += 1


# -- the driver -------------------------------------------------------------------------------------

@dataclass
class RunResult:
    """Outputs by region name, seconds per run, device counters of the last run."""

    outputs: dict[str, np.ndarray]
    seconds: list[float]
    counters: dict[str, int] = field(default_factory=dict)


class VTADriver:
    """Runs :class:`~toolkit.vta.program.Program` s on a :class:`Device` whose bitstream matches ``hw``."""

    def __init__(self, device: Device, hw: Any, register_base: int | None = None,
                 wait_polls: int = DEFAULT_WAIT_POLLS) -> None:
        self.device, self.hw = device, hw
        base = REGISTER_BASE.get(hw.target, REGISTER_BASE["pynq"]) if register_base is None else register_base
        self.fetch, self.load = device.mmio(base + FETCH), device.mmio(base + LOAD)
        self.compute, self.store = device.mmio(base + COMPUTE), device.mmio(base + STORE)
        self.wait_polls = wait_polls

    def _relocated(self, program: Any, phys: int) -> list:
        from toolkit.vta.isa import MemInsn
        from toolkit.vta.timing import dram_elem_bytes

        insns = copy.deepcopy(program.insns)
        for i in insns:
            if isinstance(i, MemInsn) and i.x_size:
                elem = dram_elem_bytes(i.mem, self.hw)
                if phys % elem:
                    raise BoardError(f"DMA buffer at 0x{phys:x} is not aligned to {elem} B; reallocate it")
                i.dram_base += phys // elem
        return insns

    def launch(self, insn_phys: int, count: int) -> None:
        """Start the fetch module on ``count`` instructions at ``insn_phys`` and wait for compute's done."""
        self.fetch.write(FETCH_INSN_COUNT, count)
        self.fetch.write(FETCH_INSN_ADDR, insn_phys)
        self.fetch.write(CONTROL, START)
        for mod in (self.load, self.compute, self.store):
            mod.write(CONTROL, AUTORESTART)
        for _ in range(self.wait_polls):
            if self.compute.read(COMPUTE_DONE_RD) == DONE:
                return
            time.sleep(0)
        raise BoardError(f"VTA did not finish within {self.wait_polls} polls; reload the bitstream "
                         "(`edgetune board provision`) or power-cycle the board")

    def load_program(self, program: Any, arrays: dict[str, np.ndarray]) -> LoadedProgram:
        """Put ``program`` on the device: its DRAM allocated, its micro-ops and ``arrays`` (by region) written and
        its instructions relocated there, once; :meth:`LoadedProgram.run` then runs it on what changes."""
        from toolkit.vta.isa import encode_insn

        if program.hw != self.hw:
            raise BoardError(f"program compiled for {program.hw.model} but the board runs {self.hw.model}; "
                             "recompile for this board's VTA config")
        loaded = LoadedProgram(self, program, self.device.allocate(program.dram_bytes))
        try:
            if "uop" in program.regions and program.uops:
                r = program.regions["uop"]
                words = program.uop_words().astype("<u%d" % self.hw.uop_bytes).view(np.uint8)
                loaded.data[r.offset: r.offset + words.size] = words
            loaded.write(arrays)
            stream = b"".join(encode_insn(i, self.hw) for i in self._relocated(program, loaded.data.physical_address))
            loaded.ibuf = self.device.allocate(len(stream))
            loaded.ibuf[:] = np.frombuffer(stream, np.uint8)
            loaded.ibuf.flush()
        except BaseException:
            loaded.close()
            raise
        return loaded

    def run(self, program: Any, inputs: dict[str, np.ndarray], repeat: int = 1) -> RunResult:
        """Copy inputs in, run ``repeat`` times (timed), copy outputs out, free the program's memory."""
        loaded = self.load_program(program, inputs)
        try:
            return loaded.run({}, repeat)
        finally:
            loaded.close()


class LoadedProgram:
    """A program on the device (:meth:`VTADriver.load_program`): its DRAM arena and instruction stream stay allocated
    until :meth:`close`, so a model's weights are written once for all its inferences."""

    def __init__(self, driver: VTADriver, program: Any, data: Any) -> None:
        self.driver, self.program, self.data = driver, program, data
        self.ibuf: Any = None

    def write(self, arrays: dict[str, np.ndarray]) -> None:
        """Write ``arrays`` into their regions of the arena."""
        regions = self.program.regions
        for name, arr in arrays.items():
            if name not in regions:
                raise BoardError(f"input {name!r} has no DRAM region; regions: {', '.join(regions)}")
            r = regions[name]
            a = np.ascontiguousarray(np.asarray(arr, dtype=r.dtype).reshape(r.shape)).view(np.uint8).reshape(-1)
            self.data[r.offset: r.offset + a.size] = a
        self.data.flush()

    def run(self, inputs: dict[str, np.ndarray], repeat: int = 1) -> RunResult:
        """Write ``inputs``, run ``repeat`` times (timed), read the outputs back."""
        from toolkit.vta.program import is_output

        self.write(inputs)
        device = self.driver.device
        seconds = []
        for _ in range(max(1, repeat)):
            t0 = device.clock()
            self.driver.launch(self.ibuf.physical_address, len(self.program.insns))
            seconds.append(device.clock() - t0)
        self.data.invalidate()
        outputs = {}
        for name, r in self.program.regions.items():
            if is_output(name):
                nb = int(np.prod(r.shape, dtype=np.int64)) * np.dtype(r.dtype).itemsize
                outputs[name] = np.asarray(self.data[r.offset: r.offset + nb]).copy().view(r.dtype).reshape(r.shape)
        return RunResult(outputs, seconds, device.counters())

    def close(self) -> None:
        """Free the arena and the instruction stream."""
        self.driver.device.free(self.data)
        if self.ibuf is not None:
            self.driver.device.free(self.ibuf)
            self.ibuf = None


class VTAExecutor:
    """What the agent calls: load bitstreams and run program binaries on one device."""

    def __init__(self, driver: VTADriver) -> None:
        self.driver = driver

    def program(self, bitstream: str | None) -> None:
        """Load a bitstream onto the device."""
        self.driver.device.program(bitstream)

    def run(self, program_bytes: bytes, inputs: dict[str, np.ndarray], repeat: int = 1) -> RunResult:
        """Run a program binary (``Program.to_bytes()``)."""
        from toolkit.vta.program import Program

        return self.driver.run(Program.from_bytes(program_bytes), inputs, repeat)

    def load_program(self, program_bytes: bytes, arrays: dict[str, np.ndarray]) -> LoadedProgram:
        """Put a program binary and its constant ``arrays`` on the device (:meth:`VTADriver.load_program`)."""
        from toolkit.vta.program import Program

        return self.driver.load_program(Program.from_bytes(program_bytes), arrays)


def make_executor(kind: str, bitstream: str | None = None, config: str | None = None) -> VTAExecutor:
    """The executor of an agent: ``fsim`` (simulated register interface) or ``fpga`` (pynq)."""
    from toolkit.vta.config import VTAConfig, get_preset

    hw = get_preset(config or "pynq") if not (config or "").startswith("{") else VTAConfig.from_json(
        __import__("json").loads(config))
    if kind == "fsim":
        sim = SimulatedVTADevice(hw)
        sim.program(bitstream)
        return VTAExecutor(VTADriver(sim, hw))
    if kind == "fpga":
        device = PynqDevice()
        device.program(bitstream)
        return VTAExecutor(VTADriver(device, hw))
    raise BoardError(f"executor {kind!r} runs no VTA programs; use a vta board (fsim or fpga)")
