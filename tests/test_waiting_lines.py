"""On a terminal a command says what it waits for before its first output; off a terminal it says nothing."""

from __future__ import annotations

import subprocess
import sys

from toolkit.testing.terminal import on_a_terminal


def _on_a_terminal(args: list[str], timeout: float = 300.0) -> str:
    return on_a_terminal(args, timeout=timeout).text


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


def test_a_wait_is_said_with_its_time_on_a_terminal_and_not_at_all_off_one():
    text = _on_a_terminal(["workloads", "extract", "resnet18"])
    line = next(ln for ln in text.replace("\r", "\n").splitlines() if "tracing model resnet18" in ln)
    assert "0:00:0" in line, line           # the seconds so far, beside a spinner
    assert text.index("tracing model resnet18") < text.index("resnet18.L1")
    piped = subprocess.run([sys.executable, "-m", "toolkit", "workloads", "extract", "resnet18"], capture_output=True,
                           text=True, timeout=300)
    assert piped.returncode == 0 and "tracing" not in piped.stderr + piped.stdout
