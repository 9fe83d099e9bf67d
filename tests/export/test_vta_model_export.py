"""Whole models on VTA boards: a CNN trained here on scikit-learn's digits and the built-in ResNet-18 quantised to
int8 (`export --model -b vta-fsim`), their convs VTA programs run in the simulator or by a board agent over RPC
(`run`), bit-exact with the int8 reference and agreeing with PyTorch; a tuned log's configs; bad inputs."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from toolkit.backends.vta.model import compile_vta_model
from toolkit.manifest import ConvPlan
from toolkit.boards import BoardEntry, Inventory, load_profile
from toolkit.cli.app import app
from toolkit.testing.cli import one_line_error, sim_agent
from toolkit.export import load_export, sha256_file
from toolkit.manifest import MANIFEST
from toolkit.rpc.tracker import ensure_local_rpc
from toolkit.tuning.core.space import Config
from toolkit.vta.compiler import check_config
from toolkit.vta.program import Program
from toolkit.vta.config import get_preset
from toolkit.vta.errors import VTAError
from toolkit.vta.reference import unpack_weight
from toolkit.workloads.model_files import load_model

cli = CliRunner()
DIGITS_SHAPE = "1,1,8,8"
RESNET_SHAPE = "1,3,32,32"


def _invoke(*args):
    return cli.invoke(app, [str(a) for a in args])


def _ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout




@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """A small CNN trained on digits (three VTA convs, the first's 1 channel padded to 16), saved as .pt2, with
    calibration, test inputs and labels as .npy, and its float accuracy."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    idx = np.random.default_rng(0).permutation(len(x))
    train, calib, test = idx[:1200], idx[1200:1300], idx[1300:]
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    xt, yt = torch.from_numpy(x[train]), torch.from_numpy(d.target[train])
    for _ in range(15):
        for i in range(0, len(train), 64):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt[i:i + 64]), yt[i:i + 64]).backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        accuracy = float((net(torch.from_numpy(x[test])).argmax(1).numpy() == d.target[test]).mean())
    folder = tmp_path_factory.mktemp("digits")
    torch.export.save(torch.export.export(net, (torch.zeros(1, 1, 8, 8),)), str(folder / "digits.pt2"))
    for name, arr in (("calib", x[calib]), ("test", x[test]), ("labels", d.target[test])):
        np.save(folder / f"{name}.npy", arr)
    return folder, accuracy


@pytest.fixture(scope="module")
def digits_export(digits, tmp_path_factory):
    folder, _ = digits
    out = tmp_path_factory.mktemp("exports") / "digits"
    _ok(_invoke("export", "--model", folder / "digits.pt2", "--input-shape", DIGITS_SHAPE, "-b", "vta-fsim",
                "--calibrate", folder / "calib.npy", "--out", out))
    return out


@pytest.mark.slow
def test_trained_cnn_in_int8_on_vta_keeps_its_accuracy(digits, digits_export, tmp_path):
    folder, float_accuracy = digits
    r = _invoke("run", digits_export, "-b", "vta-fsim", "--input", folder / "test.npy", "--output",
                tmp_path / "out.npy", "--check", "--per-layer", "--json")
    run = json.loads(_ok(r))
    d = run["details"]
    assert run["correct"] is True and d["bit_exact"] is True
    assert d["pytorch"]["top1_agreement"] >= 0.99 and d["pytorch"]["samples"] == 497
    assert d["vta_ms"] > 0 and d["cpu_ms"] > 0 and d["vta_seconds"] == "modelled by the simulator"
    devices = {(layer["layer"], layer["device"]) for layer in d["layers"] if layer["op"] != "maxpool"}
    assert devices == {("0.space_to_depth", "cpu"), ("0", "vta"), ("3", "vta"), ("7", "vta"),
                       ("10", "cpu"), ("11", "cpu"), ("12", "cpu")}
    int8_accuracy = float((np.load(tmp_path / "out.npy").argmax(1) == np.load(folder / "labels.npy")).mean())
    assert int8_accuracy >= float_accuracy - 0.01 and float_accuracy > 0.95
    manifest = load_export(digits_export).manifest
    assert manifest.kind == "vta-model" and manifest.model["calibration"]["source"] == "given"
    assert manifest.model["calibration"]["inputs"] == 100
    convs = {c["module"]: c for c in manifest.model["convs"]}
    assert convs["0"]["schedule"] == "fallback"
    assert convs["0"]["workload"] == "conv2d:N=1,H=8,W=8,CI=16,CO=16,K=3,S=1,P=1"     # 1 channel padded to 16
    s2d = next(v for v in manifest.model["vta_layers"] if v["op"] == "space_to_depth")
    assert "0's 1 channels padded to 16; VTA computes 16.00x" in s2d["why"]


