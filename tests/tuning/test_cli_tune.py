"""``edgetune tune`` / ``edgetune tuners``: JSON output, errors, and crash safety under SIGKILL."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolkit.cli.app import app
from toolkit.tuning.journal import read_log

runner = CliRunner()
SMALL = "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1"     # 256 configs, ~30 ms a trial on the simulator


def test_tune_json_summary(tmp_path):
    log = tmp_path / "small.jsonl"
    res = runner.invoke(app, ["tune", "--workload", SMALL, "--tuner", "ga", "--trials", "12",
                              "--log", str(log), "--seed", "3", "--option", "pop_size=6", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["trials"] == 12 and out["log"] == str(log) and out["board"] == "vta-fsim"
    assert set(out) >= {"best_config", "best_seconds", "best_gops", "trials", "invalid", "wall_s", "log"}
    recs = read_log(log)[1]
    assert len(recs) == 12 and out["invalid"] == sum(not r.valid for r in recs)
    if out["best_seconds"] is not None:
        assert out["best_gops"] == pytest.approx(2 * 14 * 14 * 32 * 32 * 9 / out["best_seconds"] / 1e9)
        assert out["best_config"] == min((r for r in recs if r.valid), key=lambda r: r.seconds).config


def test_tune_table_output_and_tvm_compat(tmp_path):
    log = tmp_path / "small.jsonl"
    res = runner.invoke(app, ["tune", "-w", SMALL, "-t", "random", "-n", "4", "--log", str(log),
                              "--tvm-compat"])
    assert res.exit_code == 0, res.output
    assert "tuning summary" in res.stdout and "best GOPS" in res.stdout
    assert read_log(log)[0].task["template"]["tvm_compat"] is True


@pytest.mark.parametrize("args, message", [
    (["--tuner", "nope"], "unknown tuner 'nope'"),
    (["--option", "plan_size"], "is not KEY=VALUE"),
    (["--option", "warp=3"], "has no option(s) ['warp']"),
    (["--option", "loss=huber"], "must be one of ['rank', 'reg']"),
    (["--workload", "resnet18.C99"], "has no layer 'C99'"),
])
def test_bad_input_is_a_one_line_error(tmp_path, args, message):
    base = ["tune", "--workload", SMALL, "--trials", "2", "--log", str(tmp_path / "x.jsonl")]
    res = runner.invoke(app, base + args)
    assert res.exit_code == 2
    assert message in " ".join(res.output.split()) and "Traceback" not in res.output
    assert not (tmp_path / "x.jsonl").exists()


def test_tuners_lists_option_tables():
    res = runner.invoke(app, ["tuners", "--json"])
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert {"random", "grid", "ga", "xgb"} <= set(data)
    assert data["xgb"]["options"]["plan_size"]["default"] == 64
    assert data["xgb"]["options"]["loss"]["choices"] == ["rank", "reg"]
    assert data["ga"]["options"]["pop_size"]["default"] == 100
    res = runner.invoke(app, ["tuners"])
    assert res.exit_code == 0 and "mutation_prob" in res.stdout


def test_research_switches_are_listed_apart_from_the_everyday_options():
    ml2 = json.loads(runner.invoke(app, ["tuners", "ml2tuner", "--json"]).stdout)["ml2tuner"]["options"]
    experimental = {k for k, o in ml2.items() if o.get("experimental")}
    assert {"use_a", "a_invalid", "a_pool", "negatives_in_p"} <= experimental
    assert not experimental & {"plan_size", "alpha", "precision", "transfer", "prior_check"}
    res = runner.invoke(app, ["tuners", "ml2tuner"])
    everyday, research = res.stdout.split("experimental options")
    assert "prior_check" in everyday and "use_a" not in everyday and "use_a" in research
    listing = runner.invoke(app, ["tuners"]).stdout
    assert "negatives_in_p" not in listing and "prior_check" in " ".join(listing.split())


def _count(log: Path) -> int:
    try:
        return max(0, log.read_bytes().count(b"\n") - 1)
    except FileNotFoundError:
        return 0


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_loses_nothing_and_measures_nothing_twice(tmp_path):
    log = tmp_path / "small.jsonl"
    cmd = [sys.executable, "-m", "toolkit", "tune", "--workload", SMALL, "--tuner", "xgb",
           "--option", "plan_size=16", "--trials", "120", "--log", str(log), "--seed", "5", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _count(log) < 30 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the tuning run finished before it could be killed; raise --trials"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    killed_at = log.read_bytes()
    complete = killed_at[: killed_at.rfind(b"\n") + 1]
    n_before = complete.count(b"\n") - 1
    assert 30 <= n_before < 120

    res = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["trials"] == 120 and out["resumed"] == n_before
    after = log.read_bytes()
    assert after.startswith(complete), "a record written before the crash changed"
    _, recs = read_log(log)
    assert len(recs) == 120 and [r.trial for r in recs] == list(range(120))
    assert len({r.index for r in recs}) == 120, "a config was measured twice"


def test_a_truncated_last_line_is_warned_about_once_on_resume(tmp_path, recwarn):
    from toolkit.tuning.journal import TruncatedLogWarning

    log = tmp_path / "t.jsonl"
    first = runner.invoke(app, ["tune", "-w", "resnet18.C11", "-n", "2", "-t", "random", "--log", str(log)])
    assert first.exit_code == 0, first.output
    with log.open("a") as f:
        f.write('{"workload": {"n"')          # a write cut by a crash
    recwarn.clear()
    r = runner.invoke(app, ["tune", "-w", "resnet18.C11", "-n", "3", "-t", "random", "--log", str(log), "--resume"])
    assert r.exit_code == 0, r.output
    assert sum(issubclass(w.category, TruncatedLogWarning) for w in recwarn) == 1
    assert len(read_log(log)[1]) == 3


def _numpy_loaded(pid: int) -> bool:
    """Whether the process has mapped numpy's extension (edgetune's command line is loading: Python has started)."""
    try:
        return "_multiarray_umath" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _records(log: Path) -> int:
    return max(0, log.read_bytes().count(b"\n") - 1) if log.exists() else 0


@pytest.mark.parametrize("when, sig", [("starting", signal.SIGINT), ("tuning", signal.SIGINT),
                                       ("tuning", signal.SIGTERM)])
def test_ctrl_c_or_sigterm_while_starting_or_tuning_is_one_line(tmp_path, when, sig):
    """Sent while the command line loads (numpy mapped, the command not yet running) or once trials are logged;
    either way, and for SIGTERM as for Ctrl-C: one line, and exit 130 (or the SIGINT status a shell also shows as
    130). (A signal before Python itself has started cannot be answered by edgetune: the waits rule that out.)"""
    log = tmp_path / "l.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "tune", "-w", "resnet18.C2", "-n", "100000", "-t",
                             "random", "--log", str(log)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            # a shell's background job ignores SIGINT, and its children inherit that: undo it
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ready = (lambda: _numpy_loaded(proc.pid)) if when == "starting" else (lambda: _records(log) > 0)
    deadline = time.monotonic() + 120
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode in (130, -signal.SIGINT) and "Traceback" not in err, err
    assert lines[-1].startswith("error: interrupted") and len([ln for ln in lines if "error" in ln]) == 1, err


def test_a_board_whose_agent_never_came_fails_before_tuning_within_its_wait(tmp_path):
    """A board registered in the inventory but with no server under its key: the command says how long it waits
    (``--wait-board``, at most the wait for a board never seen) and fails before the tuner's first compile."""
    from toolkit.boards import BoardEntry, Inventory
    from toolkit.rpc.tracker import NEVER_SEEN_S, local_rpc
    from toolkit.testing.cli import one_line_error

    Inventory().add(BoardEntry("pz-no-agent", "pynq-z1", host="127.0.0.1", rpc_key="nobody-here"))
    log = tmp_path / "never.jsonl"
    with local_rpc("local") as (host, port):
        for wait, said in ((1, 1), (60, NEVER_SEEN_S)):
            r = runner.invoke(app, ["tune", "-b", "pz-no-agent", "--tracker", f"{host}:{port}", "-w", "resnet18.C5",
                                    "-n", "4", "--wait-board", str(wait), "--log", str(log)])
            assert f"waiting up to {said:.0f} s for board pz-no-agent" in r.output, r.output
            assert f"under key 'nobody-here' (waited {said:.0f} s)" in one_line_error(r)
            assert not log.exists()             # nothing was tuned: the board is reached first
