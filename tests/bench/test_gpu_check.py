"""bench/gpu_check.py: the folder `prepare` builds for a GPU machine, and `run` where there is no GPU (here)."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from bench import gpu_check, gpu_folder, gpu_prepare
from toolkit.testing.cli import one_line_error

ROOT = Path(__file__).resolve().parents[2]
EM_X86_64 = 62


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The check with the fallback config and one random candidate, no wheels (no network in the test)."""
    folder = tmp_path_factory.mktemp("gpu-check") / "check"
    gpu_prepare.prepare(folder, candidates=1, wheels=False, say=lambda _: None)
    return folder


def _run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.gpu_check", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_prepare_lists_and_hashes_every_file_within_the_carry_limit(prepared: Path) -> None:
    info = gpu_check.verified(prepared)
    on_disk = {p.relative_to(prepared).as_posix() for p in prepared.rglob("*") if p.is_file()}
    assert on_disk - set(info["files"]) == {gpu_folder.MANIFEST}
    assert info["bytes"] < gpu_folder.MAX_BYTES
    assert info["target"]["arch"] == gpu_folder.GPU_ARCH and info["target"]["host"]["mtriple"].startswith("x86_64")
    kernels = info["kernel"]["candidates"]
    assert len(kernels) == 2 and kernels[0]["fallback"] and not kernels[1]["fallback"]
    assert len({k["index"] for k in kernels}) == 2


@pytest.mark.slow
def test_libraries_are_x86_64_and_embed_the_cuda_source_the_gpu_compiles(prepared: Path) -> None:
    info = gpu_check.verified(prepared)
    libraries = [prepared / k["library"] for k in info["kernel"]["candidates"]] + [prepared / "model/model.so"]
    for lib in libraries:
        data = lib.read_bytes()
        assert data[:4] == b"\x7fELF" and data[18] == EM_X86_64
        assert re.search(rb'extern "C" __global__ void __launch_bounds__\(\d+\) \w+\(', data), lib
    with tarfile.open(prepared / gpu_folder.RUNTIME) as tar:
        names = set(tar.getnames())
    assert {"tvm/__init__.py", "tvm/lib/libtvm_runtime.so", "tvm/lib/libtvm_runtime_cuda.so"} <= names
    assert not any("libtvm_compiler" in n for n in names)


@pytest.mark.slow
def test_the_reference_is_the_check_model_as_torch_runs_it(prepared: Path) -> None:
    ref = np.load(prepared / "reference.npz")
    with torch.no_grad():
        want = gpu_check.small_resnet()(torch.from_numpy(ref["x"])).numpy()
    np.testing.assert_allclose(ref["y0"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_run_without_a_gpu_says_so_inone_line_error(prepared: Path, tmp_path: Path) -> None:
    """Here: the runtime unpacks and imports; CUDA's runtime or the GPU is what is missing."""
    line = one_line_error(_run("run", prepared, "--out", tmp_path / "out"))
    assert "no libcudart.so.13" in line or "sees no GPU here" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_changed_or_planted_file_is_refused_before_anything_loads(prepared: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(prepared), str(copy)], check=True)
    lib = copy / gpu_check.verified(copy)["kernel"]["candidates"][0]["library"]
    lib.write_bytes(lib.read_bytes() + b"\0")
    assert "differs from what check.json lists" in one_line_error(_run("run", copy, "--out", tmp_path / "o"))
    lib.unlink()
    lib.symlink_to(prepared / gpu_check.verified(prepared)["kernel"]["candidates"][0]["library"])
    assert "not a plain file inside" in one_line_error(_run("run", copy, "--out", tmp_path / "o"))
    (copy / gpu_folder.MANIFEST).write_text("{")
    assert "is not a check manifest" in one_line_error(_run("run", copy, "--out", tmp_path / "o"))
    assert "is not a prepared check" in one_line_error(_run("run", tmp_path, "--out", tmp_path / "o"))


def test_prepare_refuses_a_used_folder_and_a_bad_workload_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    assert "not an empty folder" in one_line_error(_run("prepare", tmp_path / "used", "--no-wheels"))
    assert "unknown workload" in one_line_error(_run("prepare", tmp_path / "new", "--workload", "nope", "--no-wheels"))
    assert not (tmp_path / "new").exists()


def test_the_report_puts_edgetune_beside_torch() -> None:
    best = {"index": 7, "fallback": False, "correct": True, "seconds": 20e-6}
    fallback = {"index": 3, "fallback": True, "correct": True, "seconds": 50e-6}
    results = {"gpu": "GPU", "arch": "sm_90", "built_for": "sm_90", "tvm": "0.27", "torch": "2", "compiler": "nvcc",
               "repeat": 10, "number": 20, "passed": True,
               "kernel": {"label": "resnet18.C8", "torch_s": 10e-6, "best": best, "fallback": fallback,
                          "candidates": [fallback, best], "correct": 2, "total": 2},
               "model": {"name": "m", "input_shape": [1, 3, 8, 8], "tvm_s": 1e-3, "torch_s": 2e-3,
                         "correct_vs_torch_cpu": True, "max_abs_error_vs_torch_cpu": 1e-5}}
    text = gpu_check.report(results)
    assert "| resnet18.C8: fastest of 2 candidates (config 7) | 20.0 | 10.0 | 2/2 candidates |" in text
    assert "| resnet18.C8: fallback config 3 | 50.0 | 10.0 | True |" in text
    assert "| m (1, 3, 8, 8), whole model (fallback configs) | 1,000.0 | 2,000.0 | True" in text
