"""The scripts in examples/ run as a user runs them (small budgets) and do what they say."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(tmp_path: Path, script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_every_example_is_tested():
    tested = {"tune_one_layer.py", "custom_tuner.py", "tune_network.py", "compose_tuner.py", "deploy_model.py",
              "deploy_model_vta.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_tune_one_layer_tunes_exports_and_runs_bit_exact(tmp_path):
    out = _run(tmp_path, "tune_one_layer.py", "--trials", "12", "--out", "o")
    assert "after 12 trials" in out and "output bit-exact" in out
    assert (tmp_path / "o" / "export" / "manifest.json").is_file()
    again = _run(tmp_path, "tune_one_layer.py", "--trials", "16", "--out", "o")   # resumes the log: 4 more
    assert "after 16 trials" in again


def test_custom_tuner_runs_beside_a_registered_one(tmp_path):
    out = _run(tmp_path, "custom_tuner.py", "--trials", "24")
    found = dict(re.findall(r"^(\S+)\s+best ([\d.]+) ms after 24 trials", out, flags=re.M))
    assert set(found) == {"neighbour-walk", "random"}
    assert all(math.isfinite(float(v)) for v in found.values())


def test_a_composed_tuner_runs_beside_xgb(tmp_path):
    out = _run(tmp_path, "compose_tuner.py", "--trials", "40")
    found = {m[0]: (float(m[1]), int(m[2])) for m in
             re.findall(r"^(\S+)\s+best ([\d.]+) ms after 40 trials, (\d+) fits", out, flags=re.M)}
    assert set(found) == {"composed", "xgb"} and all(math.isfinite(v[0]) for v in found.values())
    assert found["composed"][1] >= 2          # the sampler's batches refit the model more often than xgb's plans


@pytest.mark.slow
def test_tune_network_gives_every_task_trials_and_a_total(tmp_path):
    out = _run(tmp_path, "tune_network.py", "--trials", "88", "--out", "o")
    assert re.search(r"network conv latency [\d.]+ ms after 88 trials", out)
    assert " 0 trials" not in out


@pytest.mark.slow
def test_deploy_model_tunes_exports_and_runs_a_whole_model(tmp_path):
    out = _run(tmp_path, "deploy_model.py", "--trials", "8", "--out", "o")
    assert "in 8 trials" in out and re.search(r"^conv1\s+(tuned|fallback)", out, flags=re.M)
    error = float(re.search(r"relative error ([\d.e+-]+)", out).group(1))
    assert error < 1e-3 and "outputs (4, 10)" in out


def test_deploy_model_vta_keeps_the_trained_accuracy_in_int8(tmp_path):
    out = _run(tmp_path, "deploy_model_vta.py", "--out", "o")
    fl, q = (float(v) for v in re.search(r"float32 ([\d.]+)%, int8 on VTA ([\d.]+)%", out).groups())
    assert fl > 95 and q >= fl - 1
    assert "bit-exact with the int8 reference" in out and "conv 0   fallback" in out
