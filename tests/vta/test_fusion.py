"""Residual adds folded into their convs (``conv_add``): which adds fuse, the fused int8 graph against the float
one and the unfused int8 one, and a fused layer run as one VTA program, bit-exact, through a package."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolkit.backends.vta.model import default_config, epilogue
from toolkit.errors import ExportError
from toolkit.vta.compiler import compile_conv2d
from toolkit.vta.config import get_preset
from toolkit.vta.graph import INPUT, Graph, Layer, check_arrays, execute
from toolkit.vta.merge import merge_segment
from toolkit.vta.ops import OPS
from toolkit.vta.pooling import Pooling, compile_maxpool
from toolkit.vta.quantize import FloatModel, fuse_residuals, quantize, run_float
from toolkit.vta.segments import vta_segments
from toolkit.workloads import parse_workload

HW = get_preset("pynq")
C = 16


def conv(name: str, src: str, relu: bool, stride: int = 1, k: int = 3) -> Layer:
    return Layer(name, "conv", [src], attrs={"stride": [stride, stride], "pad": [k // 2, k // 2], "groups": 1,
                                             "relu": relu})


def block(downsample: bool, seed: int = 0) -> FloatModel:
    """ResNet's basic block: conv-ReLU, conv, the shortcut (the input, or a strided 1x1 conv) added, ReLU."""
    rng = np.random.default_rng(seed)
    co = 2 * C if downsample else C
    layers = [conv("c1", INPUT, True, 2 if downsample else 1), conv("c2", "c1", False)]
    shapes = {"c1": (co, C, 3, 3), "c2": (co, co, 3, 3)}
    if downsample:
        layers.append(conv("d", INPUT, False, 2, 1))
        shapes["d"] = (co, C, 1, 1)
    layers.append(Layer("a", "add", ["c2", "d" if downsample else INPUT], attrs={"relu": True}))
    layers.append(Layer("g", "avgpool", ["a"]))
    arrays = {}
    for name, s in shapes.items():
        arrays[f"{name}.weight"] = (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32)
        arrays[f"{name}.bias"] = (rng.standard_normal(s[0]) * 0.1).astype(np.float32)
    return FloatModel(Graph((1, C, 8, 8), 0, layers, ["g", "a"]), arrays)


@pytest.mark.parametrize("downsample", [False, True])
def test_a_residual_block_fuses_its_add_into_the_last_conv_and_stays_as_close_to_float(downsample):
    x = np.random.default_rng(1).standard_normal((8, C, 8, 8)).astype(np.float32)
    model = block(downsample)
    plain = quantize(model, x)
    fused = quantize(model, x)
    assert fuse_residuals(fused) == {}
    ops = {layer.name: layer.op for layer in fused.graph.layers}
    last = "d" if downsample else "c2"     # the later conv operand takes the add
    assert ops[last] == "conv_add" and "a" not in ops and fused.graph.outputs == ["g", last]
    assert fused.graph.layer(last).inputs == ([INPUT, "c2"] if downsample else ["c1", INPUT])
    check_arrays(fused.graph, fused.arrays)
    Graph.from_json(fused.graph.to_json())       # a fused graph is a valid export graph
    step = 2.0 ** -fused.graph.layer(last).attrs["exp"]
    for i in range(8):
        want = run_float(model, x[i:i + 1])["a"]
        got = execute(fused.graph, fused.arrays, x[i:i + 1]).outputs[1]
        unfused = execute(plain.graph, plain.arrays, x[i:i + 1]).outputs[1]
        assert np.max(np.abs(got - want)) <= 6 * step
        # one rounding fewer: never further from float than the unfused int8 graph, on average
        assert np.mean(np.abs(got - want)) <= np.mean(np.abs(unfused - want)) + step / 8


def test_adds_that_cannot_be_fused_stay_adds():
    x = np.random.default_rng(1).standard_normal((4, C, 8, 8)).astype(np.float32)
    model = block(False)
    model.graph.layers[1].attrs["relu"] = True            # relu(conv) + x: the ReLU comes between
    assert fuse_residuals(quantize(model, x)) == {"a": "its conv c2 has a ReLU"}
    model = block(False)
    model.graph.layers.insert(2, Layer("p", "maxpool", ["c2"], attrs={"kernel": [1, 1], "stride": [1, 1],
                                                                         "pad": [0, 0]}))
    model.graph.outputs = ["g", "p"]                       # the conv's output has another user
    assert fuse_residuals(quantize(model, x)) == {"a": "its conv c2 has other users"}
    q = quantize(block(False), x)
    q.graph.layer("a").attrs["exp"] -= 20                  # an output 2**20 coarser than its operands
    assert "need a shift of" in fuse_residuals(q)["a"]
    q = quantize(block(False), x)
    q.exps[INPUT] += 24                                    # a residual finer than the conv's accumulator
    assert fuse_residuals(q) == {"a": "its residual is finer than the conv's accumulator"}


