"""Emulated board images: what this machine needs to run them (root, ``binfmt_misc``, qemu-user, Debian's tools)
and building an image once per machine from a :class:`Recipe` (``mmdebstrap`` of a Debian arm64 or armhf
userland, plus PyPI's aarch64 wheels where it has TVM), cached in a folder named by the recipe's hash.
:mod:`toolkit.testing.emulated_board` runs boards from them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from toolkit.build_lock import build_lock, remove_partial
from toolkit.errors import EdgetuneError

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
BINFMT_CONF = "/usr/lib/binfmt.d/qemu-{qemu}.conf"
"""Debian's ``qemu-user-static`` registration line of an architecture (flag ``F``: works in a chroot)."""
SITE = "usr/local/lib/python3.11/dist-packages"


class EmulationUnavailable(EdgetuneError):
    """This machine cannot run emulated boards; the message says what is missing."""


@dataclass(frozen=True)
class Recipe:
    """What an emulated board image holds; its hash names the cache folder."""

    suite: str = "bookworm"
    arch: str = "arm64"
    mirror: str = "http://deb.debian.org/debian"
    packages: tuple[str, ...] = ("openssh-server", "python3", "python3-venv", "ca-certificates", "procps",
                                 "iproute2", "tini")
    wheels: tuple[str, ...] = ("apache-tvm==0.27.0.post1", "apache-tvm-ffi==0.1.14.post1", "numpy", "tornado",
                               "psutil", "cloudpickle")
    wheel_platforms: tuple[str, ...] = ("manylinux_2_28_aarch64", "manylinux2014_aarch64")
    python: str = "3.11"
    qemu: str = "aarch64"
    machine: str = "aarch64"

    @property
    def key(self) -> str:
        """Twelve hex digits of the recipe's SHA-256."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


ARMV7 = Recipe(arch="armhf", packages=Recipe.packages + ("python3-numpy", "python3-psutil", "python3-cloudpickle"),
               wheels=(), wheel_platforms=(), qemu="arm", machine="armv7l")
"""The Pynq's userland: Debian armhf, numpy from Debian (a PYNQ image's numpy comes with the image too)."""
RECIPES = {"aarch64": Recipe(), "armv7": ARMV7}


def cache_root() -> Path:
    """``$EDGETUNE_EMULATED_CACHE``, else ``$XDG_CACHE_HOME/edgetune/emulated`` (``~/.cache``)."""
    if os.environ.get("EDGETUNE_EMULATED_CACHE"):
        return Path(os.environ["EDGETUNE_EMULATED_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "edgetune" / "emulated"


def image_dir(recipe: Recipe = Recipe()) -> Path:
    """Where the image of ``recipe`` lives (it may not be built yet)."""
    return cache_root() / f"{recipe.suite}-{recipe.arch}-{recipe.key}"


def kernel_has_binfmt() -> bool:
    """Does this kernel support ``binfmt_misc`` at all (registered or not)."""
    try:
        return "binfmt_misc" in Path("/proc/filesystems").read_text() or BINFMT_DIR.joinpath("status").exists()
    except OSError:
        return False


def skip_reason() -> str | None:
    """Why emulated boards are skipped here, or ``None``: only ``EDGETUNE_SKIP_EMULATED=1`` or a kernel
    without ``binfmt_misc`` skip them; anything else missing is an error to fix."""
    if os.environ.get("EDGETUNE_SKIP_EMULATED") == "1":
        return "EDGETUNE_SKIP_EMULATED=1"
    if not kernel_has_binfmt():
        return "this kernel has no binfmt_misc (emulated aarch64 boards need it)"
    return None


def ensure_binfmt(qemu: str = "aarch64") -> None:
    """Mount ``binfmt_misc`` and register Debian's ``qemu-<qemu>`` handler where they are not yet."""
    if os.geteuid() != 0:
        raise EmulationUnavailable("emulated boards need root (network namespaces, mounts, chroot)")
    if not kernel_has_binfmt():
        raise EmulationUnavailable("this kernel has no binfmt_misc: emulated aarch64 boards cannot run here")
    if not BINFMT_DIR.joinpath("register").exists():
        run_tool(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)], "mount binfmt_misc")
    entry = BINFMT_DIR / f"qemu-{qemu}"
    if entry.exists():
        if entry.read_text().splitlines()[0] != "enabled":
            entry.write_text("1")
        return
    conf = Path(BINFMT_CONF.format(qemu=qemu))
    if not conf.is_file():
        raise EmulationUnavailable("qemu-user-static is not installed (apt-get install qemu-user-static)")
    line = next(x for x in conf.read_text().splitlines() if x.startswith(":"))
    BINFMT_DIR.joinpath("register").write_text(line)


