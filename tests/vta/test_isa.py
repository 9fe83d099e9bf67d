"""VTA ISA encoding: hand-assembled words (vta.md 2.2), overflow errors, round trips for every preset."""

from __future__ import annotations

import random

import pytest

from toolkit.errors import ConfigError
from toolkit.vta.config import PRESETS, VTAConfig, get_preset
from toolkit.vta.errors import EncodingError, ProgramFormatError, VTAError
from toolkit.vta.layout import layout_table
from toolkit.vta.isa import (
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    MemId,
    MemInsn,
    Opcode,
    Uop,
    decode_insn,
    decode_uop,
    encode_insn,
    encode_insns,
    encode_uop,
    queue_of,
)

HW = get_preset("pynq")


def _word(*fields: tuple[int, int]) -> bytes:
    """Assemble (value, lsb) pairs into 16 little-endian bytes."""
    w = 0
    for value, lsb in fields:
        w |= value << lsb
    return w.to_bytes(16, "little")


def test_load_inp_word_matches_layout_table():
    # LOAD INP, pop_next; memory_type [9:7], sram_base [25:10], dram_base [57:26], y_size [79:64],
    # x_size [95:80], x_stride [111:96], y_pad_0 [115:112], y_pad_1 [119:116], x_pad_0 [123:120], x_pad_1 [127:124]
    raw = _word((0, 0), (1, 4), (2, 7), (0x244, 10), (0x100, 26), (9, 64), (56, 80), (56, 96), (1, 112),
                (0, 116), (1, 120), (1, 124))
    insn = decode_insn(raw, HW)
    assert insn == MemInsn(Opcode.LOAD, MemId.INP, 0x244, 0x100, 9, 56, 56, 1, 0, 1, 1, pop_next=True)
    assert encode_insn(insn, HW) == raw
    assert queue_of(insn) == "load"


def test_gemm_word_matches_layout_table():
    # opcode [2:0], pop_prev [3], push_next [6], reset [7], uop_bgn [20:8], uop_end [34:21], iter_out [48:35],
    # iter_in [62:49], dst_out [74:64], dst_in [85:75], src_out [96:86], src_in [107:97], wgt_out [117:108],
    # wgt_in [127:118]
    raw = _word((2, 0), (1, 3), (1, 6), (16, 8), (64, 21), (56, 35), (3, 49), (1, 64), (448, 75), (1, 86),
                (1, 97), (9, 108), (1, 118))
    insn = decode_insn(raw, HW)
    assert insn == GemmInsn(False, 16, 64, 56, 3, 1, 448, 1, 1, 9, 1, pop_prev=True, push_next=True)
    assert encode_insn(insn, HW) == raw
    assert queue_of(insn) == "compute"


def test_alu_word_with_negative_immediate():
    # alu_opcode [110:108], use_imm [111], imm [127:112] (int16, two's complement)
    raw = _word((4, 0), (1, 5), (112, 8), (113, 21), (1, 35), (896, 49), (1, 75), (1, 97), (3, 108), (1, 111),
                (0xFFF8, 112))
    insn = decode_insn(raw, HW)
    assert insn == AluInsn(False, 112, 113, 1, 896, 0, 1, 0, 1, AluOp.SHR, True, -8, push_prev=True)
    assert encode_insn(insn, HW) == raw


def test_finish_and_store_words():
    assert encode_insn(FinishInsn(), HW) == bytes([3]) + bytes(15)
    raw = _word((1, 0), (1, 3), (1, 5), (4, 7), (0x380, 10), (0x5380, 26), (2, 64), (448, 80), (3136, 96))
    insn = decode_insn(raw, HW)
    assert insn == MemInsn(Opcode.STORE, MemId.OUT, 0x380, 0x5380, 2, 448, 3136, pop_prev=True, push_prev=True)
    assert queue_of(insn) == "store"
    assert queue_of(MemInsn(Opcode.LOAD, MemId.UOP, 0, 0, 1, 8, 8)) == "compute"
    assert queue_of(MemInsn(Opcode.LOAD, MemId.ACC, 0, 0, 1, 8, 8)) == "compute"


def test_uop_word_matches_layout_table():
    # dst [10:0], src [21:11], wgt [31:22]
    word = 56 | (58 << 11) | (9 << 22)
    assert decode_uop(word, HW) == Uop(56, 58, 9)
    assert encode_uop(Uop(56, 58, 9), HW) == word