def fused_package(x: np.ndarray):
    """A residual block quantised and fused, both convs on VTA: (the quantised model, its package)."""
    from toolkit.vta.graph import to_package

    q = quantize(block(False), x)
    fuse_residuals(q)
    programs = {}
    stored = dict(q.arrays)
    wl = parse_workload("conv2d:H=8,W=8,CI=16,CO=16,K=3,S=1,P=1")
    for name in ("c1", "c2"):
        layer = q.graph.layer(name)
        OPS[layer.op].to_vta(layer, stored, HW, batch=1)
        ep = epilogue(layer)
        programs[name] = compile_conv2d(wl, default_config(wl, HW, **ep).values, HW, **ep).program
    assert stored["c2.ident"].shape == (1, 1, 1, 1, 16, 16)
    # and a max pooling on VTA (its input, the block's output, is non-negative) before the global pooling
    pool = Layer("m", "maxpool", ["c2"], attrs={"kernel": [3, 3], "stride": [2, 2], "pad": [1, 1]})
    q.graph.layers.insert(len(q.graph.layers) - 1, pool)
    q.graph.layers[-1].inputs = ["m"]
    OPS["maxpool"].to_vta(pool, stored, HW, batch=1)
    q.arrays["m.ident"] = stored["m.ident"]
    programs["m"] = compile_maxpool(Pooling((1, C, 8, 8), (3, 3), (2, 2), (1, 1)), HW)
    merged = {s.name: merge_segment(s, programs, {x.name: OPS[x.op].vta_arrays(x, stored) for x in s.layers})
              .to_bytes() for s in vta_segments(q.graph)}
    return q, to_package(q.graph, stored, merged, HW.to_json())


def test_a_fused_layer_runs_as_one_vta_program_bit_exact_through_a_package():
    from toolkit.vta.graph import run_package, tensor_digests
    from toolkit.vta.program import Program
    from toolkit.vta.sim import simulate

    x = np.random.default_rng(3).standard_normal((6, C, 8, 8)).astype(np.float32)
    q, package = fused_package(x)
    calls = []

    def load_program(program: bytes, constants: dict):
        calls.append(sorted(constants))
        return lambda named: (lambda r: (r.outputs, r.seconds))(simulate(Program.from_bytes(program),
                                                                         {**constants, **named}))

    outputs, _, digests = run_package(package, x, load_program)
    assert any({"bias:c2", "ident:c2", "wgt:c2", "ident:m"} <= set(c) for c in calls)
    for i in range(6):
        reference = execute(q.graph, q.arrays, x[i:i + 1])
        assert digests[i] == tensor_digests(reference, HW)
        assert np.array_equal(outputs[i][1], reference.outputs[1])
    for key, bad, words in (("array:c2.ident", np.zeros((1, 1, 1, 1, 8, 16), np.int8), "identity block"),
                            ("array:c1.shift", np.full((1, 1, 1, 1, 1, 16), 40, np.int32), "shifts are not one in"),
                            ("array:m.ident", np.zeros((1, 1, 1, 1, 16, 8), np.int8), "not one square block")):
        tampered = dict(package, **{key: bad})
        with pytest.raises(ExportError, match=words):
            run_package(tampered, x, load_program)


def test_the_board_runs_a_fused_package_with_the_agents_modules_alone(tmp_path):
    """What a board has: the agent's bundle and numpy, no other edgetune module (a lazy import of the compiler or
    the workloads would fail there, not here)."""
    import subprocess
    import sys

    from toolkit.rpc.provision import agent_files

    for name, path in agent_files():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(path.read_bytes())
    x = np.random.default_rng(4).standard_normal((2, C, 8, 8)).astype(np.float32)
    q, package = fused_package(x)
    np.savez(tmp_path / "package.npz", **package)
    np.save(tmp_path / "x.npy", x)
    script = (f"import sys; sys.path[:0] = [{str(tmp_path)!r}, {str(Path(np.__file__).parent.parent)!r}]\n"
              "import numpy as np, toolkit\n"
              f"assert toolkit.__file__.startswith({str(tmp_path)!r}), toolkit.__file__\n"
              "from toolkit.vta.graph import run_package\n"
              "from toolkit.vta.program import Program\n"
              "from toolkit.vta.sim import simulate\n"
              "def load(program, constants):\n"
              "    def run(named):\n"
              "        r = simulate(Program.from_bytes(program), {**constants, **named})\n"
              "        return r.outputs, r.seconds\n"
              "    return run\n"
              f"with np.load({str(tmp_path / 'package.npz')!r}) as npz: package = dict(npz)\n"
              f"outputs, _, _ = run_package(package, np.load({str(tmp_path / 'x.npy')!r}), load)\n"
              f"np.save({str(tmp_path / 'out.npy')!r}, outputs[1][1])\n"
              "print(sorted(m for m in sys.modules if m.startswith('toolkit')))\n")
    r = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "toolkit.workloads" not in r.stdout and "toolkit.vta.compiler" not in r.stdout
    assert np.array_equal(np.load(tmp_path / "out.npy"), execute(q.graph, q.arrays, x[1:2]).outputs[1])
