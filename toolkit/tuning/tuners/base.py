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
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from toolkit.errors import ConfigError
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.core.space import ConfigSpace


@dataclass(frozen=True)
class Option:
    """One tuner option: default, type, a one-line description, and for numbers the allowed range
    (``low``/``high``, inclusive unless ``low_open``; :data:`BOUNDS` gives it by option name)."""

    default: Any
    doc: str
    type: type = object
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def check(self, name: str, value: Any) -> Any:
        """Validate and coerce ``value``; :class:`ConfigError` if it does not fit."""
        if self.type is not object and value is not None:
            try:
                if self.type is bool and isinstance(value, str):
                    value = {"true": True, "1": True, "false": False, "0": False}[value.lower()]
                elif self.type is int and isinstance(value, float) and not value.is_integer():
                    raise ValueError(value)
                else:
                    value = self.type(value)
            except (TypeError, ValueError, KeyError, OverflowError):
                raise ConfigError(f"option {name}={value!r} is not a {self.type.__name__}") from None
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"option {name}={value!r} must be one of {list(self.choices)}")
        if self.type in (int, float) and value is not None:
            low = self.low if self.low is not None else (0 if self.type is int else None)
            if self.type is float and not math.isfinite(value):
                raise ConfigError(f"option {name}={value!r} must be a finite number")
            if low is not None and (value < low or (self.low_open and value == low)):
                raise ConfigError(f"option {name}={value!r} must be {'>' if self.low_open else '>='} {low:g}")
            if self.high is not None and value > self.high:
                raise ConfigError(f"option {name}={value!r} must be <= {self.high:g}")
        return value


BOUNDS: dict[str, tuple[float | None, float | None, bool]] = {
    # name: (low, high, low open). Integers are >= 0 unless listed; floats need only be finite.
    "plan_size": (1, None, False), "epsilon": (0, 1, False), "max_rounds": (1, None, False),
    "sa_chains": (1, None, False), "sa_early_stop": (1, None, False),
    "episodes": (1, None, False), "max_steps": (1, None, False), "stay_ratio": (0, 1, True),
    "hidden": (1, None, False), "head_hidden": (1, None, False), "value_hidden": (1, None, False),
    "temperature": (0, None, True), "lr": (0, None, True), "epochs": (1, None, False),
    "minibatch": (1, None, False), "gamma": (0, 1, False), "lam": (0, 1, False), "clip": (0, None, True),
    "c1": (0, None, False), "c2": (0, None, False), "torch_threads": (1, None, False),
    "k_min": (1, None, False), "k_max": (1, None, False), "k_step": (1, None, False),
    "k_threshold": (1, None, True), "n_cardinal": (1, None, False), "rl_elite": (0, 1, False),
    "rl_elite_top": (1, None, False), "precision": (0, 1, True), "v_explore": (0, 1, False),
    "v_pool": (1, None, False), "pop_size": (2, None, False), "mutation_prob": (0, 1, False),
    "trials_per_iter": (1, None, False), "build_timeout": (0, None, True),
}
"""The range of every numeric option, by name: one meaning per name across the tuners."""


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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.options = {k: replace(o, low=BOUNDS[k][0], high=BOUNDS[k][1], low_open=BOUNDS[k][2])
                       if k in BOUNDS and o.low is None and o.high is None else o for k, o in cls.options.items()}

    def __init__(self, seed: int = 0, **options: Any) -> None:
        unknown = set(options) - set(self.options)
        if unknown:
            raise ConfigError(
                f"tuner {self.name!r} has no option(s) {sorted(unknown)}; options: {sorted(self.options)}"
            )
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 32:
            raise ConfigError(f"seed {seed!r} must be an integer in 0..{2 ** 32 - 1}")
        self.seed = seed
        self.params = {k: opt.check(k, options.get(k, opt.default)) for k, opt in self.options.items()}
        self.check_params()

    def check_params(self) -> None:
        """Refuse option combinations that cannot work (:class:`ConfigError`). Runs in ``__init__``, before
        any trial; subclasses extend it (call ``super().check_params()``)."""
        p = self.params
        if "k_min" in p and "k_max" in p and p["k_min"] > p["k_max"]:
            raise ConfigError(f"option k_min={p['k_min']} is larger than k_max={p['k_max']}: no cluster count "
                              "to try; lower k_min or raise k_max")

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
    "ml2tuner+": "toolkit.tuning.tuners.ml2tuner:ML2TunerPlus",
    "chameleon-ml2": "toolkit.tuning.tuners.ml2tuner:ChameleonML2Tuner",
    "metaschedule": "toolkit.backends.tvm.metaschedule:MetaScheduleTuner",
}
"""Built-in tuners: name -> ``module:class``, imported on first use (``make_tuner("random")`` imports
neither torch nor TVM). ``metaschedule`` is a driver the TVM backend provides."""

DEFAULT_TUNER = "ml2tuner+"
"""The tuner ``edgetune tune`` (and ``tune --model``, ``make demo``) uses when none is named: the one that
measures best on the test set (docs/benchmarks.md, "Headline: the test set"), starting from the transfer model
edgetune ships for the board where there is one."""

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
