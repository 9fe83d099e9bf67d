"""The fast paths of tuning on TVM boards: features without code generation, RPC session reuse,
the hopeless-config cut. Real TVM builds, a real loopback tracker and server."""

import math

import numpy as np
import pytest

from toolkit.backends import backend_for
from toolkit.boards import load_profile, resolve_board
from toolkit.rpc.tracker import start_server, start_tracker
from toolkit.backends import template_for
from toolkit.backends.tvm.cpu import CPUConv2dTemplate
from toolkit.tuning.session import tune
from toolkit.tuning.core.builder import LocalBuilder, has_features_path
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.backends.tvm.rpc_runner import RPCRunner
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.core.task import Task
from toolkit.tuning.core.template import Template
from toolkit.tuning.tuners.base import Tuner
from toolkit.workloads import parse_workload

WL = parse_workload("conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1")
BROKEN = 7
"""The index whose schedule fails in :class:`_NoCodegen`."""


class _NoCodegen(CPUConv2dTemplate):
    """The CPU template, but a full build is a test failure and config ``BROKEN`` cannot be scheduled."""

    def build(self, config):
        raise AssertionError("features must not build")

    def schedule(self, config):
        if config.index == BROKEN:
            raise ValueError("no such loop")
        return super().schedule(config)


@pytest.fixture(scope="module")
def template():
    return CPUConv2dTemplate(WL, load_profile("local"))


@pytest.fixture(scope="module")
def configs(template):
    space = template.space()
    return [space.get(i) for i in space.sample(3, np.random.default_rng(11))]


def test_features_are_the_build_features_without_code_generation(template, configs):
    built = [template.build(c).features for c in configs]
    assert [template.features(c) for c in configs] == built
    fake = _NoCodegen(WL, load_profile("local"))
    broken = fake.space().get(BROKEN)
    builder = LocalBuilder(n_parallel=2, timeout_s=60)
    try:
        out = builder.features(fake, [*configs, broken])
    finally:
        builder.close()
    assert out[:3] == built
    assert isinstance(out[3], MeasureResult) and out[3].error is ErrorClass.COMPILE_ERROR
    assert "scheduling failed" in out[3].message


def test_templates_without_a_features_path_are_built():
    vta = template_for(parse_workload("resnet18.C11"), load_profile("vta-fsim"))
    plain = type("PlainVTA", (type(vta),), {"features": Template.features})(vta.workload, load_profile("vta-fsim"))
    assert has_features_path(vta) and not has_features_path(plain)
    assert has_features_path(CPUConv2dTemplate(WL, load_profile("local")))
    space = vta.space()
    cfgs = [space.get(i) for i in range(0, 60, 5)]
    built = LocalBuilder(n_parallel=0).build(plain, cfgs)
    expected = [b.error if isinstance(b, MeasureResult) else b.features for b in built]

    def outcomes(found):
        return [f.error if isinstance(f, MeasureResult) else f for f in found]

    assert outcomes(LocalBuilder(n_parallel=0).features(plain, cfgs)) == expected
    assert outcomes(LocalBuilder(n_parallel=0).features(vta, cfgs)) == expected  # compiled, not encoded
    assert any(isinstance(e, dict) for e in expected) and any(not isinstance(e, dict) for e in expected)


class _FeatureReader(Tuner):
    """Reads compile features in setup (as ml2tuner does) and proposes nothing."""

    name = "feature-reader"

    def setup(self, ctx):
        super().setup(ctx)
        self.got = ctx.compile_features([0, 1, BROKEN])

    def propose(self, n):
        return []


def test_the_loop_reads_features_without_building():
    task = Task(WL, resolve_board("local"), _NoCodegen(WL, load_profile("local")), backend_for("cpu"))
    reader = _FeatureReader()
    runner = RPCRunner("127.0.0.1", 9, "unused")   # never contacted: nothing is measured
    tune(task, reader, 1, runner=runner, builder=LocalBuilder(n_parallel=0))
    assert reader.got[0] == CPUConv2dTemplate(WL, load_profile("local")).features(task.space.get(0))
    assert isinstance(reader.got[1], dict) and isinstance(reader.got[2], MeasureResult)


@pytest.fixture(scope="module")
def rpc():
    with start_tracker() as tracker, start_server(tracker.address, key="reuse"):
        yield tracker.address


@pytest.fixture(scope="module")
def items(template, configs):
    return [(c, template.build(c)) for c in configs]


def test_one_session_serves_a_batch_and_a_failure_starts_a_new_one(rpc, template, items):
    # the server ends a failed session only at its session timeout: keep that short (reuse still fits)
    runner = RPCRunner(*rpc, "reuse", session_timeout=14)
    options = MeasureOptions(check=True, timeout_s=1)
    results = runner.run(template, items, options)
    assert all(r.valid and len(r.costs) == 3 for r in results), [r.message for r in results]
    assert runner.sessions == 1
    (c0, a0), (c1, a1) = items[:2]
    corrupt = type(a1)(index=a1.index, kind=a1.kind, payload=b"\x7fELF not a library")
    results = runner.run(template, [(c0, a0), (c1, corrupt), items[2]], options)
    assert [r.valid for r in results] == [True, False, True]
    assert results[1].error is ErrorClass.RUNTIME_ERROR
    assert runner.sessions == 3          # a new session for the next batch, another after the failure


def test_hopeless_configs_keep_one_timed_run(rpc, template, items):
    runner = RPCRunner(*rpc, "reuse")
    cut = runner.run(template, items[:2], MeasureOptions(hopeless_factor=10, best_s=1e-9))
    assert all(r.valid and len(r.costs) == 1 and "hopeless" in r.message for r in cut)
    full = runner.run(template, items[:2], MeasureOptions(hopeless_factor=10, best_s=math.inf))
    assert all(r.valid and len(r.costs) == 3 and not r.message for r in full)
    assert MeasureOptions(hopeless_factor=0, best_s=1.0).hopeless_after() == math.inf
