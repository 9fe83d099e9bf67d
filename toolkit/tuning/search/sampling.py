"""Chameleon's adaptive sampling: cluster search candidates and measure one per cluster.

The search proposes candidates (best predicted first). They are clustered with k-means on the
*cardinal* knobs (the knobs with most options), trying k = 8, 16, ..., 64 and keeping the knee of
the loss curve: the last k after which the loss stops dropping by ``threshold`` (2.5x). One
representative per cluster is measured: the real candidate nearest the centroid. A
representative that is already measured, a duplicate or otherwise excluded is replaced by
*sample synthesis* (``representative="centroid"`` synthesises every representative, as the reference does):

- ``reduction="mode"`` (paper): each knob takes its most frequent value among the cluster's members;
- ``reduction="sample"`` (reference code): the cardinal knobs take the rounded centroid, every other
  knob a random choice among the candidates' values for that knob;

falling back to an unmeasured random configuration.

>>> import numpy as np
>>> from toolkit.tuning.core.space import ConfigSpace, SplitKnob
>>> space = ConfigSpace([SplitKnob("a", 64), SplitKnob("b", 64), SplitKnob("c", 8)])
>>> cands = space.sample(40, np.random.default_rng(0))
>>> out = adaptive_sample(space, cands, exclude=set(), rng=np.random.default_rng(0))
>>> 8 <= out.k <= 40 and len(out.indices) == out.k == len(set(out.indices))
True
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from toolkit.errors import ConfigError
from toolkit.tuning.core.space import ConfigSpace

REDUCTIONS = ("mode", "sample")
K_RULES = ("knee", "stop")
REPRESENTATIVES = ("nearest", "centroid", "best")


def cardinal_knobs(dims: Sequence[int], n: int = 2) -> np.ndarray:
    """Positions of the ``n`` knobs with most options (ties: earlier knob first)."""
    return np.argsort(-np.asarray(dims), kind="stable")[:n]


@dataclass
class Clustering:
    """A k-means result: ``k``, per-point ``labels``, ``centers`` and the loss of every k tried."""

    k: int
    labels: np.ndarray
    centers: np.ndarray
    inertias: dict[int, float] = field(default_factory=dict)


def _kmeans(points: np.ndarray, k: int, rng: np.random.Generator) -> Clustering:
    from sklearn.cluster import KMeans

    km = KMeans(n_clusters=k, init="k-means++", n_init=1, max_iter=100,
                random_state=int(rng.integers(2**31 - 1)))
    with warnings.catch_warnings():  # duplicate points may leave fewer distinct clusters than k
        warnings.simplefilter("ignore")
        km.fit(points)
    return Clustering(k, km.labels_, km.cluster_centers_, {k: float(km.inertia_)})


def select_k(points: np.ndarray, rng: np.random.Generator, k_min: int = 8, k_max: int = 64, k_step: int = 8,
             threshold: float = 2.5, rule: str = "knee") -> Clustering:
    """Cluster ``points`` ([n, d]) with the k of the knee of the k-means loss curve.

    k runs over ``k_min, k_min + k_step, ..., k_max`` (capped at the number of distinct points). The
    loop stops at the first k whose loss is no longer ``threshold`` times smaller than the previous
    k's. ``rule="knee"`` keeps the previous k (the knee: the last k that still paid off);
    ``rule="stop"`` keeps the k where the loop stopped, as the reference code does (so it never
    returns ``k_min``). Without a stop the last k tried is kept.

    >>> rng = np.random.default_rng(0)
    >>> centres = rng.uniform(0, 100, (16, 2))
    >>> pts = np.repeat(centres, 10, axis=0) + rng.normal(0, 0.3, (160, 2))
    >>> select_k(pts, rng).k
    16
    """
    if rule not in K_RULES:
        raise ConfigError(f"k rule {rule!r} must be one of {list(K_RULES)}")
    if k_min < 1 or k_step < 1 or k_max < k_min or threshold <= 1:
        raise ConfigError("k range needs 1 <= k_min <= k_max, k_step >= 1 and a threshold > 1")
    points = np.asarray(points, dtype=np.float64)
    n_distinct = len(np.unique(points, axis=0))
    ks = [k for k in range(k_min, k_max + 1, k_step) if k <= n_distinct] or [n_distinct]
    inertias: dict[int, float] = {}
    prev: Clustering | None = None
    for k in ks:
        cur = _kmeans(points, k, rng)
        inertias.update(cur.inertias)
        if prev is not None and cur.inertias[k] * threshold >= prev.inertias[prev.k]:
            chosen = prev if rule == "knee" else cur
            chosen.inertias = inertias
            return chosen
        prev = cur
    assert prev is not None
    prev.inertias = inertias
    return prev


def synthesize(members: np.ndarray, reduction: str, rng: np.random.Generator, *, pool: np.ndarray | None = None,
               center: np.ndarray | None = None, cardinal: np.ndarray | None = None) -> np.ndarray:
    """One synthetic configuration (knob indices) for a cluster.

    ``reduction="mode"``: each knob's most frequent value among ``members`` (ties: the smallest).
    ``reduction="sample"``: the ``cardinal`` knobs take the rounded ``center``; every other knob a
    random choice among ``pool``'s values (all candidates, as the reference code does).

    >>> synthesize(np.array([[1, 5], [2, 5], [1, 7]]), "mode", np.random.default_rng(0)).tolist()
    [1, 5]
    """
    members = np.asarray(members, dtype=np.int64)
    if reduction == "mode":
        return np.array([np.bincount(col).argmax() for col in members.T], dtype=np.int64)
    if reduction == "sample":
        pool = members if pool is None else np.asarray(pool, dtype=np.int64)
        out = np.array([rng.choice(col) for col in pool.T], dtype=np.int64)
        if center is not None and cardinal is not None:
            out[cardinal] = np.rint(center).astype(np.int64)
        return out
    raise ConfigError(f"reduction {reduction!r} must be one of {list(REDUCTIONS)}")


@dataclass
class AdaptiveSample:
    """What :func:`adaptive_sample` chose: flat ``indices`` to measure, the ``k`` used, the loss curve,
    and how many representatives were synthesised or replaced by random configs."""

    indices: list[int]
    k: int
    inertias: dict[int, float]
    n_synthesized: int = 0
    n_random: int = 0


def adaptive_sample(space: ConfigSpace, candidates: Sequence[int], exclude: set[int], rng: np.random.Generator, *,
                    k_min: int = 8, k_max: int = 64, k_step: int = 8, threshold: float = 2.5, n_cardinal: int = 2,
                    reduction: str = "mode", rule: str = "knee", representative: str = "nearest",
                    max_tries: int = 16) -> AdaptiveSample:
    """Reduce ``candidates`` (flat indices, best predicted first) to one config per k-means cluster.

    ``representative="nearest"`` measures the candidate nearest each centroid (synthesis only
    replaces a measured or duplicate one); ``"centroid"`` measures a synthesised config, as the
    reference code does: the cardinal knobs take the rounded centroid, the others the ``reduction``
    of the cluster (``mode``) or of all candidates (``sample``); ``"best"`` (edgetune's greedy
    variant) measures each cluster's best-predicted member (its earliest candidate) and returns the
    picks best predicted first, so the model's top candidate is always among them.

    ``exclude`` holds indices that must not be measured (already measured, known invalid). The
    result has distinct indices outside ``exclude``; it is shorter than ``k`` only when the space
    has no unmeasured config left.
    """
    if reduction not in REDUCTIONS:
        raise ConfigError(f"reduction {reduction!r} must be one of {list(REDUCTIONS)}")
    if representative not in REPRESENTATIVES:
        raise ConfigError(f"representative {representative!r} must be one of {list(REPRESENTATIVES)}")
    dims = np.asarray(space.dims, dtype=np.int64)
    cands = np.asarray(list(candidates), dtype=np.int64)
    if len(cands) == 0:
        return AdaptiveSample([], 0, {})
    knobs = space.knob_indices_array(cands)
    cardinal = cardinal_knobs(space.dims, n_cardinal)
    points = knobs[:, cardinal].astype(np.float64)
    clus = select_k(points, rng, k_min, k_max, k_step, threshold, rule)
    taken = set(exclude)
    out: list[int] = []
    n_syn = n_rand = 0
    for c in range(len(clus.centers)):
        members = np.flatnonzero(clus.labels == c)
        if len(members) == 0:
            continue
        synthesized = representative == "centroid"
        if synthesized:
            syn = synthesize(knobs[members], reduction, rng, pool=knobs, center=clus.centers[c], cardinal=cardinal)
            syn[cardinal] = np.rint(clus.centers[c]).astype(np.int64)
            pick = int(space.from_knob_indices_array(np.clip(syn, 0, dims - 1)[None])[0])
        elif representative == "best":
            pick = int(cands[members[0]])   # members are in candidate order: best predicted first
        else:
            # nearest member to the centroid; ties go to the best predicted (earliest) candidate
            dist = ((points[members] - clus.centers[c]) ** 2).sum(axis=1)
            pick = int(cands[members[np.argmin(dist)]])
        if pick in taken:
            pick = -1
            for _ in range(max_tries if reduction == "sample" else 1):
                syn = synthesize(knobs[members], reduction, rng, pool=knobs, center=clus.centers[c],
                                 cardinal=cardinal)
                idx = int(space.from_knob_indices_array(np.clip(syn, 0, dims - 1)[None])[0])
                if idx not in taken:
                    pick, synthesized = idx, True
                    break
            if pick < 0:
                fresh = space.sample(1, rng, exclude=taken)
                if not fresh:
                    break
                pick, synthesized = fresh[0], False
                n_rand += 1
        n_syn += synthesized
        taken.add(pick)
        out.append(pick)
    if representative == "best":
        rank = {int(c): j for j, c in reversed(list(enumerate(cands)))}
        out.sort(key=lambda i: rank.get(i, len(cands)))
    return AdaptiveSample(out, clus.k, clus.inertias, n_syn, n_rand)


@dataclass
class KMeansSettings:
    """How candidates are clustered: k-means on the ``n_cardinal`` knobs with the most options, k from ``k_min``
    to ``k_max`` by ``k_step`` chosen by :func:`select_k` (``threshold``, ``rule``); ``sampled_k`` counts the
    picks of each round."""

    k_min: int = 8
    k_max: int = 64
    k_step: int = 8
    threshold: float = 2.5
    n_cardinal: int = 2
    rule: str = "knee"
    sampled_k: list[int] = field(default_factory=list)


@dataclass
class AdaptiveSampler(KMeansSettings):
    """Chameleon's adaptive sampling as a :class:`~toolkit.tuning.search.Sampler`: :func:`adaptive_sample`
    with these settings, counting what it chose."""

    reduction: str = "mode"
    representative: str = "nearest"
    n_synthesized: int = 0
    n_random: int = 0

    def select(self, space: ConfigSpace, candidates: Sequence[int], exclude: set[int],
               rng: np.random.Generator, ranking: Sequence[int] | None = None) -> list[int]:
        out = adaptive_sample(space, candidates, exclude, rng, k_min=self.k_min, k_max=self.k_max,
                              k_step=self.k_step, threshold=self.threshold, n_cardinal=self.n_cardinal,
                              reduction=self.reduction, rule=self.rule, representative=self.representative)
        self.sampled_k.append(len(out.indices))
        self.n_synthesized += out.n_synthesized
        self.n_random += out.n_random
        return out.indices

    def stats(self) -> dict[str, float]:
        k = self.sampled_k
        return {"sample_k_mean": float(np.mean(k)) if k else float("nan"),
                "synthesized": float(self.n_synthesized), "random_fill": float(self.n_random)}


@dataclass
class ClusterSampler(KMeansSettings):
    """One config per cluster of the candidates, the best-ranked member of each, best first; with ``fill_to``
    the next best-ranked candidates fill the selection up to that many (``chameleon-ml2``'s round).

    The candidates are clustered on the ``n_cardinal`` knobs with the most options (k-means, k by
    :func:`select_k`); ``ranking`` (the candidates best first) decides each cluster's member; without it the
    candidates' order does.
    """

    fill_to: int = 0

    def select(self, space: ConfigSpace, candidates: Sequence[int], exclude: set[int],
               rng: np.random.Generator, ranking: Sequence[int] | None = None) -> list[int]:
        ranked = list(candidates if ranking is None else ranking)
        points = space.knob_indices_array(candidates)[:, cardinal_knobs(space.dims, self.n_cardinal)]
        clus = select_k(points.astype(np.float64), rng, self.k_min, self.k_max, self.k_step, self.threshold,
                        self.rule)
        rank = {i: j for j, i in enumerate(ranked)}
        best: dict[int, int] = {}
        for i, label in zip(candidates, clus.labels):
            if int(label) not in best or rank[i] < rank[best[int(label)]]:
                best[int(label)] = i
        self.sampled_k.append(len(best))
        chosen = sorted(best.values(), key=rank.__getitem__)
        picked = set(chosen)
        return chosen + [i for i in ranked if i not in picked][: max(0, self.fill_to - len(chosen))]

    def stats(self) -> dict[str, float]:
        k = self.sampled_k
        return {"sample_k_mean": float(np.mean(k)) if k else float("nan")}


def spread_sample(space: ConfigSpace, n: int, rng: np.random.Generator, pool_factor: int = 16) -> list[int]:
    """``n`` distinct configs spread over the space: k-means (k = ``n``) over a random pool of
    ``pool_factor * n`` configs (the whole space if smaller), on knob indices normalised by each
    knob's number of options, and the pool member nearest each centre (Chameleon+'s initial plan).

    >>> from toolkit.tuning.core.space import ConfigSpace, CategoricalKnob
    >>> space = ConfigSpace([CategoricalKnob("a", list(range(10))), CategoricalKnob("b", list(range(10)))])
    >>> picks = spread_sample(space, 4, np.random.default_rng(0))
    >>> len(set(picks)) == 4
    True
    """
    if n <= 0:
        return []
    pool = np.asarray(space.sample(min(space.size, pool_factor * n), rng), dtype=np.int64)
    if len(pool) <= n:
        return [int(i) for i in pool]
    points = space.knob_indices_array(pool) / np.maximum(np.asarray(space.dims, dtype=np.float64) - 1, 1)
    clus = _kmeans(points, n, rng)
    out: list[int] = []
    for c in range(len(clus.centers)):
        members = np.flatnonzero(clus.labels == c)
        if len(members):
            near = members[np.argmin(((points[members] - clus.centers[c]) ** 2).sum(axis=1))]
            out.append(int(pool[near]))
    out = list(dict.fromkeys(out))
    rest = [int(i) for i in pool if int(i) not in set(out)]
    return out + rest[:n - len(out)]
