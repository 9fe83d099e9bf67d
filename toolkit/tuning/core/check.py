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


MODEL_RTOL = 1e-3
"""A model's output matches PyTorch's when ``max |got - torch| <= MODEL_RTOL * max |torch| + MODEL_ATOL``."""
MODEL_ATOL = 1e-5


def compare_model_outputs(outputs: list[list[np.ndarray]], reference: list[list[np.ndarray]]) -> tuple[bool, str]:
    """Each output of each input against PyTorch's (``reference``, the same nesting), within :data:`MODEL_RTOL` of
    its largest magnitude."""
    worst = 0.0
    for got, want in zip(outputs, reference):
        for g, r in zip(got, want):
            if g.shape != r.shape:
                return False, f"output shape {list(g.shape)}, PyTorch's {list(r.shape)}"
            err = float(np.max(np.abs(g.astype(np.float64) - r))) if g.size else 0.0
            scale = float(np.max(np.abs(r))) if r.size else 0.0
            worst = max(worst, err / max(scale, 1e-30))
            if not err <= MODEL_RTOL * scale + MODEL_ATOL:
                return False, f"max |error| {err:.3g} against PyTorch's max |output| {scale:.3g}"
    return True, f"equal to PyTorch within {MODEL_RTOL:g} of its largest output (worst {worst:.2g})"
