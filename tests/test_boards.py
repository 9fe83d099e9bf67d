"""Board profiles and the inventory: loading, targets, atomic writes, corrupt files."""

import os
from pathlib import Path

import pytest
import tvm

from toolkit.boards import (
    BUILTIN_BOARDS,
    BoardEntry,
    Inventory,
    atomic_write_text,
    load_profile,
    profile_names,
    resolve_board,
)
from toolkit.errors import BoardError, InventoryError

EXPECTED_TYPES = {"pynq-z1", "pynq-z2", "ultra96", "zcu102", "jetson-nano", "jetson-orin-nano",
                  "rpi4", "rpi5", "vta-fsim", "local"}


def test_every_required_profile_ships():
    assert EXPECTED_TYPES <= set(profile_names())


@pytest.mark.parametrize("name", sorted(EXPECTED_TYPES))
def test_profile_yields_a_valid_tvm_target(name):
    p = load_profile(name)
    target = tvm.target.Target(p.target)
    assert p.family in ("vta", "cpu", "cuda")
    assert p.rpc_key
    if p.family == "cuda":
        assert target.kind.name == "cuda" and target.host is not None
        assert "aarch64" in str(target.host)
    else:
        assert target.kind.name == "llvm"
    if p.family == "vta":
        assert {"preset", "bitstream", "clock_mhz", "bus_bits"} <= set(p.vta)
    if p.arch == "aarch64" and name != "local":
        assert p.cross_compiler == "aarch64-linux-gnu-g++"
    if p.arch == "armv7l":
        assert p.cross_compiler == "arm-linux-gnueabihf-g++"
        assert p.runtime["method"] == "bundle" and p.runtime["bundle"] == "armv7"


def test_local_profile_names_the_cpu():
    # Without mcpu LLVM emits generic x86-64 code; the local profile resolves it.
    mcpu = load_profile("local").target["mcpu"]
    assert mcpu not in ("auto", "native", "generic", "")


def test_unknown_profile_is_a_one_line_error():
    with pytest.raises(BoardError, match="unknown board type 'pynq-z9'.*use one of"):
        load_profile("pynq-z9")


def test_inventory_round_trip(tmp_path):
    inv = Inventory(tmp_path / "inv.toml")
    assert inv.load() == []
    inv.add(BoardEntry("pynq1", "pynq-z1", host="192.0.2.10", user="xilinx", tags=["lab", "fpga"]))
    inv.add(BoardEntry("pi", "rpi4", host="pi.local", port=2222, rpc_key="rpi-lab"))
    boards = {b.name: b for b in Inventory(tmp_path / "inv.toml").load()}
    assert boards["pynq1"].effective_rpc_key == "pynq" and boards["pynq1"].tags == ["lab", "fpga"]
    assert boards["pi"].port == 2222 and boards["pi"].effective_rpc_key == "rpi-lab"
    with pytest.raises(InventoryError, match="already registered"):
        inv.add(BoardEntry("pi", "rpi5"))
    inv.add(BoardEntry("pi", "rpi5"), replace=True)
    assert inv.get("pi").type == "rpi5"
    inv.remove("pynq1")
    assert [b.name for b in inv.load()] == ["pi"]
    with pytest.raises(BoardError, match="unknown board 'pynq1'"):
        inv.get("pynq1")


def test_inventory_rejects_bad_entries(tmp_path):
    inv = Inventory(tmp_path / "inv.toml")
    with pytest.raises(BoardError, match="unknown board type"):
        inv.add(BoardEntry("b", "nope"))
    with pytest.raises(BoardError, match="built-in"):
        inv.add(BoardEntry("vta-fsim", "vta-fsim"))
    with pytest.raises(BoardError, match="does not exist"):
        inv.add(BoardEntry("b", "rpi4", key=str(tmp_path / "missing_key")))
    with pytest.raises(BoardError, match="out of range"):
        inv.add(BoardEntry("b", "rpi4", port=70000))
    assert not inv.path.exists()


def test_corrupt_inventory_is_reported_with_path_and_line_and_kept(tmp_path):
    path = tmp_path / "inv.toml"
    text = '[boards.pynq1]\ntype = "pynq-z1"\nhost = "192.0.2.10\n'
    path.write_text(text)
    inv = Inventory(path)
    with pytest.raises(InventoryError) as exc:
        inv.load()
    assert str(path) in str(exc.value) and "line 3" in str(exc.value)
    with pytest.raises(InventoryError):
        inv.add(BoardEntry("pi", "rpi4"))
    assert path.read_text() == text  # never silently replaced


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "f.toml"
    atomic_write_text(path, "old\n")

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.toml"]  # no temp file left behind


def test_builtin_boards_need_no_registration(tmp_path):
    inv = Inventory(tmp_path / "empty.toml")
    for name in BUILTIN_BOARDS:
        b = resolve_board(name, inv)
        assert b.entry is None and b.profile.name == name
    assert resolve_board("vta-fsim", inv).profile.is_simulator


def test_the_ground_truth_is_in_the_repository(tmp_path, monkeypatch):
    from toolkit.testing import shared_data

    found = shared_data.shared_data_dir()
    assert (found / "vta_tvm018_programs" / "c2.txt").is_file()
    assert found == Path(__file__).resolve().parent / "data"
    monkeypatch.setattr(shared_data, "DATA_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="tests/data"):
        shared_data.shared_data_dir()


def test_board_remove_forgets_the_boards_provisioning_state(tmp_path):
    from typer.testing import CliRunner

    from toolkit.cli.app import app
    from toolkit.rpc.agent_control import board_state
    from toolkit.state import write_state

    inv = tmp_path / "inv.toml"
    cli = CliRunner()
    r = cli.invoke(app, ["board", "add", "pi", "--type", "rpi4", "--host", "192.0.2.10", "--inventory", str(inv)])
    assert r.exit_code == 0, r.output
    write_state("boards/pi", {"tracker": "127.0.0.1:9190", "port": 9091})
    write_state("boards/other", {"tracker": "127.0.0.1:9190", "port": 9092})
    r = cli.invoke(app, ["board", "remove", "pi", "--inventory", str(inv)])
    assert r.exit_code == 0, r.output
    assert board_state("pi") is None and board_state("other") is not None


def test_an_unknown_board_names_at_most_ten_registered_ones(tmp_path):
    from toolkit.boards import HINT_BOARDS

    inv = Inventory(tmp_path / "inv.toml")
    for i in range(25):
        inv.add(BoardEntry(f"b{i}", "rpi4", host="10.0.0.2"))
    with pytest.raises(BoardError) as exc:
        inv.get("nosuch")
    message = str(exc.value)
    assert "b8, b9 and" in message and "b10" not in message and f"and {25 - HINT_BOARDS} more" in message
