"""The template interface: how a board family turns a config into something measurable.

A template is created for one workload on one board profile. ``build`` is pure and picklable
(it runs in builder worker processes); the runner measures what it returns.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from toolkit.boards import BoardProfile
from toolkit.errors import ConfigError
from toolkit.tuning.core.result import ErrorClass
from toolkit.tuning.core.space import Config, ConfigSpace
from toolkit.workloads import Conv2dWorkload


class BuildError(Exception):
    """A config that could not be built. ``error`` classifies it (invalid config or compile error)."""

    def __init__(self, message: str, error: ErrorClass = ErrorClass.COMPILE_ERROR) -> None:
        super().__init__(message)
        self.error = error


@dataclass
class Artifact:
    """What a build produced: a file or bytes the runner can ship, plus compile-time features."""

    index: int
    kind: str                      # "vta-program" | "tvm-library"
    payload: bytes = b""           # VTA program binary, or the exported library's bytes
    path: str | None = None        # or a file (exported library)
    features: dict[str, float] = field(default_factory=dict)
    build_s: float = 0.0
    obj: Any = field(default=None, repr=False, compare=False)
    """The in-memory build product (e.g. the VTA ``Program``) so an in-process runner can skip
    decoding ``payload``; ``None`` when not available. Runners must fall back to ``payload``."""


class Template(abc.ABC):
    """A tunable conv2d implementation for one workload on one board type."""

    name: ClassVar[str] = ""
    OPTIONS: ClassVar[dict[str, Any]] = {}
    """Template options and their defaults; any other option is refused."""

    def __init__(self, workload: Conv2dWorkload, profile: BoardProfile, **options: Any) -> None:
        unknown = set(options) - set(self.OPTIONS)
        if unknown:
            raise ConfigError(f"template {self.name!r} has no option(s) {sorted(unknown)}; "
                              f"options: {sorted(self.OPTIONS) or 'none'}")
        self.workload = workload
        self.profile = profile
        self.options = options

    @abc.abstractmethod
    def space(self) -> ConfigSpace:
        """The configuration space."""

    @abc.abstractmethod
    def build(self, config: Config) -> Artifact:
        """Build one config; raise :class:`BuildError` when it cannot be built."""

    def features(self, config: Config) -> dict[str, float] | None:
        """Compile-time features of ``config`` without generating code, as :meth:`build` would record them.

        ``None`` (the default) means the template has no cheaper path than :meth:`build`, whose
        artifact's features are then used. Raises :class:`BuildError` like ``build`` for configs it
        can tell are invalid (a config that fails only in code generation is not caught here).
        """
        return None

    def fallback_config(self) -> Config | None:
        """The untuned config a whole-model export compiles a shape without a record with; ``None`` (the
        default) where the template has none."""
        return None

    def hardware(self) -> dict[str, Any] | None:
        """The hardware the built code is for, as logged (a VTA config); ``None`` (the default) where the
        board type says it all."""
        return None

    def current_features(self, features: dict[str, float]) -> dict[str, float]:
        """Recorded compile features completed to what :meth:`build` reports today (features derived
        from recorded ones, added by a newer compiler); the default returns them unchanged."""
        return features

    @abc.abstractmethod
    def make_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Random inputs in the layout the built code takes (data, weight[, bias])."""

    @abc.abstractmethod
    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The expected output for ``inputs`` (numpy), in the built code's output layout."""

    def describe(self) -> dict[str, Any]:
        """JSON-able description stored in records (template name and options)."""
        return {"template": self.name, **self.options}
