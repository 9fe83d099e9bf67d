"""The CUDA conv2d template: AutoTVM's knobs, limits checked before building, real CUDA codegen.

No GPU here: builds go through TVM's CUDA code generation and a cross-linked aarch64 host
library (apache-tvm 0.27 embeds the CUDA source, compiled by NVRTC on the board); where
``nvcc`` exists the generated source is also compiled to PTX for the Orin's sm_87.
"""

import math
import re
import shutil
import subprocess

import numpy as np
import pytest

from toolkit.boards import load_profile
from toolkit.backends.tvm.epilogue import Epilogue
from toolkit.backends.tvm.cuda import CUDAConv2dTemplate
from toolkit.backends.tvm.tir_features import FEATURE_NAMES
from toolkit.tuning.core.result import ErrorClass
from toolkit.tuning.core.template import BuildError
from toolkit.workloads import parse_workload

C5 = parse_workload("resnet18.C5")   # 128 -> 128, 28x28, k3
GOOD = {"tile_f": [4, 2, 8, 2], "tile_y": [7, 1, 4, 1], "tile_x": [1, 1, 28, 1], "tile_rc": [16, 8],
        "tile_ry": [3, 1], "tile_rx": [1, 3], "auto_unroll_max_step": 512, "unroll_explicit": 1}


def _config(t, **over):
    return t.space().get(t.space().index_of({**GOOD, **over}))


def test_space_has_autotvm_knobs_and_cardinalities():
    space = CUDAConv2dTemplate(C5, load_profile("jetson-nano")).space()
    # chameleon.md 2.3, ResNet-18 128->128 @28 k3: [120, 40, 40, 8, 2, 2, 3, 2]
    assert space.dims == [120, 40, 40, 8, 2, 2, 3, 2]
    assert space.size == math.prod([120, 40, 40, 8, 2, 2, 3, 2])


@pytest.mark.parametrize("over, reason", [
    ({"tile_f": [1, 1, 8, 16], "tile_y": [1, 2, 14, 1], "tile_x": [1, 2, 14, 1]}, "max_threads_per_block 1024"),
    ({"tile_f": [1, 1, 128, 1], "tile_y": [28, 1, 1, 1], "tile_x": [28, 1, 1, 1]}, "CUDA's limit 64"),
    ({"tile_f": [1, 1, 4, 32], "tile_y": [1, 1, 4, 7], "tile_rc": [1, 128]}, "max_shared_memory_per_block 49152"),
    ({"tile_f": [2, 1, 1, 64], "tile_y": [7, 1, 1, 4], "tile_x": [28, 1, 1, 1]}, "exceed CUDA's 255"),
    ({"tile_f": [4, 1, 8, 4], "tile_y": [1, 1, 4, 7], "tile_x": [1, 1, 28, 1]}, "registers_per_block 32768"),
])
def test_configs_over_the_board_limits_are_rejected_with_the_reason(over, reason):
    t = CUDAConv2dTemplate(C5, load_profile("jetson-nano"))
    with pytest.raises(BuildError) as info:
        t.build(_config(t, **over))
    assert info.value.error == ErrorClass.INVALID_CONFIG
    assert reason in str(info.value)


def test_registers_limit_depends_on_the_board():
    over = {"tile_f": [4, 1, 8, 4], "tile_y": [1, 1, 4, 7], "tile_x": [1, 1, 28, 1]}
    nano, orin = (CUDAConv2dTemplate(C5, load_profile(b)) for b in ("jetson-nano", "jetson-orin-nano"))
    with pytest.raises(BuildError, match="registers_per_block 32768"):
        nano.check(_config(nano, **over))
    orin.check(_config(orin, **over))   # 65536 registers per block on the Orin


@pytest.mark.parametrize("board", ["jetson-nano", "jetson-orin-nano"])
def test_random_valid_configs_generate_verified_cuda(board):
    t = CUDAConv2dTemplate(C5, load_profile(board))
    space = t.space()
    rng = np.random.default_rng(11)
    built = 0
    for index in space.sample(400, rng):
        config = space.get(index)
        try:
            t.check(config)
        except BuildError:
            continue
        art = t.build(config)
        use = t.usage(config)
        assert art.kind == "tvm-library" and art.payload[18:20] == (183).to_bytes(2, "little")  # aarch64 host
        assert list(art.features) == list(FEATURE_NAMES)
        assert art.features["threads_per_block"] == use["threads"]
        assert art.features["alloc_bytes_shared"] == use["shared_bytes"]
        assert b"__global__" in art.payload                      # the CUDA source travels in the library
        built += 1
        if built == 2:
            break
    assert built == 2


def test_generated_source_has_the_config_launch_bounds_and_shared_staging():
    t = CUDAConv2dTemplate(C5, load_profile("jetson-orin-nano"))
    src = t.cuda_source(_config(t))
    assert "__launch_bounds__(896)" in src                       # 8 x 4 x 28 threads
    # staged tiles: 8 channels x 4 rows x 30 columns of padded input, 32 filters x 8 channels x 3 taps
    assert re.search(r"__shared__ .*float pad_shared\w*\[960\]", src)
    assert re.search(r"__shared__ .*float weight_shared\w*\[768\]", src)
    assert "__syncthreads()" in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_generated_source_compiles_with_nvcc_for_orin(tmp_path):
    t = CUDAConv2dTemplate(C5, load_profile("jetson-orin-nano"))
    (tmp_path / "k.cu").write_text(t.cuda_source(_config(t)))
    proc = subprocess.run(["nvcc", "--ptx", "-arch=sm_87", "-o", str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ".target sm_87" in (tmp_path / "k.ptx").read_text()


def test_fallback_config_fits_both_jetsons_on_every_conv_of_the_built_in_networks():
    from toolkit.workloads.networks import NETWORKS, get_network

    shapes = {layer.workload for net in NETWORKS for layer in get_network(net).layers}
    assert len(shapes) > 50 and any(wl.kind == "depthwise" for wl in shapes)
    for board in ("jetson-nano", "jetson-orin-nano"):
        for wl in shapes:
            t = CUDAConv2dTemplate(wl, load_profile(board))
            t.check(t.fallback_config())      # raises BuildError naming the limit


@pytest.mark.parametrize("epilogue", [Epilogue(bias=True), Epilogue(True, True, "relu")])
def test_an_epilogue_is_computed_in_the_threads_write_back(epilogue):
    t = CUDAConv2dTemplate(C5, load_profile("jetson-nano"))
    config = t.fallback_config()
    script = t.schedule(config, epilogue).script()
    assert "T.max(" in script if epilogue.act == "relu" else "T.max(" not in script
    assert 'T.sblock("epilogue")' not in script and "conv = T.alloc" not in script   # inlined, no global conv buffer
    from toolkit.backends.tvm import tir_features

    t.verify(tir_features.lower(t.schedule(config, epilogue), t.target()))
