"""Replaying a real simulator log: same answers as measuring, no measured answer leaked to builds."""

from toolkit.boards import resolve_board
from toolkit.tuning.session import tune
from toolkit.tuning.replay import CachedRunner, MeasurementCache, ReplayBuilder
from toolkit.tuning.tuners import make_tuner
from toolkit.workloads import parse_workload
from toolkit.backends import make_task


def test_replay_matches_the_log_and_hides_measurements_from_builds(tmp_path):
    task = make_task(parse_workload("resnet18.C11"), resolve_board("vta-fsim"))
    log = tmp_path / "c11.jsonl"
    tune(task, make_tuner("random", seed=1), 24, log=log)
    cache = MeasurementCache.from_log(log)
    assert len(cache) == 24

    configs = [task.space.get(i) for i in sorted(cache.by_index)]
    built = ReplayBuilder(cache).build(task.template, configs)
    measured = [r for r in cache.by_index.values() if r.valid]
    assert measured and any(k.startswith("sim.") for k in measured[0].features)
    for b in built:
        assert not any(k.startswith("sim.") for k in b.features)  # compile features only

    artifacts = [(c, b) for c, b in zip(configs, built) if not hasattr(b, "error")]
    replayed = CachedRunner(cache).run(task.template, artifacts, None)
    for (c, _), r in zip(artifacts, replayed):
        assert r.costs == cache.lookup(c.index).costs
    best = cache.best()
    assert best is not None and best.seconds == min(r.seconds for r in measured)


def test_replayed_compile_features_are_the_compilers_even_for_records_older_than_them(tmp_path):
    """Records written before the ``time.*`` terms existed replay with them, as compiling gives them now."""
    from toolkit.vta.compiler import compile_conv2d

    task = make_task(parse_workload("resnet18.C10"), resolve_board("vta-fsim"))
    log = tmp_path / "c10.jsonl"
    tune(task, make_tuner("random", seed=3), 8, log=log)
    cache = MeasurementCache.from_log(log)
    for rec in cache.by_index.values():  # an older log: no derived terms recorded
        rec.features = {k: v for k, v in rec.features.items() if not k.startswith("time.")}
    configs = [task.space.get(i) for i in sorted(cache.by_index)]
    built = [b for b in ReplayBuilder(cache).build(task.template, configs) if not hasattr(b, "error")]
    assert built
    for b in built:
        live = compile_conv2d(task.workload, task.space.get(b.index).values, task.template.hw).features
        assert b.features == live
        assert any(k.startswith("time.") for k in b.features)
