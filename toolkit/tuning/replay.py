"""Replaying recorded measurements (Kernel Tuner's simulation mode, for edgetune logs).

A *cache* is an ordinary tuning log, typically an exhaustive ``grid`` run of a task on the
simulator. :class:`ReplayBuilder` and :class:`CachedRunner` answer every config from it instead of
compiling and measuring, so tuners can be compared over many seeds in seconds; the numbers are
the recorded (simulator) measurements, replayed.

>>> # tune(task, make_tuner("xgb"), 200, builder=ReplayBuilder(cache), runner=CachedRunner(cache))
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from toolkit.errors import LogError
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.journal import LogHeader, Record, read_log
from toolkit.tuning.core.runner import MeasureOptions, Runner
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Artifact, Template

BUILD_ERRORS = (ErrorClass.INVALID_CONFIG.value, ErrorClass.COMPILE_ERROR.value)


class MeasurementCache:
    """Recorded results by config index (the last record of an index wins)."""

    def __init__(self, header: LogHeader, records: Sequence[Record], path: str | Path | None = None) -> None:
        self.header = header
        self.path = path
        self.by_index: dict[int, Record] = {r.index: r for r in records if r.index is not None}

    @classmethod
    def from_log(cls, path: str | Path) -> MeasurementCache:
        header, records = read_log(path)
        return cls(header, records, path)

    def __len__(self) -> int:
        return len(self.by_index)

    def lookup(self, index: int) -> Record:
        try:
            return self.by_index[int(index)]
        except KeyError:
            raise LogError(f"config {index} is not in the measurement cache {self.path or ''}; "
                           "complete the cache (tune --tuner grid --resume) before replaying") from None

    def best(self) -> Record | None:
        """The fastest valid record (the space's optimum when the cache is exhaustive)."""
        valid = [r for r in self.by_index.values() if r.valid]
        return min(valid, key=lambda r: r.seconds) if valid else None


def compile_features_of(features: dict[str, float]) -> dict[str, float]:
    """The features a build reveals, without what the measurement added (``sim.*`` counters and cycles).

    A replayed build must not leak the measured answer to tuners that read compile features.
    """
    return {k: v for k, v in features.items() if not k.startswith("sim.")}


def current_compile_features(template: Template, features: dict[str, float]) -> dict[str, float]:
    """Recorded compile features completed to what the template's compiler returns today.

    Features derived from recorded ones (the VTA compiler's ``time.*`` terms) are added to records
    written before they existed, so replayed tuners see the same keys as live ones.
    """
    return template.current_features(features)


class ReplayBuilder:
    """A builder answering from a cache: recorded build errors, else an empty ``replay`` artifact."""

    n_parallel = 0

    def __init__(self, cache: MeasurementCache) -> None:
        self.cache = cache

    def build(self, template: Template, configs: Sequence[Config]) -> list[Artifact | MeasureResult]:
        out: list[Artifact | MeasureResult] = []
        for c in configs:
            rec = self.cache.lookup(c.index)
            features = compile_features_of(rec.features)
            if rec.error in BUILD_ERRORS:
                out.append(MeasureResult(c.index, c.values, error=ErrorClass(rec.error), message=rec.message,
                                         features=features, build_s=rec.build_s))
            else:
                out.append(Artifact(index=c.index, kind="replay", features=current_compile_features(template, features),
                                    build_s=rec.build_s))
        return out

    def features(self, template: Template, configs: Sequence[Config]) -> list[dict[str, float] | MeasureResult]:
        """Compile-time features of ``configs`` (or the recorded build error), as ``LocalBuilder.features``."""
        return [o.features if isinstance(o, Artifact) else o for o in self.build(template, configs)]

    def close(self) -> None:
        """Nothing to release."""


class CachedRunner(Runner):
    """A runner answering from a cache: the recorded costs or run-time error of each config."""

    def __init__(self, cache: MeasurementCache) -> None:
        self.cache = cache

    def run(self, template: Template, items: Sequence[tuple[Config, Artifact]],
            options: MeasureOptions) -> list[MeasureResult]:
        out = []
        for config, _ in items:
            r = self.cache.lookup(config.index).to_result()
            r.config = config.values
            out.append(r)
        return out
