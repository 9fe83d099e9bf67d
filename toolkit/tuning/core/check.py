"""The one output check: does a kernel's output match the template's numpy reference?

>>> import numpy as np
>>> check_output(np.ones(3), np.ones(3), exact=True)
(True, 'bit-exact')
>>> check_output(np.zeros(4, np.float32), np.ones(4, np.float32), exact=False)[1]
'4 of 4 outputs differ from the reference (max abs error 1)'
"""

from __future__ import annotations

import numpy as np

RTOL = 1e-3
ATOL = 1e-3
"""Tolerance of float32 outputs (accumulations in different orders); integer outputs must be bit-exact."""


def check_output(got: np.ndarray, expected: np.ndarray, *, exact: bool) -> tuple[bool, str]:
    """(matches, one-line verdict): bit-exact when ``exact``, else within :data:`RTOL`/:data:`ATOL`."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return False, f"output shape {list(got.shape)} != reference {list(expected.shape)}"
    if exact:
        bad = got != expected
    else:
        bad = ~np.isclose(got, expected, rtol=RTOL, atol=ATOL)
    if not bad.any():
        return True, "bit-exact" if exact else f"within rtol {RTOL:g}"
    message = f"{int(bad.sum())} of {bad.size} outputs differ from the reference"
    if not exact:
        with np.errstate(invalid="ignore"):
            message += f" (max abs error {float(np.nanmax(np.abs(got - expected))):.3g})"
    return False, message
