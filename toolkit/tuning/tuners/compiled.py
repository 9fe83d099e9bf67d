"""The compiled-features part of the ML2 family: what the compiler reveals of configs before they are measured.

``ml2tuner`` and ``chameleon-ml2`` compile their candidates without measuring them (the task's
``compile_features``: no board time), keep each config's features, learn from the configs that fail to
compile (free negatives, never trials) and, with a transfer model, add its estimate of each compiled
config as the feature :data:`PRIOR_KEY`.

>>> from toolkit.tuning.core.space import CategoricalKnob, ConfigSpace
>>> space = ConfigSpace([CategoricalKnob("t", [1, 2, 3])])
>>> part = CompiledFeatures(lambda idx: [{"uops": float(i)} for i in idx])
>>> part.compile([2, 0]), part.keys, part.matrix([0, 1]).tolist()
([2, 0], ['uops'], [[0.0], [nan]])
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.models.advanced import TIME_PREFIX

PRIOR_KEY = "time.prior"
"""The compile feature holding the transfer model's estimate (seconds) of a config."""

CompileFn = Callable[[Sequence[int]], list[dict[str, float] | MeasureResult]]


class CompiledFeatures:
    """Compile features by config index, the compile failures, and the transfer model's estimates.

    ``compile_fn`` is the task's ``compile_features`` (``None`` where the task cannot compile ahead: every
    config then counts as compiled, with no features); ``on_failure(index)`` is told of each compile failure
    as it is found. ``features`` (index -> feature dict), ``keys`` (feature names in first-seen order),
    ``failed``, ``prior`` (the transfer model in use or ``None``).
    """

    def __init__(self, compile_fn: CompileFn | None, *, prior: Any = None,
                 on_failure: Callable[[int], None] | None = None) -> None:
        self.compile_fn = compile_fn
        self.prior = prior if compile_fn is not None else None
        self.on_failure = on_failure
        self.features: dict[int, dict[str, float]] = {}
        self.keys: list[str] = []
        self._key_set: set[str] = set()
        self.failed: set[int] = set()
        self.compiled = 0
        self.compile_failed = 0
        self.compile_s = 0.0
        self._table = np.full((1, 0), np.nan)    # rows of matrix(), built on demand; the last row is all NaN
        self._row: dict[int, int] = {}
        self._pending: list[int] = []           # configs with features but no row yet

    @property
    def available(self) -> bool:
        """Whether the task compiles ahead of measuring."""
        return self.compile_fn is not None

    def __contains__(self, index: int) -> bool:
        return index in self.features

    def compile(self, indices: Sequence[int]) -> list[int]:
        """Compile the configs without features yet; the given ones that did not fail, in input order."""
        todo = [i for i in indices if i not in self.features and i not in self.failed]
        if todo and self.compile_fn is not None:
            t0 = time.perf_counter()
            out = self.compile_fn(todo)
            self.compile_s += time.perf_counter() - t0
            self.compiled += len(todo)
            for i, feat in zip(todo, out):
                if isinstance(feat, MeasureResult):
                    self.failed.add(i)
                    self.compile_failed += 1
                    if self.on_failure is not None:
                        self.on_failure(i)
                else:
                    self._store(i, feat)
            self._add_prior([i for i in todo if i in self.features])
        elif todo:
            for i in todo:
                self.features[i] = {}
            self._pending.extend(todo)
        return [i for i in indices if i not in self.failed]

    def _store(self, index: int, feat: dict[str, float]) -> None:
        self.features[index] = {k: float(v) for k, v in feat.items()}
        self._pending.append(index)
        for k in feat:
            self._add_key(k)

    def _add_key(self, key: str) -> None:
        if key not in self._key_set:
            self._key_set.add(key)
            self.keys.append(key)

    def use_prior(self, model: Any) -> None:
        """Estimate every compiled config with ``model`` (a fitted transfer model) from now on."""
        if self.compile_fn is None:
            return
        self.prior = model
        for feat in self.features.values():
            feat.pop(PRIOR_KEY, None)
        self._add_prior(list(self.features))
        self._invalidate()   # every row changed

    def _add_prior(self, indices: Sequence[int]) -> None:
        """The transfer model's seconds of freshly compiled configs, as the feature :data:`PRIOR_KEY`."""
        if self.prior is None or not indices:
            return
        pred = self.prior.predict_seconds([self.features[i] for i in indices])
        for i, v in zip(indices, pred):
            self.features[i][PRIOR_KEY] = float(v)
        self._add_key(PRIOR_KEY)

    def has_prior(self, index: int) -> bool:
        return PRIOR_KEY in self.features.get(index, {})

    def prior_seconds(self, index: int) -> float:
        return self.features[index][PRIOR_KEY]

    def prior_scale(self, xs: Sequence[int], ys: Sequence[float], flops: float) -> float:
        """Measured / estimated seconds (geometric mean over the valid trials ``xs``/``ys`` (throughputs);
        1 before any)."""
        ratios = [flops / y / self.features[x][PRIOR_KEY] for x, y in zip(xs, ys) if y > 0 and self.has_prior(x)]
        return float(np.exp(np.mean(np.log(ratios)))) if ratios else 1.0

    def has_time_terms(self) -> bool:
        """Whether the compiler reports additive time terms (``time.*`` features, as VTA's does)."""
        return any(k.startswith(TIME_PREFIX) for k in self.keys)

    def matrix(self, indices: Sequence[int]) -> np.ndarray:
        """One row per config, one column per key (NaN where a config lacks one)."""
        self._sync_table()
        nan_row = len(self._table) - 1
        return self._table[np.fromiter((self._row.get(i, nan_row) for i in indices), np.int64, len(indices))]

    def _sync_table(self) -> None:
        """Give every config with features a row of :meth:`matrix`'s table; a new key rebuilds the table.

        A config's features only change when it is compiled (a new row) or when the prior is replaced
        (:meth:`use_prior`, which rebuilds every row)."""
        if self._table.shape[1] != len(self.keys):
            self._invalidate()
        elif not self._pending:
            return
        if not self._row:
            self._table = np.full((1, len(self.keys)), np.nan)
        todo = list(dict.fromkeys(i for i in self._pending if i not in self._row))
        self._pending = []
        rows = np.array([[self.features[i].get(k, np.nan) for k in self.keys] for i in todo],
                        dtype=np.float64).reshape(len(todo), len(self.keys))
        first = len(self._table) - 1
        self._table = np.vstack([self._table[:-1], rows, self._table[-1:]])
        self._row.update((i, first + n) for n, i in enumerate(todo))

    def _invalidate(self) -> None:
        """Drop every row of :meth:`matrix`'s table: the next call builds it afresh."""
        self._row.clear()
        self._pending = list(self.features)