_GEMM = dict(reset=False, uop_bgn=0, uop_end=1, iter_out=1, iter_in=1, dst_factor_out=0, dst_factor_in=0,
             src_factor_out=0, src_factor_in=0, wgt_factor_out=0, wgt_factor_in=0)
_MEM = dict(opcode=Opcode.LOAD, mem=MemId.INP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)


@pytest.mark.parametrize("field,value,width", [
    ("uop_bgn", 8192, 13), ("uop_end", 16384, 14), ("iter_out", 16384, 14), ("iter_in", -1, 14),
    ("dst_factor_out", 2048, 11), ("src_factor_in", 2048, 11), ("wgt_factor_in", 1024, 10),
])
def test_gemm_field_overflow_raises(field, value, width):
    with pytest.raises(EncodingError) as exc:
        encode_insn(GemmInsn(**{**_GEMM, field: value}), HW)
    assert (exc.value.field, exc.value.value, exc.value.width) == (field, value, width)
    assert field in str(exc.value)


@pytest.mark.parametrize("field,value,width", [
    ("sram_base", 65536, 16), ("dram_base", 1 << 32, 32), ("y_size", 65536, 16), ("x_size", 70000, 16),
    ("x_stride", 65536, 16), ("y_pad0", 16, 4), ("x_pad1", 16, 4),
])
def test_mem_field_overflow_raises(field, value, width):
    with pytest.raises(EncodingError) as exc:
        encode_insn(MemInsn(**{**_MEM, field: value}), HW)
    assert exc.value.width == width and isinstance(exc.value, VTAError)


@pytest.mark.parametrize("imm", [32768, -32769])
def test_alu_immediate_overflow_raises(imm):
    insn = AluInsn(False, 0, 1, 1, 1, 0, 0, 0, 0, AluOp.ADD, True, imm)
    with pytest.raises(EncodingError, match="imm"):
        encode_insn(insn, HW)


@pytest.mark.parametrize("uop", [Uop(2048, 0, 0), Uop(0, 2048, 0), Uop(0, 0, 1024)])
def test_uop_overflow_raises(uop):
    with pytest.raises(EncodingError, match="uop"):
        encode_uop(uop, HW)


def _random_insns(hw: VTAConfig, rng: random.Random, n: int):
    w = hw.field_widths
    top = lambda bits: rng.choice([0, 1, (1 << bits) - 1, rng.randrange(1 << bits)])  # noqa: E731
    flags = lambda: {k: rng.random() < 0.5 for k in ("pop_prev", "pop_next", "push_prev", "push_next")}  # noqa: E731
    for _ in range(n):
        yield MemInsn(rng.choice([Opcode.LOAD, Opcode.STORE]), rng.choice(list(MemId)), top(16), top(32), top(16),
                      top(16), top(16), top(4), top(4), top(4), top(4), **flags())
        loop = [top(w["uop_bgn"]), top(w["uop_end"]), top(14), top(14), top(w["dst_factor"]), top(w["dst_factor"]),
                top(w["src_factor"]), top(w["src_factor"])]
        yield GemmInsn(rng.random() < 0.5, *loop, top(w["wgt_factor"]), top(w["wgt_factor"]), **flags())
        yield AluInsn(rng.random() < 0.5, *loop, rng.choice(list(AluOp)), rng.random() < 0.5,
                      rng.randrange(-32768, 32768), **flags())
        yield FinishInsn(**flags())


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_round_trips(preset):
    hw = get_preset(preset)
    rng = random.Random(preset)
    for insn in _random_insns(hw, rng, 200):
        raw = encode_insn(insn, hw)
        assert len(raw) == hw.insn_bytes
        assert decode_insn(raw, hw) == insn
    w = hw.field_widths
    for _ in range(200):
        u = Uop(rng.randrange(1 << w["uop_dst"]), rng.randrange(1 << w["uop_src"]), rng.randrange(1 << w["uop_wgt"]))
        word = encode_uop(u, hw)
        assert word < 1 << (8 * hw.uop_bytes) and decode_uop(word, hw) == u


def test_zcu102_uses_widened_encoding_that_holds_its_depths():
    hw = get_preset("zcu102")
    assert (hw.insn_bytes, hw.uop_bytes) == (32, 8)
    assert (hw.inp_depth, hw.wgt_depth, hw.acc_depth, hw.uop_depth) == (4096, 2048, 4096, 16384)
    big = GemmInsn(False, 16383, 16384, 16383, 16383, 4095, 4095, 4095, 4095, 2047, 2047)
    assert decode_insn(encode_insn(big, hw), hw) == big
    with pytest.raises(EncodingError):
        encode_insn(big, get_preset("pynq"))
    assert decode_uop(encode_uop(Uop(4095, 4095, 2047), hw), hw) == Uop(4095, 4095, 2047)


