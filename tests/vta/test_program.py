"""VTA program container: binary file round trip, corrupt files, listing, TVM dump import."""

from __future__ import annotations

import re

import numpy as np
import pytest

from toolkit.vta.config import get_preset
from toolkit.vta.errors import ProgramFormatError, VTAError
from toolkit.vta.isa import encode_insn
from toolkit.vta.program import Program, Region, allocate_regions
from vta_programs import DUMPS, load_dump, matrix_multiply_tutorial

HW = get_preset("pynq")


def test_save_load_is_byte_identical(tmp_path):
    prog = load_dump("c2", HW)
    path = prog.save(tmp_path / "c2.vtaprog")
    again = Program.load(path)
    assert again == prog
    assert again.to_bytes() == path.read_bytes()


def test_file_holds_instruction_and_uop_words_as_fetched():
    prog, _, _ = matrix_multiply_tutorial(HW, np.random.default_rng(0))
    data = prog.to_bytes()
    words = b"".join(encode_insn(i, HW) for i in prog.insns)
    assert words in data
    assert prog.uop_words().astype("<u4").tobytes() in data


def test_widened_preset_round_trips():
    hw = get_preset("zcu102")
    prog, _, _ = matrix_multiply_tutorial(hw, np.random.default_rng(0))
    assert Program.from_bytes(prog.to_bytes()) == prog


@pytest.mark.parametrize("cut", [0, 5, 40, -1, -20])
def test_truncated_file_raises(cut):
    data = load_dump("c4", HW).to_bytes()
    with pytest.raises(ProgramFormatError):
        Program.from_bytes(data[:cut])


def test_corrupt_byte_raises():
    data = bytearray(load_dump("c4", HW).to_bytes())
    data[len(data) // 2] ^= 0x40
    with pytest.raises(ProgramFormatError, match="corrupt"):
        Program.from_bytes(bytes(data))
    with pytest.raises(ProgramFormatError, match="magic"):
        Program.from_bytes(b"NOTVTA!!" + bytes(data[8:]))


def test_missing_file_raises(tmp_path):
    with pytest.raises(ProgramFormatError, match="cannot read"):
        Program.load(tmp_path / "absent.vtaprog")


def test_regions_are_aligned_and_validated():
    regions = allocate_regions(HW, [("inp", (3, 16), "int8"), ("out", (5, 16), "int8")], 7)
    assert [r.offset % 256 for r in regions.values()] == [0, 0, 0]
    assert regions["out"].offset == 256 and regions["uop"].nbytes == 28
    with pytest.raises(VTAError, match="multiple of 256"):
        Region("x", 100, 16, (16,), "int8")
    with pytest.raises(VTAError, match="smaller"):
        Region("x", 0, 8, (16,), "int8")


@pytest.mark.parametrize("name", ["c2", "c4", "c5", "c11", "tutorial_c8"])
def test_dump_import_matches_header_counts(name):
    text = (DUMPS / f"{name}.txt").read_text()
    prog = load_dump(name, HW)
    counts = prog.counts()
    header = dict((k.strip(), int(v)) for k, v in re.findall(r"^  (LOAD \w+|STORE \(OUT\)|FINISH)\s+(\d+)$",
                                                                text, re.M))
    assert counts["total"] == int(re.search(r"Instructions: (\d+)", text).group(1))
    assert counts.get("LOAD INP", 0) == header["LOAD INP"]
    assert counts.get("LOAD WGT", 0) == header["LOAD WGT"]
    assert counts.get("STORE", 0) == header["STORE (OUT)"]
    assert counts["FINISH"] == 1


def test_listing_mirrors_tvm_dump():
    prog = load_dump("c2", HW)
    text = prog.listing()
    assert "INSTRUCTION 6: LOAD INP" in text
    assert "\ty: size=9, pad=[1, 0]\n\tx: size=56, stride=56, pad=[1, 1]" in text
    # the running token counts end at zero, like the dump's last block
    assert text.split("INSTRUCTION 269: FINISH")[1].splitlines()[1:3] == [
        "\tl2g_queue = 0, g2l_queue = 0", "\ts2g_queue = 0, g2s_queue = 0"]
