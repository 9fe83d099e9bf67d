"""ModelV: the threshold rule, the untrained behaviour, and its precision on a real VTA space."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.errors import ConfigError
from toolkit.tuning.models.validity import ValidityModel, choose_threshold
from toolkit.backends import make_task


def test_threshold_is_the_smallest_reaching_the_precision_target():
    proba = np.array([0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])
    valid = np.array([1, 1, 1, 0, 1, 0, 0, 0], dtype=bool)
    # precision at each cut: 1, 1, 1, .75, .8, .67, .57, .5
    assert choose_threshold(proba, valid, 0.8) == 0.6
    assert choose_threshold(proba, valid, 0.9) == 0.8
    assert choose_threshold(proba, valid, 0.5) == 0.3


def test_threshold_keeps_ties_together_and_falls_back_to_best_precision():
    proba = np.array([0.9, 0.9, 0.5, 0.5])
    valid = np.array([1, 0, 1, 1], dtype=bool)
    assert choose_threshold(proba, valid, 0.7) == 0.5        # cut at 0.9 gives 0.5, at 0.5 gives 0.75
    assert choose_threshold(proba, valid, 0.99) == 0.5       # unreachable: the most precise cut


def test_untrained_model_lets_everything_through():
    X = np.arange(20, dtype=float).reshape(10, 2)
    for labels in (np.ones(10, bool), np.zeros(10, bool), np.r_[np.ones(8, bool), np.zeros(2, bool)]):
        v = ValidityModel(min_class=3).fit(X, labels)
        assert v.classifier_ is None
        assert v.predict(X).all()
        assert np.allclose(v.predict_proba(X), labels.mean())


def test_bad_input_is_a_config_error():
    with pytest.raises(ConfigError):
        ValidityModel(precision=1.5).fit(np.zeros((4, 1)), np.ones(4, bool))
    with pytest.raises(ConfigError):
        ValidityModel().fit(np.zeros((4, 1)), np.ones(3, bool))


def test_planted_region_precision_and_recall_on_held_out_points():
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 10, size=(1200, 3))
    valid = X[:, 0] * X[:, 1] < 30                                    # a product bound, like an SRAM size
    v = ValidityModel(precision=0.9, seed=0).fit(X[:400], valid[:400])
    pred = v.predict(X[400:])
    assert valid[400:][pred].mean() >= 0.85
    assert pred[valid[400:]].mean() >= 0.7
    assert 0.85 <= v.cv_precision_ <= 1.0


def test_precision_on_held_out_configs_of_the_vta_c2_space():
    """Compile-only labels of a random sample of resnet18.C2 on the Pynq VTA (edgetune's own
    lowering: about half the space is valid); ModelV trained on half, scored on the other half."""
    from toolkit.boards import resolve_board
    from toolkit.tuning.core.template import BuildError
    from toolkit.workloads import parse_workload

    task = make_task(parse_workload("resnet18.C2"), resolve_board("vta-fsim"))
    space = task.space
    idx = space.sample(320, np.random.default_rng(0))
    labels = []
    for i in idx:
        try:
            task.template.build(space.get(i))
            labels.append(True)
        except BuildError:
            labels.append(False)
    valid = np.array(labels)
    X = space.features(idx)
    assert 0.2 < valid.mean() < 0.8
    v = ValidityModel(precision=0.9, seed=0).fit(X[:160], valid[:160])
    pred = v.predict(X[160:])
    precision = valid[160:][pred].mean()
    recall = pred[valid[160:]].mean()
    assert precision >= 0.85, (precision, recall)
    assert recall >= 0.5, (precision, recall)
