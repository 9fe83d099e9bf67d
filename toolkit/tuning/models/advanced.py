"""ML2Tuner's ModelA: a time model on the compiler's additive time terms, corrected by boosted trees.

Tree ensembles on raw counts fit the smooth ``throughput ~ 1 / sum(weight * count)`` relation of an
accelerator only in coarse steps, and with the few hundred measurements of a tuning run they gain
little over knob features alone. The compiler, though, knows quantities that add up to the device
time (for VTA: bus beats per memory type, DMA rows, padding writes, instructions, GEMM/ALU cycles;
the ``time.*`` features of :mod:`toolkit.vta.features`). ModelA therefore has two stages:

1. **time model** — non-negative least squares of the measured time (``1 / throughput``) on the
   time terms, with separate weights per group (for VTA: without / with virtual threads, where the
   load, compute and store modules serialise / overlap), weighted for relative error;
2. **boosted trees** — XGBoost with AutoTVM's booster parameters on all features (knobs, compile
   features and the time model's estimate), starting from the estimate (``base_margin``) so the
   trees learn its residual — or from zero, with the estimate only as an input, when that does
   better on a held-out fifth of the rows (a task whose time the terms explain poorly). Rounds:
   early stopping on that fifth, then a refit on all rows.

Without time terms (a template that reports none, or too few valid rows) stage 1 is skipped and
ModelA is plain boosted trees with the same recipe.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> terms = rng.uniform(1, 10, size=(60, 2)); X = np.hstack([rng.uniform(size=(60, 1)), terms])
>>> y = 1.0 / (2 * terms[:, 0] + terms[:, 1])
>>> m = AdvancedCostModel(term_cols=[1, 2], seed=0).fit(X[:40], y[:40])
>>> err = np.abs(m.predict(X[40:]) * m.y_max_ - y[40:]) / y[40:]
>>> bool(err.max() < 0.05)
True
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from toolkit.tuning.models.cost import XGB_PARAMS

MIN_VALID_FOR_TIME_MODEL = 8
"""Valid rows needed before the time model is fitted (fewer: trees only)."""


class AdvancedCostModel:
    """ModelA: NNLS time model on ``term_cols`` (per group of ``group_col``) + residual boosted trees.

    Parameters (stored as given): ``term_cols`` (column indices of additive time terms),
    ``group_col`` (a column whose values ``<= 1`` / ``> 1`` select separate term weights; None: one
    group), ``seed``, ``max_rounds``, ``early_stopping_rounds``, ``val_fraction``, ``min_rounds``
    (rounds used when there are too few rows to hold some out), plus XGBoost parameters overriding
    :data:`~toolkit.tuning.models.cost.XGB_PARAMS`.
    Learned attributes: ``y_max_``, ``coef_`` (None without a time model), ``margin_`` (the trees
    start from the time model's estimate), ``n_rounds_``, ``booster_``.
    Scores are throughputs divided by ``y_max_`` (as :class:`~toolkit.tuning.models.cost.XGBCostModel`
    with ``loss="reg"``).
    """

    def __init__(self, term_cols: Sequence[int] = (), group_col: int | None = None, seed: int = 0,
                 max_rounds: int = 400, early_stopping_rounds: int = 20, val_fraction: float = 0.2,
                 min_rounds: int = 30, **params: Any) -> None:
        self.term_cols = term_cols
        self.group_col = group_col
        self.seed = seed
        self.max_rounds = max_rounds
        self.early_stopping_rounds = early_stopping_rounds
        self.val_fraction = val_fraction
        self.min_rounds = min_rounds
        self.params = params

    # -- stage 1: time model ---------------------------------------------------------------------
    def _design(self, X: np.ndarray) -> np.ndarray:
        terms = X[:, list(self.term_cols)].astype(np.float64)
        terms = np.nan_to_num(terms, nan=0.0) / self.scale_
        cols = [np.ones((len(X), 1))]
        if self.group_col is None:
            cols.append(terms)
        else:
            many = (np.nan_to_num(X[:, self.group_col], nan=1.0) > 1)[:, None]
            cols += [terms * ~many, terms * many]
        return np.hstack(cols)

    def _fit_time(self, X: np.ndarray, labels: np.ndarray) -> None:
        from scipy.optimize import nnls

        self.coef_ = None
        ok = labels > 0
        if not len(self.term_cols) or ok.sum() < MIN_VALID_FOR_TIME_MODEL:
            return
        terms = np.nan_to_num(X[ok][:, list(self.term_cols)].astype(np.float64), nan=0.0)
        self.scale_ = np.maximum(np.abs(terms).max(axis=0), 1e-12)
        t = 1.0 / labels[ok]          # time in units of the fastest training config's time
        w = labels[ok]                # 1 / t: relative errors
        A = self._design(X[ok])
        self.coef_, _ = nnls(A * w[:, None], t * w)

    def _estimate(self, X: np.ndarray) -> np.ndarray:
        """The time model's throughput estimate (label units); zeros without a time model."""
        if self.coef_ is None:
            return np.zeros(len(X))
        t = self._design(X) @ self.coef_
        return 1.0 / np.maximum(t, 1e-3)

    # -- stage 2: residual trees ------------------------------------------------------------------
    def _booster_params(self) -> dict[str, Any]:
        return {**XGB_PARAMS, "objective": "reg:squarederror", "seed": int(self.seed), "nthread": 1,
                "verbosity": 0, **self.params}

    def fit(self, X: np.ndarray, y: np.ndarray) -> AdvancedCostModel:
        """Train on features ``X`` and throughputs ``y`` (0 for failed configs); returns ``self``."""
        import xgboost as xgb

        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self.y_max_ = float(max(np.max(y), 1e-8))
        labels = y / self.y_max_
        self._fit_time(X, labels)
        est = self._estimate(X)
        Xe = np.hstack([X, est[:, None]]).astype(np.float32)
        params = self._booster_params()
        zero = np.zeros(len(X))
        margins = [est, zero] if self.coef_ is not None else [zero]
        rounds, self.margin_ = self.min_rounds, self.coef_ is not None
        n_val = int(self.val_fraction * len(X))
        if n_val >= 5:
            order = np.random.default_rng(self.seed).permutation(len(X))
            va, tr = order[:n_val], order[n_val:]
            best = None
            for m in margins:
                dtr = xgb.DMatrix(Xe[tr], labels[tr], base_margin=m[tr], nthread=1)
                dva = xgb.DMatrix(Xe[va], labels[va], base_margin=m[va], nthread=1)
                b = xgb.train({**params, "eval_metric": "rmse"}, dtr, num_boost_round=self.max_rounds,
                              evals=[(dva, "val")], early_stopping_rounds=self.early_stopping_rounds,
                              verbose_eval=False)
                if best is None or b.best_score < best[0]:
                    best = (b.best_score, int(b.best_iteration) + 1, m is est)
            _, rounds, self.margin_ = best
        base = est if self.margin_ else zero
        self.booster_ = xgb.train(params, xgb.DMatrix(Xe, labels, base_margin=base, nthread=1), num_boost_round=rounds)
        self.n_rounds_ = rounds
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted throughput / ``y_max_`` of ``X`` (higher = faster)."""
        import xgboost as xgb

        X = np.asarray(X, dtype=np.float64)
        est = self._estimate(X)
        Xe = np.hstack([X, est[:, None]]).astype(np.float32)
        return self.booster_.predict(xgb.DMatrix(Xe, base_margin=est if self.margin_ else np.zeros(len(X)), nthread=1))


TIME_PREFIX = "time."
"""Compile features with this prefix are additive time terms (stage 1's columns)."""
GROUP_KEY = "threads.total"
"""The compile feature that selects the time model's group (VTA: virtual threads; > 1 overlaps modules)."""


def time_columns(keys: Sequence[str], offset: int = 0) -> dict[str, Any]:
    """``term_cols`` and ``group_col`` for compile-feature columns ``keys`` placed after ``offset`` others.

    >>> time_columns(["loop.h0", "time.pad", "threads.total", "time.insns"], offset=3)
    {'term_cols': [4, 6], 'group_col': 5}
    """
    keys = list(keys)
    return {"term_cols": [offset + j for j, k in enumerate(keys) if k.startswith(TIME_PREFIX)],
            "group_col": offset + keys.index(GROUP_KEY) if GROUP_KEY in keys else None}
