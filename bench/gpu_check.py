"""The CUDA check: edgetune's CUDA kernels and a whole-model export on a real NVIDIA GPU, beside torch.

No GPU is needed to prepare it, and the GPU machine needs no compiler of edgetune's and no network::

    python -m bench.gpu_check prepare .gpu-check          # here: builds the folder below (half a minute)
    # on the GPU machine (x86_64, Python 3.12, torch, CUDA 13's runtime), from the repository root:
    python3 -m bench.gpu_check run .gpu-check --out results

``prepare`` writes a folder under 64 MiB, every file listed with its sha256 in ``check.json``:

- ``kernels/``: one conv workload's CUDA kernel under the template's fallback config and under ``candidates``
  random valid configs, each built and cross-linked here as ``edgetune export`` builds a kernel (for ``cuda``
  with an x86_64 host; the library embeds the CUDA C source the GPU machine compiles when it loads it);
- ``model/``: a whole-model export (``export_model``) of :func:`small_resnet` (ResNet-18 at a quarter of its
  width, 3 MB of weights), and ``reference.npz``: an input and the outputs torch computes here;
- ``runtime.tar.gz``: TVM's Python package, runtime only (``libtvm_runtime.so`` and ``libtvm_runtime_cuda.so``
  from this machine's apache-tvm wheel), and ``wheels/``: apache-tvm-ffi for the GPU machine's Python. ``run``
  unpacks both into a temporary folder it imports them from: nothing is installed there.

``run`` checks every file against ``check.json`` first, then measures each kernel candidate on the GPU
(TVM's ``time_evaluator``) after checking its output against ``torch.nn.functional.conv2d`` on the same GPU,
keeps the fastest correct one (the measuring half of a tuning round), runs the model through the Relax VM and
compares its outputs with torch's (here, on the CPU, and there, on the GPU), and times each beside torch
(cuDNN). It writes ``results.json`` and ``results.md`` to ``--out``. Bad input (a folder that is not a
prepared check, a changed file, no GPU, no CUDA 13 runtime) gets one line and exit 2.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import platform
import shutil
import site
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable

from bench.gpu_folder import CUDART, FORMAT, MANIFEST, MODEL, RUNTIME, TOLERANCE, CheckError, Say, sha256

def small_resnet() -> Any:
    """The check's model: ResNet-18 with 16 channels in its first stage (not 64), weights drawn from seed 0."""
    from toolkit.workloads.zoo import ResNet18, seeded

    return seeded(lambda: ResNet18(base=16), 0)


# -- run (on the GPU machine) -----------------------------------------------------------------------------------
def verified(folder: Path) -> dict[str, Any]:
    """``check.json`` of ``folder``, every file it lists present, a plain file inside the folder and unchanged."""
    root = folder.resolve()
    path = folder / MANIFEST
    if not path.is_file():
        raise CheckError(f"{folder} is not a prepared check (no {MANIFEST}): run `python -m bench.gpu_check "
                         "prepare` first")
    try:
        info = json.loads(path.read_text())
        files = dict(info["files"])
    except (ValueError, KeyError, TypeError):
        raise CheckError(f"{path} is not a check manifest: prepare the check again") from None
    if info.get("format") != FORMAT:
        raise CheckError(f"{path} is of format {info.get('format')}, this script reads {FORMAT}: prepare again")
    for rel, digest in files.items():
        f = folder / rel
        if f.is_symlink() or not f.is_file() or root not in f.resolve().parents:
            raise CheckError(f"{f} is missing or not a plain file inside {folder}: prepare the check again")
        if sha256(f) != digest:
            raise CheckError(f"{f} differs from what {MANIFEST} lists: prepare the check again")
    return info


