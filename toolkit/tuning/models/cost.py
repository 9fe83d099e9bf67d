"""AutoTVM's XGBoost cost model, sklearn style.

Same booster parameters and training recipe as ``autotvm/tuner/xgboost_cost_model.py``:
``max_depth=3, gamma=1e-4, min_child_weight=1, subsample=1, eta=0.3, lambda=1, alpha=0``;
``loss="rank"`` trains ``rank:pairwise`` and ``loss="reg"`` trains a squared-error regression on
``y / max(y)``; boosting stops when the training-set *average recall@plan_size* has not improved
for ``early_stopping_rounds`` rounds (AutoTVM: 20), bounded by ``max_rounds``.

>>> import numpy as np
>>> X = np.arange(40, dtype=float).reshape(20, 2); y = X[:, 0] ** 2
>>> m = XGBCostModel(loss="reg", seed=0).fit(X, y)
>>> bool(m.predict(X[-1:])[0] > m.predict(X[:1])[0])
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolkit.errors import ConfigError

XGB_PARAMS: dict[str, Any] = {
    "max_depth": 3,
    "gamma": 0.0001,
    "min_child_weight": 1,
    "subsample": 1.0,
    "eta": 0.3,
    "lambda": 1.0,
    "alpha": 0.0,
}
"""AutoTVM's booster parameters."""


def recall_curve(ranks: np.ndarray) -> np.ndarray:
    """AutoTVM's ``recall_curve(trial_ranks)``: ``curve[i] = #{j < i : ranks[j] <= i} / (i + 1)``.

    ``ranks[j]`` is the true rank (0 = best) of the ``j``-th config in predicted order.
    Vectorised: config ``j`` counts from ``i = max(j + 1, ranks[j])`` on.
    """
    n = len(ranks)
    start = np.maximum(np.arange(1, n + 1), np.asarray(ranks, dtype=np.int64))
    counts = np.cumsum(np.bincount(start[start < n], minlength=n))
    return counts / np.arange(1, n + 1)


def average_recall(preds: np.ndarray, labels: np.ndarray, top: int) -> float:
    """AutoTVM's ``a-recall@top``: the mean of the recall curve over the first ``top`` picks."""
    order = np.argsort(-preds, kind="stable")
    true_rank = np.empty(len(labels), dtype=np.int64)
    true_rank[np.argsort(-labels, kind="stable")] = np.arange(len(labels))
    curve = recall_curve(true_rank[order])
    return float(np.sum(curve[:top]) / top)


class XGBCostModel:
    """Gradient-boosted trees predicting a score that is larger for faster configs.

    Parameters (stored as given, sklearn style): ``loss`` ("rank" or "reg"), ``seed``,
    ``plan_size`` (the N of the recall@N stopping metric), ``max_rounds``,
    ``early_stopping_rounds``, plus any XGBoost parameter overriding :data:`XGB_PARAMS`.
    Learned attributes: ``booster_``, ``n_rounds_``, ``y_max_``.
    """

    def __init__(self, loss: str = "rank", seed: int = 0, plan_size: int = 64, max_rounds: int = 400,
                 early_stopping_rounds: int = 20, **params: Any) -> None:
        self.loss = loss
        self.seed = seed
        self.plan_size = plan_size
        self.max_rounds = max_rounds
        self.early_stopping_rounds = early_stopping_rounds
        self.params = params

    def get_params(self) -> dict[str, Any]:
        """Constructor parameters (for cloning)."""
        return {"loss": self.loss, "seed": self.seed, "plan_size": self.plan_size, "max_rounds": self.max_rounds,
                "early_stopping_rounds": self.early_stopping_rounds, **self.params}

    def _booster_params(self) -> dict[str, Any]:
        if self.loss not in ("rank", "reg"):
            raise ConfigError(f"cost model loss {self.loss!r} must be 'rank' or 'reg'")
        objective = "rank:pairwise" if self.loss == "rank" else "reg:squarederror"
        return {**XGB_PARAMS, "objective": objective, "seed": int(self.seed), "nthread": 1,
                "verbosity": 0, "disable_default_eval_metric": 1, **self.params}

    def fit(self, X: np.ndarray, y: np.ndarray) -> XGBCostModel:
        """Train on features ``X`` and throughputs ``y`` (0 for failed configs); returns ``self``."""
        import xgboost as xgb

        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.float64)
        if len(X) != len(y) or len(X) == 0:
            raise ConfigError(f"cost model needs as many targets as rows, got {len(X)} rows and {len(y)} targets")
        self.y_max_ = float(max(np.max(y), 1e-8))
        labels = y / self.y_max_
        # AutoTVM shuffles the training set before building the DMatrix.
        order = np.random.default_rng(self.seed).permutation(len(X))
        dtrain = xgb.DMatrix(X[order], labels[order])
        top = max(1, min(self.plan_size, len(X)))

        def a_recall(preds: np.ndarray, data: Any) -> tuple[str, float]:
            return f"a-recall@{top}", average_recall(preds, data.get_label(), top)

        self.booster_ = xgb.train(
            self._booster_params(), dtrain, num_boost_round=self.max_rounds, evals=[(dtrain, "tr")],
            custom_metric=a_recall, maximize=True, early_stopping_rounds=self.early_stopping_rounds,
            verbose_eval=False,
        )
        self.n_rounds_ = self.booster_.num_boosted_rounds()
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores of ``X`` (higher = faster); all trees are used, as AutoTVM does."""
        return self.booster_.inplace_predict(np.asarray(X, dtype=np.float32))
