"""The emulated-board image recipe and the skip rule (no root or qemu needed; tests/emulated runs the boards)."""

from __future__ import annotations

import dataclasses

from toolkit.testing import board_image as img
from toolkit.testing import emulated_board as emu


def test_the_image_is_named_by_a_hash_of_its_recipe(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_EMULATED_CACHE", str(tmp_path))
    base = emu.Recipe()
    assert emu.image_dir(base) == tmp_path / f"bookworm-arm64-{base.key}"
    assert emu.Recipe().key == base.key and len(base.key) == 12
    changed = dataclasses.replace(base, wheels=base.wheels + ("scipy",))
    assert changed.key != base.key and emu.image_dir(changed) != emu.image_dir(base)
    assert emu.image_info(base) is None                      # nothing built in an empty cache


def test_the_pynq_image_is_armhf_with_numpy_from_debian_and_no_wheels(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_EMULATED_CACHE", str(tmp_path))
    armv7 = emu.RECIPES["armv7"]
    assert (armv7.arch, armv7.qemu, armv7.machine, armv7.wheels) == ("armhf", "arm", "armv7l", ())
    assert "python3-numpy" in armv7.packages and armv7.key != emu.RECIPES["aarch64"].key
    assert emu.image_dir(armv7) == tmp_path / f"bookworm-armhf-{armv7.key}"
    assert emu.main(["path", "--arch", "armv7"]) == 0


def test_the_cache_follows_xdg_cache_home_without_an_override(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGETUNE_EMULATED_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert emu.cache_root() == tmp_path / "edgetune" / "emulated"


def test_only_the_flag_or_a_kernel_without_binfmt_skips(monkeypatch):
    monkeypatch.setenv("EDGETUNE_SKIP_EMULATED", "1")
    assert emu.skip_reason() == "EDGETUNE_SKIP_EMULATED=1"
    monkeypatch.delenv("EDGETUNE_SKIP_EMULATED")
    monkeypatch.setattr(img, "kernel_has_binfmt", lambda: True)
    assert emu.skip_reason() is None                        # anything else missing is an error, not a skip
    monkeypatch.setattr(img, "kernel_has_binfmt", lambda: False)
    assert emu.skip_reason() == "this kernel has no binfmt_misc (emulated aarch64 boards need it)"


def test_binfmt_support_is_read_from_the_kernels_filesystem_list(tmp_path, monkeypatch):
    fs = tmp_path / "filesystems"
    monkeypatch.setattr(img, "BINFMT_DIR", tmp_path / "binfmt_misc")
    real = img.Path

    def fake_path(p: str = "", *rest: str):
        return fs if p == "/proc/filesystems" else real(p, *rest)

    monkeypatch.setattr(img, "Path", fake_path)
    fs.write_text("nodev\tsysfs\nnodev\tproc\n")
    assert not img.kernel_has_binfmt()
    fs.write_text("nodev\tsysfs\nnodev\tbinfmt_misc\n")
    assert img.kernel_has_binfmt()


def test_the_build_command_says_why_it_skips(monkeypatch, capsys):
    monkeypatch.setenv("EDGETUNE_SKIP_EMULATED", "1")
    assert emu.main(["build"]) == 0
    assert "emulated boards skipped: EDGETUNE_SKIP_EMULATED=1" in capsys.readouterr().err
