"""What a ``--transfer`` source stands for on a board, resolved once, by the board's backend.

:func:`transfer_model` turns the user's choice into the object a tuner takes: ``None`` (start from nothing), the
transfer model edgetune ships for the board (its backend's :meth:`~toolkit.backends.base.Backend.pretrained_transfer`)
or one fitted on tuning logs / loaded from a file, after refusing logs tuned on another hardware family or another
VTA hardware config (their features mean other things there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolkit.backends.registry import backend_for, tuned_profile
from toolkit.boards import Board
from toolkit.errors import ConfigError
from toolkit.tuning.journal import HEADER_KEY, read_log
from toolkit.tuning.models.transfer import TransferModel, log_files, transfer_model_from
from toolkit.tuning.tuners.base import PRETRAINED


def transfer_model(source: Any, board: Board) -> TransferModel | None:
    """``None``/``"none"``: ``None``; ``"pretrained"``: the model edgetune ships for ``board`` (:class:`ConfigError`
    where it ships none); a transfer model: itself; a path (a log, a folder of logs, a saved model): the model
    fitted on it or loaded from it."""
    if source is None or source == "none":
        return None
    if source == PRETRAINED:
        model = backend_for(board.profile).pretrained_transfer(board.profile)
        if model is None:
            raise ConfigError(f"edgetune ships no pretrained model for {board.name}; pass your own tuning logs "
                              "(--transfer edgetune-logs/)")
        return model
    if not isinstance(source, (str, Path)):
        return source
    _check_logs(str(source), board)
    return transfer_model_from(source)


def _check_logs(source: str, board: Board) -> None:
    """Refuse tuning logs of another hardware family, or of another VTA hardware config, for ``board``."""
    backend = backend_for(board.profile)
    for log in log_files(source):
        try:
            with log.open("rb") as f:
                first = json.loads(f.readline(1 << 20) or b"null")
        except (OSError, ValueError, RecursionError):
            continue            # transfer_model_from says what is wrong with it
        if not (isinstance(first, dict) and HEADER_KEY in first):
            continue            # a saved transfer model: it records no board
        on = read_log(log)[0].tuned_on()
        tuned = tuned_profile(on, log)
        if backend_for(tuned) is not backend:
            raise ConfigError(f"--transfer {log} was tuned on a {tuned.family} board ({on.board_type}); {board.name} "
                              f"is a {board.profile.family} board: pass logs tuned on {board.profile.family} boards")
        if backend.hardware(tuned) != backend.hardware(board.profile):
            raise ConfigError(f"--transfer {log} was tuned for VTA {tuned.vta.get('bitstream')} ({on.board_type}); "
                              f"{board.name} has {board.profile.vta.get('bitstream')}: pass logs tuned for it")
