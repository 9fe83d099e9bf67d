"""VTA bitstreams: the catalog of known ones and a local cache laid out like VTA's.

Cache: ``$EDGETUNE_BITSTREAM_CACHE`` (default ``~/.cache/edgetune/bitstreams``) +
``<target>/<hw_ver with '_'>/<name>.bit`` (and ``<name>.hwh`` alongside when Pynq needs it).

>>> parse_name("1x16_i8w8a32_15_15_18_17")["block"]
16
>>> relative_path("pynq", "0.0.2", "1x16_i8w8a32_15_15_18_17").as_posix()
'pynq/0_0_2/1x16_i8w8a32_15_15_18_17.bit'
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.errors import BoardError

if TYPE_CHECKING:
    from toolkit.boards import BoardProfile

CATALOG = Path(__file__).resolve().parent.parent / "bitstreams" / "catalog.toml"
_NAME = re.compile(r"^(\d+)x(\d+)_i(\d+)w(\d+)a(\d+)_(\d+)_(\d+)_(\d+)_(\d+)$")
_HW_VER = re.compile(r"\d+\.\d+\.\d+")
_TARGET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
"""A VTA target (``pynq``, ``zcu102``): one plain path component of the cache."""


class BitstreamError(BoardError):
    """A bitstream that is missing, malformed or does not match the board."""


@dataclass(frozen=True)
class Bitstream:
    """One catalog entry."""

    name: str
    target: str
    hw_ver: str
    config: str = ""
    clock_mhz: int = 0
    url: str = ""
    sha256: str = ""
    ext: str = "bit"

    @property
    def relative_path(self) -> Path:
        """Path inside the cache."""
        return relative_path(self.target, self.hw_ver, self.name, self.ext)


def parse_name(name: str) -> dict[str, int]:
    """The hardware parameters encoded in a VTA bitstream name."""
    m = _NAME.fullmatch(name)
    if not m:
        raise BitstreamError(f"bitstream name {name!r} is not VTA's "
                             "{BATCH}x{BLOCK}_i{INP}w{WGT}a{ACC}_{UOP}_{INP}_{WGT}_{ACC} form; "
                             "rename the file, e.g. 1x16_i8w8a32_15_15_18_17.bit")
    keys = ("batch", "block", "inp_width", "wgt_width", "acc_width",
            "log_uop_buff", "log_inp_buff", "log_wgt_buff", "log_acc_buff")
    return dict(zip(keys, (int(g) for g in m.groups())))


def relative_path(target: str, hw_ver: str, name: str, ext: str = "bit") -> Path:
    """``<target>/<hw_ver with _>/<name>.<ext>``."""
    return Path(target) / hw_ver.replace(".", "_") / f"{name}.{ext}"


def cache_dir() -> Path:
    """``$EDGETUNE_BITSTREAM_CACHE``, else ``~/.cache/edgetune/bitstreams``."""
    return Path(os.environ.get("EDGETUNE_BITSTREAM_CACHE") or "~/.cache/edgetune/bitstreams").expanduser()


def catalog(path: Path | None = None) -> list[Bitstream]:
    """Every known bitstream (``bitstreams/catalog.toml``)."""
    path = path or CATALOG
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BitstreamError(f"bitstream catalog {path} is unreadable: {exc}") from None
    return [Bitstream(**entry) for entry in raw.get("bitstream", [])]


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find(target: str, hw_ver: str, name: str) -> Bitstream | None:
    """The catalog entry for ``(target, hw_ver, name)``, if known."""
    for b in catalog():
        if (b.target, b.hw_ver, b.name) == (target, hw_ver, name):
            return b
    return None


def for_profile(profile: "BoardProfile") -> Bitstream:
    """The bitstream a board type needs (its ``[vta]`` table), from the catalog or described by it."""
    vta = profile.vta or {}
    if profile.executor != "fpga":
        raise BitstreamError(f"board type {profile.name} has no FPGA; it needs no bitstream")
    missing = [k for k in ("bitstream", "fpga_target", "hw_ver") if not vta.get(k)]
    if missing:
        raise BitstreamError(f"board profile {profile.name} lacks vta.{', vta.'.join(missing)}")
    preset = vta.get("preset")
    if preset:
        from toolkit.vta.config import get_preset

        hw = get_preset(preset)
        if (hw.bitstream, hw.target, hw.hw_ver) != (vta["bitstream"], vta["fpga_target"], vta["hw_ver"]):
            raise BitstreamError(
                f"board profile {profile.name} is inconsistent: vta.bitstream {vta['fpga_target']}/{vta['hw_ver']}/"
                f"{vta['bitstream']} but its VTA config {preset!r} is {hw.target}/{hw.hw_ver}/{hw.bitstream}; "
                "fix the profile so the runtime and the bitstream agree")
    known = find(vta["fpga_target"], vta["hw_ver"], vta["bitstream"])
    return known or Bitstream(vta["bitstream"], vta["fpga_target"], vta["hw_ver"],
                              clock_mhz=int(vta.get("clock_mhz", 0)))


def parse_ref(ref: str) -> Bitstream:
    """A bitstream named ``TARGET/HW_VER/NAME`` (or a path inside the cache laid out that way)."""
    parts = Path(ref).with_suffix("").parts[-3:] if ref.endswith((".bit", ".rbf")) else tuple(ref.split("/"))
    if len(parts) != 3:
        raise BitstreamError(f"bitstream {ref!r} must be TARGET/HW_VER/NAME, e.g. pynq/0.0.2/1x16_i8w8a32_15_15_18_17")
    target, ver, name = parts
    hw_ver = ver.replace("_", ".")
    parse_name(name)
    return find(target, hw_ver, name) or Bitstream(name, target, hw_ver)


def cached_path(b: Bitstream) -> Path | None:
    """The cached file of ``b``, or ``None``."""
    path = cache_dir() / b.relative_path
    return path if path.is_file() else None


def check_matches(profile: "BoardProfile", b: Bitstream) -> None:
    """Refuse a bitstream whose target, hardware version or config differs from the board's."""
    want = for_profile(profile)
    diffs = [f"{k} {getattr(b, k)} != {getattr(want, k)}" for k in ("target", "hw_ver", "name")
             if getattr(b, k) != getattr(want, k)]
    if diffs:
        raise BitstreamError(
            f"bitstream {b.target}/{b.hw_ver}/{b.name} does not match board type {profile.name} "
            f"({'; '.join(diffs)}); the runtime would drive the wrong hardware: use "
            f"{want.target}/{want.hw_ver}/{want.name} (`edgetune bitstream add FILE --target {want.target} "
            f"--hw-ver {want.hw_ver}`)")


