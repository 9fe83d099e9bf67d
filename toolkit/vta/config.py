"""VTA hardware configuration: the ``vta_config.json`` keys plus the board facts (clock, bus width).

All sizes follow ``pkg_config.py`` / ``hw_spec_const.h`` (see ``docs/vta.md``).

>>> hw = get_preset("pynq")
>>> (hw.bitstream, hw.inp_depth, hw.wgt_depth, hw.acc_depth, hw.uop_depth)
('1x16_i8w8a32_15_15_18_17', 2048, 1024, 2048, 8192)
>>> (hw.insn_bytes, hw.uop_bytes)
(16, 4)
>>> get_preset("zcu102").insn_bytes  # widened encoding, see docs/vta.md
32
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from toolkit.errors import ConfigError

from toolkit.vta.layout import LOOP_ITER_BITS, layout_words

_JSON_KEYS = {
    "target": "TARGET",
    "hw_ver": "HW_VER",
    "log_inp_width": "LOG_INP_WIDTH",
    "log_wgt_width": "LOG_WGT_WIDTH",
    "log_acc_width": "LOG_ACC_WIDTH",
    "log_batch": "LOG_BATCH",
    "log_block": "LOG_BLOCK",
    "log_uop_buff_size": "LOG_UOP_BUFF_SIZE",
    "log_inp_buff_size": "LOG_INP_BUFF_SIZE",
    "log_wgt_buff_size": "LOG_WGT_BUFF_SIZE",
    "log_acc_buff_size": "LOG_ACC_BUFF_SIZE",
    "clock_mhz": "CLOCK_MHZ",
    "bus_bits": "BUS_BITS",
}
_TARGET_DEFAULTS = {  # pkg_config.py: fpga_freq (MHz), AXI width (bits)
    "pynq": (100.0, 64),
    "sim": (100.0, 64),
    "tsim": (100.0, 64),
    "de10nano": (100.0, 64),
    "ultra96": (333.0, 128),
    "zcu104": (333.0, 128),
    "zcu102": (333.0, 128),
}


@dataclass(frozen=True)
class VTAConfig:
    """One VTA hardware variant. Field names are the lower-case ``vta_config.json`` keys."""

    target: str = "pynq"
    hw_ver: str = "0.0.2"
    log_inp_width: int = 3
    log_wgt_width: int = 3
    log_acc_width: int = 5
    log_batch: int = 0
    log_block: int = 4
    log_uop_buff_size: int = 15
    log_inp_buff_size: int = 15
    log_wgt_buff_size: int = 18
    log_acc_buff_size: int = 17
    clock_mhz: float = 100.0
    bus_bits: int = 64

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name.startswith("log_") and not (0 <= getattr(self, f.name) <= 24):
                raise ConfigError(f"VTA config {f.name.upper()}={getattr(self, f.name)} is out of range 0..24")
        if self.inp_width != 8 or self.wgt_width != 8 or self.acc_width != 32:
            raise ConfigError(
                "only int8 input/weight and int32 accumulator VTA configs are supported "
                f"(got LOG_INP_WIDTH={self.log_inp_width}, LOG_WGT_WIDTH={self.log_wgt_width}, "
                f"LOG_ACC_WIDTH={self.log_acc_width}); use 3, 3, 5"
            )
        for name in ("inp", "wgt", "acc", "uop"):
            if getattr(self, f"log_{name}_depth") < 1:
                raise ConfigError(f"VTA config LOG_{name.upper()}_BUFF_SIZE is too small for one element")
        if not (0 < self.clock_mhz < 1e5) or not 8 <= self.bus_bits <= 4096 or self.bus_bits % 8:
            raise ConfigError("VTA config needs 0 < CLOCK_MHZ < 100000 and BUS_BITS a multiple of 8 in 8..4096 "
                              f"(got {self.clock_mhz}, {self.bus_bits})")
        _ver(self.hw_ver)

    # ---- widths and shapes -------------------------------------------------------------------
    inp_width = property(lambda self: 1 << self.log_inp_width)
    wgt_width = property(lambda self: 1 << self.log_wgt_width)
    acc_width = property(lambda self: 1 << self.log_acc_width)
    out_width = property(lambda self: 1 << self.log_inp_width)
    batch = property(lambda self: 1 << self.log_batch)
    block = property(lambda self: 1 << self.log_block)
    block_in = property(lambda self: 1 << self.log_block)
    block_out = property(lambda self: 1 << self.log_block)
    inp_elem_bytes = property(lambda self: self.batch * self.block_in * self.inp_width // 8)
    wgt_elem_bytes = property(lambda self: self.block_out * self.block_in * self.wgt_width // 8)
    acc_elem_bytes = property(lambda self: self.batch * self.block_out * self.acc_width // 8)
    out_elem_bytes = property(lambda self: self.batch * self.block_out * self.out_width // 8)
    inp_buff_bytes = property(lambda self: 1 << self.log_inp_buff_size)
    wgt_buff_bytes = property(lambda self: 1 << self.log_wgt_buff_size)
    acc_buff_bytes = property(lambda self: 1 << self.log_acc_buff_size)
    uop_buff_bytes = property(lambda self: 1 << self.log_uop_buff_size)
    out_buff_bytes = property(lambda self: 1 << (self.log_acc_buff_size + self.log_inp_width - self.log_acc_width))
    bus_bytes = property(lambda self: self.bus_bits // 8)
    macs_per_uop = property(lambda self: self.batch * self.block_in * self.block_out)

    # ---- SRAM depths (elements), hw_spec_const.h ---------------------------------------------
    log_uop_depth = property(lambda self: self.log_uop_buff_size - 5 + 3)
    log_inp_depth = property(
        lambda self: self.log_inp_buff_size - self.log_batch - self.log_block - self.log_inp_width + 3
    )
    log_wgt_depth = property(
        lambda self: self.log_wgt_buff_size - 2 * self.log_block - self.log_wgt_width + 3
    )
    log_acc_depth = property(
        lambda self: self.log_acc_buff_size - self.log_batch - self.log_block - self.log_acc_width + 3
    )
    uop_depth = property(lambda self: 1 << self.log_uop_depth)
    inp_depth = property(lambda self: 1 << self.log_inp_depth)
    wgt_depth = property(lambda self: 1 << self.log_wgt_depth)
    acc_depth = property(lambda self: 1 << self.log_acc_depth)
    out_depth = property(lambda self: 1 << self.log_acc_depth)

    # ---- naming --------------------------------------------------------------------------------
    @property
    def bitstream(self) -> str:
        """``{BATCH}x{BLOCK}_i{INP}w{WGT}a{ACC}_{UOP}_{INP}_{WGT}_{ACC}`` as in ``pkg_config.py``."""
        return (
            f"{self.batch}x{self.block}_i{self.inp_width}w{self.wgt_width}a{self.acc_width}_"
            f"{self.log_uop_buff_size}_{self.log_inp_buff_size}_{self.log_wgt_buff_size}_{self.log_acc_buff_size}"
        )

    @property
    def model(self) -> str:
        """``env.MODEL``: ``<target>_<bitstream>``."""
        return f"{self.target}_{self.bitstream}"

    # ---- ISA field widths ----------------------------------------------------------------------
    @cached_property
    def field_widths(self) -> dict[str, int]:
        """Bit width of every depth-dependent ISA field for this config (``hw_spec.h`` macros).

        The micro-op ``src`` width is max(INP, ACC) depth bits whatever the HW_VER (``VTAUop.src_idx`` in the
        ``hw_spec.h`` TVM v0.18 pins).
        GEMM's ``src_factor`` fields have INP depth bits and ALU's ACC depth bits (``VTAGemInsn`` and
        ``VTAAluInsn``).
        """
        src = max(self.log_inp_depth, self.log_acc_depth)
        return {
            "uop_bgn": self.log_uop_depth,
            "uop_end": self.log_uop_depth + 1,
            "iter": LOOP_ITER_BITS,
            "dst_factor": self.log_acc_depth,
            "src_factor": self.log_inp_depth,          # GEMM: input-buffer index factor
            "alu_src_factor": self.log_acc_depth,      # ALU: accumulator-buffer index factor
            "wgt_factor": self.log_wgt_depth,
            "uop_dst": self.log_acc_depth,
            "uop_src": src,
            "uop_wgt": self.log_wgt_depth,
        }

    @cached_property
    def insn_bytes(self) -> int:
        """16 for the stock 128-bit layout; 32 when the config's fields do not fit (widened encoding)."""
        return 16 if layout_words(self) <= 2 else 32

    @cached_property
    def uop_bytes(self) -> int:
        """4 for the stock 32-bit micro-op; 8 when dst+src+wgt widths exceed 32 bits (widened encoding)."""
        w = self.field_widths
        return 4 if w["uop_dst"] + w["uop_src"] + w["uop_wgt"] <= 32 else 8

    # ---- (de)serialisation ---------------------------------------------------------------------
    @classmethod
    def from_json(cls, d_or_path: dict[str, Any] | str | Path) -> "VTAConfig":
        """Build from a ``vta_config.json`` dict or file (missing CLOCK_MHZ/BUS_BITS follow TARGET)."""
        if isinstance(d_or_path, (str, Path)):
            try:
                d = json.loads(Path(d_or_path).read_text())
            except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
                raise ConfigError(f"cannot read VTA config {d_or_path}: {str(exc)[:100]}; pass a vta_config.json "
                                  "file") from None
        else:
            d = d_or_path
        if not isinstance(d, dict):
            raise ConfigError("a VTA config must be a JSON object with TARGET, HW_VER, LOG_* keys")
        unknown = set(d) - set(_JSON_KEYS.values()) - {"HW_FREQ", "HW_CLK_TARGET"}
        if unknown:
            raise ConfigError(f"unknown VTA config keys {sorted(map(str, unknown))[:5]}; known: "
                              f"{sorted(_JSON_KEYS.values())}")
        kwargs: dict[str, Any] = {}
        for name, key in _JSON_KEYS.items():
            if key in d:
                kwargs[name] = d[key]
        for name in ("target", "hw_ver"):
            if name in kwargs and not isinstance(kwargs[name], str):
                raise ConfigError(f"VTA config {name.upper()} must be a string, got {type(kwargs[name]).__name__}")
        clock, bus = _TARGET_DEFAULTS.get(kwargs.get("target", "pynq"), (100.0, 64))
        kwargs.setdefault("clock_mhz", d.get("HW_FREQ", clock))
        kwargs.setdefault("bus_bits", bus)
        for name, value in kwargs.items():
            if name in ("target", "hw_ver"):
                continue
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if name == "clock_mhz":
                if not number or not math.isfinite(value):
                    raise ConfigError(f"VTA config CLOCK_MHZ must be a finite number of MHz, got {value!r:.40}")
                kwargs[name] = float(value)
            elif not isinstance(value, int) or isinstance(value, bool) or not -(1 << 31) < value < (1 << 31):
                raise ConfigError(f"VTA config {_JSON_KEYS[name]} must be an integer, got {value!r:.40}")
        return cls(**kwargs)

    def to_json(self) -> dict[str, Any]:
        """The ``vta_config.json`` dict (with our CLOCK_MHZ and BUS_BITS); ``from_json`` inverts it."""
        return {_JSON_KEYS[k]: v for k, v in asdict(self).items()}


