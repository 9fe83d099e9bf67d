"""TVM runtime bundles for boards PyPI has no wheel for (32-bit ARM: the Pynq-Z1/Z2).

A bundle is the Python side of ``apache-tvm`` and ``apache-tvm-ffi`` (their pure-Python packages, copied from
this machine's wheels) with every native library cross-built here for the board: ``libtvm_ffi.so`` and tvm-ffi's
Cython extension from the C++ tree the tvm-ffi wheel ships, and ``libtvm_runtime.so`` (core, RPC, Relax VM)
from the ``src/runtime`` the apache-tvm wheel ships. :mod:`toolkit.rpc.runtime_build` builds it;
``board provision`` uploads it (the board needs no compiler, and no route to the internet); numpy comes from
the board's image. A bundle lives in ``$EDGETUNE_RUNTIME_CACHE`` (default ``~/.cache/edgetune/runtime``), in
a folder named by a hash of what it is built from, with ``bundle.json`` (target, Python, versions, the
sha256 of every file) and ``runtime.tar.gz`` (what is uploaded).

>>> TARGETS["armv7"].triple
'arm-linux-gnueabihf'
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from toolkit.errors import BoardError

SUPPORT_DIR = Path(__file__).resolve().parent / "runtime_support"
"""The C++ headers TVM's runtime sources include and its wheel leaves out (written for edgetune)."""
EM_ARM, EM_X86_64, EM_AARCH64 = 40, 62, 183
ELF_MACHINES = {EM_ARM: "32-bit ARM", EM_X86_64: "x86_64", EM_AARCH64: "aarch64", 3: "x86"}


@dataclass(frozen=True)
class Target:
    """A board architecture a bundle is cross-built for."""

    name: str
    triple: str
    debian_arch: str
    processor: str
    elf_machine: int
    elf_class: int
    """1: 32-bit, 2: 64-bit."""
    python: str = "3.11"
    """The Python it is built for by default: Debian bookworm's (the emulated Pynq's)."""
    suite: str = "bookworm"


TARGETS = {"armv7": Target("armv7", "arm-linux-gnueabihf", "armhf", "armv7l", EM_ARM, 1)}
BUILD_COMMAND = "edgetune runtime build --arch {arch}"


def cache_root() -> Path:
    """``$EDGETUNE_RUNTIME_CACHE``, else ``$XDG_CACHE_HOME/edgetune/runtime`` (``~/.cache``)."""
    if os.environ.get("EDGETUNE_RUNTIME_CACHE"):
        return Path(os.environ["EDGETUNE_RUNTIME_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "edgetune" / "runtime"


def target_of(arch: str) -> Target:
    """The target named ``arch`` or one line naming those there are."""
    try:
        return TARGETS[arch]
    except KeyError:
        raise BoardError(f"no runtime bundle for architecture {arch!r}; bundles are built for: "
                         f"{', '.join(TARGETS)}") from None


def recipe(target: Target, python: str | None = None) -> dict:
    """Everything a bundle is built from: its hash names the bundle's folder."""
    support = hashlib.sha256()
    for path in sorted(SUPPORT_DIR.rglob("*.h")):
        support.update(path.relative_to(SUPPORT_DIR).as_posix().encode() + b"\0" + path.read_bytes())
    build = Path(__file__).with_name("runtime_build.py")
    return {"target": asdict(target), "python": python or target.python, "tvm": metadata.version("apache-tvm"),
            "tvm_ffi": metadata.version("apache-tvm-ffi"), "support": support.hexdigest()[:16],
            "builder": hashlib.sha256(build.read_bytes()).hexdigest()[:16]}


def bundle_dir(target: Target, python: str | None = None) -> Path:
    """Where the bundle of ``target`` for ``python`` lives (it may not be built yet)."""
    r = recipe(target, python)
    key = hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()[:12]
    return cache_root() / f"{target.name}-cp{r['python'].replace('.', '')}-{key}"


def elf_kind(path: Path) -> tuple[int, int] | None:
    """``(class, machine)`` of an ELF file (class 1: 32-bit, 2: 64-bit), ``None`` for anything else."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "little" if head[5] == 1 else "big"
    return head[4], int.from_bytes(head[18:20], order)


def verify(folder: Path, target: Target) -> dict:
    """``bundle.json`` of the bundle in ``folder`` once every file it lists is there with its sha256 and every
    library is an ELF file for ``target``; otherwise one line saying what is wrong and how to rebuild."""
    rebuild = f"rebuild it with `{BUILD_COMMAND.format(arch=target.name)}`"
    try:
        info = json.loads((folder / "bundle.json").read_text())
        files = dict(info["files"])
    except (OSError, ValueError, KeyError, TypeError):
        raise BoardError(f"{folder} is no runtime bundle (no readable bundle.json); {rebuild}") from None
    for rel, digest in files.items():
        path = folder / rel
        if ".." in Path(rel).parts or path.is_symlink() or not path.is_file():
            raise BoardError(f"runtime bundle {folder.name}: {rel} is missing or not a plain file; {rebuild}")
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise BoardError(f"runtime bundle {folder.name}: {rel} differs from its recorded sha256; {rebuild}")
        if rel.endswith(".so") or ".so." in rel:
            kind = elf_kind(path)
            if kind != (target.elf_class, target.elf_machine):
                what = "no ELF file" if kind is None else (f"{'32' if kind[0] == 1 else '64'}-bit "
                                                           f"{ELF_MACHINES.get(kind[1], f'machine {kind[1]}')}")
                raise BoardError(f"runtime bundle {folder.name}: {Path(rel).name} is {what}, not "
                                 f"{ELF_MACHINES[target.elf_machine]} for {target.name}; {rebuild}")
    archive = folder / "runtime.tar.gz"
    if not archive.is_file() or hashlib.sha256(archive.read_bytes()).hexdigest() != info.get("archive_sha256"):
        raise BoardError(f"runtime bundle {folder.name}: runtime.tar.gz is missing or differs from its recorded "
                         f"sha256; {rebuild}")
    return info


def require(arch: str, python: str | None = None) -> tuple[Path, dict]:
    """The verified bundle for ``arch`` (and ``python``), or one line with the command that builds it."""
    target = target_of(arch)
    folder = bundle_dir(target, python)
    if not (folder / "bundle.json").is_file():
        raise BoardError(f"the {arch} TVM runtime is not built yet on this machine (PyPI has no {arch} wheel): "
                         f"build it once with `{BUILD_COMMAND.format(arch=arch)}` (a few minutes), then provision "
                         "again")
    return folder, verify(folder, target)
