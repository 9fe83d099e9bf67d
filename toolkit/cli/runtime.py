"""``edgetune runtime``: TVM runtime bundles cross-built here for boards PyPI has no wheel for (armv7)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit import console
from toolkit.cli.app import app
from toolkit.cli.options import JsonOpt

runtime_app = typer.Typer(help="Build and inspect the TVM runtime bundles provisioning uploads to armv7 boards.",
                          no_args_is_help=True)
app.add_typer(runtime_app, name="runtime", rich_help_panel="Boards")

ArchOpt = Annotated[str, typer.Option("--arch", help="Board architecture (armv7: Pynq-Z1/Z2).")]


@runtime_app.command("build")
def build(
    arch: ArchOpt = "armv7",
    sysroot: Annotated[Optional[Path], typer.Option(
        help="A folder with the board's usr/include/python3.X (and usr/include/<triple>/python3.X), for a board "
             "whose Python is not Debian bookworm's 3.11 (a PYNQ v3 image has 3.10).")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Compilers run at once.")] = 2,
    json: JsonOpt = False,
) -> None:
    """Cross-build TVM's runtime, tvm-ffi and its Python extension for ARCH (once; a few minutes)."""
    import time

    from toolkit.rpc import runtime_build
    from toolkit.rpc.runtime_bundle import bundle_dir, target_of, verify

    target = target_of(arch)
    if sysroot is not None and not sysroot.is_dir():
        raise typer.BadParameter(f"{sysroot} is not a folder", param_hint="--sysroot")
    python = runtime_build.python_of(sysroot) if sysroot else target.python
    cached = (bundle_dir(target, python) / "bundle.json").is_file()
    start = time.monotonic()
    with console.progress() as bar:
        task = bar.add_task(f"runtime {arch}", total=len(runtime_build.RUNTIME_SOURCES), status="")
        folder = runtime_build.build(target, sysroot=sysroot, jobs=jobs, say=console.say,
                                     progress=lambda done, total: bar.update(task, completed=done))
    info = verify(folder, target)
    if json:
        console.print_json({"path": str(folder), "cached": cached, **{k: v for k, v in info.items() if k != "files"}})
        return
    verb = "already built" if cached else f"built in {time.monotonic() - start:.0f} s"
    console.info(f"{arch} runtime for Python {info['python']} {verb}: {folder} "
                 f"({info['bytes'] / 2**20:.1f} MiB, tvm {info['tvm']}); `edgetune board provision` uploads it")


@runtime_app.command("info")
def info(arch: ArchOpt = "armv7", python: Annotated[Optional[str], typer.Option(
        help="The board's Python version (default: the target's, 3.11).")] = None, json: JsonOpt = False) -> None:
    """Where ARCH's bundle is, whether it is built and verified, and what it holds."""
    from toolkit.rpc.runtime_bundle import require

    folder, data = require(arch, python)
    if json:
        console.print_json({"path": str(folder), **{k: v for k, v in data.items() if k != "files"}})
        return
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in data["seconds"].items())
    console.info(f"{folder}: {arch} for Python {data['python']} ({data['soabi']}), tvm {data['tvm']}, tvm-ffi "
                 f"{data['tvm_ffi']}, {len(data['files'])} files, {data['bytes'] / 2**20:.1f} MiB; built in "
                 f"{sum(data['seconds'].values()):.0f} s ({steps})")
