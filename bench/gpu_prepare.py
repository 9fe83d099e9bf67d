"""The CUDA check's first half, here: the folder :mod:`bench.gpu_check` runs on a GPU machine.

``python -m bench.gpu_check prepare FOLDER`` calls :func:`prepare`; this module needs TVM and edgetune, the other
half neither.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.gpu_folder import FORMAT, GPU_ARCH, MANIFEST, MAX_BYTES, MODEL, RUNTIME, CheckError, Say, sha256


def gpu_profile(arch: str = GPU_ARCH) -> Any:
    """The board the check builds for: the Jetson profile's CUDA target with the lent machine's GPU ``arch`` and an
    x86_64 host, linked by this machine's ``g++``."""
    from toolkit.boards import load_profile

    base = load_profile("jetson-orin-nano")
    target = {**base.target_spec, "arch": arch, "registers_per_block": 65536,
              "host": {"kind": "llvm", "mtriple": "x86_64-linux-gnu"}}
    return replace(base, name=f"cuda-x86_64-{arch}", description=f"an NVIDIA {arch} GPU on an x86_64 host",
                   arch="x86_64", target_spec=target, cross_compiler="g++", rpc_key="gpu-check")




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
    from toolkit.workloads.model_files import load_model

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
