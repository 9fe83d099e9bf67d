"""SSH against hostile or minimal setups: no sftp subsystem, known_hosts markers, unprotected keys,
shell syntax in provisioning options."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from typer.testing import CliRunner

from toolkit.cli.app import app
from toolkit.errors import BoardError
from toolkit.rpc.agent_control import call_health
from toolkit.rpc.ssh import SSHTarget, connect
from toolkit.testing.cli import one_line_error

from .conftest import free_port

runner = CliRunner()


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_uploads_and_home_work_without_sftp(sshd_no_sftp, known_hosts, tmp_path):
    known_hosts.write_text("".join(sshd_no_sftp.known_hosts_line.values()))
    target = SSHTarget("127.0.0.1", sshd_no_sftp.port, "root", (str(sshd_no_sftp.client_key),))
    with connect(target) as s:
        assert s.sftp is None
        dest = tmp_path / "sub dir" / "f.bin"
        dest.parent.mkdir()
        data = bytes(range(256)) * 4000
        s.put_bytes(data, str(dest), 0o640)
        assert dest.read_bytes() == data and (dest.stat().st_mode & 0o777) == 0o640
        assert s.home() == s.run('printf %s "$HOME"').stdout


@pytest.mark.slow
def test_provision_over_an_sshd_without_sftp(sshd_no_sftp, known_hosts, tmp_path):
    known_hosts.write_text("".join(sshd_no_sftp.known_hosts_line.values()))
    r = _cli("tracker", "start", "--port", free_port(), "--json")
    assert r.exit_code == 0, r.output
    tracker = ("127.0.0.1", json.loads(r.stdout)["port"])
    try:
        r = _cli("board", "add", "nosftp", "--type", "vta-fsim", "--host", "127.0.0.2", "--port", sshd_no_sftp.port,
                 "--user", "root", "--key", sshd_no_sftp.client_key)
        assert r.exit_code == 0, r.output
        r = _cli("board", "provision", "nosftp", "--python", sys.executable, "--remote-dir", tmp_path / "remote",
                 "--json")
        assert r.exit_code == 0, r.output
        assert "answers" in json.loads(r.stdout)["steps"][-1]["detail"]
        assert call_health(tracker, "vta-fsim", "nosftp", 30)["executor"] == "fsim"
        assert "stopped the agent" in _cli("board", "stop", "nosftp").stdout
    finally:
        _cli("tracker", "stop")


def test_known_hosts_markers_are_understood(sshd, known_hosts):
    line = sshd.known_hosts_line["127.0.0.1"]
    key_type, key_b64 = line.split()[1:3]
    target = SSHTarget("127.0.0.1", sshd.port, "root", (str(sshd.client_key),))
    known_hosts.write_text(f"@cert-authority *.example.org {key_type} {key_b64}\n# a comment\n{line}")
    with connect(target) as s:
        assert s.run("true").ok
    known_hosts.write_text(f"@revoked * {key_type} {key_b64}\n{line}")
    with pytest.raises(BoardError, match="@revoked"):
        connect(target)
    known_hosts.write_text(f"@revoked * {key_type} {key_b64}\n")
    with pytest.raises(BoardError, match="@revoked"):
        connect(target, accept_new_host_key=True)
    assert "127.0.0.1" not in known_hosts.read_text().split("\n", 1)[1]   # nothing recorded
    known_hosts.write_text("this is not a key line\n")
    with pytest.raises(BoardError, match="known_hosts .*:1 is not a host key line"):
        connect(target)


def test_a_private_key_others_can_read_is_refused(sshd, trusted, tmp_path):
    key = tmp_path / "key"
    shutil.copy(sshd.client_key, key)
    key.chmod(0o644)
    with pytest.raises(BoardError, match="chmod 600"):
        connect(SSHTarget("127.0.0.1", sshd.port, "root", (str(key),)))
    key.chmod(0o600)
    with connect(SSHTarget("127.0.0.1", sshd.port, "root", (str(key),))) as s:
        assert s.run("true").ok


@pytest.mark.parametrize("flag,value", [("--remote-dir", "~/x'; touch /tmp/pwned #"),
                                        ("--python", "python3'; touch /tmp/pwned #"),
                                        ("--remote-dir", "relative/dir"), ("--remote-dir", "~/../../etc")])
def test_shell_syntax_in_provision_options_is_refused(flag, value, tmp_path):
    assert _cli("board", "add", "p1", "--type", "rpi4", "--host", "10.0.0.9").exit_code == 0
    assert flag in one_line_error(_cli("board", "provision", "p1", flag, value, "--dry-run"))


def test_the_bitstream_check_expands_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETUNE_BITSTREAM_CACHE", str(tmp_path / "bits"))
    src = tmp_path / "1x16_i8w8a32_15_15_18_17.bit"
    src.write_bytes(b"\x00bitstream")
    assert _cli("bitstream", "add", src, "--target", "pynq", "--hw-ver", "0.0.2").exit_code == 0
    assert _cli("board", "add", "pz", "--type", "pynq-z1", "--host", "10.0.0.9").exit_code == 0
    steps = json.loads(_cli("board", "provision", "pz", "--dry-run", "--json").stdout)["steps"]
    check = next(s for s in steps if s["name"].startswith("upload bitstream"))["check"]
    assert '"$HOME"/' in check and "'~" not in check
