"""Search over a space guided by a model: simulated annealing (:mod:`.annealing`), Chameleon's PPO agent
(:mod:`.ppo`) and adaptive sampling (:mod:`.sampling`).

Every optimizer follows :class:`Optimizer` and every sampler :class:`Sampler`, so a model-based tuner
(:class:`~toolkit.tuning.tuners.model_based.ModelBasedTuner`) takes any of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

if TYPE_CHECKING:
    import numpy as np

    from toolkit.tuning.core.space import ConfigSpace


class Optimizer(Protocol):
    """Finds the configs a scoring function rates best.

    ``find_maximums`` returns up to ``num`` distinct flat indices, best first, none in ``exclude``;
    ``elite`` (measured configs to start from) may be ignored. ``n_queries`` counts the configs scored.
    """

    n_queries: int

    def find_maximums(self, space: ConfigSpace, score_fn: Callable[[np.ndarray], np.ndarray], num: int,
                      exclude: Iterable[int], rng: np.random.Generator, elite: Sequence[int] = ()) -> list[int]: ...

    def stats(self) -> dict[str, float]: ...


class Sampler(Protocol):
    """Chooses which of an optimizer's candidates to measure (e.g. one per cluster).

    ``ranking`` is the candidates best first where the tuner ranks them (``chameleon-ml2``: by ModelA); a
    sampler may use it to pick within clusters or ignore it.
    """

    def select(self, space: ConfigSpace, candidates: Sequence[int], exclude: set[int],
               rng: np.random.Generator, ranking: Sequence[int] | None = None) -> list[int]: ...

    def stats(self) -> dict[str, float]: ...
