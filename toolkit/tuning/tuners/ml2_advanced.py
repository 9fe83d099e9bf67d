"""The advanced-model part of the ML2 family: ModelA, and under transfer the prior check.

**ModelA** ranks compiled candidates on knob features plus the compiler's features
(:class:`~toolkit.tuning.models.advanced.AdvancedCostModel`: a least-squares time model on the compiler's additive
``time.*`` terms whose residual boosted trees learn). With a transfer model the time model is one term, the
transferred estimate; with ``prior_check`` a second ModelA is fitted on the task's own features alone
(:class:`OwnModel`), both rank each round before it is measured, and :class:`PriorCheck` decides which ranks.

Lifecycle, once per round: :meth:`AdvancedRanker.score_round` (last round's two models on the configs measured
since), then :meth:`~AdvancedRanker.fit`; :meth:`~AdvancedRanker.predict` between fits. ``model`` is ``None`` until
:data:`MIN_VALID_FOR_A` valid measurements have compile features (the tuner then ranks with ModelP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from toolkit.tuning.models.advanced import AdvancedCostModel, time_columns
from toolkit.tuning.tuners.compiled import PRIOR_KEY, CompiledFeatures

MIN_VALID_FOR_A = 4
"""ModelA is fitted once this many valid measurements have compile features; before that ModelP ranks."""

Features = Callable[[Sequence[int]], np.ndarray]


class PriorCheck:
    """Which ModelA ranks under transfer: the one on the transferred estimate until the one on the task's
    own features has ordered more of the measured pairs right, significantly.

    Both models rank each round before it is measured (out of sample); :meth:`score` counts, over the
    round's pairs of configs whose throughputs differ, those only one of the two orders right. The task's
    own model takes over once its wins exceed the prior's by ``z`` standard deviations of a fair coin
    (and at least ``min_pairs`` pairs split them); the counts are cumulative, so the choice settles.

    >>> check = PriorCheck()
    >>> check.score([3.0, 2.0, 1.0], prior=np.array([1.0, 2.0, 3.0]), own=np.array([3.0, 2.0, 1.0]))
    >>> check.own_right, check.prior_right, check.prefers_own()
    (3, 0, False)
    >>> for _ in range(4):
    ...     check.score([3.0, 2.0, 1.0], prior=np.array([1.0, 2.0, 3.0]), own=np.array([3.0, 2.0, 1.0]))
    >>> check.prefers_own()
    True
    """

    def __init__(self, z: float = 2.0, min_pairs: int = 10) -> None:
        self.z, self.min_pairs = z, min_pairs
        self.own_right = self.prior_right = 0
        self.seen = 0                        # trials already scored

    def score(self, measured: Sequence[float], prior: np.ndarray, own: np.ndarray) -> None:
        """Count the pairs of ``measured`` throughputs that one model's scores order right and the other's not."""
        y = np.asarray(measured, dtype=np.float64)
        i, j = np.triu_indices(len(y), k=1)
        differ = y[i] != y[j]
        i, j = i[differ], j[differ]
        sign = np.sign(y[i] - y[j])
        ok_prior = np.sign(prior[i] - prior[j]) == sign
        ok_own = np.sign(own[i] - own[j]) == sign
        self.own_right += int(np.sum(ok_own & ~ok_prior))
        self.prior_right += int(np.sum(ok_prior & ~ok_own))

    def prefers_own(self) -> bool:
        """Whether the task's own model has won significantly so far."""
        n = self.own_right + self.prior_right
        return n >= self.min_pairs and self.own_right - self.prior_right > self.z * n ** 0.5


