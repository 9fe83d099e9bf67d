"""ModelV: a validity classifier with a decision threshold chosen from the data.

ML2Tuner (Cha et al., arXiv 2411.10764) drops candidates that a validity model predicts invalid
before they reach the board. The paper does not give the model or its threshold; here ModelV is an
XGBoost classifier on the same knob features as the performance model, trained on every attempt
(valid or not, including compile failures found while extracting compile-time features), and its
threshold is the smallest one whose **out-of-fold precision** (the share of predicted-valid configs
that really are valid) reaches ``precision`` — so as many configs as possible pass while the ones
that pass are rarely invalid.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.uniform(0, 1, size=(300, 2)); y = X[:, 0] + X[:, 1] < 1.0   # planted valid region
>>> v = ValidityModel(precision=0.9, seed=0).fit(X, y)
>>> bool(v.predict(np.array([[0.1, 0.1]]))[0]), bool(v.predict(np.array([[0.9, 0.9]]))[0])
(True, False)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolkit.errors import ConfigError

CLASSIFIER_PARAMS: dict[str, Any] = {
    "n_estimators": 60,
    "max_depth": 4,
    "learning_rate": 0.3,
    "min_child_weight": 1,
    "subsample": 1.0,
    "n_jobs": 1,
    "verbosity": 0,
}
"""Booster parameters of the classifier (small: a few hundred to a few thousand rows)."""


def choose_threshold(proba: np.ndarray, valid: np.ndarray, precision: float) -> float:
    """The smallest threshold ``t`` such that configs with ``proba >= t`` are valid at rate ``>= precision``.

    ``proba`` are out-of-sample probabilities of validity, ``valid`` the true labels. When no
    threshold reaches the target, the one with the highest precision (the smallest such ``t``) is
    returned. Configs at exactly ``t`` count as predicted valid.

    >>> choose_threshold(np.array([0.1, 0.4, 0.6, 0.8, 0.9]), np.array([0, 1, 0, 1, 1]), 0.75)
    0.4
    >>> choose_threshold(np.array([0.1, 0.4, 0.6, 0.8, 0.9]), np.array([0, 1, 0, 1, 1]), 1.0)
    0.8
    """
    proba = np.asarray(proba, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool)
    order = np.argsort(-proba, kind="stable")
    p, v = proba[order], valid[order]
    # Candidate cut positions: after the last of each run of equal probabilities.
    last = np.r_[p[1:] != p[:-1], True]
    tp = np.cumsum(v)[last]
    n_pass = (np.arange(1, len(p) + 1))[last]
    prec = tp / n_pass
    cuts = p[last]
    ok = np.flatnonzero(prec >= precision - 1e-12)
    if len(ok):
        return float(cuts[ok[-1]])
    best = np.flatnonzero(prec >= prec.max() - 1e-12)
    return float(cuts[best[-1]])


class ValidityModel:
    """P(valid | features) with a cross-validated decision threshold (sklearn style).

    Parameters: ``precision`` — target precision of "predicted valid" (threshold rule above);
    ``cv`` — folds for the out-of-fold probabilities; ``min_class`` — below this many examples of
    either class the model is not trained and everything is predicted valid (nothing is known yet
    that could justify rejecting a config); ``seed``; any XGBoost parameter overriding
    :data:`CLASSIFIER_PARAMS`.
    Learned attributes: ``classifier_`` (``None`` when not trained), ``threshold_``,
    ``cv_precision_`` and ``cv_recall_`` (out-of-fold, at ``threshold_``), ``prior_`` (valid share).
    """

    def __init__(self, precision: float = 0.9, cv: int = 3, min_class: int = 3, seed: int = 0,
                 **params: Any) -> None:
        self.precision = precision
        self.cv = cv
        self.min_class = min_class
        self.seed = seed
        self.params = params

    def _classifier(self) -> Any:
        import xgboost as xgb

        return xgb.XGBClassifier(**{**CLASSIFIER_PARAMS, "random_state": int(self.seed), **self.params})

    def fit(self, X: np.ndarray, valid: np.ndarray) -> ValidityModel:
        """Train on features ``X`` and validity labels; choose the threshold; returns ``self``."""
        from sklearn.model_selection import StratifiedKFold

        if not 0.0 < self.precision <= 1.0:
            raise ConfigError(f"validity precision target {self.precision} must be in (0, 1]")
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(valid, dtype=bool).astype(np.int64)
        if len(X) != len(y) or len(X) == 0:
            raise ConfigError(f"validity model needs as many labels as rows, got {len(X)} rows and {len(y)} labels")
        self.prior_ = float(y.mean())
        n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
        self.classifier_ = None
        self.threshold_ = 0.0
        self.cv_precision_ = self.prior_
        self.cv_recall_ = 1.0
        if min(n_pos, n_neg) < self.min_class:
            return self
        folds = max(2, min(self.cv, n_pos, n_neg))
        oof = np.empty(len(y))
        splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=int(self.seed))
        for train, test in splitter.split(X, y):
            oof[test] = self._classifier().fit(X[train], y[train]).predict_proba(X[test])[:, 1]
        self.threshold_ = choose_threshold(oof, y.astype(bool), self.precision)
        passed = oof >= self.threshold_
        self.cv_precision_ = float(y[passed].mean()) if passed.any() else 0.0
        self.cv_recall_ = float(passed[y == 1].mean())
        self.classifier_ = self._classifier().fit(X, y)
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Probability of validity per row (the training prior while untrained)."""
        X = np.asarray(X, dtype=np.float32)
        if self.classifier_ is None:
            return np.full(len(X), self.prior_)
        return self.classifier_.predict_proba(X)[:, 1]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Boolean mask: predicted valid (``predict_proba >= threshold_``)."""
        if self.classifier_ is None:
            return np.ones(len(np.asarray(X)), dtype=bool)
        return self.predict_proba(X) >= self.threshold_