def _ver(s: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in s.split("."))
    except ValueError:
        raise ConfigError(f"VTA HW_VER must look like 0.0.2, got {s!r}") from None


PRESETS: dict[str, VTAConfig] = {
    "pynq": VTAConfig(target="pynq", clock_mhz=100.0, bus_bits=64),
    "ultra96": VTAConfig(target="ultra96", clock_mhz=333.0, bus_bits=128),
    "zcu102": VTAConfig(
        target="zcu102",
        log_uop_buff_size=16,
        log_inp_buff_size=16,
        log_wgt_buff_size=19,
        log_acc_buff_size=18,
        clock_mhz=333.0,
        bus_bits=128,
    ),
    "pynq-4x8": VTAConfig(
        target="pynq",
        hw_ver="0.0.1",
        log_batch=2,
        log_block=3,
        log_uop_buff_size=15,
        log_inp_buff_size=16,
        log_wgt_buff_size=16,
        log_acc_buff_size=18,
        clock_mhz=100.0,
        bus_bits=64,
    ),
}
"""Named hardware variants (see ``docs/vta.md``)."""


def get_preset(name: str) -> VTAConfig:
    """The preset called ``name``; :class:`ConfigError` lists the known names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown VTA preset {name!r}; known presets: {', '.join(PRESETS)}") from None


def preset_name(hw: dict[str, Any]) -> str | None:
    """The name of the preset whose ``vta_config.json`` dict is ``hw`` (``None`` for a custom config).

    >>> preset_name(PRESETS["zcu102"].to_json())
    'zcu102'
    """
    return next((name for name, cfg in PRESETS.items() if cfg.to_json() == hw), None)
