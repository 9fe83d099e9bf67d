"""Emulated boards: Debian arm64 (Raspberry Pi 4, ZCU102, Ultra96) and armhf (Pynq-Z1) userlands under qemu-user,
each in its own network and process namespaces.

The images, and the armv7 TVM runtime a Pynq is provisioned with, are built once per machine (``make
emulated-boards``, cached outside the repository). These tests are skipped, with the reason, only where the kernel
has no ``binfmt_misc`` or where ``EDGETUNE_SKIP_EMULATED=1`` is set; anything else missing (root, qemu-user-static,
mmdebstrap, a cross compiler, a failed build) fails them, so a machine that can run them does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.errors import EdgetuneError
from toolkit.rpc import runtime_build
from toolkit.rpc.runtime_bundle import TARGETS
from toolkit.testing import emulated_board as emu

PYNQ_MEMORY_MB = 512
"""A Pynq-Z1's DDR (shared with the FPGA on the real board)."""


def _built(recipe: emu.Recipe) -> Path:
    reason = emu.skip_reason()
    if reason:
        pytest.skip(f"emulated boards skipped: {reason}")
    try:
        return emu.build_image(recipe, say=lambda m: print(m, flush=True))
    except emu.EmulationUnavailable as exc:
        pytest.fail(f"this machine has binfmt_misc but cannot run emulated boards: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def emulated_image() -> Path:
    """The aarch64 image (built here if this machine has none yet: a few minutes)."""
    return _built(emu.RECIPES["aarch64"])


@pytest.fixture(scope="session")
def armv7_image() -> Path:
    """The armhf (Pynq) image."""
    return _built(emu.RECIPES["armv7"])


@pytest.fixture(scope="session")
def armv7_runtime(armv7_image) -> Path:
    """The armv7 TVM runtime bundle provisioning uploads (cross-built here if this machine has none yet)."""
    try:
        return runtime_build.build(TARGETS["armv7"], say=lambda m: print(m, flush=True))
    except EdgetuneError as exc:
        pytest.fail(f"the armv7 runtime cannot be built here: {exc}", pytrace=False)


@pytest.fixture
def board(emulated_image):
    """A running emulated aarch64 board, stopped (namespace, overlay and every process) after the test."""
    b = emu.start_board(emulated_image)
    yield b
    b.stop()


@pytest.fixture
def pynq(armv7_image, armv7_runtime, monkeypatch):
    """A running emulated Pynq-Z1: armhf, 512 MB, 2 CPUs; provisioning finds the runtime bundle built here."""
    monkeypatch.setenv("EDGETUNE_RUNTIME_CACHE", str(armv7_runtime.parent))
    b = emu.start_board(armv7_image, memory_mb=PYNQ_MEMORY_MB, cpus=2)
    yield b
    b.stop()