@pytest.mark.slow
def test_agreement_with_the_float_model_is_reported_and_fails_the_run_only_below_what_was_asked(
        digits, digits_export, tmp_path):
    folder, _ = digits
    x = np.load(folder / "test.npy")[:40]
    np.save(tmp_path / "x.npy", x)
    run = json.loads(_ok(_invoke("run", digits_export, "-b", "vta-fsim", "--input", tmp_path / "x.npy", "--json",
                                 "--min-cosine", "0.5", "--min-top1", "0.5")))
    agree = run["details"]["pytorch"]
    assert run["correct"] is True and agree["cosine_min"] < 1.0 and "reported" in run["message"]
    assert f"top-1 agrees on {agree['top1_agreement']:.1%} of 40" in run["message"]       # not rounded to 100 %
    out = tmp_path / "y.npy"
    r = _invoke("run", digits_export, "-b", "vta-fsim", "--input", tmp_path / "x.npy", "--output", out,
                "--min-cosine", "1.0")
    assert r.exit_code == 1 and f"cosine min {agree['cosine_min']:.4f} < --min-cosine 1.0" in r.output
    assert "Traceback" not in r.output and np.load(out).shape[0] == 40           # the outputs are written either way
    r = _invoke("run", digits_export, "-b", "vta-fsim", "--input", tmp_path / "x.npy", "--min-top1", "1.01")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "drop --no-check" in one_line_error(_invoke("run", digits_export, "-b", "vta-fsim", "--no-check",
                                                       "--min-cosine", "0.9"))


