"""`board console` against a pseudo-terminal: a fake login prompt, then a real /bin/sh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from toolkit.cli.app import app
from toolkit.rpc.serial_console import SerialConsole, SerialConsoleError, bring_up

runner = CliRunner()

FAKE_LOGIN = textwrap.dedent(r"""
    import os, sys
    fd = 0
    def out(s): os.write(fd, s.encode())
    def line():
        buf = b""
        while not buf.endswith(b"\n"):
            buf += os.read(fd, 1)
        return buf.decode().strip()
    out("\r\nPYNQ Linux, based on Ubuntu 18.04 pynq ttyPS0\r\n\r\n")
    while True:
        out("pynq login: ")
        user = line()
        if not user:  # like agetty: an empty name gives a fresh prompt
            continue
        out("Password: ")
        pw = line()
        if user == "xilinx" and pw == "s3cret":
            break
        out("\r\nLogin incorrect\r\n")
        if user == "give-up":
            sys.exit(1)
    out("Welcome\r\n")
    # the shell's stdio are pipes relayed to the line (a pty master is no controlling tty for it)
    import select, subprocess
    sh = subprocess.Popen(["/bin/sh", "-i"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, bufsize=0)
    while sh.poll() is None:
        ready, _, _ = select.select([fd, sh.stdout], [], [], 0.5)
        if fd in ready:
            sh.stdin.write(os.read(fd, 4096))
        if sh.stdout in ready:
            data = os.read(sh.stdout.fileno(), 4096)
            os.write(fd, data.replace(b"\n", b"\r\n"))
""")


@pytest.fixture
def board(tmp_path):
    """The 'board' side sits on the pty master (like a board's UART); we open the slave like a serial device."""
    master, slave = os.openpty()
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "PS1": "xilinx@pynq:~$ "}
    proc = subprocess.Popen([sys.executable, "-c", FAKE_LOGIN], stdin=master, stdout=master, stderr=master,
                            env=env, start_new_session=True, cwd=home)
    os.close(master)
    device = os.ttyname(slave)
    yield device, home
    proc.kill()
    proc.wait()
    os.close(slave)


def test_login_probe_install_key(board, tmp_path):
    device, home = board
    pub = tmp_path / "id_ed25519.pub"
    pub.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTest test@host\n")
    asked = []
    with SerialConsole.open(device, timeout=10) as con:
        facts = bring_up(con, "xilinx", lambda: asked.append(1) or "s3cret", install_key=pub.read_text())
        assert con.run("exit_code_test() { return 3; }; exit_code_test")[0] == 3
        rc, out = con.run("echo hello; echo world")
        assert rc == 0 and out == "hello\nworld\n"
    assert asked == [1]
    assert facts.arch == os.uname().machine and facts.user == "xilinx" and facts.key_installed
    assert (home / ".ssh" / "authorized_keys").read_text().count("FakeKeyForTest") == 1
    assert "edgetune board add b --type" in facts.add_command("b")


def test_cli_reads_password_from_stdin_and_never_stores_it(board, tmp_path):
    device, home = board
    pub = tmp_path / "k.pub"
    pub.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherKey x\n")
    r = runner.invoke(app, ["board", "console", "--serial", device, "--password-stdin", "--install-key", str(pub),
                            "--name", "pz", "--json"], input="s3cret\n")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["key_installed"] and data["add_command"].startswith("edgetune board add pz --type")
    assert "s3cret" not in r.stdout
    assert "s3cret" not in (home / ".ssh" / "authorized_keys").read_text()


def test_wrong_password_is_a_one_line_error(board):
    device, _ = board
    r = runner.invoke(app, ["board", "console", "--serial", device, "--password-stdin", "--timeout", "5"],
                      input="wrong\n")
    assert r.exit_code == 2 and "refused" in r.output and "Traceback" not in r.output


def test_a_private_key_is_never_sent(board):
    device, _ = board
    with SerialConsole.open(device, timeout=10) as con, pytest.raises(SerialConsoleError, match="public key"):
        bring_up(con, "xilinx", lambda: "s3cret", install_key="-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
