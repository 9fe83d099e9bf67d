"""Every built-in tuner passes the tuner conformance suite."""

from toolkit.testing.conformance import TunerConformance
from toolkit.tuning.tuners.ga import GATuner
from toolkit.tuning.tuners.grid import GridTuner
from toolkit.tuning.tuners.random import RandomTuner
from toolkit.tuning.tuners.xgb import XGBTuner


class TestRandom(TunerConformance):
    tuner_factory = RandomTuner


class TestGrid(TunerConformance):
    tuner_factory = GridTuner


class TestGA(TunerConformance):
    tuner_factory = GATuner


class TestGASmallPopulation(TunerConformance):
    tuner_factory = staticmethod(lambda seed: GATuner(seed=seed, pop_size=10))


class TestXGBRank(TunerConformance):
    tuner_factory = XGBTuner


class TestXGBReg(TunerConformance):
    tuner_factory = staticmethod(lambda seed: XGBTuner(seed=seed, loss="reg", plan_size=32))
