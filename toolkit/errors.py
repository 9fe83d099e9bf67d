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


class ExportError(EdgetuneError):
    """An export that cannot be written, read or run (bad log, wrong board type, corrupt folder)."""


class BoardLostError(EdgetuneError):
    """The board went away mid-measurement. The tuning loop re-measures the batch (never records it)."""


class BoardGoneError(BoardError):
    """The board went away and did not come back within the run's wait (``--wait-board``): the run stops (every
    finished trial is in the log) instead of waiting again."""


class ClusterError(EdgetuneError):
    """A Ray cluster that cannot be started, reached or used (no Ray installed, a node refused, the head lost)."""


WAIT = "wait:"
"""The prefix of the lines that say, off a terminal, what a command waits for (beside ``error:`` and
``warning:``, the only other lines a command prints on stderr before a one-line error)."""


def error_line(exc: BaseException, *, first: bool = False) -> str:
    r"""The line of a (TVM, compiler) error message that says what went wrong, at most 300 characters.

    Default: the last line naming an ``Error`` (TVM ends its messages with the cause), else the last line.
    ``first``: a compiler's first ``error:`` line, else the first line naming an error, else the first line.

    >>> error_line(RuntimeError("Traceback:\n  frame\nValueError: bad shape\n  note"))
    'ValueError: bad shape'
    >>> error_line(RuntimeError("x.c: In function f\nx.c:3: error: boom\nx.c:4: error: again"), first=True)
    'x.c:3: error: boom'
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    if first:
        line = next((ln for ln in lines if "error:" in ln), None) or next(
            (ln for ln in lines if "Error" in ln or "error" in ln), lines[0])
    else:
        line = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1])
    return line[:300]


def one_line(value: object, limit: int | None = 500) -> str:
    r"""``value`` (an exception, a message) on one line: its whitespace runs made single spaces, cut at ``limit``.

    >>> one_line(OSError("no\n   such file"))
    'no such file'
    """
    text = " ".join(str(value).split())
    return text if limit is None else text[:limit]
