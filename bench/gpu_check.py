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
import hashlib
import json
import os
import platform
import shutil
import site
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

MANIFEST = "check.json"
RUNTIME = "runtime.tar.gz"
FORMAT = 1
MAX_BYTES = 60 * 2**20
"""What a prepared folder may hold: the device tool carries 64 MiB in all."""
GPU_ARCH = "sm_90"
"""The lent GPUs are Hopper (H100, H200)."""
CUDART = "libcudart.so.13"
"""The CUDA runtime apache-tvm 0.27's ``libtvm_runtime_cuda.so`` is linked against."""
TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}
"""float32 against torch with TF32 off: differences come from the order of the sums alone."""

Say = Callable[[str], None]


class CheckError(Exception):
    """A one-line reason the check cannot go on."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- prepare (here) ---------------------------------------------------------------------------------------------
def gpu_profile(arch: str = GPU_ARCH) -> Any:
    """The board the check builds for: the Jetson profile's CUDA target with the lent machine's GPU ``arch`` and an
    x86_64 host, linked by this machine's ``g++``."""
    from toolkit.boards import load_profile

    base = load_profile("jetson-orin-nano")
    target = {**base.target_spec, "arch": arch, "registers_per_block": 65536,
              "host": {"kind": "llvm", "mtriple": "x86_64-linux-gnu"}}
    return replace(base, name=f"cuda-x86_64-{arch}", description=f"an NVIDIA {arch} GPU on an x86_64 host",
                   arch="x86_64", target_spec=target, cross_compiler="g++", rpc_key="gpu-check")


def small_resnet() -> Any:
    """The check's model: ResNet-18 with 16 channels in its first stage (not 64), weights drawn from seed 0."""
    from toolkit.workloads.zoo import ResNet18, seeded

    return seeded(lambda: ResNet18(base=16), 0)


MODEL = "bench.gpu_check:small_resnet"


def prepare(folder: Path, *, model: str = MODEL, input_shape: tuple[int, int, int, int] = (1, 3, 224, 224),
            workload: str = "resnet18.C8", candidates: int = 24, seed: int = 0, python: str = "3.12",
            wheels: bool = True, say: Say = print) -> dict[str, Any]:
    """Build the check into ``folder`` (new or empty); returns what ``check.json`` says."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise CheckError(f"{folder} exists and is not an empty folder: give a new one")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return _prepare(folder, model, input_shape, workload, candidates, seed, python, wheels, say)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _prepare(folder: Path, model: str, input_shape: tuple[int, int, int, int], workload: str, candidates: int,
             seed: int, python: str, wheels: bool, say: Say) -> dict[str, Any]:
    import numpy as np

    from toolkit.backends import backend_for
    from toolkit.export.model import export_model
    from toolkit.export.run import reference_outputs
    from toolkit.rpc.runtime_build import copy_python, package_site
    from toolkit.tuning.core.template import BuildError
    from toolkit.workloads import parse_workload
    from toolkit.workloads.extract import load_model

    profile = gpu_profile()
    backend = backend_for(profile)
    started = time.monotonic()

    wl = parse_workload(workload)
    template = backend.template(wl, profile)
    space, rng = template.space(), np.random.default_rng(seed)
    fallback = template.fallback_config()
    picked, tried = [fallback], {fallback.index}
    say(f"[1/4] {workload} ({wl.spec()}): building the fallback config and {candidates} random valid configs "
        f"of {len(space):,} for {profile.target['arch']} ...")
    (folder / "kernels").mkdir()
    kernels = []
    while len(picked) < candidates + 1 and len(tried) < len(space):
        index = int(rng.integers(len(space)))
        if index in tried:
            continue
        tried.add(index)
        try:
            template.check(space.get(index))
        except BuildError:
            continue
        picked.append(space.get(index))
    for i, config in enumerate(picked):
        try:
            files, signature = backend.write_kernel(template, config, folder, f"kernels/{config.index}")
        except BuildError as exc:
            say(f"      config {config.index}: {exc}")
            continue
        kernels.append({"index": config.index, "config": config.values, "library": files["library"],
                        "fallback": i == 0})
        say(f"      {len(kernels)}/{len(picked)} built")
    signature = signature | {"workload": wl.spec(), "label": wl.label}

    say(f"[2/4] {model} {input_shape}: a whole-model export for {profile.name} (every conv on its fallback "
        "config; no log) ...")
    export_model(model, folder / "model", profile, input_shape=input_shape, seed=seed,
                 progress=lambda what: say(f"      {what}"))
    loaded = load_model(model, input_shape, seed=seed)
    x = np.random.default_rng(seed).uniform(-1, 1, input_shape).astype("float32")
    outputs = reference_outputs(loaded, x)
    np.savez(folder / "reference.npz", x=x, **{f"y{i}": y for i, y in enumerate(outputs)})

    say("[3/4] TVM's runtime (Python package, libtvm_runtime.so, libtvm_runtime_cuda.so) ...")
    tvm_site = package_site("tvm")
    with tempfile.TemporaryDirectory(prefix="edgetune-gpu-check-") as tmp:
        copy_python(tvm_site, Path(tmp, "tvm"))
        Path(tmp, "tvm/lib").mkdir(exist_ok=True)
        for lib in ("libtvm_runtime.so", "libtvm_runtime_cuda.so"):
            shutil.copy(tvm_site / "lib" / lib, Path(tmp, "tvm/lib", lib))
        with tarfile.open(folder / RUNTIME, "w:gz") as tar:
            tar.add(Path(tmp, "tvm"), "tvm")
    if wheels:
        say(f"[4/4] apache-tvm-ffi for Python {python} on x86_64 (pip download) ...")
        from importlib import metadata

        version = metadata.version("apache-tvm-ffi")
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--python-version", python, "--implementation", "cp", "--platform",
                            "manylinux_2_28_x86_64", "-d", str(folder / "wheels"), f"apache-tvm-ffi=={version}"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise CheckError(f"pip could not download apache-tvm-ffi=={version} for Python {python}: "
                             f"{(r.stderr.strip().splitlines() or ['no output'])[-1]}")
    else:
        say("[4/4] no wheels: the GPU machine must have apache-tvm-ffi of this version already")

    files = {p.relative_to(folder).as_posix(): sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    size = sum((folder / f).stat().st_size for f in files)
    if size > MAX_BYTES:
        raise CheckError(f"the check takes {size / 2**20:.1f} MiB, above {MAX_BYTES / 2**20:.0f} MiB: "
                         "give a smaller --model or fewer --candidates")
    info = {"format": FORMAT, "profile": profile.name, "target": profile.target, "seed": seed,
            "kernel": {"signature": signature, "candidates": kernels},
            "model": {"name": model, "input_shape": list(input_shape), "export": "model",
                      "outputs": len(outputs)},
            "python": python, "wheels": wheels, "bytes": size, "prepare_s": round(time.monotonic() - started, 1),
            "files": files}
    (folder / MANIFEST).write_text(json.dumps(info, indent=1) + "\n")
    say(f"{folder}: {len(files)} files, {size / 2**20:.1f} MiB, in {info['prepare_s']:.0f} s")
    return info


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
