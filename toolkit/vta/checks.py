"""Schedule limit checks of the VTA conv2d compiler and their errors.

Every check runs before a single instruction is emitted. Each kind of limit has its own error
class (a :class:`~toolkit.vta.errors.VTAError`) that names the resource, what the schedule needs
and what the hardware has, e.g. ``SRAMCapacityError: local.inp_buffer needs 2320 entries ...``.

:class:`TVMCompatError` is different: it is raised only with ``tvm_compat=True`` for schedules that
TVM v0.18's lowering or runtime cannot handle although the hardware could (see ``docs/vta.md``).
"""

from __future__ import annotations

from toolkit.errors import ConfigError
from toolkit.vta.errors import VTAError


class ScheduleConfigError(VTAError, ConfigError):
    """A schedule config that does not fit the workload (bad split, unknown knob, odd thread split)."""


class SRAMCapacityError(VTAError):
    """An on-chip buffer (inp/wgt/acc/out) too small for the tiles of all virtual threads."""


class UopBufferError(VTAError):
    """A micro-op kernel larger than the micro-op buffer."""


class AccHazardError(VTAError):
    """A micro-op writes the accumulator entry written by one of the two micro-ops before it.

    The GEMM pipeline (II = 1) would read a stale value; TVM's runtime rejects this inside a kernel
    (``dst_idx != dst_index``), edgetune also across loop iterations as the pipeline issues them.
    """


class FieldWidthError(VTAError):
    """An instruction or micro-op field value that does not fit its ISA bit width."""


class DMALimitError(VTAError):
    """A DMA transfer outside the LOAD/STORE limits (pad <= 15, sizes and strides <= 65535)."""


class TVMCompatError(VTAError):
    """A schedule TVM v0.18's VTA lowering/runtime cannot compile or run (``tvm_compat=True`` only)."""


def need(cls: type[VTAError], resource: str, needed: int, available: int, what: str) -> None:
    """Raise ``cls`` if ``needed > available``, with the standard one-line message."""
    if needed > available:
        raise cls(f"{resource} needs {needed} {what} but the hardware has {available}; "
                  "choose smaller tiles or fewer virtual threads", resource=resource, needed=needed,
                  available=available)


def capacity(buffers: list[tuple[str, int, int]]) -> None:
    """:class:`SRAMCapacityError` naming every buffer ``(name, needed, depth)`` that overflows."""
    over = [(n, need_, have) for n, need_, have in buffers if need_ > have]
    if over:
        what = ", ".join(f"{n} needs {need_} entries (has {have})" for n, need_, have in over)
        err = SRAMCapacityError(f"on-chip buffer overflow: {what}; choose smaller tiles or fewer virtual threads",
                                resource=over[0][0], needed=over[0][1], available=over[0][2])
        err.resources = [n for n, _, _ in over]
        raise err


def field(name: str, value: int, bits: int) -> None:
    """:class:`FieldWidthError` if unsigned ``value`` does not fit ``bits`` bits."""
    if not 0 <= value < (1 << bits):
        raise FieldWidthError(f"ISA field {name}={value} does not fit its {bits}-bit field (max {(1 << bits) - 1}); "
                              "choose smaller tiles", resource=name, needed=value, available=(1 << bits) - 1)


def dma(name: str, value: int, limit: int) -> None:
    """:class:`DMALimitError` if a DMA quantity exceeds ``limit``."""
    if value > limit:
        raise DMALimitError(f"DMA {name}={value} exceeds the LOAD/STORE limit {limit}; choose smaller tiles",
                            resource=name, needed=value, available=limit)


def tvm_2d_dims(extents: list[int], strides: list[int]) -> int:
    """Number of DMA dimensions TVM's ``InjectDMAIntrin`` derives for a DRAM access (block excluded).

    ``extents``/``strides`` are the copy loops outermost first, in elements (one element is a whole
    VTA block, stride 1 = contiguous). Unit loops vanish (TVM drops extent-1 loops); adjacent loops
    merge when the outer stride equals inner stride x inner extent; and, as in ``_fold_buffer_dim``,
    when the innermost remaining loop is not contiguous TVM adds a unit dimension of its own.
    A pattern is expressible by one 2-D DMA iff this is <= 2.
    """
    loops = [(e, s) for e, s in zip(extents, strides) if e > 1]
    if not loops:
        return 0
    groups = 1
    inner_e, inner_s = loops[-1]
    for e, s in reversed(loops[:-1]):
        if s == inner_s * inner_e:
            inner_e *= e
        else:
            groups += 1
            inner_e, inner_s = e, s
    return groups + (0 if loops[-1][1] == 1 else 1)
