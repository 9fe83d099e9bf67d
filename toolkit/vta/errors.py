"""Errors of the VTA backend (encoding, program files, simulation).

Every one is a :class:`VTAError`, itself an :class:`~toolkit.errors.EdgetuneError`, so the CLI
prints it as one line. ``resource``/``needed``/``available`` say what ran out, when that applies.
"""

from __future__ import annotations

from toolkit.errors import EdgetuneError


class VTAError(EdgetuneError):
    """Base of every VTA backend error."""

    def __init__(self, message: str, *, resource: str | None = None, needed: int | None = None,
                 available: int | None = None) -> None:
        super().__init__(message)
        self.resource = resource
        self.needed = needed
        self.available = available


class EncodingError(VTAError):
    """A field value that does not fit its bit width (the C runtime would silently truncate it)."""

    def __init__(self, field: str, value: int, width: int, *, signed: bool = False) -> None:
        lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
        super().__init__(
            f"instruction field {field}={value} does not fit its {width}-bit field (range {lo}..{hi}); "
            "split the loop or tile so that it fits",
            resource=field,
            needed=value,
            available=hi,
        )
        self.field = field
        self.value = value
        self.width = width


class DeadlockError(VTAError):
    """A module waits for a dependency token that never comes (the FPGA would hang)."""


class FinishOrderError(VTAError):
    """An instruction that may run after FINISH: fsim (and the board) would never report the program done."""


class LeftoverTokenError(VTAError):
    """Dependency tokens left in a FIFO when the program finished (malformed program)."""


class SimulatorBoundsError(VTAError):
    """An SRAM index or DRAM range out of bounds (fsim's CHECK_LT / CHECK_LE)."""


class ProgramFormatError(VTAError):
    """A program file that is corrupt, truncated or of an unknown version."""
