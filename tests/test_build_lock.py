"""Folders built once: what a killed build left mounted below its folder is unmounted before the folder goes."""

from __future__ import annotations

import os
import subprocess

import pytest

from toolkit.build_lock import build_lock, remove_partial


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_a_partial_build_with_a_mount_inside_is_unmounted_then_removed(tmp_path):
    partial = tmp_path / "image.partial"
    outside = tmp_path / "host-shm"          # stands for the host's /dev/shm a killed mmdebstrap left bound
    (partial / "rootfs/dev/shm").mkdir(parents=True)
    outside.mkdir()
    (outside / "keep").write_text("the host's file")
    subprocess.run(["mount", "--bind", str(outside), str(partial / "rootfs/dev/shm")], check=True)
    remove_partial(partial)
    assert not partial.exists()
    assert (outside / "keep").read_text() == "the host's file"


def test_a_missing_partial_is_nothing_to_remove_and_the_lock_sits_beside_the_folder(tmp_path):
    remove_partial(tmp_path / "never-built")
    said = []
    with build_lock(tmp_path / "cache" / "thing", said.append):
        assert (tmp_path / "cache" / "thing.lock").is_file()
    assert said == []
