"""Shared fixtures: every test runs with its own inventory and config dirs, never the user's."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("EDGETUNE_INVENTORY", str(home / "inventory.toml"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.delenv("EDGETUNE_CLUSTER", raising=False)     # a user's cluster never reaches a test
    yield


@pytest.fixture
def known_hosts(tmp_path, monkeypatch) -> Path:
    """An empty known_hosts file for this test (``EDGETUNE_KNOWN_HOSTS``)."""
    path = tmp_path / "known_hosts"
    path.write_text("")
    monkeypatch.setenv("EDGETUNE_KNOWN_HOSTS", str(path))
    monkeypatch.setenv("EDGETUNE_SSH_CONFIG", str(tmp_path / "no_ssh_config"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return path