def add(path: Path, target: str, hw_ver: str, name: str | None = None) -> tuple[Path, str]:
    """Copy a bitstream (and its ``.hwh`` sibling) into the cache; ``(cached path, sha256)``.

    A catalog entry with a known digest must match; otherwise the file is refused.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise BitstreamError(f"bitstream file {path} does not exist")
    if not _HW_VER.fullmatch(hw_ver):
        raise BitstreamError(f"hardware version {hw_ver!r} must look like 0.0.2")
    if not _TARGET.fullmatch(target):
        raise BitstreamError(f"target {target!r} must be a board target such as pynq, ultra96 or zcu102 "
                             "(letters, digits, '_' and '-')")
    name = name or path.stem
    parse_name(name)
    ext = path.suffix.lstrip(".") or "bit"
    digest = sha256_of(path)
    known = find(target, hw_ver, name)
    if known and known.sha256 and known.sha256 != digest:
        raise BitstreamError(f"{path} has sha256 {digest} but the catalog's {target}/{hw_ver}/{name} has "
                             f"{known.sha256}; download it again from {known.url or 'its source'}")
    dest = cache_dir() / relative_path(target, hw_ver, name, ext)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, dest)
    hwh = path.with_suffix(".hwh")
    if hwh.is_file():
        shutil.copyfile(hwh, dest.with_suffix(".hwh"))
    return dest, digest


@dataclass(frozen=True)
class CachedBitstream:
    """A file in the cache and what the catalog says of it."""

    target: str
    hw_ver: str
    name: str
    path: Path
    sha256: str
    status: str  # "ok", "unverified" (catalog digest unknown), "unknown" (not in catalog), "MISMATCH"
    hwh: bool


def list_cached() -> list[CachedBitstream]:
    """Every bitstream in the cache, verified against the catalog."""
    root = cache_dir()
    out = []
    for path in sorted(root.glob("*/*/*")):
        if path.suffix not in (".bit", ".rbf"):
            continue
        target, ver_dir = path.parts[-3], path.parts[-2]
        hw_ver = ver_dir.replace("_", ".")
        digest = sha256_of(path)
        known = find(target, hw_ver, path.stem)
        status = ("unknown" if known is None else "unverified" if not known.sha256
                  else "ok" if known.sha256 == digest else "MISMATCH")
        out.append(CachedBitstream(target, hw_ver, path.stem, path, digest, status,
                                   path.with_suffix(".hwh").is_file()))
    return out
