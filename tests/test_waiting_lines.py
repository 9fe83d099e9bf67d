"""A command says what it waits for before its first output: on a terminal with a spinner, off one as plain
``wait:`` lines."""

from __future__ import annotations

import re
import subprocess
import sys
import time

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


def test_a_wait_is_said_with_its_time_on_a_terminal_and_as_plain_lines_off_one():
    text = _on_a_terminal(["workloads", "extract", "resnet18"])
    line = next(ln for ln in text.replace("\r", "\n").splitlines() if "tracing model resnet18" in ln)
    assert "0:00:0" in line, line           # the seconds so far, beside a spinner
    assert "wait:" not in text
    assert text.index("tracing model resnet18") < text.index("resnet18.L1")
    piped = subprocess.run([sys.executable, "-m", "toolkit", "workloads", "extract", "resnet18"], capture_output=True,
                           text=True, timeout=300)
    assert piped.returncode == 0 and "resnet18.L1" in piped.stdout
    lines = piped.stderr.splitlines()
    assert lines[0].startswith("wait: tracing model resnet18"), piped.stderr
    assert re.fullmatch(r"wait: tracing model resnet18 .*: done in \d+\.\d s", lines[-1]), piped.stderr


def test_off_a_terminal_a_long_wait_says_it_still_waits(monkeypatch, capsys):
    """Every ``WAIT_EVERY_S`` a plain line with the seconds so far; a wait under a second has no closing line."""
    from toolkit import console

    monkeypatch.setattr(console, "WAIT_EVERY_S", 0.2)
    with console.waiting("the board [x]"):
        time.sleep(1.1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "wait: the board [x]"
    assert 3 <= sum(ln.endswith("s so far") for ln in lines) <= 6, lines
    assert re.fullmatch(r"wait: the board \[x\]: done in 1\.\d s", lines[-1]), lines
    with console.waiting("quick"):
        pass
    assert capsys.readouterr().err.splitlines() == ["wait: quick"]


def test_every_summary_says_how_long_the_whole_command_took(tmp_path):
    """export and run (a model, kernels) and tune end with the command's time, start-up included."""
    from typer.testing import CliRunner

    from toolkit.cli.app import app

    cli = CliRunner()
    took = re.compile(r"the command[\s│:]*(took )?[\d.]+ s")
    r = cli.invoke(app, ["tune", "-w", "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1", "-t", "random", "-n", "4",
                         "--seed", "1", "--log", str(tmp_path / "k.jsonl")])     # seed 1: valid configs
    assert r.exit_code == 0 and re.search(r"the command: [\d.]+ s, start-up included", r.output), r.output
    for args in (["export", "--log", str(tmp_path / "k.jsonl"), "--out", str(tmp_path / "k")],
                 ["run", str(tmp_path / "k"), "-b", "vta-fsim"],
                 ["export", "--model", "resnet18", "-b", "vta-fsim", "--out", str(tmp_path / "m")],
                 ["run", str(tmp_path / "m"), "-b", "vta-fsim", "--no-check"]):
        r = cli.invoke(app, args)
        assert r.exit_code == 0 and took.search(" ".join(r.output.split())), (args, r.output[-2000:])


def test_plain_progress_says_when_a_task_starts_and_a_transient_bar_its_status(monkeypatch, capsys):
    """Off a terminal a task's first line comes when it starts; a transient bar (a wait inside a command) prints its
    status as ``wait:`` lines, at most one per ``status_every_s``."""
    from toolkit import console

    with console.PlainProgress() as bar:
        task = bar.add_task("tune random C5", total=8, status="")
        bar.update(task, completed=1)
    assert capsys.readouterr().err.splitlines() == ["wait: tune random C5: started", "tune random C5: 1/8"]
    monkeypatch.setattr(console.PlainProgress, "status_every_s", 0.3)
    with console.PlainProgress(transient=True) as bar:
        task = bar.add_task("export", total=None, status="")
        bar.update(task, status="building conv1")
        bar.update(task, status="building conv2")            # too soon: not said
        time.sleep(0.35)
        bar.update(task, status="building conv3")
    assert capsys.readouterr().err.splitlines() == ["wait: export: building conv1", "wait: export: building conv3"]
