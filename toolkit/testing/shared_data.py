"""Where the ground truth from the real TVM v0.18 VTA stack lives: ``tests/data`` of the checkout.

The files (TVM's instruction dumps and the simulator's counters, see ``tests/data/vta_tvm018_programs/README.md``)
are in the repository, so a clone alone runs the fidelity tests and the simulator benchmark.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[2] / "tests" / "data"


def shared_data_dir() -> Path:
    """The ground-truth folder; :class:`FileNotFoundError` saying what is missing if it is absent (an
    installed edgetune without its repository)."""
    if not (DATA_DIR / "vta_tvm018_resnet18_truth.jsonl").is_file():
        raise FileNotFoundError(f"the TVM v0.18 ground-truth data is not in {DATA_DIR}; run from an edgetune "
                                "checkout (the files live in tests/data)")
    return DATA_DIR