def require_tools() -> None:
    """The Debian tools the images and boards need, or one line naming the packages."""
    missing = [pkg for tool, pkg in (("mmdebstrap", "mmdebstrap"), ("ip", "iproute2"), ("unshare", "util-linux"),
                                     ("ssh-keygen", "openssh-client"), ("qemu-aarch64-static", "qemu-user-static"),
                                     ("qemu-arm-static", "qemu-user-static"))
               if shutil.which(tool) is None]
    if missing:
        raise EmulationUnavailable(f"missing Debian packages for emulated boards: apt-get install {' '.join(missing)}")


def run_tool(argv: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    """Run a host tool; its failure is one line naming ``what`` and the end of its output."""
    r = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if r.returncode != 0:
        tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:])
        raise EmulationUnavailable(f"{what} failed (exit {r.returncode}): {tail}")
    return r


# -- the image ---------------------------------------------------------------------------------


def build_image(recipe: Recipe = Recipe(), say: Callable[[str], None] = print) -> Path:
    """Build the image of ``recipe`` unless it is cached; its folder (``rootfs/`` and ``image.json``)."""
    target = image_dir(recipe)
    if (target / "image.json").is_file():
        return target
    require_tools()
    ensure_binfmt(recipe.qemu)
    with build_lock(target, say):
        if (target / "image.json").is_file():
            return target
        return _build(recipe, target, say)


def _build(recipe: Recipe, target: Path, say: Callable[[str], None]) -> Path:
    start = time.monotonic()
    partial = target.with_name(target.name + ".partial")
    remove_partial(partial)
    partial.mkdir()
    rootfs = partial / "rootfs"
    say(f"building the {recipe.suite} {recipe.arch} userland with mmdebstrap (about 2 minutes) ...")
    run_tool(["mmdebstrap", f"--arch={recipe.arch}", "--variant=minbase", "--include=" + ",".join(recipe.packages),
          recipe.suite, str(rootfs), recipe.mirror], "mmdebstrap", timeout=3600)
    debian_s = time.monotonic() - start
    if recipe.wheels:
        say(f"installing the {recipe.machine} wheels from PyPI ...")
        pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--only-binary=:all:",
               "--python-version", recipe.python, "--implementation", "cp", "--target", str(rootfs / SITE)]
        for plat in recipe.wheel_platforms:
            pip += ["--platform", plat]
        run_tool(pip + list(recipe.wheels), f"pip install of the {recipe.machine} wheels", timeout=3600)
    say("checking the board's python under emulation ...")
    tvm = "tvm" if recipe.wheels else "platform as tvm"   # an armv7 image gets its TVM at provisioning
    probe = run_tool(["chroot", str(rootfs), "/usr/bin/python3", "-c",
                  f"import platform, numpy, {tvm}; print(platform.machine(), getattr(tvm, '__version__', '-'))"],
                 "the image's python", timeout=600).stdout.split()
    if probe[:1] != [recipe.machine]:
        raise EmulationUnavailable(f"the image's python runs as {probe[:1]}, not {recipe.machine}")
    size = int(run_tool(["du", "-sb", str(rootfs)], "du").stdout.split()[0])
    info = {"recipe": asdict(recipe), "key": recipe.key, "tvm": probe[1], "seconds": round(time.monotonic() - start, 1),
            "debian_seconds": round(debian_s, 1), "bytes": size}
    (partial / "image.json").write_text(json.dumps(info, indent=1) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    say(f"image {target.name}: {size / 2**20:.0f} MiB, built in {info['seconds']:.0f} s")
    return target


def image_info(recipe: Recipe = Recipe()) -> dict | None:
    """``image.json`` of the built image, or ``None``."""
    path = image_dir(recipe) / "image.json"
    return json.loads(path.read_text()) if path.is_file() else None
