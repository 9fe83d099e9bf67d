"""MetaSchedule for a Jetson (CUDA) target without a GPU: design space, postprocessing and GPU
verification by MetaSchedule's own search strategy, then real builds (CUDA source + aarch64 host
library) through the MetaSchedule builder edgetune configures, and the trace rebuild used by export."""

from __future__ import annotations

import pytest

from toolkit.boards import load_profile
from toolkit.backends import template_for
from toolkit.backends.tvm.metaschedule import KIND, ms_builder, ms_target, rebuild, trace_json, workload_module
from toolkit.workloads import parse_workload

WL = "conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1"
EM_AARCH64 = 183


@pytest.fixture(scope="module")
def jetson_candidates():
    from tvm.s_tir import meta_schedule as ms

    template = template_for(parse_workload(WL), load_profile("jetson-nano"))
    mod = workload_module(template)
    ctx = ms.TuneContext(mod=mod, target=ms_target(template.profile), space_generator="post-order-apply",
                         search_strategy="replay-trace", rand_state=0, num_threads=1)
    spaces = ctx.generate_design_space()
    ctx.pre_tuning(max_trials=2, num_trials_per_iter=2, design_spaces=spaces,
                   database=ms.database.MemoryDatabase(), cost_model=None)
    candidates = ctx.search_strategy.generate_measure_candidates()
    assert candidates, "MetaSchedule produced no candidate for the Jetson target"
    return template, ctx, candidates


def _elf_machine(payload: bytes) -> int:
    assert payload[:4] == b"\x7fELF"
    return int.from_bytes(payload[18:20], "little")


def test_jetson_candidates_are_gpu_bound_and_build_to_aarch64_with_cuda_source(jetson_candidates):
    from tvm.s_tir import meta_schedule as ms

    template, ctx, candidates = jetson_candidates
    script = candidates[0].sch.mod.script()
    assert "threadIdx.x" in script and "blockIdx" in script   # bound to the GPU by MetaSchedule's rules
    builder = ms_builder(template.profile, max_workers=1)
    results = builder.build([ms.builder.BuilderInput(c.sch.mod, ctx.target) for c in candidates[:1]])
    assert results[0].error_msg is None, results[0].error_msg
    with open(results[0].artifact_path, "rb") as fh:
        payload = fh.read()
    assert _elf_machine(payload) == EM_AARCH64          # linked by aarch64-linux-gnu-g++ on the host
    assert b"__global__" in payload                      # the CUDA C source the board's NVRTC compiles


def test_trace_of_a_candidate_rebuilds_for_jetson(jetson_candidates):
    template, _, candidates = jetson_candidates
    config = {"kind": KIND, "trace": trace_json(candidates[0].sch.trace)}
    artifact = rebuild(template, config)
    assert artifact.kind == "tvm-library" and _elf_machine(artifact.payload) == EM_AARCH64
