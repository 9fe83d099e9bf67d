"""This machine's roofs (the dashboard's roofline of ``local``), measured once per process: a float32 matrix
product's rate and a large copy's bandwidth.

They are what numpy's BLAS and memory copy reach here, on every core numpy uses: a floor under the true peaks,
honest enough to show how far a tuned kernel is from them.
"""

from __future__ import annotations

import time
from functools import lru_cache

import numpy as np

from toolkit.backends.base import Roofline
from toolkit.harness.environment import cpu_name

MATMUL_N = 1024
COPY_BYTES = 256 << 20


def _best_of(fn, repeat: int = 5) -> float:  # noqa: ANN001
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@lru_cache(maxsize=1)
def measured_roofline() -> Roofline:
    """The float32 GEMM rate (GFLOP/s) and copy bandwidth (GB/s, bytes read plus written) of this machine."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32) for _ in range(2))
    gemm_s = _best_of(lambda: a @ b)
    src = np.ones(COPY_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    copy_s = _best_of(lambda: np.copyto(dst, src))
    return Roofline(2 * MATMUL_N ** 3 / gemm_s / 1e9, 2 * COPY_BYTES / copy_s / 1e9,
                    f"measured here ({cpu_name()}): numpy float32 matmul {MATMUL_N}x{MATMUL_N}, copy of "
                    f"{COPY_BYTES >> 20} MiB")
