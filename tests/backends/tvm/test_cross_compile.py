"""CPU builds for ARM boards are cross-linked on this machine into libraries of the board's ISA."""

import dataclasses
import shutil

import pytest

from toolkit.boards import load_profile
from toolkit.backends.tvm.cpu import CPUConv2dTemplate
from toolkit.workloads import parse_workload

WL = parse_workload("conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1")
EM_ARM, EM_AARCH64 = 40, 183

ARMV7 = dataclasses.replace(
    load_profile("rpi4"), name="rpi3-armv7", arch="armv7l",
    target_spec={"kind": "llvm", "mtriple": "armv7l-linux-gnueabihf", "mattr": ["+neon"], "mcpu": "cortex-a53",
            "mfloat-abi": "hard"},  # gnueabihf: without it ld refuses to link (VFP register arguments)
    cross_compiler="arm-linux-gnueabihf-g++")


def _elf(payload: bytes) -> tuple[int, int]:
    """(EI_CLASS, e_machine) of an ELF image."""
    assert payload[:4] == b"\x7fELF"
    return payload[4], int.from_bytes(payload[18:20], "little")


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None, reason="no aarch64 cross compiler")
@pytest.mark.parametrize("board", ["rpi4", "rpi5"])
def test_aarch64_build_is_an_aarch64_shared_library(board):
    t = CPUConv2dTemplate(WL, load_profile(board))
    art = t.build(t.space().get(123))
    assert _elf(art.payload) == (2, EM_AARCH64)


@pytest.mark.skipif(shutil.which("arm-linux-gnueabihf-g++") is None, reason="no armv7 cross compiler")
def test_armv7_build_is_a_32bit_arm_shared_library():
    t = CPUConv2dTemplate(WL, ARMV7)
    art = t.build(t.space().get(321))
    assert _elf(art.payload) == (1, EM_ARM)


def test_local_build_is_for_this_machine():
    t = CPUConv2dTemplate(WL, load_profile("local"))
    assert _elf(t.build(t.space().get(7)).payload) == (2, 62)   # EM_X86_64
