"""Max pooling as a VTA program: bit-exact with the int8 reference on non-negative inputs (edge padding, floor
mode, several tiles, other block sizes), the limits refused, and which pools of a model go to VTA."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.vta import reference as ref
from toolkit.vta.checks import SRAMCapacityError
from toolkit.vta.config import get_preset
from toolkit.vta.ops import identity_block, maxpool
from toolkit.vta.pooling import Pooling, compile_maxpool, pooling_tiles
from toolkit.vta.sim import simulate


@pytest.mark.parametrize("preset, shape, k, s, p", [
    ("pynq", (1, 64, 56, 56), 3, 2, 1),      # ResNet-18's pool, at half size
    ("pynq", (1, 16, 8, 8), 2, 2, 0),
    ("pynq", (1, 32, 9, 11), 3, 1, 1),
    ("pynq", (1, 48, 15, 15), 3, 2, 1),
    ("pynq", (1, 16, 7, 7), 3, 3, 1),        # floor mode drops a column
    ("pynq-4x8", (4, 16, 10, 10), 3, 2, 1),
    ("zcu102", (1, 32, 20, 20), 2, 2, 0),
])
def test_a_pooling_program_equals_the_reference(preset, shape, k, s, p):
    hw = get_preset(preset)
    x = np.random.default_rng(sum(shape)).integers(0, 128, shape).astype(np.int8)
    program = compile_maxpool(Pooling(shape, (k, k), (s, s), (p, p)), hw)
    res = simulate(program, {"inp": ref.pack_input(x, hw), "ident": identity_block(hw, 0)})
    got = ref.unpack_output(res.outputs["out"].reshape(program.regions["out"].shape), hw)
    assert np.array_equal(got, maxpool(x, (k, k), (s, s), (p, p), -128))
    assert program.meta["kind"] == "maxpool" and res.seconds > 0


def test_tiles_fill_the_buffers_and_a_row_too_wide_is_refused():
    hw = get_preset("pynq")
    tc, th = pooling_tiles(Pooling((1, 64, 112, 112), (3, 3), (2, 2), (1, 1)), hw)
    w_ext, h_ext = 113, (th - 1) * 2 + 3
    assert tc * h_ext * w_ext <= hw.inp_depth and tc * (h_ext * w_ext + th * 56) <= hw.acc_depth
    assert (tc, th) == (1, 4)     # 2 channel blocks or 7 rows would overflow the accumulator
    with pytest.raises(SRAMCapacityError, match="buffer"):
        compile_maxpool(Pooling((1, 16, 8, 3000), (3, 3), (2, 2), (1, 1)), hw)


torch = pytest.importorskip("torch")


def test_a_pool_after_a_relu_runs_on_vta_and_one_after_a_plain_conv_stays_on_the_cpu(tmp_path):
    """Pooling starts from zero with zero padding: exact only for a non-negative input."""
    import json

    from torch import nn

    from toolkit.boards import load_profile
    from toolkit.manifest import ConvPlan
    from toolkit.backends.vta.model import compile_vta_model, default_config
    from toolkit.workloads import Conv2dWorkload
    from toolkit.workloads.model_files import load_model

    net = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(16, 16, 3, padding=1), nn.MaxPool2d(2))
    loaded = load_model(net.eval(), (1, 16, 8, 8))
    (tmp_path / "pkg").mkdir()
    profile = load_profile("vta-fsim")
    hw = get_preset(profile.vta["preset"])
    plans = [ConvPlan(name, wl, "fallback", template=object(), config=default_config(wl, hw))
             for name, wl in (("0", Conv2dWorkload(1, 8, 8, 16, 16, 3, 3, 1, 1, 1, 1)),
                              ("3", Conv2dWorkload(1, 4, 4, 16, 16, 3, 3, 1, 1, 1, 1)))]
    build = compile_vta_model(loaded.program, profile, plans, tmp_path / "pkg")
    pools = {v["layer"]: v for v in build.extra["vta_layers"] if v["op"] == "maxpool"}
    assert pools["2"]["device"] == "vta" and pools["2"]["program"] == build.files["program:vta0"]
    assert pools["4"]["device"] == "cpu" and "may be negative" in pools["4"]["why"]
    graph = json.loads((tmp_path / "pkg" / "graph.json").read_text())
    assert {layer["name"]: layer["device"] for layer in graph["layers"]}["2"] == "vta"
