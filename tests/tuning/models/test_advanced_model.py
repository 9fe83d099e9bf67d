"""ModelA (AdvancedCostModel): the time model on additive terms and its residual trees."""

import numpy as np

from toolkit.tuning.models.advanced import AdvancedCostModel, time_columns
from toolkit.tuning.models.cost import XGBCostModel


def additive_task(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Knob-like columns, two time terms and a thread count; time = terms weighted, halved by threads."""
    rng = np.random.default_rng(seed)
    knobs = rng.integers(1, 9, size=(n, 3)).astype(float)
    terms = np.column_stack([knobs[:, 0] * knobs[:, 1] * 10, 400 / knobs[:, 2]])
    threads = rng.integers(1, 3, size=n).astype(float)
    time = np.where(threads > 1, 0.6, 1.0) * (3 * terms[:, 0] + terms[:, 1]) + 50
    return np.column_stack([knobs, terms, threads]), 1.0 / time


def rmse(model, X_tr, y_tr, X_te, y_te) -> float:
    model.fit(X_tr, y_tr)
    return float(np.sqrt(np.mean((model.predict(X_te) * model.y_max_ - y_te) ** 2)))


def test_time_model_beats_trees_on_an_additive_cost_with_few_rows():
    X, y = additive_task(400, seed=0)
    tr, te = slice(0, 60), slice(60, None)
    cols = time_columns(["a", "time.x", "time.y", "threads.total"], offset=2)
    assert cols == {"term_cols": [3, 4], "group_col": 5}
    a = rmse(AdvancedCostModel(**cols, seed=0), X[tr], y[tr], X[te], y[te])
    trees = rmse(XGBCostModel(loss="reg", seed=0), X[tr], y[tr], X[te], y[te])
    assert a < 0.25 * trees


def test_without_time_terms_it_is_boosted_trees_and_handles_failed_rows():
    X, y = additive_task(120, seed=1)
    y[:10] = 0.0  # failed configs: throughput 0, never in the time model
    m = AdvancedCostModel(seed=0).fit(X, y)
    assert m.coef_ is None and not m.margin_ and m.n_rounds_ >= 1
    m = AdvancedCostModel(term_cols=[3, 4], group_col=5, seed=0).fit(X, y)
    assert m.coef_ is not None and np.all(m.coef_ >= 0)
    pred = m.predict(X)
    assert pred.shape == (120,) and np.corrcoef(pred[10:], y[10:])[0, 1] > 0.9
    tiny = AdvancedCostModel(term_cols=[3, 4], seed=0).fit(X[10:15], y[10:15])  # too few rows for either stage
    assert tiny.coef_ is None and tiny.predict(X[:3]).shape == (3,)
