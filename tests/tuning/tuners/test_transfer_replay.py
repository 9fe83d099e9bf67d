"""Transfer on a held-out layer: the shipped Pynq model (trained on ResNet-18 C2-C11 only) against a cold start,
replaying the exhaustive simulator log of a synthetic test-set layer kept in tests/data."""

from __future__ import annotations

import lzma
import math
from pathlib import Path

import pytest

from toolkit.backends import make_task
from toolkit.backends.vta.pretrained import load_pretrained, model_path
from toolkit.harness import CompileReplayBuilder, stale_configs
from toolkit.boards import resolve_board
from toolkit.tuning.metrics import regret_at, trials_to_optimum
from toolkit.tuning.replay import CachedRunner, MeasurementCache
from toolkit.tuning.session import tune
from toolkit.tuning.tuners.base import make_tuner
from toolkit.workloads import parse_workload
from toolkit.workloads.splits import split_of

DATA = Path(__file__).resolve().parents[2] / "data" / "transfer"
LAYER = "conv2d:H=42,W=42,CI=64,CO=96,K=3,S=2,P=1"
TRIALS = 40


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """The layer's task on vta-fsim and its exhaustive cache (checked against today's simulator)."""
    path = tmp_path_factory.mktemp("cache") / "layer.jsonl"
    path.write_bytes(lzma.decompress((DATA / "pynq-conv2d_H42_W42_CI64_CO96_K3_S2_P1.jsonl.xz").read_bytes()))
    task = make_task(parse_workload(LAYER), resolve_board("vta-fsim"))
    cache = MeasurementCache.from_log(path)
    assert len(cache) == task.space.size
    assert stale_configs(task, cache) == [], "the kept log no longer matches the simulator: rebuild it"
    return task, cache


def _trials_to_optimum(task, cache, tuner) -> tuple[int, float]:
    s = tune(task, tuner, TRIALS, builder=CompileReplayBuilder.for_task(task, cache), runner=CachedRunner(cache))
    history = s.to_json()["history"]
    optimum = cache.best().seconds
    return trials_to_optimum(history, optimum) or TRIALS, regret_at(history, optimum, 10)


def test_the_layer_is_held_out():
    assert split_of(parse_workload(LAYER)) == "test"
    assert "development set" in load_pretrained("pynq").trained_on_


@pytest.mark.parametrize("name, seeds", [("ml2tuner", (0, 1, 2)), ("chameleon-ml2", (0,))])
def test_transfer_beats_a_cold_start_on_a_held_out_layer(replay, name, seeds):
    task, cache = replay
    model = load_pretrained("pynq")
    cold = [_trials_to_optimum(task, cache, make_tuner(name, seed=s, transfer=None)) for s in seeds]
    warm = [_trials_to_optimum(task, cache, make_tuner(name, seed=s, transfer=model)) for s in seeds]
    geo = lambda xs: math.exp(sum(math.log(x) for x, _ in xs) / len(xs))   # noqa: E731
    assert geo(warm) < 0.5 * geo(cold), f"trials to the optimum: transfer {warm}, cold {cold}"
    assert sum(r for _, r in warm) < sum(r for _, r in cold), f"regret after 10 trials: {warm} vs {cold}"


def test_the_shipped_models_are_small_and_load():
    for preset in ("pynq", "zcu102", "ultra96"):
        path = model_path(preset)
        assert path.is_file(), f"{path.name} is missing: make pretrained"
        assert path.stat().st_size < 1_000_000
        assert load_pretrained(preset).term_keys_


class _Inverted:
    """A transfer model that ranks every config the wrong way round (a prior from the wrong hardware)."""

    def __init__(self, model) -> None:
        self.model = model

    def predict_seconds(self, feats):
        return 1e-6 / self.model.predict_seconds(feats)


@pytest.mark.parametrize("seed", (0, 1))
def test_a_wrong_prior_is_dropped_and_a_right_one_kept(replay, seed):
    """The prior check (``prior_check``, on by default): a prior that ranks backwards is found out on the
    task's own measurements and ModelA ranks without it; the shipped prior of the layer's board is kept."""
    task, cache = replay
    model = load_pretrained("pynq")
    wrong = make_tuner("ml2tuner", seed=seed, transfer=_Inverted(model))
    _trials_to_optimum(task, cache, wrong)
    stats = wrong.stats()
    assert stats["prior_dropped"] == 1, stats
    assert stats["pairs_own_right"] > 2 * stats["pairs_prior_right"], stats
    right = make_tuner("ml2tuner", seed=seed, transfer=model)
    _trials_to_optimum(task, cache, right)
    assert right.stats()["prior_dropped"] == 0, right.stats()


def test_dropping_a_wrong_prior_finds_the_optimum_sooner(replay):
    task, cache = replay
    model = _Inverted(load_pretrained("pynq"))
    checked = [_trials_to_optimum(task, cache, make_tuner("ml2tuner", seed=s, transfer=model))[0] for s in (0, 1, 2)]
    unchecked = [_trials_to_optimum(task, cache, make_tuner("ml2tuner", seed=s, transfer=model, prior_check=False))[0]
                 for s in (0, 1, 2)]
    assert sum(math.log(x) for x in checked) < sum(math.log(x) for x in unchecked), (checked, unchecked)
