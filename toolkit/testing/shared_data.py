"""Where the ground truth from the real TVM v0.18 VTA stack lives (tests and benchmarks use it).

The project's steering repository keeps it in ``shared/data`` beside this checkout; CI lays a
copy of ``shared/`` beside its clone. ``$EDGETUNE_SHARED_DATA`` overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """The ``shared/data`` folder; :class:`FileNotFoundError` naming the places looked at if absent."""
    env = os.environ.get("EDGETUNE_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates += [_REPO.parent / "shared" / "data", Path("/work/shared/data")]
    for path in candidates:
        if (path / "vta_tvm018_resnet18_truth.jsonl").is_file():
            return path
    raise FileNotFoundError(
        "the TVM v0.18 ground-truth data is not in any of "
        f"{', '.join(str(p) for p in candidates)}; set EDGETUNE_SHARED_DATA to the shared/data folder"
    )
