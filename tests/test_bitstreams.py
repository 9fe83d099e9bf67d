"""The bitstream catalog and cache (VTA's layout), and the FPGA bitstream step of provisioning."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from toolkit import bitstreams
from toolkit.boards import load_profile
from toolkit.cli.app import app

runner = CliRunner()
NAME = "1x16_i8w8a32_15_15_18_17"


def _cli(*args, code=0):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    return r


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_BITSTREAM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_catalog_knows_vta_distro_and_every_fpga_profile():
    known = {(b.target, b.hw_ver, b.name) for b in bitstreams.catalog()}
    assert ("pynq", "0.0.2", NAME) in known and ("pynq", "0.0.1", "4x8_i8w8a32_15_16_16_18") in known
    for name in ("pynq-z1", "pynq-z2", "ultra96", "zcu102"):
        b = bitstreams.for_profile(load_profile(name))
        assert (b.target, b.hw_ver, b.name) in known
    assert bitstreams.parse_name("4x8_i8w8a32_15_16_16_18")["batch"] == 4


def test_add_list_verify_use_vtas_cache_layout(cache, tmp_path):
    src = tmp_path / f"{NAME}.bit"
    src.write_bytes(b"bits")
    src.with_suffix(".hwh").write_text("<hwh/>")
    out = _cli("bitstream", "add", src, "--target", "pynq", "--hw-ver", "0.0.2").stdout
    dest = cache / "pynq" / "0_0_2" / f"{NAME}.bit"
    assert str(dest) in out and dest.read_bytes() == b"bits" and dest.with_suffix(".hwh").is_file()
    rows = json.loads(_cli("bitstream", "list", "--json").stdout)["bitstreams"]
    row = next(r for r in rows if (r["target"], r["hw_ver"], r["name"]) == ("pynq", "0.0.2", NAME))
    assert row["cached"] == str(dest) and row["status"] == "unverified"  # the catalog digest is unknown
    assert json.loads(_cli("bitstream", "verify", "--json").stdout)[0]["hwh"] is True


def test_bad_bitstreams_are_one_line_errors(cache, tmp_path, monkeypatch):
    bad = tmp_path / "mydesign.bit"
    bad.write_bytes(b"x")
    assert "{BATCH}x{BLOCK}" in _cli("bitstream", "add", bad, "--target", "pynq", code=2).output
    good = tmp_path / f"{NAME}.bit"
    good.write_bytes(b"x")
    assert "0.0.2" in _cli("bitstream", "add", good, "--target", "pynq", "--hw-ver", "two", code=2).output
    # a catalog digest that does not match refuses the file, and verify flags a changed cached file
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(f'[[bitstream]]\nname = "{NAME}"\ntarget = "pynq"\nhw_ver = "0.0.2"\nsha256 = "{"0" * 64}"\n')
    monkeypatch.setattr(bitstreams, "CATALOG", catalog)
    assert "sha256" in _cli("bitstream", "add", good, "--target", "pynq", code=2).output
    monkeypatch.setattr(bitstreams, "CATALOG", bitstreams.Path(__file__).parents[1] / "bitstreams" / "catalog.toml")
    _cli("bitstream", "add", good, "--target", "pynq")
    monkeypatch.setattr(bitstreams, "CATALOG", catalog)
    assert json.loads(_cli("bitstream", "verify", "--json", code=1).stdout)[0]["status"] == "MISMATCH"


def test_provision_refuses_a_bitstream_for_other_hardware(cache):
    _cli("board", "add", "pz", "--type", "pynq-z2", "--host", "10.0.0.7")
    r = _cli("board", "provision", "pz", "--dry-run", "--bitstream", "pynq/0.0.1/4x8_i8w8a32_15_16_16_18", code=2)
    assert "does not match board type pynq-z2" in r.output and NAME in r.output
    _cli("board", "add", "pi", "--type", "rpi4", "--host", "10.0.0.8")
    assert "no FPGA" in _cli("board", "provision", "pi", "--dry-run", "--bitstream", f"pynq/0.0.2/{NAME}",
                             code=2).output