def unpack_runtime(folder: Path, info: dict[str, Any], into: Path) -> None:
    """Unpack the runtime archive and the wheels ``check.json`` lists into ``into``, first on ``sys.path``."""
    here = ".".join(platform.python_version_tuple()[:2])
    if info.get("wheels") and info["python"] != here:
        raise CheckError(f"{folder} was prepared for Python {info['python']}, this is Python {here}: prepare it "
                         f"with --python {here}")
    with tarfile.open(folder / RUNTIME) as tar:
        tar.extractall(into, filter="data")
    for rel in info["files"]:
        if rel.startswith("wheels/") and rel.endswith(".whl"):
            with zipfile.ZipFile(folder / rel) as wheel:
                wheel.extractall(into)
    for lib in into.rglob("*.so"):
        lib.chmod(0o755)
    sys.path.insert(0, str(into))


def load_cudart() -> str:
    """Load CUDA 13's runtime globally (the GPU machine's torch wheels carry it); its path."""
    try:
        ctypes.CDLL(CUDART, mode=ctypes.RTLD_GLOBAL)
        return CUDART
    except OSError:
        pass
    roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "nvidia", "**", CUDART), recursive=True)):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
    for path in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"):
        if os.path.isfile(os.path.join(path, CUDART)):
            ctypes.CDLL(os.path.join(path, CUDART), mode=ctypes.RTLD_GLOBAL)
            return os.path.join(path, CUDART)
    raise CheckError(f"no {CUDART} here (apache-tvm 0.27's CUDA runtime needs CUDA 13): install a CUDA 13 "
                     "runtime or torch's CUDA 13 wheels")