@pytest.mark.slow
def test_the_readme_snippet_runs_the_package(digits_export):
    readme = (digits_export / "README.md").read_text()
    snippet = readme.split("```python\n", 1)[1].split("```", 1)[0]
    proc = subprocess.run([sys.executable, "-c", snippet], cwd=digits_export, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["(1,", "10)", "True"]


@pytest.fixture(scope="module")
def resnet_export(tmp_path_factory):
    """ResNet-18 at 32x32 tuned briefly on vta-fsim (`tune --model`), exported with its log."""
    folder = tmp_path_factory.mktemp("resnet")
    _ok(_invoke("tune", "--model", "resnet18", "--input-shape", RESNET_SHAPE, "-b", "vta-fsim", "-t", "random",
                "-n", "12", "--log", folder / "r18.jsonl"))
    r = _invoke("export", "--model", "resnet18", "--input-shape", RESNET_SHAPE, "-b", "vta-fsim", "--log",
                folder / "r18.jsonl", "--out", folder / "export")
    assert r.exit_code == 0 and "calibrated on synthetic inputs" in r.output, r.output
    return folder / "export"


@pytest.mark.slow
def test_resnet18_runs_bit_exact_with_its_tuned_configs(resnet_export):
    m = load_export(resnet_export).manifest.model
    schedules = [c["schedule"] for c in m["convs"]]
    assert "tuned" in schedules and "fallback" in schedules and len(schedules) == 20
    assert schedules[0] != "cpu" and ",CI=16," in m["convs"][0]["workload"]      # 3 channels by space-to-depth
    tuned = next(c for c in m["convs"] if c["schedule"] == "tuned")
    layer = next(v for v in m["vta_layers"] if v["layer"] == tuned["module"])
    assert layer["config_index"] == tuned["record"]["index"] and layer["note"] == ""
    assert m["calibration"]["source"] == "synthetic"
    run = json.loads(_ok(_invoke("run", resnet_export, "-b", "vta-fsim", "--check", "--json")))
    assert run["correct"] is True and run["details"]["bit_exact"] is True
    assert run["details"]["pytorch"]["cosine_min"] >= 0.99 and run["outputs"] == [[1, 1000]]


@pytest.mark.slow
def test_another_vta_config_is_exported_for_and_run_with_vta_config(tmp_path):
    _ok(_invoke("export", "--model", "resnet18", "--input-shape", RESNET_SHAPE, "-b", "zcu102", "--out",
                tmp_path / "z"))
    r = _invoke("run", tmp_path / "z", "-b", "vta-fsim")
    assert "--vta-config zcu102" in one_line_error(r)
    run = json.loads(_ok(_invoke("run", tmp_path / "z", "-b", "vta-fsim", "--vta-config", "zcu102", "--json")))
    assert run["correct"] is True and run["board"] == "vta-fsim-zcu102"


def test_a_tuned_config_that_leaves_no_room_for_the_bias_falls_back_to_the_default(tmp_path):
    """A config valid without a bias but not with one (the bias takes accumulator entries) is replaced by the
    largest-tile config, and the manifest says why."""
    from toolkit.workloads import Conv2dWorkload

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(16, 32, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.conv(x))

    profile = load_profile("vta-fsim")
    hw = get_preset(profile.vta["preset"])
    wl = Conv2dWorkload(1, 16, 16, 16, 32, 3, 3, 1, 1, 1, 1)
    from toolkit.backends.vta.space import vta_conv2d_space

    space = vta_conv2d_space(wl, hw)
    tight = None
    for i in range(len(space)):
        cfg = space.get(i)
        try:
            check_config(wl, cfg.values, hw, bias=False)
        except VTAError:
            continue
        try:
            check_config(wl, cfg.values, hw, bias=True)
        except VTAError:
            tight = cfg
            break
    assert isinstance(tight, Config)
    loaded = load_model(Net().eval(), (1, 16, 16, 16))
    (tmp_path / "pkg").mkdir()
    plan = ConvPlan("conv", None, "tuned", template=object(), config=tight)
    build = compile_vta_model(loaded.program, profile, [plan], tmp_path / "pkg")
    layer = build.extra["vta_layers"][0]
    assert layer["device"] == "vta" and layer["config_index"] != tight.index
    assert "the tuned one does not fit the bias" in layer["note"]
    assert set(build.files) == {"model", "weights", "program:vta0"} and plan.kernel == "conv"


# -- a VTA board over RPC: a real agent (simulated VTA device) on the loopback tracker ---------------
@pytest.mark.slow
def test_the_int8_model_runs_on_a_board_agent_over_rpc(digits, digits_export, tmp_path):
    host, port, stop = ensure_local_rpc("local")
    try:
        with sim_agent(host, port, "pynq", "pz-sim", tmp_path / "agent.log"):
            Inventory().add(BoardEntry("pz", "pynq-z1", host="127.0.0.1"))
            x = np.load(digits[0] / "test.npy")[:3]
            np.save(tmp_path / "x.npy", x)
            run = json.loads(_ok(_invoke("run", digits_export, "-b", "pz", "--tracker", f"{host}:{port}", "--input",
                                         tmp_path / "x.npy", "--check", "--json")))
            assert run["correct"] is True and run["details"]["bit_exact"] is True
            assert run["details"]["vta_seconds"] == "measured on the board" and run["inputs"] == 3
    finally:
        stop()


# -- bad inputs: one line, exit 2, nothing left behind ------------------------------------------------
@pytest.mark.slow
def test_bad_vta_model_exports_get_one_line_errors(digits, tmp_path):
    folder, _ = digits
    model = folder / "digits.pt2"
    args = ("--model", model, "--input-shape", DIGITS_SHAPE, "-b", "vta-fsim", "--out")
    np.save(tmp_path / "wrong.npy", np.zeros((4, 3, 8, 8), np.float32))
    np.save(tmp_path / "nan.npy", np.full((4, 1, 8, 8), np.nan, np.float32))
    (tmp_path / "junk.npy").write_bytes(b"junk")
    for name, words in (("wrong.npy", "calibration inputs must be"), ("nan.npy", "NaN"),
                        ("junk.npy", "is not a .npy array")):
        r = _invoke("export", *args, tmp_path / name.replace(".npy", ""), "--calibrate", tmp_path / name)
        assert words in one_line_error(r), name
    r = _invoke("export", *args, tmp_path / "d", "--calibrate", tmp_path)
    assert "is a folder" in one_line_error(r)
    r = _invoke("export", *args, tmp_path / "e", "--calibrate", "/dev/null")
    assert "not a regular file" in one_line_error(r)
    r = _invoke("export", "--model", model, "--input-shape", DIGITS_SHAPE, "-b", "local", "--out", tmp_path / "f",
                "--calibrate", folder / "calib.npy")
    assert "drop --calibrate" in one_line_error(r)
    source = tmp_path / "net.py"
    source.write_text("from torch import nn\n\n\ndef sigmoid():\n"
                      "    return nn.Sequential(nn.Conv2d(16, 16, 3), nn.Sigmoid())\n\n\ndef odd():\n"
                      "    return nn.Sequential(nn.Conv2d(16, 24, 3), nn.ReLU(), nn.Conv2d(24, 24, 3))\n\n\n"
                      "def first_only():\n    return nn.Sequential(nn.Conv2d(3, 16, 3, stride=3), nn.Flatten())\n")
    r = _invoke("export", "--model", f"{source}:sigmoid", "--input-shape", "1,16,8,8", "-b", "vta-fsim", "--out",
                tmp_path / "g")
    assert "aten.sigmoid" in one_line_error(r) and "no int8 lowering" in r.output
    r = _invoke("export", "--model", f"{source}:odd", "--input-shape", "1,16,8,8", "-b", "vta-fsim", "--out",
                tmp_path / "h")
    line = one_line_error(r)
    assert "no conv of the model can run on VTA" in line and "output channels 24 not a multiple of" in line
    r = _invoke("export", "--model", f"{source}:first_only", "--input-shape", "1,3,8,8", "-b", "vta-fsim", "--out",
                tmp_path / "i")
    assert "input channels 3 not a multiple of VTA's block 16" in one_line_error(r)
    assert not any((tmp_path / n).exists() for n in ("wrong", "nan", "junk", "d", "e", "f", "g", "h", "i"))


def _rehash(folder, rel: str) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][rel] = sha256_file(folder / rel)
    (folder / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.slow
def test_tampered_vta_model_packages_are_refused_in_one_line(digits_export, tmp_path):
    def copy(name: str):
        dst = tmp_path / name
        shutil.copytree(digits_export, dst)
        return dst

    a = copy("a")       # a changed file, not re-hashed
    (a / "graph.json").write_text((a / "graph.json").read_text().replace('"shift": ', '"shift": 1+'))
    assert "does not match its sha256" in one_line_error(_invoke("run", a, "-b", "vta-fsim"))
    b = copy("b")       # a hostile graph, re-hashed: the graph's own checks refuse it
    graph = json.loads((b / "graph.json").read_text())
    graph["layers"][1]["inputs"] = ["nowhere"]
    (b / "graph.json").write_text(json.dumps(graph))
    _rehash(b, "graph.json")
    assert "earlier layer" in one_line_error(_invoke("run", b, "-b", "vta-fsim"))
    c = copy("c")       # a pickled object array in the weights, re-hashed
    import pickle

    (c / "weights.npz").unlink()
    np.savez(c / "weights.npz", **{"3.weight": np.array([pickle.dumps(1)], dtype=object)})
    _rehash(c, "weights.npz")
    assert "re-export the model" in one_line_error(_invoke("run", c, "-b", "vta-fsim"))
    d = copy("d")       # a program whose arena has no region for layer 7's weights, re-hashed
    rel = next(v["program"] for v in json.loads((d / MANIFEST).read_text())["model"]["vta_layers"]
               if v["layer"] == "7")
    program = Program.load(d / rel)
    program.regions = {k: dataclasses.replace(v, name="wgt:other" if k == "wgt:7" else k)
                       for k, v in program.regions.items()}
    program.save(d / rel)
    _rehash(d, rel)
    assert "layer 7's wgt region is missing" in one_line_error(_invoke("run", d, "-b", "vta-fsim"))
    with np.load(digits_export / "weights.npz") as npz:
        stored = {k: npz[k] for k in npz.files}
    w = stored["7.weight"]                               # a VTA layer's weights are stored packed
    assert w.ndim == 6 and stored["7.bias"].ndim == 6
    ob, ib, kh, kw, bo, bi = w.shape
    oihw = unpack_weight(w)
    for name, weight, words in (
            ("e", w[:, :max(1, ib // 2)], "do not fit its input"),          # input-channel blocks cut
            ("f", oihw, "no 7.weight as a 6-D int8 array"),                        # stored unpacked
            # packed for a VTA of 8-wide input blocks: the same OIHW weights in another layout
            ("g", np.ascontiguousarray(oihw.reshape(ob, bo, 2 * ib, bi // 2, kh, kw).transpose(0, 2, 4, 5, 1, 3)),
             "wgt region")):
        e = copy(name)
        np.savez(e / "weights.npz", **{**stored, "7.weight": weight})
        _rehash(e, "weights.npz")
        assert words in one_line_error(_invoke("run", e, "-b", "vta-fsim")), name