def test_config_json_round_trip_and_derived_names():
    for hw in PRESETS.values():
        assert VTAConfig.from_json(hw.to_json()) == hw
    assert get_preset("pynq").model == "pynq_1x16_i8w8a32_15_15_18_17"
    assert get_preset("pynq-4x8").bitstream == "4x8_i8w8a32_15_16_16_18"
    hw = get_preset("pynq")
    assert (hw.inp_elem_bytes, hw.wgt_elem_bytes, hw.acc_elem_bytes, hw.out_elem_bytes) == (16, 256, 64, 16)
    stock = VTAConfig.from_json({"TARGET": "ultra96", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3,
                                 "LOG_ACC_WIDTH": 5, "LOG_BATCH": 0, "LOG_BLOCK": 4, "LOG_UOP_BUFF_SIZE": 15,
                                 "LOG_INP_BUFF_SIZE": 15, "LOG_WGT_BUFF_SIZE": 18, "LOG_ACC_BUFF_SIZE": 17})
    assert stock == get_preset("ultra96")


def test_bad_configs_and_unknown_preset():
    with pytest.raises(ConfigError, match="pynq, ultra96"):
        get_preset("nope")
    with pytest.raises(ConfigError, match="unknown VTA config keys"):
        VTAConfig.from_json({"LOG_BLOK": 4})
    with pytest.raises(ConfigError, match="int8"):
        VTAConfig(log_inp_width=2)


def test_corrupt_words_raise_format_error():
    with pytest.raises(ProgramFormatError, match="opcode"):
        decode_insn(bytes([7]) + bytes(15), HW)
    with pytest.raises(ProgramFormatError, match="memory id"):
        decode_insn(_word((0, 0), (7, 7)), HW)
    with pytest.raises(ProgramFormatError):
        decode_insn(bytes(8), HW)


def test_alu_src_factor_has_the_accumulator_width_and_gemm_the_input_width():
    """hw_spec.h: VTAAluInsn's src_factor fields index the accumulator buffer, VTAGemInsn's the input buffer.
    With LOG_INP_BUFF_SIZE 14 the two widths differ (10 and 11 bits), which no preset shows."""
    hw = VTAConfig.from_json({**get_preset("pynq").to_json(), "LOG_INP_BUFF_SIZE": 14})
    assert (hw.log_inp_depth, hw.log_acc_depth) == (10, 11)
    table = {kind: {name: (lsb, width) for name, lsb, width in fields} for kind, fields in layout_table(hw).items()}
    assert table["alu"]["src_factor_out"][1] == table["alu"]["src_factor_in"][1] == 11
    assert table["gemm"]["src_factor_out"][1] == table["gemm"]["src_factor_in"][1] == 10
    assert list(table["alu"]) == ["opcode", "pop_prev", "pop_next", "push_prev", "push_next", "reset", "uop_bgn",
                                  "uop_end", "iter_out", "iter_in", "dst_factor_out", "dst_factor_in",
                                  "src_factor_out", "src_factor_in", "op", "use_imm", "imm"]   # VTAAluInsn's order
    shr = AluInsn(False, 0, 1, 1, 1, 0, 0, 2047, 2047, AluOp.SHR, True, 8)   # needs all 11 bits
    assert decode_insn(encode_insn(shr, hw), hw) == shr
    with pytest.raises(EncodingError, match="src_factor"):
        encode_insn(GemmInsn(False, 0, 1, 1, 1, 0, 0, 2047, 0, 0, 0), hw)


def test_a_whole_program_encodes_as_its_instructions_one_by_one():
    insns = [MemInsn(**_MEM), GemmInsn(**_GEMM), AluInsn(False, 0, 1, 1, 1, 0, 0, 0, 0, AluOp.ADD, True, -5),
             MemInsn(**{**_MEM, "opcode": Opcode.STORE}), FinishInsn()]
    for hw in PRESETS.values():
        assert encode_insns(insns, hw) == b"".join(encode_insn(i, hw) for i in insns)
    bad = [MemInsn(**_MEM), GemmInsn(**{**_GEMM, "wgt_factor_in": 1024})]
    with pytest.raises(EncodingError) as exc:
        encode_insns(bad, HW)
    assert exc.value.field == "wgt_factor_in"
    with pytest.raises(EncodingError, match="opcode"):
        encode_insns([MemInsn(**{**_MEM, "opcode": Opcode.GEMM})], HW)
