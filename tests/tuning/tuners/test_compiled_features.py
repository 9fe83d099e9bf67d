"""CompiledFeatures: the feature matrix, kept row by row, equals one built afresh from the features after every
kind of change (new configs, new keys, failures, a prior added or replaced)."""

from __future__ import annotations

import numpy as np

from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.tuners.compiled import PRIOR_KEY, CompiledFeatures


def fresh(part: CompiledFeatures, indices: list[int]) -> np.ndarray:
    return np.array([[part.features.get(i, {}).get(k, np.nan) for k in part.keys] for i in indices],
                    dtype=np.float64).reshape(len(indices), len(part.keys))


class Prior:
    def __init__(self, scale: float) -> None:
        self.scale = scale

    def predict_seconds(self, feats: list[dict[str, float]]) -> np.ndarray:
        return np.array([self.scale * (1.0 + f.get("a", 0.0)) for f in feats])


def compile_fn(indices):
    """Config i: feature ``a`` always, ``b`` from index 10 on (a key that appears late); multiples of 7 fail."""
    out = []
    for i in indices:
        if i % 7 == 0:
            out.append(MeasureResult(index=i, config={}, error=ErrorClass.COMPILE_ERROR, message="no"))
        else:
            out.append({"a": float(i), **({"b": i / 2} if i >= 10 else {})})
    return out


def test_the_matrix_equals_one_built_afresh_after_every_change():
    part = CompiledFeatures(compile_fn)
    probe = list(range(30)) + [3, 3, 99]
    steps = [lambda: part.compile([1, 2, 3, 7]), lambda: part.compile([4, 5, 11, 12, 14]),
             lambda: part.use_prior(Prior(2.0)), lambda: part.compile([15, 16, 3]),
             lambda: part.use_prior(Prior(0.5)), lambda: part.compile(list(range(20, 30)))]
    assert part.matrix(probe).shape == (len(probe), 0)
    for step in steps:
        step()
        got = part.matrix(probe)
        np.testing.assert_array_equal(got, fresh(part, probe))
    assert PRIOR_KEY in part.keys and part.matrix([5])[0, part.keys.index(PRIOR_KEY)] == 0.5 * 6.0
    assert {7, 14, 21, 28} <= part.failed and np.isnan(part.matrix([7])).all()
