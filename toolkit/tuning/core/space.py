"""Configuration spaces: knobs, flat indices, neighbourhoods and cost-model features.

A space is an ordered list of knobs. A configuration is a flat integer index, decoded in
mixed radix with the **first knob least significant**, exactly as AutoTVM's ``point2knob``;
so AutoTVM indices (e.g. TopHub's) mean the same configuration here.

>>> from toolkit.tuning.core.space import ConfigSpace, SplitKnob, CategoricalKnob
>>> space = ConfigSpace([SplitKnob("tile_h", 56, 2), CategoricalKnob("oc_nthread", [1, 2])])
>>> space.size
16
>>> space.get(9).values
{'tile_h': [28, 2], 'oc_nthread': 2}
>>> space.index_of({"tile_h": [28, 2], "oc_nthread": 2})
9
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from toolkit.errors import ConfigError


def divisors(n: int) -> list[int]:
    """Sorted divisors of ``n``."""
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


class Knob(abc.ABC):
    """One tunable dimension: a finite, ordered list of options."""

    name: str

    @property
    @abc.abstractmethod
    def options(self) -> list[Any]:
        """Every value of the knob, in index order (JSON-able)."""

    @property
    @abc.abstractmethod
    def feature_names(self) -> list[str]:
        """Names of the numeric features one option contributes."""

    @abc.abstractmethod
    def option_features(self, value: Any) -> list[float]:
        """Numeric encoding of one option (for cost models)."""

    def __len__(self) -> int:
        return len(self.options)

    def index(self, value: Any) -> int:
        """Index of ``value``; :class:`ConfigError` if it is not an option."""
        try:
            return self._lookup[_freeze(value)]
        except AttributeError:
            self._lookup = {_freeze(v): i for i, v in enumerate(self.options)}
            return self.index(value)
        except KeyError:
            raise ConfigError(
                f"{value!r} is not an option of knob {self.name!r} (options: {self.options[:8]}"
                f"{' ...' if len(self) > 8 else ''})"
            ) from None

    @property
    def feature_table(self) -> np.ndarray:
        """``[len(self), n_features]`` array of every option's features (cached)."""
        try:
            return self._table
        except AttributeError:
            self._table = np.array([self.option_features(v) for v in self.options], dtype=np.float64)
            return self._table

    def describe(self) -> str:
        """A short human description for the knob table."""
        return f"{len(self)} options"


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class SplitKnob(Knob):
    """An ``n_parts``-way split of an axis of length ``length``: AutoTVM's ``factors`` policy.

    Options are lists ``[outer, ..., inner]`` whose product is ``length``, enumerated by a
    depth-first walk over the sorted divisors with the innermost factor varying slowest,
    as AutoTVM does, so that a +-1 move is AutoTVM's neighbouring factorisation.
    """

    def __init__(self, name: str, length: int, n_parts: int = 2) -> None:
        if length < 1 or n_parts < 1:
            raise ConfigError(f"split knob {name!r}: length and parts must be >= 1")
        self.name = name
        self.length = length
        self.n_parts = n_parts
        self._options = self._enumerate()

    def _enumerate(self) -> list[list[int]]:
        factors = divisors(self.length)
        out: list[list[int]] = []

        def walk(stack: list[int], prod: int) -> None:
            if len(stack) == self.n_parts - 1:
                out.append([self.length // prod] + stack[::-1])
                return
            for f in factors:
                if (self.length // prod) % f == 0:
                    walk(stack + [f], prod * f)

        walk([], 1)
        return out

    @property
    def options(self) -> list[list[int]]:
        return self._options

    @property
    def feature_names(self) -> list[str]:
        return [f"{self.name}.{i}" for i in range(self.n_parts)]

    def option_features(self, value: Any) -> list[float]:
        return [float(v) for v in value]

    def describe(self) -> str:
        return f"{self.n_parts}-way split of {self.length}: {len(self)} options"


class CategoricalKnob(Knob):
    """A knob with an explicit list of options (numbers, strings or booleans)."""

    def __init__(self, name: str, options: Sequence[Any]) -> None:
        if not options:
            raise ConfigError(f"categorical knob {name!r} needs at least one option")
        self.name = name
        self._options = list(options)

    @property
    def options(self) -> list[Any]:
        return self._options

    @property
    def feature_names(self) -> list[str]:
        return [self.name]

    def option_features(self, value: Any) -> list[float]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return [float(value)]
        return [float(self._options.index(value))]

    def describe(self) -> str:
        return f"one of {self._options}"


@dataclass(frozen=True)
class Config:
    """One point of a space: its flat index and its knob values."""

    index: int
    values: dict[str, Any]

    def __getitem__(self, knob: str) -> Any:
        return self.values[knob]


class ConfigSpace:
    """The cartesian product of knobs, addressed by flat index."""

    def __init__(self, knobs: Iterable[Knob]) -> None:
        self.knobs: list[Knob] = list(knobs)
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise ConfigError(f"duplicate knob names in {names}")
        self.dims: list[int] = [len(k) for k in self.knobs]
        self.size: int = int(np.prod(self.dims, dtype=object))
        self._radix = np.cumprod([1] + self.dims[:-1]).astype(np.int64)

    def __len__(self) -> int:
        return self.size

    @property
    def knob_names(self) -> list[str]:
        """Knob names in definition order."""
        return [k.name for k in self.knobs]

    @property
    def feature_names(self) -> list[str]:
        """Column names of :meth:`features`."""
        return [n for k in self.knobs for n in k.feature_names]

    # -- index <-> knob indices <-> values ---------------------------------------------
    def _check(self, index: int) -> int:
        index = int(index)
        if not 0 <= index < self.size:
            raise ConfigError(f"config index {index} is outside the space (size {self.size})")
        return index

    def knob_indices(self, index: int) -> list[int]:
        """Per-knob option indices of a flat index (first knob least significant)."""
        index = self._check(index)
        out = []
        for d in self.dims:
            out.append(index % d)
            index //= d
        return out

    def knob_indices_array(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Vectorised :meth:`knob_indices`: ``[n, n_knobs]`` int64."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1, 1)
        return (idx // self._radix) % np.asarray(self.dims, dtype=np.int64)

    def from_knob_indices(self, knob_idx: Sequence[int]) -> int:
        """Flat index of per-knob option indices."""
        if len(knob_idx) != len(self.dims):
            raise ConfigError(f"expected {len(self.dims)} knob indices, got {len(knob_idx)}")
        index = 0
        for i, d in zip(reversed(list(knob_idx)), reversed(self.dims)):
            if not 0 <= int(i) < d:
                raise ConfigError(f"knob index {i} out of range 0..{d - 1}")
            index = index * d + int(i)
        return index

    def from_knob_indices_array(self, knob_idx: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`from_knob_indices` for an ``[n, n_knobs]`` array."""
        return (np.asarray(knob_idx, dtype=np.int64) * self._radix).sum(axis=1)

    def get(self, index: int) -> Config:
        """The configuration at ``index``."""
        ki = self.knob_indices(index)
        return Config(int(index), {k.name: k.options[i] for k, i in zip(self.knobs, ki)})

    def index_of(self, values: dict[str, Any]) -> int:
        """Flat index of a config given as knob values; unknown or missing knobs raise."""
        extra = set(values) - set(self.knob_names)
        if extra:
            raise ConfigError(f"unknown knob(s) {sorted(extra)}; this space has {self.knob_names}")
        missing = [n for n in self.knob_names if n not in values]
        if missing:
            raise ConfigError(f"config is missing knob(s) {missing}")
        return self.from_knob_indices([k.index(values[k.name]) for k in self.knobs])

    # -- search helpers -----------------------------------------------------------------
    def neighbours(self, index: int) -> list[int]:
        """Configs one knob one step away (AutoTVM order for split knobs)."""
        ki = self.knob_indices(index)
        out = []
        for pos, d in enumerate(self.dims):
            for step in (-1, 1):
                j = ki[pos] + step
                if 0 <= j < d:
                    moved = list(ki)
                    moved[pos] = j
                    out.append(self.from_knob_indices(moved))
        return out

    def features(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """``[n, n_features]`` float array: every knob's numeric encoding, concatenated."""
        ki = self.knob_indices_array(indices)
        cols = [k.feature_table[ki[:, i]] for i, k in enumerate(self.knobs)]
        return np.hstack(cols) if cols else np.zeros((len(ki), 0))

    def sample(self, n: int, rng: np.random.Generator, exclude: set[int] | None = None) -> list[int]:
        """Up to ``n`` distinct indices not in ``exclude``, uniformly at random."""
        exclude = exclude or set()
        free = self.size - len(exclude)
        n = min(n, max(free, 0))
        if n <= 0:
            return []
        if self.size <= 4 * (n + len(exclude)) or self.size <= 200_000:
            if self.size <= 2_000_000:
                pool = np.setdiff1d(np.arange(self.size, dtype=np.int64), np.fromiter(exclude, np.int64))
                return [int(i) for i in rng.choice(pool, size=n, replace=False)]
        out: list[int] = []
        seen = set(exclude)
        while len(out) < n:
            for i in rng.integers(0, self.size, size=2 * (n - len(out))):
                i = int(i)
                if i not in seen:
                    seen.add(i)
                    out.append(i)
                    if len(out) == n:
                        break
        return out

    @staticmethod
    def format(values: dict[str, Any]) -> str:
        """A compact one-line rendering of knob values: ``tile_h=7x8 oc_nthread=2``."""
        def one(v: Any) -> str:
            return "x".join(str(x) for x in v) if isinstance(v, (list, tuple)) else str(v)

        return " ".join(f"{k}={one(v)}" for k, v in values.items())

    def table(self) -> list[tuple[str, int, str]]:
        """Rows ``(knob, options, description)`` for display."""
        return [(k.name, len(k), k.describe()) for k in self.knobs]
