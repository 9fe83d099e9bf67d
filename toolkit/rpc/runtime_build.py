"""Cross-building a TVM runtime bundle (:mod:`toolkit.rpc.runtime_bundle`) on this machine.

Six steps, each said before it starts:

1. the board's Python headers: Debian's ``libpython3.X-dev`` for the target unpacked with ``mmdebstrap
   --variant=extract`` (seconds; nothing runs), or a sysroot copied from the board (``sysroot``);
2. ``libtvm_ffi.so`` (and its testing library, which the extension links) with CMake and Debian's
   cross compiler, from the C++ tree in the ``apache-tvm-ffi`` wheel;
3. tvm-ffi's Cython extension: ``core.pyx`` turned into C++ by Cython here, compiled against the board's
   headers. Its object header is kept at 16 bytes on 32-bit targets (upstream asserts a 64-bit layout);
4. ``libtvm_runtime.so`` from the ``src/runtime`` in the ``apache-tvm`` wheel (core, RPC, Relax VM; not the
   fp16 builtins, the pipe channel or the LLM caches) with the headers that wheel leaves out, which edgetune
   carries in ``runtime_support/``;
5. the Python packages: ``tvm`` and ``tvm_ffi`` as installed here (pure Python) plus ``typing_extensions``;
6. ``bundle.json`` (sha256 of every file) and ``runtime.tar.gz``.

Needs the target's cross compiler (Debian's ``g++-arm-linux-gnueabihf``), ``cmake`` and ``cython`` (PyPI,
``pip install 'edgetune[runtime]'``) and, without ``sysroot``, ``mmdebstrap``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import util
from pathlib import Path
from typing import Callable

from toolkit.build_lock import build_lock, remove_partial
from toolkit.errors import BoardError
from toolkit.rpc.runtime_bundle import SUPPORT_DIR, Target, bundle_dir, recipe

Say = Callable[[str], None]
Progress = Callable[[int, int], None]

RUNTIME_SOURCES = (
    "cpu_device_api", "device_api", "file_utils", "logging", "module", "tensor", "thread_pool",
    "threading_backend", "timer", "workspace_pool", "const_loader_module", "static_library",
    "memory/memory_manager",
    "rpc/rpc_channel", "rpc/rpc_device_api", "rpc/rpc_endpoint", "rpc/rpc_event_impl", "rpc/rpc_local_session",
    "rpc/rpc_module", "rpc/rpc_server_env", "rpc/rpc_session", "rpc/rpc_socket_impl",
    "vm/builtin", "vm/bytecode", "vm/executable", "vm/vm", "vm/tensor_cache_support",
)
"""TVM's runtime sources in the bundle (``src/runtime/NAME.cc``)."""
CXXFLAGS = ("-std=c++17", "-O2", "-fPIC", "-Wno-psabi", "-DNDEBUG")
PY_HEADER_PATCH = (
    "struct PyCustomAllocHeader {\n  PyObject* tagged_pyobj;\n  TVMFFIObjectAllocHeader base;\n};",
    "struct PyCustomAllocHeader {\n  PyObject* tagged_pyobj;\n#if UINTPTR_MAX == 0xFFFFFFFFu\n"
    "  char pad32[16 - sizeof(PyObject*) - sizeof(TVMFFIObjectAllocHeader)];  // edgetune: 32-bit targets\n"
    "#endif\n  TVMFFIObjectAllocHeader base;\n};")
"""tvm-ffi's Python object header: a pointer and a deleter, asserted to be 16 bytes (so the object after it is
aligned); on a 32-bit target they are 8, so padding goes between them (the deleter stays right before the
object, where the C++ side looks for it)."""
MIRROR = "http://deb.debian.org/debian"


def package_site(package: str) -> Path:
    spec = util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise BoardError(f"{package} is not installed here; install edgetune's dependencies (`make install`)")
    return Path(next(iter(spec.submodule_search_locations)))


