"""`export --model` runs the built model against PyTorch before it writes anything: a model TVM imports wrongly
(an LSTM) is refused in one line naming the first op whose output differs; a right one records the check."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from toolkit.cli.app import app
from toolkit.export import load_export
from toolkit.testing.cli import one_line_error

cli = CliRunner()
SHAPE = "1,3,8,8"
SOURCE = '''
import torch
from torch import nn


class WithLSTM(nn.Module):
    """A conv whose rows feed an LSTM: TVM's importer computes the LSTM wrongly."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(16, 4)
        self.lstm = nn.LSTM(8, 16, batch_first=True)

    def forward(self, x):
        rows = torch.relu(self.conv(x)).mean(dim=2).transpose(1, 2)
        out, _ = self.lstm(rows)
        return self.fc(out[:, -1])


class Edge(nn.Module):
    """A stem, a depthwise conv with Hardswish, a dilated conv with SiLU, a grouped 1x1 with ReLU6."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.BatchNorm2d(16), nn.Hardswish())
        self.dil = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 2, dilation=2), nn.SiLU())
        self.grp = nn.Sequential(nn.Conv2d(16, 32, 1, groups=4), nn.ReLU6())

    def forward(self, x):
        x = self.stem(x)
        return self.grp(self.dil(self.dw(x)) + x)


def lstm():
    torch.manual_seed(0)
    return WithLSTM().eval()


def edge():
    torch.manual_seed(0)
    return Edge().eval()
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "models.py"
    path.write_text(SOURCE)
    return path


def _export(*args):
    return cli.invoke(app, ["export", *map(str, args)])


def test_a_model_tvm_builds_wrongly_is_refused_naming_the_op_and_nothing_is_written(models, tmp_path):
    out = tmp_path / "lstm"
    r = _export("--model", f"{models}:lstm", "--input-shape", SHAPE, "-b", "local", "--out", out)
    assert r.exit_code == 2, r.output
    line = one_line_error(r)
    assert line.startswith("error: the built model differs from PyTorch's (max |error|"), line
    assert "the first op whose output differs is " in line and "nothing was exported" in line, line
    assert not out.exists()
    r = _export("--model", f"{models}:lstm", "--input-shape", SHAPE, "-b", "local", "--out", out, "--no-check")
    assert r.exit_code == 0, r.output
    assert "not checked against PyTorch: --no-check" in r.output
    assert load_export(out).manifest.model["check"] == {"checked": False, "why": "--no-check"}


def test_an_edge_model_is_checked_and_every_conv_kind_gets_a_kernel_with_its_activation(models, tmp_path):
    out = tmp_path / "edge"
    r = _export("--model", f"{models}:edge", "--input-shape", SHAPE, "-b", "local", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    model = json.loads(r.stdout)["model"]
    assert model["check"]["checked"] is True and model["check"]["verdict"].startswith("equal to PyTorch")
    convs = {c["module"]: (c["workload"].split(",", 5)[-1], c["schedule"], c["epilogue"]) for c in model["convs"]}
    assert convs == {
        "stem.0": ("K=3,S=2,P=1", "fallback", ["bias", "hardswish"]),
        "dw.0": ("K=3,S=1,P=1,G=16", "fallback", ["bias", "hardswish"]),
        "dil.0": ("K=3,S=1,P=2,D=2", "fallback", ["bias", "silu"]),
        "grp.0": ("K=1,S=1,P=0,G=4", "fallback", ["bias", "relu6"])}


def test_a_cross_compiled_model_says_it_was_not_checked_here(models, tmp_path):
    r = _export("--model", f"{models}:edge", "--input-shape", SHAPE, "-b", "rpi4", "--out", tmp_path / "rpi")
    assert r.exit_code == 0, r.output
    assert "not checked against PyTorch: not run here (it is built for aarch64" in r.output
    assert "no provisioned board named" in r.output
