"""The validity part of the ML2 family: ModelV and the post-compile validity model.

**ModelV** (:class:`~toolkit.tuning.models.validity.ValidityModel` on knob features) learns from every attempt so
far, trials and free negatives (configs that failed to compile) alike, and drops the candidates it predicts
invalid before they are compiled. With ``hidden`` (the ``v_hidden`` option, an edgetune addition) a second
validity model on knob **and** compile features checks the survivors again once they are compiled.

Lifecycle: :meth:`ValidityFilter.record` every attempt as it is known; :meth:`~ValidityFilter.fit` once per round
(before the round's candidates are filtered); :meth:`~ValidityFilter.split` the candidates,
:meth:`~ValidityFilter.split_compiled` the compiled ones.

>>> part = ValidityFilter(precision=0.9, hidden=False)
>>> part.split([3, 1], lambda idx: np.zeros((len(idx), 1)))     # nothing learnt yet: every candidate passes
([3, 1], [])
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Sequence

import numpy as np

from toolkit.tuning.models.validity import ValidityModel

Features = Callable[[Sequence[int]], np.ndarray]


class ValidityFilter:
    """ModelV (``model``) and, with ``hidden``, the post-compile validity model (``model_hidden``), with the
    counts of what each rejected and the seconds spent fitting them."""

    def __init__(self, precision: float, hidden: bool) -> None:
        self.precision, self.hidden = precision, hidden
        self.index: list[int] = []               # every trial and every free negative
        self.valid: list[bool] = []
        self.model: ValidityModel | None = None
        self.model_hidden: ValidityModel | None = None
        self.rejected = self.hidden_rejected = 0
        self.fit_s = 0.0

    def record(self, index: int, valid: bool) -> None:
        """One attempt: a trial (valid or not), or a compile failure (a free negative)."""
        self.index.append(index)
        self.valid.append(valid)

    def fit(self, knob_features: Features, compiled_features: Features | None, compiled: Container[int],
            seed: int) -> None:
        """ModelV on every attempt; the post-compile model on the attempts in ``compiled`` (when ``hidden`` and
        the task compiles ahead: ``compiled_features`` is given)."""
        if not self.index:
            return
        t0 = time.perf_counter()
        self.model = ValidityModel(precision=self.precision, seed=seed)
        self.model.fit(knob_features(self.index), np.asarray(self.valid))
        self.model_hidden = None
        if self.hidden and compiled_features is not None:
            rows = [(i, ok) for i, ok in zip(self.index, self.valid) if i in compiled]
            if rows:
                self.model_hidden = ValidityModel(precision=self.precision, seed=seed)
                self.model_hidden.fit(compiled_features([i for i, _ in rows]), np.asarray([ok for _, ok in rows]))
        self.fit_s += time.perf_counter() - t0

    def split(self, cands: list[int], knob_features: Features) -> tuple[list[int], list[int]]:
        """(kept, rejected) by ModelV, both in input order."""
        if not cands or self.model is None:
            return list(cands), []
        ok = self.model.predict(knob_features(cands))
        self.rejected += int((~ok).sum())
        return [c for c, o in zip(cands, ok) if o], [c for c, o in zip(cands, ok) if not o]

    def split_compiled(self, alive: list[int], compiled_features: Features, count: bool = True
                       ) -> tuple[list[int], list[int]]:
        """(kept, rejected) by the post-compile model (all kept without one). ``count``: add the rejects to
        :attr:`hidden_rejected`."""
        if not alive or self.model_hidden is None:
            return list(alive), []
        ok = self.model_hidden.predict(compiled_features(alive))
        if count:
            self.hidden_rejected += int((~ok).sum())
        return [c for c, o in zip(alive, ok) if o], [c for c, o in zip(alive, ok) if not o]

    def likeliest(self, rejected: list[int], knob_features: Features) -> list[int]:
        """ModelV's rejects, most likely valid first."""
        assert self.model is not None
        p = self.model.predict_proba(knob_features(rejected))
        return [rejected[j] for j in np.argsort(-p, kind="stable")]

    def stats(self) -> dict[str, float]:
        v = self.model
        return {"v_fit_s": self.fit_s,
                "v_threshold": float(v.threshold_) if v is not None else 0.0,
                "v_cv_precision": float(v.cv_precision_) if v is not None else 0.0}
