"""A prepared CUDA check folder: its file names, limits and hashes, and the one error the check reports.

Shared by :mod:`bench.gpu_prepare` (which builds the folder here) and :mod:`bench.gpu_check` (which runs it on the
GPU machine); it imports nothing of TVM or edgetune.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

MANIFEST = "check.json"
RUNTIME = "runtime.tar.gz"
FORMAT = 1
MAX_BYTES = 60 * 2**20
"""What a prepared folder may hold: the device tool carries 64 MiB in all."""
GPU_ARCH = "sm_90"
"""The lent GPUs are Hopper (H100, H200)."""
CUDART = "libcudart.so.13"
"""The CUDA runtime apache-tvm 0.27's ``libtvm_runtime_cuda.so`` is linked against."""
TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}
"""float32 against torch with TF32 off: differences come from the order of the sums alone."""

Say = Callable[[str], None]
MODEL = "bench.gpu_check:small_resnet"
"""The model ``prepare`` exports unless told another."""


class CheckError(Exception):
    """A one-line reason the check cannot go on."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
