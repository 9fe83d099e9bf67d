"""User-facing errors.

Every error a user can cause (bad input, unreachable board, corrupt file) is an
:class:`EdgetuneError`. Its message is one line that says what is wrong and what to do;
the CLI prints it without a traceback and exits non-zero.
"""

from __future__ import annotations


class EdgetuneError(Exception):
    """Base class of every error the CLI reports as one line (exit code 2)."""

    exit_code = 2


class WorkloadError(EdgetuneError, ValueError):
    """A workload spec or network name that cannot be parsed."""


class BoardError(EdgetuneError):
    """An unknown board, board type, or a malformed board profile."""


class InventoryError(EdgetuneError):
    """The board inventory file cannot be read or written."""


class ConfigError(EdgetuneError, ValueError):
    """An invalid configuration (schedule config, option value, hardware config)."""


class LogError(EdgetuneError):
    """A tuning log that cannot be used (corrupt header, wrong schema, no valid record)."""
