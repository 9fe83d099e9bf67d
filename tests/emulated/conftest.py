"""Emulated aarch64 boards (Debian arm64 under qemu-user, each in its own network namespace).

The image is built once per machine (``make emulated-boards``, cached outside the repository). These
tests are skipped, with the reason, only where the kernel has no ``binfmt_misc`` or where
``EDGETUNE_SKIP_EMULATED=1`` is set; anything else missing (root, qemu-user-static, mmdebstrap, a
failed build) fails them, so a machine that can run them does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.testing import emulated_board as emu


@pytest.fixture(scope="session")
def emulated_image() -> Path:
    """The built image (built here if this machine has none yet: a few minutes)."""
    reason = emu.skip_reason()
    if reason:
        pytest.skip(f"emulated boards skipped: {reason}")
    try:
        return emu.build_image(say=lambda m: print(m, flush=True))
    except emu.EmulationUnavailable as exc:
        pytest.fail(f"this machine has binfmt_misc but cannot run emulated boards: {exc}", pytrace=False)


@pytest.fixture
def board(emulated_image):
    """A running emulated board, stopped (namespace, overlay and every process) after the test."""
    b = emu.start_board(emulated_image)
    yield b
    b.stop()