def use_nvcc(arch: str) -> str | None:
    """Compile the CUDA C a library embeds with ``nvcc`` for ``arch`` when it is loaded (TVM's own callback needs
    NVRTC through cuda-python); the nvcc used, or ``None`` to keep TVM's."""
    import tvm_ffi

    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.isfile(p)), None)
    if nvcc is None:
        return None

    def compile_cuda(code: str, *_: Any) -> bytes:
        with tempfile.TemporaryDirectory(prefix="edgetune-nvcc-") as tmp:
            src, out = Path(tmp, "kernels.cu"), Path(tmp, "kernels.cubin")
            src.write_text(code)
            r = subprocess.run([nvcc, "--cubin", "-O3", f"-arch={arch}", "-o", str(out), str(src)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"nvcc failed: {r.stderr.strip()[:2000]}")
            return out.read_bytes()

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", compile_cuda, override=True)
    return nvcc


def _median(costs: Any) -> float:
    values = sorted(float(c) for c in costs)
    return values[len(values) // 2]


def _torch_time(fn: Callable[[], Any], repeat: int, number: int) -> float:
    """Median seconds of ``fn`` on the GPU (CUDA events, ``number`` calls per sample, after warm-up)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) / 1e3 / number)
    return _median(samples)


def run(folder: Path, out: Path, *, repeat: int = 10, number: int = 20, say: Say = print) -> dict[str, Any]:
    """Run a prepared check on this machine's first GPU; writes ``results.json`` and ``results.md`` to ``out``."""
    info = verified(folder)
    with tempfile.TemporaryDirectory(prefix="edgetune-gpu-check-") as tmp:
        unpack_runtime(folder, info, Path(tmp))
        os.environ["TVM_USE_RUNTIME_LIB"] = "1"
        cudart = load_cudart()
        return _run(folder, info, out, cudart, repeat, number, say)


def _run(folder: Path, info: dict[str, Any], out: Path, cudart: str, repeat: int, number: int, say: Say
         ) -> dict[str, Any]:
    import numpy as np
    import tvm
    from tvm.runtime.vm import VirtualMachine

    dev = tvm.cuda(0)
    if not dev.exist:
        raise CheckError("TVM's CUDA runtime sees no GPU here (no NVIDIA driver, or libtvm_runtime_cuda.so did not "
                         "load): run the check on the GPU machine")
    import torch

    if not torch.cuda.is_available():
        raise CheckError("torch sees no CUDA GPU here: run the check on the GPU machine")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    arch = "sm_" + dev.compute_version.replace(".", "")
    nvcc = use_nvcc(arch)
    gpu = torch.cuda.get_device_name(0)
    say(f"{gpu} ({arch}), TVM {tvm.__version__} runtime only, torch {torch.__version__}, {cudart}, "
        f"CUDA C compiled by {nvcc or 'NVRTC'}")
    results: dict[str, Any] = {"gpu": gpu, "arch": arch, "built_for": info["target"]["arch"],
                               "tvm": tvm.__version__, "torch": torch.__version__, "python": platform.python_version(),
                               "compiler": nvcc or "nvrtc", "repeat": repeat, "number": number}

    # one conv workload: every candidate checked against torch, then timed
    sig = info["kernel"]["signature"]
    shapes = [a["shape"] for a in sig["args"]]
    rng = np.random.default_rng(info["seed"])
    data, weight = (rng.uniform(-1, 1, s).astype("float32") for s in shapes[:2])
    td, tw = torch.from_numpy(data).cuda(), torch.from_numpy(weight).cuda()
    tw_oihw = tw if sig["args"][1]["layout"] == "OIHW" else tw.permute(3, 0, 1, 2).contiguous()

    def torch_conv() -> Any:
        return torch.nn.functional.conv2d(td, tw_oihw, stride=sig["stride"], padding=sig["padding"])

    expected = torch_conv().cpu().numpy()
    torch_s = _torch_time(torch_conv, repeat, number)
    args = [tvm.runtime.tensor(data, dev), tvm.runtime.tensor(weight, dev),
            tvm.runtime.tensor(np.zeros(shapes[2], "float32"), dev)]
    rows = []
    for k in info["kernel"]["candidates"]:
        row = {"index": k["index"], "fallback": k["fallback"]}
        try:
            lib = tvm.runtime.load_module(str(folder / k["library"]))
            lib["main"](*args)
            got = args[2].numpy()
            err = float(np.max(np.abs(got - expected)))
            row["correct"], row["max_abs_error"] = bool(np.allclose(got, expected, **TOLERANCE)), err
            if row["correct"]:
                timer = lib.time_evaluator("main", dev, number=number, repeat=repeat)
                row["seconds"] = _median(timer(*args).results)
        except Exception as exc:  # noqa: BLE001 - a candidate that fails to load or run is a result, not a crash
            row["error"] = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
        rows.append(row)
        say(f"  candidate {k['index']}: " + (f"{row['seconds'] * 1e6:.1f} us" if "seconds" in row else
                                             row.get("error") or f"WRONG (max error {row['max_abs_error']:.3g})"))
    timed = [r for r in rows if "seconds" in r]
    best = min(timed, key=lambda r: r["seconds"]) if timed else None
    fallback = next((r for r in rows if r["fallback"]), None)
    results["kernel"] = {"workload": sig["workload"], "label": sig["label"], "torch_s": torch_s,
                         "best": best, "fallback": fallback, "candidates": rows,
                         "correct": sum(1 for r in rows if r.get("correct")), "total": len(rows)}

    # the whole model through the Relax VM
    ref = np.load(folder / "reference.npz")
    x = ref["x"]
    lib = tvm.runtime.load_module(str(folder / info["model"]["export"] / "model.so"))
    vm = VirtualMachine(lib, dev)
    xt = tvm.runtime.tensor(x, dev)
    value = vm["main"](xt)
    got = [value.numpy()] if hasattr(value, "numpy") else [v.numpy() for v in value]
    here = [ref[f"y{i}"] for i in range(info["model"]["outputs"])]
    model = {"name": info["model"]["name"], "input_shape": info["model"]["input_shape"],
             "max_abs_error_vs_torch_cpu": max(float(np.max(np.abs(a - b))) for a, b in zip(got, here)),
             "correct_vs_torch_cpu": all(np.allclose(a, b, **TOLERANCE) for a, b in zip(got, here))}
    timer = vm.time_evaluator("main", dev, number=number, repeat=repeat)
    model["tvm_s"] = _median(timer(xt).results)
    if info["model"]["name"] == MODEL:
        net = small_resnet().cuda()
        tx = torch.from_numpy(x).cuda()
        with torch.no_grad():
            on_gpu = net(tx)
            model["max_abs_error_vs_torch_gpu"] = float(np.max(np.abs(got[0] - on_gpu.cpu().numpy())))
            model["correct_vs_torch_gpu"] = bool(np.allclose(got[0], on_gpu.cpu().numpy(), **TOLERANCE))
            model["torch_s"] = _torch_time(lambda: net(tx), repeat, number)
    results["model"] = model
    results["passed"] = bool(best) and model["correct_vs_torch_cpu"] and model.get("correct_vs_torch_gpu", True)

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "results.md").write_text(report(results))
    say(report(results))
    return results


def report(r: dict[str, Any]) -> str:
    """The results as a Markdown table (the fastest correct candidate, the fallback and torch, side by side)."""
    k, m = r["kernel"], r["model"]

    def us(s: float | None) -> str:
        return f"{s * 1e6:,.1f}" if s is not None else "-"

    best, fb = k["best"] or {}, k["fallback"] or {}
    errors = f"max error {m['max_abs_error_vs_torch_cpu']:.2g} vs torch here"
    if "max_abs_error_vs_torch_gpu" in m:
        errors += f", {m['max_abs_error_vs_torch_gpu']:.2g} vs torch there"
    lines = [f"GPU: {r['gpu']} ({r['arch']}; kernels built for {r['built_for']}), TVM {r['tvm']} runtime, torch "
             f"{r['torch']}, CUDA C compiled by {r['compiler']}; medians of {r['repeat']} x {r['number']} runs.", "",
             "| what | edgetune (us) | torch, cuDNN (us) | correct |", "| --- | ---: | ---: | --- |",
             f"| {k['label']}: fastest of {k['total']} candidates (config {best.get('index', '-')}) | "
             f"{us(best.get('seconds'))} | {us(k['torch_s'])} | {k['correct']}/{k['total']} candidates |",
             f"| {k['label']}: fallback config {fb.get('index', '-')} | {us(fb.get('seconds'))} | "
             f"{us(k['torch_s'])} | {fb.get('correct', '-')} |",
             f"| {m['name']} {tuple(m['input_shape'])}, whole model (fallback configs) | {us(m['tvm_s'])} | "
             f"{us(m.get('torch_s'))} | {m['correct_vs_torch_cpu']} ({errors}) |",
             "", f"passed: {r['passed']}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="build the check into FOLDER (here; no GPU needed)")
    p.add_argument("folder", type=Path)
    p.add_argument("--model", default=MODEL, help="a built-in network, module:factory or a model file")
    p.add_argument("--input-shape", default="1,3,224,224")
    p.add_argument("--workload", default="resnet18.C8")
    p.add_argument("--candidates", type=int, default=24)
    p.add_argument("--python", default="3.12", help="the GPU machine's Python (for the apache-tvm-ffi wheel)")
    p.add_argument("--no-wheels", action="store_true", help="the GPU machine has apache-tvm-ffi already")
    r = sub.add_parser("run", help="run a prepared check on this machine's GPU")
    r.add_argument("folder", type=Path)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--repeat", type=int, default=10)
    r.add_argument("--number", type=int, default=20)
    a = parser.parse_args(argv)
    try:
        if a.command == "prepare":
            from bench.gpu_prepare import prepare

            shape = tuple(int(v) for v in a.input_shape.split(","))
            if len(shape) != 4:
                raise CheckError(f"--input-shape {a.input_shape!r} must be N,C,H,W")
            prepare(a.folder, model=a.model, input_shape=shape, workload=a.workload, candidates=a.candidates,
                    python=a.python, wheels=not a.no_wheels)
        else:
            return 0 if run(a.folder, a.out, repeat=a.repeat, number=a.number)["passed"] else 1
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - edgetune's own errors are one line too (it is absent on the GPU)
        if type(exc).__module__ != "toolkit.errors":
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
