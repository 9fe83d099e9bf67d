"""Registers the ``metaschedule`` driver (defined in :mod:`toolkit.tuning.metaschedule`) as a tuner name."""

from toolkit.tuning.metaschedule import MetaScheduleTuner
from toolkit.tuning.tuners.base import register

register(MetaScheduleTuner)

__all__ = ["MetaScheduleTuner"]
