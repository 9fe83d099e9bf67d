"""The emulated-board image recipe and the skip rule (no root or qemu needed; tests/emulated runs the boards)."""

from __future__ import annotations

import dataclasses

from toolkit.testing import emulated_board as emu


def test_the_image_is_named_by_a_hash_of_its_recipe(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_EMULATED_CACHE", str(tmp_path))
    base = emu.Recipe()
    assert emu.image_dir(base) == tmp_path / f"bookworm-arm64-{base.key}"
    assert emu.Recipe().key == base.key and len(base.key) == 12
    changed = dataclasses.replace(base, wheels=base.wheels + ("scipy",))
    assert changed.key != base.key and emu.image_dir(changed) != emu.image_dir(base)
    assert emu.image_info(base) is None                      # nothing built in an empty cache


def test_the_cache_follows_xdg_cache_home_without_an_override(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGETUNE_EMULATED_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert emu.cache_root() == tmp_path / "edgetune" / "emulated"


def test_only_the_flag_or_a_kernel_without_binfmt_skips(monkeypatch):
    monkeypatch.setenv("EDGETUNE_SKIP_EMULATED", "1")
    assert emu.skip_reason() == "EDGETUNE_SKIP_EMULATED=1"
    monkeypatch.delenv("EDGETUNE_SKIP_EMULATED")
    expected = None if emu.kernel_has_binfmt() else "this kernel has no binfmt_misc (emulated aarch64 boards need it)"
    assert emu.skip_reason() == expected


def test_the_build_command_says_why_it_skips(monkeypatch, capsys):
    monkeypatch.setenv("EDGETUNE_SKIP_EMULATED", "1")
    assert emu.main(["build"]) == 0
    assert "emulated boards skipped: EDGETUNE_SKIP_EMULATED=1" in capsys.readouterr().err
