"""What a tuning run starts from, worked out before it starts: the budget a log leaves (``--more``) and the
transfer model a ``--transfer`` source stands for on a board.

The command line reads these from here; a notebook calls them the same way::

    trials, held = budget(Path("edgetune-logs/vta-fsim/resnet18.C2.jsonl"), more=64)
    tuner = make_tuner("ml2tuner", **transfer_options("edgetune-logs/", "ml2tuner", board))
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from toolkit.backends.transfer import transfer_model
from toolkit.boards import Board
from toolkit.errors import ConfigError
from toolkit.tuning.journal import DuplicateRecordWarning, TruncatedLogWarning, stream_log
from toolkit.tuning.tuners.base import tuner_class


def budget(log: Path | None, trials: int | None = None, more: int | None = None) -> tuple[int, int]:
    """``(trials in all, trials the log holds)`` for ``--trials N`` (the budget in all, the log's included) or
    ``--more N`` (N beyond what the log holds); exactly one of them. ``log`` is the log a ``--more`` run
    continues (``None``: nothing to count; ``--trials`` needs no count, the run reads the log once).

    >>> budget(Path("no-such-log.jsonl"), more=8)
    (8, 0)
    """
    if (trials is None) == (more is None):
        raise ConfigError("give --trials N (the budget in all) or --more N (trials beyond the log's), one of them")
    held = trials_in(log) if log is not None else 0
    return (held + more if more is not None else trials), held  # type: ignore[return-value]


def transfer_options(source: str | None, tuner: str, board: Board) -> dict[str, Any]:
    """The tuner option ``--transfer SOURCE`` stands for: ``{}`` (the tuner's default), else ``{"transfer": the
    model}`` resolved once by :func:`~toolkit.backends.transfer.transfer_model` (``none``: ``None``; ``pretrained``:
    :class:`ConfigError` where edgetune ships no model for the board)."""
    if source is None:
        return {}
    if "transfer" not in tuner_class(tuner).options:
        raise ConfigError(f"tuner {tuner!r} does not learn from other tasks; --transfer needs ml2tuner, "
                          "ml2tuner+ or chameleon-ml2")
    return {"transfer": transfer_model(source, board)}


def trials_in(path: Path) -> int:
    """Trials a log holds (0 when there is none yet); a truncated last line or a repeated record is warned about
    once, when the run takes the log over."""
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedLogWarning)
        warnings.simplefilter("ignore", DuplicateRecordWarning)
        return sum(1 for _ in stream_log(path)[1])   # counted as read: the log is not held in memory
