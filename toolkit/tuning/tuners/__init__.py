"""Tuners, by name. ``TUNERS`` maps a registry name to a :class:`Tuner` class."""

from toolkit.tuning.tuners.base import TUNERS, Option, Tuner, TuningContext, make_tuner, register

__all__ = ["TUNERS", "Option", "Tuner", "TuningContext", "make_tuner", "register"]
