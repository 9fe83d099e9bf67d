"""``chameleon-ml2``: ML2Tuner's rounds with Chameleon's PPO exploration and cluster sampling as its parts.

:class:`~toolkit.tuning.tuners.ml2tuner.ML2Tuner` composed with Chameleon's optimizer
(:class:`~toolkit.tuning.search.ppo.RLOptimizer`) and a
:class:`~toolkit.tuning.search.sampling.ClusterSampler` that picks each round's configs from ModelA's ranking.
"""

from __future__ import annotations

from dataclasses import replace

from toolkit.tuning.search.ppo import RLOptimizer
from toolkit.tuning.search.sampling import ClusterSampler
from toolkit.tuning.tuners.base import Option, register
from toolkit.tuning.tuners.ml2tuner import ML2Tuner
from toolkit.tuning.tuners.options import PLUS_OPTIONS, RL_OPTIONS, SAMPLING_OPTIONS, rl_optimizer


@register
class ChameleonML2Tuner(ML2Tuner):
    """``chameleon-ml2``: Chameleon's PPO exploration and adaptive sampling, with ModelV and ModelA.

    Per round the RL agent (reward: ModelP, on the rank loss like ``ml2tuner``'s) proposes
    ``(alpha + 1) * N`` candidates; ModelV and the compiler filter them as in ``ml2tuner``; the
    survivors are clustered on the cardinal knobs (k-means, k by Chameleon's knee rule) and from each
    cluster the member ModelA rates best is measured; ModelA's best other survivors fill the round up
    to N (``fill_to_n``; without it a round measures k, Chameleon's adaptive sample count, and takes
    2-4x more rounds). Every measured config is a real, unmeasured candidate, so Chameleon's sample
    synthesis (for redundant centroids) is not needed.

    >>> from toolkit.tuning.tuners.base import make_tuner
    >>> t = make_tuner("chameleon-ml2", seed=0, episodes=32)
    >>> t.params["loss"], t.params["plan_size"], t.params["plan_size"] * (t.params["alpha"] + 1), t.params["k_max"]
    ('rank', 4, 64, 8)
    """

    name = "chameleon-ml2"
    options = {
        **{k: v for k, v in ML2Tuner.options.items() if not k.startswith("sa_")},
        "loss": replace(ML2Tuner.options["loss"], doc="ModelP's loss, which the RL agent's reward reads: rank "
                        "(rank:pairwise, as ml2tuner's ModelP) or reg (Chameleon's regression on normalised "
                        "throughput)"),
        **RL_OPTIONS,
        **{k: v for k, v in SAMPLING_OPTIONS.items() if k != "reduction"},
        **{k: replace(SAMPLING_OPTIONS[k], default=v) for k, v in (("k_min", 2), ("k_max", 8), ("k_step", 2))},
        **{k: PLUS_OPTIONS[k] for k in ("rl_elite", "rl_elite_top")},
        "plan_size": replace(ML2Tuner.options["plan_size"], default=4,
                             doc="N: the RL agent proposes (alpha + 1) * N candidates per round"),
        "alpha": replace(ML2Tuner.options["alpha"], default=15),
        "fill_to_n": Option(True, "after one config per cluster, ModelA's best other survivors fill the round up "
                            "to N (False: k configs per round, Chameleon's adaptive count; more rounds)", bool),
    }

    def make_optimizer(self) -> RLOptimizer:
        return rl_optimizer(self.params, self.seed)

    def make_sampler(self) -> ClusterSampler:
        p = self.params
        return ClusterSampler(k_min=p["k_min"], k_max=p["k_max"], k_step=p["k_step"], threshold=p["k_threshold"],
                              n_cardinal=p["n_cardinal"], rule=p["k_rule"], fill_to=p["plan_size"] if p["fill_to_n"]
                              else 0)
