"""Conv extraction from small PyTorch models: graph tracing, merging, unsupported convs, files, CLI."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.errors import WorkloadError
from toolkit.workloads.extract import extract, parse_input_shape, parse_scales, requant_shift, requant_shifts

MODEL_SOURCE = textwrap.dedent("""
    import torch
    from torch import nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 24, 3, 2, 1)
            self.a = nn.Conv2d(24, 24, 3, padding=1)
            self.b = nn.Conv2d(24, 24, 3, padding=1)
            self.g = nn.Conv2d(24, 24, 3, padding=1, groups=4)
            self.d = nn.Conv2d(24, 40, 3, padding=2, dilation=2)

        def forward(self, x):
            x = self.stem(x)
            x = self.b(torch.relu(self.a(x)))
            return self.d(self.g(x))

    def make():
        return Small()
""")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "small.py"
    path.write_text(MODEL_SOURCE)
    return path


def _module(model_file):
    ns = {}
    exec(compile(MODEL_SOURCE, str(model_file), "exec"), ns)
    return ns["make"]()


def _check_small(ex, n=1, h=32):
    net = ex.network
    by_module = {m: layer for layer in net.layers for m in layer.modules}
    assert net.n_convs == 5 and len(net.layers) == 4
    stem = by_module["stem"].workload
    assert (stem.n, stem.h, stem.ci, stem.co, stem.kh, stem.sh, stem.ph) == (n, h, 3, 24, 3, 2, 1)
    assert by_module["a"] is by_module["b"] and by_module["a"].count == 2     # identical shapes merged
    assert by_module["g"].workload.g == 4 and by_module["g"].workload.kind == "grouped"
    dilated = by_module["d"].workload
    assert (dilated.dh, dilated.dw, dilated.kind) == (2, 2, "dilated") and ",D=2" in dilated.spec()
    assert (dilated.oh, dilated.co) == (h // 2, 40)
    assert [layer.name for layer in net.layers] == [f"{net.name}.L{i}" for i in range(1, 5)]


def test_extract_from_module_and_factory(model_file):
    _check_small(extract(_module(model_file), (1, 3, 32, 32), name="small"))
    _check_small(extract(f"{model_file}:make", (2, 3, 64, 64)), n=2, h=64)


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_extract_from_pt2_and_torchscript(model_file, tmp_path):
    module = _module(model_file).eval()
    example = torch.zeros(1, 3, 32, 32)
    pt2 = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(module, (example,)), str(pt2))
    _check_small(extract(pt2, (1, 3, 32, 32)))
    with pytest.raises(WorkloadError, match="exported for"):   # the archive is specialised to its shape
        extract(pt2, (2, 3, 32, 32))
    proc = subprocess.run([sys.executable, "-m", "toolkit", "workloads", "extract", str(pt2), "--input-shape",
                           "1,4,32,32"], capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("wait:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("warning: loading") and "runs the Python code pickled in it" in lines[0]
    assert len(lines) == 2 and "does not run on input shape 1,4,32,32: Guard failed" in lines[1], lines
    ts = tmp_path / "small.ts"
    torch.jit.save(torch.jit.trace(module, example), str(ts))
    _check_small(extract(ts, (1, 3, 32, 32)))


def test_functional_and_transposed_convs():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(16, 8, 3, 3))
            self.up = nn.ConvTranspose2d(16, 8, 2, 2)

        def forward(self, x):
            return self.up(nn.functional.conv2d(x, self.w, padding="same"))

    ex = extract(M(), (1, 8, 10, 10))
    (layer,) = ex.network.layers
    assert layer.workload.spec() == "conv2d:N=1,H=10,W=10,CI=8,CO=16,K=3,S=1,P=1"
    assert ex.skipped == [("up", "transposed conv: not a conv2d workload")]


def test_requant_shift_rule():
    r = requant_shift(0.5, 0.25, 4.0)          # 0.5 * 0.25 / 4 = 2**-5, exact
    assert (r.shift, r.rel_error) == (5, 0.0)
    r = requant_shift(0.1, 0.02, 0.05)          # 0.04 ~ 2**-4.64 -> shift 5, 2**-5 / 0.04 - 1 = -0.22
    assert r.shift == 5 and r.rel_error == pytest.approx(2 ** -5 / 0.04 - 1)
    with pytest.raises(WorkloadError, match="positive"):
        requant_shift(0.0, 1.0, 1.0)
    with pytest.raises(WorkloadError, match="-31..31"):
        requant_shift(1e-12, 1e-3, 1.0)


def test_per_module_scales(model_file, tmp_path):
    net = extract(f"{model_file}:make", (1, 3, 32, 32)).network
    path = tmp_path / "scales.json"
    path.write_text(json.dumps({"*": [0.5, 0.25, 4.0], "stem": [1.0, 1.0, 256.0]}))
    shifts = requant_shifts(net, parse_scales(str(path)))
    assert shifts["stem"].shift == 8 and shifts["a"].shift == 5
    path.write_text(json.dumps({"nope": [1, 1, 1]}))
    with pytest.raises(WorkloadError, match="unknown module"):
        requant_shifts(net, parse_scales(str(path)))
    with pytest.raises(WorkloadError, match="three numbers"):
        parse_scales("1,2")


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_bad_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(WorkloadError, match="four positive integers"):
        parse_input_shape("1,3,224")
    with pytest.raises(WorkloadError, match="neither a file, a built-in network nor module:factory"):
        extract("no_such_model", (1, 3, 8, 8))
    with pytest.raises(WorkloadError, match="cannot import"):
        extract("no_such_package.models:make", (1, 3, 8, 8))
    junk = tmp_path / "junk.ts"
    junk.write_bytes(b"not a model")
    with pytest.raises(WorkloadError, match="is not a model file .not a zip archive: neither a torch.export archive "
                                            "nor a TorchScript file"):
        extract(junk, (1, 3, 8, 8))


def test_cli_extract_json_vta(model_file):
    r = CliRunner().invoke(app, ["workloads", "extract", f"{model_file}:make", "--input-shape", "1,3,32,32",
                                 "--json", "--vta", "--scales", "0.5,0.25,4"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["n_convs"] == 5
    assert {t["spec"] for t in d["vta"]["tasks"]} == {"conv2d:N=1,H=17,W=17,CI=16,CO=32,K=2,S=1,P=0",   # by s2d
                                                      "conv2d:N=1,H=16,W=16,CI=32,CO=32,K=3,S=1,P=1"}
    reasons = " ".join(s["reason"] for s in d["vta"]["skipped"])
    assert "first conv" not in reasons and "grouped" in reasons and "dilated" in reasons
    assert {r["shift"] for r in d["requant"].values()} == {5}
    r = CliRunner().invoke(app, ["workloads", "extract", f"{model_file}:make", "--input-shape", "1,3,32,32",
                                 "--json", "--vta", "--first-conv", "cpu"])
    d = json.loads(r.stdout)
    assert {t["spec"] for t in d["vta"]["tasks"]} == {"conv2d:N=1,H=16,W=16,CI=32,CO=32,K=3,S=1,P=1"}
    assert "first conv" in " ".join(s["reason"] for s in d["vta"]["skipped"])
    r = CliRunner().invoke(app, ["workloads", "extract", f"{model_file}:make", "--input-shape", "1,3"])
    assert r.exit_code == 2 and "four positive integers" in r.output


def test_cli_networks():
    r = CliRunner().invoke(app, ["workloads", "networks", "--json"])
    assert r.exit_code == 0
    assert [n["name"] for n in json.loads(r.stdout)][:3] == ["resnet18", "resnet34", "resnet50"]
    r = CliRunner().invoke(app, ["workloads", "networks", "resnet18", "--vta", "--json"])
    assert len(json.loads(r.stdout)["vta"]["tasks"]) == 11     # C1 by space-to-depth and C2..C11