def _tool(name: str, package: str) -> str:
    """``name`` from this Python's environment first (PyPI's cmake), else from ``PATH``."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        raise BoardError(f"{name} is needed to build the runtime: install {package}")
    return found


def _run(argv: list[str], what: str, cwd: Path | None = None) -> None:
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        errors = [x for x in (r.stderr or r.stdout).splitlines() if "error" in x.lower()] or \
            (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise BoardError(f"{what} failed (exit {r.returncode}): {' | '.join(errors[:3])[:600]}")


def copy_python(site: Path, dest: Path) -> None:
    """Copy the Python files of the installed package at ``site`` to ``dest`` (not its web runtime, bundled
    third-party trees, C++ sources or Cython: a board runs none of them)."""
    for path in sorted(site.rglob("*.py")):
        rel = path.relative_to(site)
        if rel.parts[0] in ("web", "3rdparty", "src", "cython") or "__pycache__" in rel.parts:
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest / rel)


def python_of(sysroot: Path) -> str:
    """The Python version whose headers ``sysroot`` holds (``usr/include/python3.X/patchlevel.h``)."""
    for patch in sorted(sysroot.glob("usr/include/python3.*/patchlevel.h")):
        text = patch.read_text(errors="replace")
        major = re.search(r"#define\s+PY_MAJOR_VERSION\s+(\d+)", text)
        minor = re.search(r"#define\s+PY_MINOR_VERSION\s+(\d+)", text)
        if major and minor:
            return f"{major.group(1)}.{minor.group(1)}"
    raise BoardError(f"no Python headers under {sysroot}/usr/include (python3.X/Python.h); copy the board's "
                     "/usr/include/python3.X and /usr/include/<triple>/python3.X there")


def build(target: Target, *, sysroot: Path | None = None, jobs: int = 2, say: Say = print,
          progress: Progress | None = None) -> Path:
    """Build the bundle of ``target`` unless it is cached; its folder."""
    python = python_of(sysroot) if sysroot else target.python
    folder = bundle_dir(target, python)
    if (folder / "bundle.json").is_file():
        return folder
    cxx = _tool(f"{target.triple}-g++", f"Debian's g++-{target.triple}")
    cmake = _tool("cmake", "cmake >= 3.26 (pip install 'edgetune[runtime]')")
    if util.find_spec("Cython") is None:
        raise BoardError("cython is needed to build the runtime: pip install 'edgetune[runtime]'")
    with build_lock(folder, say):
        if (folder / "bundle.json").is_file():
            return folder
        partial = folder.with_name(folder.name + ".partial")
        remove_partial(partial)
        work = partial / "build"
        work.mkdir(parents=True)
        seconds = _build(target, python, sysroot, cxx, cmake, work, partial / "bundle", jobs, say, progress)
        _seal(partial / "bundle", target, python, seconds, say)
        shutil.rmtree(folder, ignore_errors=True)
        (partial / "bundle").rename(folder)
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def _build(target: Target, python: str, sysroot: Path | None, cxx: str, cmake: str, work: Path, out: Path,
           jobs: int, say: Say, progress: Progress | None) -> dict[str, float]:
    ffi_site, tvm_site = package_site("tvm_ffi"), package_site("tvm")
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    if sysroot is None:
        say(f"[1/6] unpacking Debian {target.suite}'s {target.debian_arch} Python {python} headers (mmdebstrap) ...")
        sysroot = work / "sysroot"
        _run([_tool("mmdebstrap", "Debian's mmdebstrap"), "--variant=extract", f"--arch={target.debian_arch}",
              f"--include=libpython{python}-dev", target.suite, str(sysroot), MIRROR], "mmdebstrap of the headers")
    else:
        say(f"[1/6] using the Python {python} headers under {sysroot}")
    seconds["headers"] = time.monotonic() - t0

    t0 = time.monotonic()
    say(f"[2/6] cross-building libtvm_ffi.so for {target.triple} with CMake (about a minute on 2 cores) ...")
    src = work / "tvm_ffi"
    src.mkdir()
    for part in ("CMakeLists.txt", "src", "include", "3rdparty"):
        (shutil.copytree if (ffi_site / part).is_dir() else shutil.copy)(ffi_site / part, src / part)
    shutil.copytree(ffi_site / "share/cmake/tvm_ffi/Utils", src / "cmake/Utils")
    toolchain = work / "toolchain.cmake"
    toolchain.write_text(f"set(CMAKE_SYSTEM_NAME Linux)\nset(CMAKE_SYSTEM_PROCESSOR {target.processor})\n"
                         f"set(CMAKE_C_COMPILER {target.triple}-gcc)\nset(CMAKE_CXX_COMPILER {cxx})\n")
    ffi_build = work / "tvm_ffi-build"
    _run([cmake, "-S", str(src), "-B", str(ffi_build), f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
          "-DCMAKE_BUILD_TYPE=Release", "-DTVM_FFI_USE_LIBBACKTRACE=OFF", "-DTVM_FFI_BACKTRACE_ON_SEGFAULT=OFF"],
         "cmake configure of tvm-ffi")
    _run([cmake, "--build", str(ffi_build), "-j", str(jobs), "--target", "tvm_ffi_shared", "tvm_ffi_testing"],
         "cmake build of libtvm_ffi.so")
    ffi_lib = ffi_build / "lib"
    seconds["tvm_ffi"] = time.monotonic() - t0

    t0 = time.monotonic()
    say(f"[3/6] tvm-ffi's Python extension for Python {python} (Cython, then {target.triple}-g++) ...")
    cy = work / "cython"
    shutil.copytree(ffi_site / "cython", cy)
    header = cy / "tvm_ffi_python_object.h"
    text = header.read_text()
    if target.elf_class == 1:
        if PY_HEADER_PATCH[0] not in text:
            raise BoardError(f"tvm-ffi {recipe(target)['tvm_ffi']}'s Python object header changed: the 32-bit "
                             "layout fix in toolkit/rpc/runtime_build.py needs updating for it")
        header.write_text(text.replace(*PY_HEADER_PATCH))
    _run([sys.executable, "-m", "cython", "--cplus", str(cy / "core.pyx"), "-o", str(cy / "core.cpp"),
          "--module-name", "tvm_ffi.core"], "cython")
    soabi = f"cpython-{python.replace('.', '')}-{target.triple}"
    ffi_inc = [f"-I{ffi_site / 'include'}", f"-I{ffi_site / '3rdparty/dlpack/include'}"]
    core = work / f"core.{soabi}.so"
    _run([cxx, *CXXFLAGS, "-shared", f"-I{sysroot}/usr/include/python{python}", f"-I{sysroot}/usr/include",
          f"-I{cy}", *ffi_inc, str(cy / "core.cpp"), "-o", str(core), f"-L{ffi_lib}", "-ltvm_ffi",
          "-ltvm_ffi_testing", "-Wl,-rpath,$ORIGIN/lib"], "compiling tvm-ffi's extension")
    seconds["extension"] = time.monotonic() - t0

    t0 = time.monotonic()
    say(f"[4/6] cross-building libtvm_runtime.so: {len(RUNTIME_SOURCES)} files of TVM's src/runtime ...")
    tree = work / "tvm/src"
    shutil.copytree(tvm_site / "src/runtime", tree / "runtime")
    shutil.copytree(SUPPORT_DIR / "src/support", tree / "support")
    includes = [f"-I{tvm_site / 'include'}", f"-I{SUPPORT_DIR / 'include'}", *ffi_inc]
    objs = work / "obj"
    objs.mkdir()

    def compile_one(name: str) -> Path:
        obj = objs / (name.replace("/", "_") + ".o")
        _run([cxx, *CXXFLAGS, *includes, "-c", str(tree / "runtime" / f"{name}.cc"), "-o", str(obj)],
             f"compiling src/runtime/{name}.cc")
        return obj

    built: list[Path] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for obj in pool.map(compile_one, RUNTIME_SOURCES):
            built.append(obj)
            if progress:
                progress(len(built), len(RUNTIME_SOURCES))
    runtime = work / "libtvm_runtime.so"
    _run([cxx, "-shared", "-o", str(runtime), *map(str, built), f"-L{ffi_lib}", "-ltvm_ffi", "-lpthread", "-ldl",
          "-Wl,--no-undefined", "-Wl,-rpath,$ORIGIN:$ORIGIN/../../tvm_ffi/lib"], "linking libtvm_runtime.so")
    seconds["runtime"] = time.monotonic() - t0

    say("[5/6] assembling the Python packages ...")
    py = out / "python"
    for package, site in (("tvm_ffi", ffi_site), ("tvm", tvm_site)):
        copy_python(site, py / package)
    for lib, dest in ((ffi_lib / "libtvm_ffi.so", "tvm_ffi/lib"), (ffi_lib / "libtvm_ffi_testing.so", "tvm_ffi/lib"),
                      (core, "tvm_ffi"), (runtime, "tvm/lib")):
        (py / dest).mkdir(parents=True, exist_ok=True)
        shutil.copy(lib, py / dest / lib.name)
    extension = util.find_spec("typing_extensions")
    if extension is None or extension.origin is None:
        raise BoardError("typing_extensions is not installed here; install edgetune's dependencies")
    shutil.copy(extension.origin, py / "typing_extensions.py")
    return seconds


def _seal(out: Path, target: Target, python: str, seconds: dict[str, float], say: Say) -> None:
    """Write ``bundle.json`` and ``runtime.tar.gz`` (reproducible: fixed times, sorted names)."""
    say("[6/6] hashing every file; writing bundle.json and runtime.tar.gz ...")
    paths = sorted(p for p in out.rglob("*") if p.is_file())
    files = {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for rel in files:
            data = (out / rel).read_bytes()
            info = tarfile.TarInfo(rel)
            info.size, info.mtime, info.mode = len(data), 0, 0o755 if rel.endswith(".so") else 0o644
            tar.addfile(info, io.BytesIO(data))
    (out / "runtime.tar.gz").write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    info = {**recipe(target, python), "soabi": f"cpython-{python.replace('.', '')}-{target.triple}",
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "bytes": sum((out / rel).stat().st_size for rel in files),
            "archive_sha256": hashlib.sha256((out / "runtime.tar.gz").read_bytes()).hexdigest(), "files": files}
    (out / "bundle.json").write_text(json.dumps(info, indent=1) + "\n")
