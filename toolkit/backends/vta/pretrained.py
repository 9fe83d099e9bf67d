"""The transfer models shipped with edgetune: one per VTA hardware preset, trained on the development set only.

Each model (:class:`~toolkit.tuning.models.transfer.TransferModel`) is fitted on every valid config of
ResNet-18 C2-C11 (:data:`toolkit.workloads.splits.DEVELOPMENT`), measured exhaustively on the simulator with
that preset, in the space its headline benchmark uses (:data:`SETTINGS`: ``pynq`` and ``ultra96``: edgetune's
own space; ``zcu102``: the TVM-compatible one). No test-set layer is ever read. ``make pretrained``
(``python -m bench.pretrain``) rebuilds them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from toolkit.tuning.models.transfer import TransferModel

FOLDER = Path(__file__).resolve().parent / "pretrained"
"""Where the shipped models live (package data)."""

SETTINGS: dict[str, dict[str, Any]] = {"pynq": {}, "ultra96": {}, "zcu102": {"tvm_compat": True}}
"""Template options of each preset's training spaces."""


def model_path(preset: str) -> Path:
    return FOLDER / f"{preset}.json"


@lru_cache(maxsize=8)
def load_pretrained(preset: str) -> TransferModel | None:
    """The shipped model of ``preset``, or ``None`` when edgetune ships none for it."""
    path = model_path(preset)
    return TransferModel.load(path) if path.is_file() else None
