"""The tuner interface (ask/tell), its option tables and the name-to-class registry.

A tuner is created with its options only (no work in ``__init__``), bound to a task's space
by :meth:`Tuner.setup`, then driven by the tuning loop::

    tuner = XGBTuner(seed=0, plan_size=64)
    tuner.setup(TuningContext(space=task.space))
    while budget:
        indices = tuner.propose(8)      # distinct, never measured before
        results = measure(indices)
        tuner.update(results)
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from toolkit.errors import ConfigError
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.core.space import ConfigSpace


@dataclass(frozen=True)
class Option:
    """One tuner option: default, type, and a one-line description."""

    default: Any
    doc: str
    type: type = object
    choices: tuple | None = None

    def check(self, name: str, value: Any) -> Any:
        """Validate and coerce ``value``; :class:`ConfigError` if it does not fit."""
        if self.type is not object and value is not None:
            try:
                if self.type is bool and isinstance(value, str):
                    value = {"true": True, "1": True, "false": False, "0": False}[value.lower()]
                else:
                    value = self.type(value)
            except (TypeError, ValueError, KeyError):
                raise ConfigError(f"option {name}={value!r} is not a {self.type.__name__}") from None
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"option {name}={value!r} must be one of {list(self.choices)}")
        return value


@dataclass
class TuningContext:
    """What a tuner may use from the task.

    ``compile_features`` compiles configs without measuring them (no board time) and returns,
    per index, either a feature dict or a :class:`MeasureResult` with the compile error.
    It is ``None`` where the task cannot compile ahead of measurement.
    """

    space: ConfigSpace
    compile_features: Callable[[Sequence[int]], list[dict[str, float] | MeasureResult]] | None = None
    n_parallel: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


class Tuner(abc.ABC):
    """Base class of every tuner (ask/tell)."""

    name: ClassVar[str] = ""
    options: ClassVar[dict[str, Option]] = {}

    def __init__(self, seed: int = 0, **options: Any) -> None:
        unknown = set(options) - set(self.options)
        if unknown:
            raise ConfigError(
                f"tuner {self.name!r} has no option(s) {sorted(unknown)}; options: {sorted(self.options)}"
            )
        self.seed = seed
        self.params = {k: opt.check(k, options.get(k, opt.default)) for k, opt in self.options.items()}

    def setup(self, ctx: TuningContext) -> None:
        """Bind to a task. Subclasses extend this to build their state; call ``super().setup``."""
        self.ctx = ctx
        self.space = ctx.space
        self.rng = np.random.default_rng(self.seed)
        self.visited: set[int] = set()

    @abc.abstractmethod
    def propose(self, n: int) -> list[int]:
        """Up to ``n`` distinct indices never proposed or measured before (fewer only when exhausted)."""

    def update(self, results: Sequence[MeasureResult]) -> None:
        """Learn from measured results (valid or not). Subclasses extend; call ``super().update``."""
        for r in results:
            self.visited.add(r.index)

    def load_history(self, results: Sequence[MeasureResult]) -> None:
        """Restore state from earlier records (resume); by default the same as :meth:`update`."""
        self.update(results)

    def stats(self) -> dict[str, float]:
        """Counters for benchmarks (e.g. cost-model queries); empty by default."""
        return {}


BUILTIN_TUNERS: dict[str, str] = {
    "random": "toolkit.tuning.tuners.random:RandomTuner",
    "grid": "toolkit.tuning.tuners.grid:GridTuner",
    "ga": "toolkit.tuning.tuners.ga:GATuner",
    "xgb": "toolkit.tuning.tuners.xgb:XGBTuner",
    "rl": "toolkit.tuning.tuners.chameleon:RLTuner",
    "sa-as": "toolkit.tuning.tuners.chameleon:SAASTuner",
    "chameleon": "toolkit.tuning.tuners.chameleon:ChameleonTuner",
    "chameleon+": "toolkit.tuning.tuners.chameleon:ChameleonPlusTuner",
    "ml2tuner": "toolkit.tuning.tuners.ml2tuner:ML2Tuner",
    "chameleon-ml2": "toolkit.tuning.tuners.ml2tuner:ChameleonML2Tuner",
    "metaschedule": "toolkit.backends.tvm.metaschedule:MetaScheduleTuner",
}
"""Built-in tuners: name -> ``module:class``, imported on first use (``make_tuner("random")`` imports
neither torch nor TVM). ``metaschedule`` is a driver the TVM backend provides."""

TUNERS: dict[str, type[Tuner]] = {}
"""Tuner classes loaded so far, by name: built-ins once used, and every class passed to :func:`register`."""


def register(cls: type[Tuner]) -> type[Tuner]:
    """Class decorator: add a tuner to the registry under ``cls.name`` (how a user's tuner gets a name)."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    TUNERS[cls.name] = cls
    return cls


def tuner_names() -> list[str]:
    """Every tuner name: the built-ins and the registered ones, sorted."""
    return sorted(set(BUILTIN_TUNERS) | set(TUNERS))


def tuner_class(name: str) -> type[Tuner]:
    """The class registered under ``name``, importing a built-in's module on first use."""
    if name not in TUNERS and name in BUILTIN_TUNERS:
        import importlib

        module, attr = BUILTIN_TUNERS[name].split(":")
        TUNERS[name] = getattr(importlib.import_module(module), attr)
    if name not in TUNERS:
        raise ConfigError(f"unknown tuner {name!r}: use one of {', '.join(tuner_names())}")
    return TUNERS[name]


def make_tuner(name: str, seed: int = 0, **options: Any) -> Tuner:
    """Create a tuner by name (for the CLI; Python users pass instances)."""
    return tuner_class(name)(seed=seed, **options)


def tuner_classes() -> dict[str, type[Tuner]]:
    """Every tuner class by name (imports every built-in)."""
    return {name: tuner_class(name) for name in tuner_names()}
