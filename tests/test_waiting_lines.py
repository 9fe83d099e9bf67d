"""On a terminal a command says what it waits for before its first output; off a terminal it says nothing."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys


def _on_a_terminal(args: list[str], timeout: float = 300.0) -> str:
    """Run ``python -m toolkit ARGS`` with stdout and stderr on a pseudo-terminal; everything it printed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", *args], stdout=slave, stderr=slave, stdin=slave,
                            env={**os.environ, "COLUMNS": "200", "TERM": "xterm"}, close_fds=True)
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                raise AssertionError(f"no output for {timeout} s: {out[-500:]!r}")
            try:
                chunk = os.read(master, 65536)
            except OSError:     # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        proc.wait(timeout=60)
        os.close(master)
    return out.decode(errors="replace")


def test_tune_on_a_tvm_board_says_it_reaches_the_board_first_and_uses_the_measurement_settings(tmp_path):
    """On a terminal, the wait for the board is said first; ``--repeat 2`` reaches the board's runner (every valid
    record holds two costs; vta-fsim would ignore it)."""
    from toolkit.tuning.journal import read_log

    log = tmp_path / "l.jsonl"
    text = _on_a_terminal(["tune", "-b", "local", "-w", "conv2d:H=8,W=8,CI=8,CO=8,K=3,S=1,P=1", "-t", "random",
                           "-n", "2", "--repeat", "2", "--number", "1", "--timeout", "20", "--log", str(log)])
    assert "reaching board local through its RPC tracker" in text, text[-2000:]
    assert text.index("reaching board local") < text.index("tuning summary")
    valid = [rec for rec in read_log(log)[1] if rec.valid]
    assert valid and all(len(rec.costs) == 2 for rec in valid)
