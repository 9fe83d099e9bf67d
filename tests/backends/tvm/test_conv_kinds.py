"""Depthwise, grouped and dilated convs on CPU and GPU boards: the spec, correct kernels, every tuner tunes them."""

import numpy as np
import pytest
import torch
import tvm

from toolkit.backends import template_for
from toolkit.backends.registry import make_task
from toolkit.backends.tvm.cpu import CPUConv2dTemplate
from toolkit.backends.tvm.cuda import CUDAConv2dTemplate
from toolkit.backends.tvm.tir_features import KIND_FEATURES
from toolkit.boards import load_profile, resolve_board
from toolkit.errors import ConfigError
from toolkit.tuning.session import tune
from toolkit.tuning.tuners.base import make_tuner, tuner_names
from toolkit.workloads import parse_workload

LOCAL = load_profile("local")
KINDS = {
    "depthwise": "conv2d:H=14,W=14,CI=16,CO=16,K=3,S=1,P=1,G=16",
    "depthwise x2, stride 2": "conv2d:H=15,W=15,CI=16,CO=32,K=3,S=2,P=1,G=16",
    "grouped": "conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1,G=4",
    "dilated": "conv2d:H=14,W=14,CI=8,CO=16,K=3,S=1,P=2,D=2",
    "depthwise dilated, 5x3": "conv2d:H=14,W=12,CI=8,CO=8,KH=5,KW=3,S=1,PH=4,PW=2,G=8,D=2",
}


def _torch(wl, data, weight_oihw):
    return torch.nn.functional.conv2d(torch.from_numpy(data), torch.from_numpy(np.ascontiguousarray(weight_oihw)),
                                      stride=(wl.sh, wl.sw), padding=(wl.ph, wl.pw), dilation=(wl.dh, wl.dw),
                                      groups=wl.g).numpy()


@pytest.mark.parametrize("kind", list(KINDS))
def test_cpu_kernels_of_every_kind_equal_torch(kind, tmp_path):
    """The fallback config and six random ones, each built by LLVM and run, against torch; the numpy reference
    the tuners check with too."""
    wl = parse_workload(KINDS[kind])
    t = template_for(wl, LOCAL)
    assert isinstance(t, CPUConv2dTemplate) and t.weight_oihw(t.make_inputs(np.random.default_rng(0))[1]).shape == (
        wl.co, wl.ci // wl.g, wl.kh, wl.kw)
    rng = np.random.default_rng(1)
    data, weight = t.make_inputs(rng)
    want = _torch(wl, data, t.weight_oihw(weight))
    np.testing.assert_allclose(t.reference([data, weight]), want, rtol=1e-4, atol=1e-4)
    for index in [t.fallback_config().index, *t.space().sample(6, rng)]:
        artifact = t.build(t.space().get(int(index)))
        path = tmp_path / f"k{index}.so"        # a loaded library's file is never rewritten
        path.write_bytes(artifact.payload)
        lib = tvm.runtime.load_module(str(path))
        out = tvm.runtime.tensor(np.zeros(t.output_shape(), np.float32), tvm.cpu())
        lib["main"](*(tvm.runtime.tensor(x, tvm.cpu()) for x in (data, weight)), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4, err_msg=str(index))


def test_a_depthwise_space_has_no_duplicate_reduction_orders_and_vectorises_columns():
    t = CPUConv2dTemplate(parse_workload(KINDS["depthwise"]), LOCAL)
    knobs = {k.name: k for k in t.space().knobs}
    assert knobs["reorder"].options == ["kh.kw.ci.ci"] and knobs["vec"].options == ["ow"]
    assert t.fallback_config()["vec"] == "ow"
    grouped = CPUConv2dTemplate(parse_workload(KINDS["grouped"]), LOCAL).space()
    assert {k.name: k for k in grouped.knobs}["tile_co"].length == 8     # one group's output channels


@pytest.mark.parametrize("kind", list(KINDS))
def test_cuda_kernels_of_every_kind_lower_within_the_jetsons_limits(kind):
    """No GPU here: the fallback config schedules, lowers and passes TVM's ``verify_gpu_code``."""
    wl = parse_workload(KINDS[kind])
    for board in ("jetson-nano", "jetson-orin-nano"):
        t = CUDAConv2dTemplate(wl, load_profile(board))
        t.lower(t.fallback_config())


def test_vta_refuses_a_depthwise_conv_with_the_reason():
    with pytest.raises(ConfigError, match="depthwise conv \\(groups=16\\): VTA runs dense convs; tune it on a CPU"):
        template_for(parse_workload(KINDS["depthwise"]), load_profile("vta-fsim"))


FAST = {"chameleon": {"episodes": 8, "max_steps": 20, "max_rounds": 20},
        "rl": {"episodes": 8, "max_steps": 20, "max_rounds": 20, "plan_size": 4},
        "chameleon+": {"episodes": 8, "max_steps": 20, "max_rounds": 20},
        "ml2tuner": {"sa_chains": 8, "sa_steps": 20, "max_rounds": 20},
        "ml2tuner+": {"sa_chains": 8, "sa_steps": 20, "max_rounds": 20, "prior_pool": 32},
        "chameleon-ml2": {"plan_size": 4, "episodes": 8, "max_steps": 20, "max_rounds": 20}}
"""Smaller search budgets for the tuners whose defaults search for long (their algorithms unchanged)."""
DRIVERS = ("metaschedule",)
"""MetaSchedule takes its own compute of the same template (``test_metaschedule_local``); four trials of it take
80-140 s here whatever the conv, so the suite leaves it to the benchmark (``bench/bench_edge_models.py``)."""


@pytest.fixture(scope="module")
def local_runner():
    task = make_task(parse_workload(KINDS["depthwise"]), resolve_board("local"))
    runner = task.backend.make_runner(task.board)
    yield runner
    runner.close()


@pytest.mark.parametrize("name", [n for n in tuner_names() if n not in DRIVERS])
def test_every_registered_tuner_tunes_a_depthwise_conv_on_local(name, local_runner, tmp_path):
    task = make_task(parse_workload("conv2d:H=8,W=8,CI=8,CO=8,K=3,S=1,P=1,G=8"), resolve_board("local"))
    log = tmp_path / f"{name}.jsonl"
    summary = tune(task, make_tuner(name, seed=0, **FAST.get(name, {})), 4, log=log, runner=local_runner)
    assert summary.trials == 4 and summary.best_seconds is not None and summary.best_seconds > 0, summary


def test_compile_features_know_the_conv_kind():
    """The tuners' compile features carry each conv's kind, so cost and transfer models tell them apart."""
    depthwise = CPUConv2dTemplate(parse_workload(KINDS["depthwise dilated, 5x3"]), LOCAL)
    plain = CPUConv2dTemplate(parse_workload("conv2d:H=14,W=12,CI=8,CO=8,KH=5,KW=3,S=1,PH=2,PW=1"), LOCAL)
    kinds = [{k: t.features(t.fallback_config())[k] for k in KIND_FEATURES} for t in (depthwise, plain)]
    assert kinds == [{"conv_groups_log2": 3.0, "conv_reduction_per_output": 15.0, "conv_dilation": 2.0},
                     {"conv_groups_log2": 0.0, "conv_reduction_per_output": 120.0, "conv_dilation": 1.0}]
