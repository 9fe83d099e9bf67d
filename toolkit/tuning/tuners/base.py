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
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from toolkit.errors import ConfigError
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.core.space import ConfigSpace


@dataclass(frozen=True)
class Option:
    """One tuner option: default, type, a one-line description, and for numbers the allowed range
    (``low``/``high``, inclusive unless ``low_open``; an integer's ``low`` is 0 unless given)."""

    default: Any
    doc: str
    type: type = object
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    experimental: bool = False
    """A research switch (an ablation): ``edgetune tuners NAME`` lists it apart from the everyday options."""

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


PRETRAINED = "pretrained"
"""The ``transfer`` option value naming the transfer model edgetune ships for the task's board."""


@dataclass
class TuningContext:
    """What a tuner may use from the task.

    ``compile_features`` compiles configs without measuring them (no board time) and returns,
    per index, either a feature dict or a :class:`MeasureResult` with the compile error.
    It is ``None`` where the task cannot compile ahead of measurement. ``flops`` is the operations
    of one run (throughput = flops / seconds), ``task`` the task's description as logged, and
    ``pretrained`` returns the transfer model edgetune ships for the board (``None`` where none is).
    ``extra`` holds what a user's own tuner needs beyond these.
    """

    space: ConfigSpace
    compile_features: Callable[[Sequence[int]], list[dict[str, float] | MeasureResult]] | None = None
    n_parallel: int = 1
    flops: float = 1.0
    task: dict[str, Any] = field(default_factory=dict)
    pretrained: Callable[[], Any] = field(default=lambda: None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        moved = [k for k in ("flops", "task", "pretrained") if k in self.extra]
        if moved:   # the typed fields used to travel in ``extra``
            warnings.warn(f"TuningContext(extra={{{', '.join(map(repr, moved))}: ...}}) is deprecated; pass "
                          f"{', '.join(k + '=' for k in moved)} instead", DeprecationWarning, stacklevel=3)
            self.extra = dict(self.extra)
            for k in moved:
                setattr(self, k, float(self.extra.pop(k)) if k == "flops" else self.extra.pop(k))


def resolve_transfer(choice: Any, pretrained: Callable[[], Any]) -> Any:
    """The transfer model a ``transfer`` option stands for: ``None``, a model as given, or for
    :data:`PRETRAINED` the board's shipped model (``pretrained()``; ``None`` where none is shipped).

    >>> resolve_transfer(PRETRAINED, lambda: "shipped"), resolve_transfer(None, lambda: "shipped")
    ('shipped', None)
    """
    return pretrained() if choice == PRETRAINED else choice


class Configurable:
    """A named search with options: :class:`Tuner` and :class:`Driver` share how they are created.

    ``options`` declares every option (default, type, range); ``__init__`` takes the seed and options
    only (no work), refusing unknown or out-of-range values and option combinations
    (:meth:`check_params`) before any trial.
    """

    name: ClassVar[str] = ""
    options: ClassVar[dict[str, Option]] = {}

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

    def stats(self) -> dict[str, float]:
        """Counters for benchmarks (e.g. cost-model queries); empty by default."""
        return {}


class Tuner(Configurable, abc.ABC):
    """Base class of every ask/tell tuner: the tuning loop (:func:`toolkit.tuning.session.tune`) asks
    :meth:`propose`, measures, and tells :meth:`update`."""

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


class TransferLearner(abc.ABC):
    """A tuner that learns from other tasks' records through a transfer model (its ``transfer`` option).

    Whole-network tuning hands each task's tuner a model of the network's other records as they grow
    (:meth:`use_transfer`); :meth:`resolved_transfer` is the model in use once set up.
    """

    @abc.abstractmethod
    def use_transfer(self, model: Any) -> None:
        """Use ``model`` (a fitted transfer model) from the next round on."""

    @abc.abstractmethod
    def resolved_transfer(self) -> Any:
        """The transfer model this tuner uses (:data:`PRETRAINED` resolved once set up), or ``None``."""


class Driver(Configurable, abc.ABC):
    """A search that runs its own loop (MetaSchedule): :func:`~toolkit.tuning.session.tune` hands it the whole
    run through :meth:`drive` instead of asking for configs."""

    @abc.abstractmethod
    def drive(self, task: Any, n_trials: int, *, log: Any = None, resume: bool = False, runner: Any = None,
              measure_options: Any = None, callback: Any = None) -> Any:
        """Tune ``task`` for ``n_trials`` trials, logging and resuming as :func:`tune` does; a ``TuneSummary``."""


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
    "chameleon-ml2": "toolkit.tuning.tuners.chameleon_ml2:ChameleonML2Tuner",
    "metaschedule": "toolkit.backends.tvm.metaschedule:MetaScheduleTuner",
}
"""Built-in tuners: name -> ``module:class``, imported on first use (``make_tuner("random")`` imports
neither torch nor TVM). ``metaschedule`` is a driver the TVM backend provides."""

DEFAULT_TUNER = "ml2tuner+"
"""The tuner ``edgetune tune`` (and ``tune --model``, ``make demo``) uses when none is named: the one that
measures best on the test set (docs/benchmarks.md, "Headline: the test set"), starting from the transfer model
edgetune ships for the board where there is one."""

TUNERS: dict[str, type[Tuner | Driver]] = {}
"""Tuner classes loaded so far, by name: built-ins once used, and every class passed to :func:`register`."""


def register(cls: type[Tuner | Driver]) -> type[Tuner | Driver]:
    """Class decorator: add a tuner to the registry under ``cls.name`` (how a user's tuner gets a name)."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    TUNERS[cls.name] = cls
    return cls


def tuner_names() -> list[str]:
    """Every tuner name: the built-ins and the registered ones, sorted."""
    return sorted(set(BUILTIN_TUNERS) | set(TUNERS))


def tuner_class(name: str) -> type[Tuner | Driver]:
    """The class registered under ``name``, importing a built-in's module on first use."""
    if name not in TUNERS and name in BUILTIN_TUNERS:
        import importlib

        module, attr = BUILTIN_TUNERS[name].split(":")
        TUNERS[name] = getattr(importlib.import_module(module), attr)
    if name not in TUNERS:
        raise ConfigError(f"unknown tuner {name!r}: use one of {', '.join(tuner_names())}")
    return TUNERS[name]


def make_tuner(name: str, seed: int = 0, **options: Any) -> Tuner | Driver:
    """Create a tuner by name (for the CLI; Python users pass instances)."""
    return tuner_class(name)(seed=seed, **options)


def tuner_classes() -> dict[str, type[Tuner | Driver]]:
    """Every tuner class by name (imports every built-in)."""
    return {name: tuner_class(name) for name in tuner_names()}
