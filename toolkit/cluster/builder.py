"""Builds on a Ray cluster: :class:`RayBuilder` behind the :class:`~toolkit.tuning.core.builder.Builder` interface."""

from __future__ import annotations

from typing import Any, Sequence

from toolkit.cluster.client import ClusterClient, failed_build
from toolkit.tuning.core.builder import (Builder, BuildOutcome, FeaturesOutcome, LocalBuilder, build_in_worker,
                                         features_in_worker, warm_up, has_features_path)
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Artifact, Template


class RayBuilder(Builder):
    """Builds configs on the workers of the Ray cluster at ``address``.

    As :class:`~toolkit.tuning.core.builder.LocalBuilder` with worker processes: one config per CPU of the
    cluster at once (``n_parallel``, default all of them), ``timeout_s`` per build (-> ``TIMEOUT``, its worker
    killed), ``preload`` imported once per worker. Artifacts come back as bytes (never a path on another machine).
    A worker that crashes on a config gives a ``COMPILE_ERROR``; a worker or node lost under a build has it run
    again elsewhere (by Ray). The cluster lost: :class:`~toolkit.errors.ClusterError`, one line.
    """

    def __init__(self, address: str, *, timeout_s: float = 30.0, n_parallel: int | None = None,
                 preload: Sequence[str] = ()) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.preload = tuple(preload)
        self._client = ClusterClient(address)
        self.n_parallel = n_parallel or self._client.cpus
        self._warm = False

    @classmethod
    def like(cls, builder: Builder, address: str) -> RayBuilder:
        """A cluster builder with ``builder``'s timeout and preloaded modules (a board's default builder)."""
        if isinstance(builder, LocalBuilder):
            return cls(address, timeout_s=builder.timeout_s, preload=builder.preload)
        return cls(address)

    def _run(self, fn: Any, template: Template, configs: Sequence[Config]) -> list[Any]:
        if not self._warm:    # import the preloaded modules once per worker: no build's timeout pays for it
            self._client.map(_warm_chunk, self.preload, [[0]] * self.n_parallel, timeout_s=None,
                             n_parallel=self.n_parallel)
            self._warm = True
        chunks = self._client.map(fn, template, [[c] for c in configs], timeout_s=self.timeout_s,
                                  n_parallel=self.n_parallel, failed=failed_build)
        return [o for chunk in chunks for o in chunk]

    def build(self, template: Template, configs: Sequence[Config]) -> list[BuildOutcome]:
        """One outcome per config, in order."""
        return self._run(_build_chunk, template, configs)

    def features(self, template: Template, configs: Sequence[Config]) -> list[FeaturesOutcome]:
        """Compile-time features of ``configs`` (a features-only path when the template has one), in order."""
        if not has_features_path(template):
            return [o.features if isinstance(o, Artifact) else o for o in self.build(template, configs)]
        return self._run(features_in_worker, template, configs)

    def close(self) -> None:
        """Stop this process's link to the cluster (the cluster keeps running)."""
        self._client.close()


def _build_chunk(template: Template, configs: list[Config]) -> list[BuildOutcome]:
    """Build ``configs`` on a worker; the artifacts travel back as bytes (their in-memory products stay there)."""
    return [build_in_worker(template, c) for c in configs]


def _warm_chunk(preload: Sequence[str], _: list[Any]) -> list[None]:
    warm_up(preload)
    return [None]


def make_builder(backend: Any, board: Any, cluster: str | None) -> Builder:
    """The builder a run uses: the board's default (worker processes here), or with ``cluster`` a
    :class:`RayBuilder` with the same timeout and preloaded modules."""
    default = backend.default_builder(board)
    return default if cluster is None else RayBuilder.like(default, cluster)
