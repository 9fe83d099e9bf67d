"""Whole-model exports on `local`: a PyTorch model tuned (`tune --model`), compiled through Relax with the tuned
kernels (`export --model`) and run over loopback RPC (`run`), its outputs equal to PyTorch's; the package's
manifest and README; bad inputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from toolkit.boards import load_profile
from toolkit.cli.app import app
from toolkit.testing.cli import one_line_error
from toolkit.export import load_export
from toolkit.manifest import MANIFEST
from toolkit.tuning.journal import read_log
from toolkit.workloads import Conv2dWorkload, parse_workload
from toolkit.backends.tvm.cpu import CPUConv2dTemplate

cli = CliRunner()
SHAPE = "1,3,16,16"

MODEL_SOURCE = '''
import torch
from torch import nn


class Net(nn.Module):
    """conv+BN+ReLU, a residual block, a depthwise conv, pooling and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.c1, self.b1 = nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
        self.c2, self.b2 = nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
        self.down = nn.Conv2d(16, 32, 1, 2)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        x = self.down(self.dw(torch.relu(x + y)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def make():
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
    return net


def no_conv():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 4))
'''


def _invoke(*args):
    return cli.invoke(app, [str(a) for a in args])




@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "net.py"
    path.write_text(MODEL_SOURCE)
    return path


@pytest.fixture(scope="module")
def torch_model(model_file):
    namespace: dict = {}
    exec(compile(model_file.read_text(), str(model_file), "exec"), namespace)   # the user's model, as torch runs it
    return namespace["make"]()


@pytest.fixture(scope="module")
def network_log(model_file, tmp_path_factory):
    """A real `tune --model` of the model on `local` (8 trials: 2 for each of its 4 shapes in the first round)."""
    log = tmp_path_factory.mktemp("logs") / "net.jsonl"
    r = _invoke("tune", "--model", f"{model_file}:make", "--input-shape", SHAPE, "-b", "local", "-t", "xgb",
                "-n", "8", "--round-trials", "8", "--log", log)
    assert r.exit_code == 0, r.output
    return log


@pytest.fixture(scope="module")
def model_export(model_file, network_log, tmp_path_factory):
    out = tmp_path_factory.mktemp("exports") / "net"
    r = _invoke("export", "--model", f"{model_file}:make", "--input-shape", SHAPE, "-b", "local",
                "--log", network_log, "--out", out, "--json")
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.slow
def test_tuned_model_runs_on_local_and_equals_torch(model_export, torch_model, tmp_path):
    x = np.random.default_rng(3).standard_normal((3, 3, 16, 16)).astype(np.float32)   # three inputs, stacked
    np.save(tmp_path / "x.npy", x)
    r = _invoke("run", model_export, "-b", "local", "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
                "--json", "--per-layer")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["correct"] is True and out["inputs"] == 3 and out["latency_ms"] > 0
    assert out["latency_min_ms"] <= out["latency_ms"] <= out["latency_max_ms"]
    got = np.load(tmp_path / "y.npy")
    with torch.no_grad():
        want = torch.cat([torch_model(torch.from_numpy(x[i:i + 1])) for i in range(3)]).numpy()
    assert got.shape == (3, 10)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    timed = {row["module"]: row for row in out["per_layer"]}
    assert all(timed[m]["seconds"] > 0 for m in ("stem", "c1", "c2", "dw", "down"))   # the depthwise conv too


@pytest.mark.slow
def test_manifest_says_what_each_conv_got(model_export, network_log, model_file):
    ex = load_export(model_export)
    model = ex.manifest.model
    assert ex.is_model and ex.manifest.kind == "tvm-model" and ex.manifest.kernels == []
    convs = {c["module"]: c for c in model["convs"]}
    assert list(convs) == ["stem", "c1", "c2", "dw", "down"]           # graph order, module paths
    assert convs["dw"]["schedule"] in ("tuned", "fallback") and convs["dw"]["workload"].endswith(",G=16")
    assert convs["dw"]["kernel"] not in (None, convs["c1"]["kernel"])
    assert convs["c1"]["kernel"] == convs["c2"]["kernel"]              # one kernel per shape
    # what each kernel also computes in the model: the bias (or the folded batch-norm), the residual add, ReLU
    assert {m: c["epilogue"] for m, c in convs.items()} == {
        "stem": ["bias", "relu"], "c1": ["bias", "relu"], "c2": ["bias", "residual", "relu"], "dw": ["bias"],
        "down": ["bias"]}
    tuned = [c for c in convs.values() if c["schedule"] == "tuned"]
    assert tuned, "the log's tuned shape is used"
    best: dict = {}
    for r in read_log(network_log)[1]:
        spec = Conv2dWorkload.from_dict(r.workload).spec()
        if r.valid and (spec not in best or r.seconds < best[spec].seconds):
            best[spec] = r
    for c in tuned:
        rec, want = c["record"], best[c["workload"]]
        assert (rec["trial"], rec["config"], rec["latency_s"]) == (want.trial, want.config, want.seconds)
    assert all(c["schedule"] == "fallback" for c in convs.values() if c["workload"] not in best and c["kernel"])
    assert {c["schedule"] for c in convs.values()} <= {"tuned", "fallback", "tvm"}
    assert model["inputs"] == [{"name": "x", "shape": [1, 3, 16, 16], "dtype": "float32"}]
    assert model["outputs"] == [{"shape": [1, 10], "dtype": "float32"}]
    assert model["source"]["kind"] == "factory" and len(model["source"]["sha256"]) == 64
    assert set(model["files"].values()) <= set(ex.manifest.files)
    assert any(f.startswith("logs/") for f in ex.manifest.files)
    assert MANIFEST not in ex.manifest.files


@pytest.mark.slow
def test_readme_snippet_runs_with_the_tvm_runtime_alone(model_export, torch_model):
    readme = (model_export / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    code += textwrap.dedent("""
        import sys
        assert not any(m == "toolkit" or m.startswith("toolkit.") for m in sys.modules), "edgetune was imported"
        np.save("out.npy", out.numpy())
    """)
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}   # libtvm_runtime.so alone, as on a board
    subprocess.run([sys.executable, "-c", code], cwd=model_export, check=True, timeout=300, env=env)
    got = np.load(model_export / "out.npy")
    (model_export / "out.npy").unlink()
    with torch.no_grad():
        want = torch_model(torch.zeros(1, 3, 16, 16)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_untuned_export_uses_the_fallback_config_for_every_conv(model_file, tmp_path):
    from toolkit.export.model import export_model

    manifest = export_model(f"{model_file}:make", tmp_path / "e", "local", input_shape=(1, 3, 16, 16))
    schedules = [c["schedule"] for c in manifest.model["convs"]]
    assert schedules == ["fallback"] * 5                 # the depthwise conv too
    run = load_export(tmp_path / "e").run_model("local", check=True)
    assert run.correct is True, run.message


def test_fallback_config_is_a_point_of_every_space():
    profile = load_profile("local")
    specs = [f"resnet18.C{i}" for i in range(1, 12)] + [
        "conv2d:H=13,W=13,CI=3,CO=10,K=3,S=1,P=1", "conv2d:H=7,W=7,CI=1024,CO=1000,K=1,S=1,P=0",
        "conv2d:H=17,W=11,CI=5,CO=7,K=5,S=2,P=2", "conv2d:H=56,W=56,CI=32,CO=32,K=3,S=1,P=1,G=32",
        "conv2d:H=28,W=28,CI=64,CO=128,K=3,S=2,P=1,G=4", "conv2d:H=14,W=14,CI=16,CO=16,K=3,S=1,P=2,D=2"]
    for spec in specs:
        template = CPUConv2dTemplate(parse_workload(spec), profile)
        config = template.fallback_config()
        assert template.space().get(config.index).values == config.values
        wl = template.workload
        assert config["tile_co"][0] * config["tile_co"][1] * wl.g == wl.co      # a group's output channels
        template.schedule(config)     # schedules without error


# -- bad inputs: one line, exit 2 ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.slow
def test_a_tuned_conv_names_its_trial_counted_from_one_as_report_does(model_export):
    tuned = [c for c in load_export(model_export).manifest.model["convs"] if c["schedule"] == "tuned"]
    assert tuned and all(c["why"] == f"trial {c['record']['trial'] + 1} of {c['record']['log']}" for c in tuned)


@pytest.mark.slow
def test_a_float_model_takes_no_agreement_threshold(model_export):
    assert "runs in float32" in one_line_error(_invoke("run", model_export, "-b", "local", "--min-top1", "0.5"))


def test_bad_model_exports_get_one_line_errors(model_file, network_log, tmp_path):
    args = ["--input-shape", SHAPE, "-b", "local", "--out"]
    r = _invoke("export", "--model", f"{model_file}:no_conv", *args, tmp_path / "a")
    assert "no conv layers" in one_line_error(r)
    r = _invoke("tune", "-w", "resnet18.C11", "-b", "vta-fsim", "-t", "random", "-n", "2",
                "--log", tmp_path / "v.jsonl")
    assert r.exit_code == 0, r.output
    r = _invoke("export", "--model", f"{model_file}:make", "--log", tmp_path / "v.jsonl", *args, tmp_path / "b")
    assert "tuned on a vta board" in one_line_error(r)
    r = _invoke("tune", "-w", "conv2d:H=9,W=9,CI=8,CO=8,K=3,S=1,P=1", "-b", "local", "-t", "random", "-n", "2",
                "--log", tmp_path / "other.jsonl")
    assert r.exit_code == 0, r.output
    r = _invoke("export", "--model", f"{model_file}:make", "--log", tmp_path / "other.jsonl", *args, tmp_path / "c")
    said = one_line_error(r)
    assert f"is a conv of this model at input shape {SHAPE}" in said and "--input-shape the logs were tuned" in said
    r = _invoke("export", "--model", f"{model_file}:make", "--input-shape", SHAPE, "--out", tmp_path / "e")
    assert "needs --board" in one_line_error(r)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_a_model_exports_for_a_cuda_board_with_each_kernels_gpu_code(model_file, tmp_path):
    """No GPU here: the Jetson package is cross-linked for aarch64 and embeds the CUDA source of every kernel (what
    the board's NVRTC compiles at load); running it needs the board, and `local` refuses it."""
    out = tmp_path / "nano"
    r = _invoke("export", "--model", f"{model_file}:make", "--input-shape", SHAPE, "-b", "jetson-nano", "--out", out)
    assert r.exit_code == 0, r.output
    ex = load_export(out)
    assert ex.manifest.family == "cuda" and ex.manifest.arch == "aarch64"
    convs = {c["module"]: c for c in ex.manifest.model["convs"]}
    assert {m: (c["schedule"], c["epilogue"]) for m, c in convs.items()} == {
        "stem": ("fallback", ["bias", "relu"]), "c1": ("fallback", ["bias", "relu"]),
        "c2": ("fallback", ["bias", "residual", "relu"]), "dw": ("fallback", ["bias"]), "down": ("fallback", ["bias"])}
    model, kernels = ((out / f).read_bytes() for f in ("model.so", "kernels.so"))
    assert all(lib[:4] == b"\x7fELF" and lib[18] == 183 for lib in (model, kernels))   # e_machine: EM_AARCH64

    def gpu_kernels(library: bytes) -> set[str]:
        return set(re.findall(rb'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)_kernel\(', library))

    # kernels.so: the plain kernels the manifest names; model.so: one per shape and epilogue, and TVM's own
    assert gpu_kernels(kernels) == {c["kernel"].encode() for c in convs.values() if c["kernel"]}
    edgetune = {k for k in gpu_kernels(model) if k.startswith(b"edgetune_conv")}
    assert len(edgetune) == len({(c["workload"], tuple(c["epilogue"])) for c in convs.values() if c["kernel"]}) == 5
    assert gpu_kernels(model) - edgetune          # pooling and the classifier: dlight's schedules
    assert "dev = tvm.cuda(0)" in (out / "README.md").read_text()
    r = _invoke("run", out, "-b", "local")
    assert "GPU" in one_line_error(r) or "cuda" in one_line_error(r)


@pytest.mark.slow
def test_a_tuned_shape_the_model_lacks_is_reported_not_refused(model_file, network_log, tmp_path):
    r = _invoke("tune", "-w", "conv2d:H=9,W=9,CI=8,CO=8,K=3,S=1,P=1", "-b", "local", "-t", "random", "-n", "2",
                "--log", tmp_path / "other.jsonl")
    assert r.exit_code == 0, r.output
    r = _invoke("export", "--model", f"{model_file}:make", "--input-shape", SHAPE, "-b", "local", "--log",
                network_log, "--log", tmp_path / "other.jsonl", "--out", tmp_path / "e")
    assert r.exit_code == 0, r.output
    assert "not in the model: tuned shape conv2d:N=1,H=9,W=9,CI=8,CO=8,K=3,S=1,P=1" in r.output


@pytest.mark.slow
def test_a_log_tuned_on_another_cpu_is_used_with_a_warning(model_file, network_log, tmp_path):
    header, *records = network_log.read_text().splitlines()
    task = json.loads(header)
    mcpu = task["task"]["tasks"][0]["target"]["mcpu"]
    for t in task["task"]["tasks"]:
        t["target"]["mcpu"] = "cortex-a72"          # as if tuned on an aarch64 board's CPU
    log = tmp_path / "elsewhere.jsonl"
    log.write_text("\n".join([json.dumps(task), *records]) + "\n")
    r = _invoke("export", "--model", f"{model_file}:make", "--input-shape", SHAPE, "-b", "local", "--log", log,
                "--out", tmp_path / "e")
    assert r.exit_code == 0, r.output
    assert f"elsewhere.jsonl was tuned for CPU cortex-a72, this board's is {mcpu}" in " ".join(r.output.split())
    model = load_export(tmp_path / "e").manifest.model
    assert model["tuned_elsewhere"] == [{"log": "elsewhere.jsonl", "why": f"CPU cortex-a72, this board's is {mcpu}"}]
    assert {c["schedule"] for c in model["convs"]} >= {"tuned"}         # its records are used all the same


@pytest.mark.slow
def test_bad_runs_get_one_line_errors(model_export, tmp_path):
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 8, 8), np.float32))
    np.save(tmp_path / "f64.npy", np.zeros((1, 3, 16, 16), np.float64))
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    for name, words in (("wrong.npy", "inputs of shape [1, 3, 16, 16]"), ("f64.npy", "float32"),
                        ("junk.npy", "not a .npy array")):
        r = _invoke("run", model_export, "-b", "local", "--input", tmp_path / name)
        assert words in one_line_error(r), name
    r = _invoke("run", model_export, "-b", "local", "--input", tmp_path)
    assert "is a folder" in one_line_error(r)
    r = _invoke("run", model_export, "-b", "vta-fsim")
    assert "run it on a cpu board" in one_line_error(r)
    tampered = tmp_path / "tampered"
    import shutil

    shutil.copytree(model_export, tampered)
    lib = tampered / "model.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    r = _invoke("run", tampered, "-b", "local")
    assert "does not match its sha256" in one_line_error(r)
    manifest = json.loads((tampered / MANIFEST).read_text())
    manifest["model"]["files"]["model"] = "../outside.so"
    (tampered / MANIFEST).write_text(json.dumps(manifest))
    r = _invoke("run", tampered, "-b", "local")
    assert "re-export" in one_line_error(r)
