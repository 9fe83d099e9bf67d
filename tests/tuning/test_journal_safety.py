"""One writer per log, only regular files as logs, hostile lines refused in one line, nothing recorded lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.backends import make_task
from toolkit.boards import resolve_board
from toolkit.errors import LogError
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.journal import Journal, LogHeader, Record, read_log
from toolkit.tuning.session import tune
from toolkit.tuning.tuners.base import make_tuner
from toolkit.workloads import parse_workload

TASK = {"workload": {"n": 1, "h": 7}, "board": "vta-fsim", "target": {"kind": "llvm"}, "template": {}, "hw": None}
SMALL = "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1"
EDGETUNE = [sys.executable, "-m", "toolkit"]


def _record(n: int, **extra) -> dict:
    rec = Record(workload=TASK["workload"], board="vta-fsim", tuner="random", trial=n, config={"t": n},
                 index=n, costs=[1e-3]).to_json()
    return {**rec, **extra}


def _log(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "log.jsonl"
    header = LogHeader(TASK).to_json()
    path.write_text("".join(json.dumps(x) + "\n" if not isinstance(x, str) else x for x in (header, *lines)))
    return path


def test_a_second_journal_on_the_same_log_is_refused_naming_the_holder(tmp_path):
    path = tmp_path / "a.jsonl"
    first = Journal(path, LogHeader(TASK))
    first.open()
    first.append(Record(**{k: v for k, v in _record(0).items() if k in Record.__dataclass_fields__}))
    with pytest.raises(LogError, match=rf"being written by pid {os.getpid()}"):
        Journal(path, LogHeader(TASK)).open()
    first.close()
    again = Journal(path, LogHeader(TASK))
    assert len(again.open()) == 1          # the lock went with the first writer
    again.close()


def test_two_cli_writers_one_log_nothing_lost_nothing_twice(tmp_path):
    """The reproduction: a second `tune --resume` on a log another run is writing."""
    log = tmp_path / "L.jsonl"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    first = subprocess.Popen([*EDGETUNE, "tune", "-b", "vta-fsim", "-w", "resnet18.C5", "-t", "random", "-n", "400",
                              "--seed", "3", "--log", str(log)], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count("\n") < 11):
            time.sleep(0.1)
        second = subprocess.run([*EDGETUNE, "tune", "-b", "vta-fsim", "-w", "resnet18.C5", "-t", "random", "-n",
                                 "400", "--seed", "4", "--resume", "--log", str(log)], env=env, capture_output=True,
                                text=True, timeout=300)
    finally:
        assert first.wait(timeout=300) == 0, first.stderr.read()
    errors = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
    assert second.returncode == 2 and len(errors) == 1 and "is being written by pid" in errors[0]
    assert "Traceback" not in second.stderr
    _, recs = read_log(log)
    assert [r.trial for r in recs] == list(range(400))
    assert len({r.index for r in recs}) == 400


@pytest.mark.parametrize("make", [
    lambda tmp: tmp,                                   # a directory
    lambda tmp: Path("/dev/null"),                     # a character device
    lambda tmp: (tmp / "file").write_text("x") and tmp / "file" / "log.jsonl",   # under a regular file
])
def test_only_regular_files_are_logs(tmp_path, make):
    path = make(tmp_path)
    task = make_task(parse_workload(SMALL), resolve_board("vta-fsim"))
    with pytest.raises(LogError, match="folder|regular file|is a file"):
        tune(task, make_tuner("random"), 2, log=path, resume=True)


def test_resume_on_a_file_that_is_no_log_leaves_it_alone(tmp_path):
    task = make_task(parse_workload(SMALL), resolve_board("vta-fsim"))
    for text in ("hello world", "hello\nworld\n"):
        path = tmp_path / "notes.txt"
        path.write_text(text)
        with pytest.raises(LogError):
            tune(task, make_tuner("random"), 2, log=path, resume=True)
        assert path.read_text() == text


@pytest.mark.parametrize("line,what", [
    ("[" * 100000 + "]" * 100000 + "\n", "nested"),
    ('{"trial": ' + "9" * 5000 + "}\n", "corrupt"),
    (json.dumps(_record(1, costs=[float("nan")])) + "\n", "every cost must be between"),
    (json.dumps(_record(1, costs=[-1e-3])) + "\n", "every cost must be between"),
    (json.dumps(_record(1, costs=[0])) + "\n", "every cost must be between"),
    (json.dumps(_record(1, costs="fast")) + "\n", "costs"),
    (json.dumps(_record(1, trial="one")) + "\n", "trial"),
    (json.dumps(_record(1, config=[1, 2])) + "\n", "config"),
    (json.dumps(_record(1, features={"f": "x"})) + "\n", "features"),
    (json.dumps(_record(1, error="melted")) + "\n", "unknown error"),
    (json.dumps(_record(1, index=-5)) + "\n", "negative"),
])
def test_hostile_lines_are_one_line_errors_naming_the_line(tmp_path, line, what):
    path = _log(tmp_path, _record(0), line)
    with pytest.raises(LogError, match=rf"log.jsonl:3: .*{what}") as info:
        read_log(path)
    assert "\n" not in str(info.value)


def test_a_header_with_wrong_types_is_refused(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({**LogHeader(TASK).to_json(), "created": {"a": 1}}) + "\n")
    with pytest.raises(LogError, match="created"):
        read_log(path)


def test_resume_refuses_records_of_another_workload(tmp_path):
    task = make_task(parse_workload(SMALL), resolve_board("vta-fsim"))
    log = tmp_path / "a.jsonl"
    tune(task, make_tuner("random", seed=0), 4, log=log)
    before = log.read_text()
    other = json.loads(before.splitlines()[1])
    other["workload"] = {**other["workload"], "h": 28}
    log.write_text(before + json.dumps(other) + "\n")
    with pytest.raises(LogError, match="another workload"):
        tune(task, make_tuner("random", seed=0), 8, log=log, resume=True)
    assert log.read_text() == before + json.dumps(other) + "\n"


def test_resume_refuses_an_index_outside_the_space(tmp_path):
    task = make_task(parse_workload(SMALL), resolve_board("vta-fsim"))
    log = tmp_path / "a.jsonl"
    tune(task, make_tuner("random", seed=0), 2, log=log)
    rec = json.loads(log.read_text().splitlines()[1])
    rec.update(index=10 ** 9, trial=2)
    log.write_text(log.read_text() + json.dumps(rec) + "\n")
    with pytest.raises(LogError, match="outside this task's space"):
        tune(task, make_tuner("random", seed=0), 8, log=log, resume=True)


def test_a_tuner_on_a_space_where_nothing_builds_ends_as_exhausted(tmp_path):
    """ml2tuner compiles candidates without trials: where none compiles it must still end."""
    from toolkit.tuning.core.builder import Builder
    from toolkit.tuning.core.result import ErrorClass

    class NothingBuilds(Builder):
        def build(self, template, configs):
            return [MeasureResult(c.index, c.values, error=ErrorClass.COMPILE_ERROR, message="no") for c in configs]

    task = make_task(parse_workload(SMALL), resolve_board("vta-fsim"))
    s = tune(task, make_tuner("ml2tuner", seed=0, sa_chains=16, sa_steps=50), 64, builder=NothingBuilds())
    assert s.stopped == "exhausted" and s.valid == 0


def test_a_log_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    (tmp_path / "log.jsonl").symlink_to(victim)
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    for name in ("log.jsonl", "dangling.jsonl"):
        with pytest.raises(LogError, match="symbolic link"):
            Journal(tmp_path / name, LogHeader({"workload": {}})).open()
    assert victim.read_text() == "someone else's file\n" and not (tmp_path / "nowhere.jsonl").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_log_owned_by_another_user_is_refused(tmp_path):
    planted = tmp_path / "planted.jsonl"
    planted.write_text("")
    os.chown(planted, 65534, 65534)
    with pytest.raises(LogError, match="belongs to another user"):
        Journal(planted, LogHeader({"workload": {}})).open()
    assert planted.read_text() == ""


def test_a_full_disk_during_tune_is_one_line_naming_the_log_and_the_records_before_stay(tmp_path):
    """A write that fails (here: the file-size limit, as a full disk fails it) ends the run with one line that
    names the log; closing the log does not raise again and mask it; what was written reads back."""
    import resource
    import signal

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))

    r = subprocess.run([*EDGETUNE, "tune", "-w", "resnet18.C2", "-t", "random", "-n", "64", "--log", "l.jsonl"],
                       cwd=tmp_path, preexec_fn=limit, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("wait:")]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "cannot write tuning log l.jsonl" in lines[0] and "Traceback" not in r.stderr
    with pytest.warns(Warning):   # the record cut by the limit is a truncated last line
        records = read_log(tmp_path / "l.jsonl")[1]
    assert 0 < len(records) < 64
