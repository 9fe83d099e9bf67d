"""Tuners, by name: a lazy name -> class registry (:data:`BUILTIN_TUNERS`, :func:`register`)."""

from toolkit.tuning.tuners.base import (BUILTIN_TUNERS, TUNERS, Option, Tuner, TuningContext, make_tuner, register,
                                        tuner_class, tuner_classes, tuner_names)

__all__ = ["BUILTIN_TUNERS", "TUNERS", "Option", "Tuner", "TuningContext", "make_tuner", "register", "tuner_class",
           "tuner_classes", "tuner_names"]