class OwnModel:
    """ModelA on the task's own features: a cost model that never sees the transferred estimate's column."""

    def __init__(self, model: AdvancedCostModel, prior_col: int) -> None:
        self.model, self.prior_col = model, prior_col

    def _drop(self, X: np.ndarray) -> np.ndarray:
        return np.delete(np.asarray(X, dtype=np.float64), self.prior_col, axis=1)

    def fit(self, X: np.ndarray, y: np.ndarray) -> OwnModel:
        self.model.fit(self._drop(X), y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict(self._drop(X))

    @property
    def y_max_(self) -> float:
        return self.model.y_max_


class AdvancedRanker:
    """ModelA (``model``) over ``compiled``'s features; ``features(indices)`` gives knob + compile features and
    ``knob_width`` says how many of their columns are knob features. ``drop_invalid`` keeps invalid trials out
    of the training set (else they count as throughput 0); ``prior_check`` fits the task's own ModelA beside the
    one on the transferred estimate."""

    def __init__(self, compiled: CompiledFeatures, features: Features, knob_width: int, *, max_rounds: int,
                 drop_invalid: bool = False, prior_check: bool = True) -> None:
        self.compiled, self.features, self.knob_width = compiled, features, knob_width
        self.max_rounds, self.drop_invalid, self.use_prior_check = max_rounds, drop_invalid, prior_check
        self.model: AdvancedCostModel | OwnModel | None = None
        self.check = PriorCheck()
        self.pair: dict[str, AdvancedCostModel | OwnModel] = {}   # with transfer: "prior" and "own", as last fitted
        self.fits = 0

    def fit(self, xs: Sequence[int], ys: Sequence[float], seed: int) -> None:
        """Refit on the measured configs ``xs`` (throughputs ``ys``) that have compile features, compiling
        resumed records first (lazily)."""
        self.model = None
        comp = self.compiled
        missing = [i for i in xs if i not in comp and i not in comp.failed]
        if missing:
            comp.compile(missing)
        keep = [(x, y) for x, y in zip(xs, ys) if x in comp and (y > 0 or not self.drop_invalid)]
        if sum(1 for _, y in keep if y > 0) < MIN_VALID_FOR_A:
            return
        X, y = self.features([x for x, _ in keep]), np.asarray([v for _, v in keep])
        self.fits += 1
        if comp.prior is None:
            self.model = AdvancedCostModel(**time_columns(comp.keys, self.knob_width), seed=seed,
                                           max_rounds=self.max_rounds).fit(X, y)
            return
        prior_col = self.knob_width + comp.keys.index(PRIOR_KEY)  # the time model is a + b * (transfer estimate)
        with_prior = AdvancedCostModel(term_cols=[prior_col], group_col=None, seed=seed,
                                       max_rounds=self.max_rounds).fit(X, y)
        self.pair = {"prior": with_prior}
        if self.use_prior_check:
            own_keys = [k for k in comp.keys if k != PRIOR_KEY]
            own = AdvancedCostModel(**time_columns(own_keys, self.knob_width), seed=seed, max_rounds=self.max_rounds)
            self.pair["own"] = OwnModel(own, prior_col).fit(X, y)
            self.fits += 1
        self.model = self.pair["own"] if self.check.prefers_own() else with_prior

    def score_round(self, xs: Sequence[int], ys: Sequence[float]) -> None:
        """Score the last fitted pair on the configs measured since the last call (``xs``, ``ys``: every trial)."""
        start, self.check.seen = self.check.seen, len(xs)
        if len(self.pair) < 2:
            return
        new = [(x, y) for x, y in zip(xs[start:], ys[start:]) if x in self.compiled]
        if len(new) > 1:
            X = self.features([x for x, _ in new])
            self.check.score([y for _, y in new], self.pair["prior"].predict(X), self.pair["own"].predict(X))

    def predict(self, indices: Sequence[int]) -> np.ndarray:
        """ModelA's scores of ``indices`` (normalised throughput; :attr:`model` must be fitted)."""
        assert self.model is not None
        return self.model.predict(self.features(indices))

    def stats(self) -> dict[str, float]:
        return {"a_fits": float(self.fits),
                "prior_dropped": float(self.model is not None and self.model is self.pair.get("own")),
                "pairs_own_right": float(self.check.own_right),
                "pairs_prior_right": float(self.check.prior_right)}
