"""Tuning logs: round trip, merging, best per workload, corrupt and truncated files."""

import json
import warnings

import pytest

from toolkit.errors import LogError
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.journal import (
    Journal, LogHeader, Record, TruncatedLogWarning, best_per_workload, load_records, read_log,
)

TASK = {"workload": {"n": 1, "h": 56, "name": "resnet18.C2"}, "board": "vta-fsim", "board_type": "vta-fsim",
        "target": {"kind": "llvm"}, "template": {"template": "vta-conv2d", "bias": False}, "hw": {"LOG_BATCH": 0}}


def _write(path, n, task=TASK, tuner="random", start=0):
    with Journal(path, LogHeader(task)) as j:
        for i in range(n):
            res = MeasureResult(start + i, {"tile": [i, 1]}, costs=[1e-3 * (n - i)] if i % 3 else [],
                                error=None if i % 3 else ErrorClass.INVALID_CONFIG, message="" if i % 3 else "acc",
                                features={"f": float(i)})
            j.append(Record.from_result(res, trial=start + i, tuner=tuner, task=task))


def test_round_trip_keeps_every_field(tmp_path):
    path = tmp_path / "a.jsonl"
    _write(path, 5)
    header, recs = read_log(path)
    assert header.task == TASK and header.schema == 1 and header.tvm.startswith("0.27")
    assert [r.index for r in recs] == [0, 1, 2, 3, 4]
    assert recs[0].error == "invalid_config" and not recs[0].valid and recs[0].message == "acc"
    assert recs[4].seconds == pytest.approx(1e-3) and recs[4].features == {"f": 4.0}
    assert recs[4].to_result().seconds == pytest.approx(1e-3)
    assert recs[0].to_result().error is ErrorClass.INVALID_CONFIG
    assert recs[1].board == "vta-fsim" and recs[1].tuner == "random" and recs[1].template["template"] == "vta-conv2d"


def test_every_line_is_on_disk_after_append(tmp_path):
    path = tmp_path / "a.jsonl"
    j = Journal(path, LogHeader(TASK))
    j.open()
    j.append(Record(workload=TASK["workload"], board="vta-fsim", tuner="x", trial=0, config={}, index=1))
    assert len(path.read_text().splitlines()) == 2     # readable while the journal is still open
    j.close()


def test_truncated_last_line_is_skipped_with_a_warning_and_cut_on_reopen(tmp_path):
    path = tmp_path / "a.jsonl"
    _write(path, 4)
    full = path.read_bytes()
    path.write_bytes(full + b'{"workload": {"n": 1}, "boa')
    with pytest.warns(TruncatedLogWarning, match=r"a.jsonl:6"):
        _, recs = read_log(path)
    assert len(recs) == 4
    with pytest.warns(TruncatedLogWarning):
        j = Journal(path, LogHeader(TASK))
        assert len(j.open()) == 4
    j.append(Record(workload={}, board="vta-fsim", tuner="x", trial=4, config={}, index=99))
    j.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, recs = read_log(path)
    assert [r.index for r in recs] == [0, 1, 2, 3, 99]
    assert path.read_bytes().startswith(full)


def test_corrupt_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "a.jsonl"
    _write(path, 4)
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = "{not json\n"
    path.write_text("".join(lines))
    with pytest.raises(LogError, match=r"a.jsonl:3: not valid JSON"):
        read_log(path)
    lines[2] = json.dumps({"workload": {}, "board": "b"}) + "\n"
    path.write_text("".join(lines))
    with pytest.raises(LogError, match=r"a.jsonl:3: record lacks tuner, trial, config"):
        read_log(path)


def test_bad_header_is_an_error(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"input": ["llvm"], "config": {}, "result": [[1.0], 0], "version": 0.2}\n')
    with pytest.raises(LogError, match=r"a.jsonl:1: not an edgetune log header"):
        read_log(path)
    path.write_text(json.dumps({"edgetune_log": 99, "task": {}}) + "\n")
    with pytest.raises(LogError, match="schema 99 is not supported"):
        read_log(path)
    path.write_text("")
    with pytest.raises(LogError, match="empty tuning log"):
        read_log(path)
    with pytest.raises(LogError, match="does not exist"):
        read_log(tmp_path / "missing.jsonl")


def test_reopening_for_another_task_is_refused(tmp_path):
    path = tmp_path / "a.jsonl"
    _write(path, 2)
    other = dict(TASK, board="pynq1", hw={"LOG_BATCH": 1})
    with pytest.raises(LogError, match="belongs to another task .different board, hw"):
        Journal(path, LogHeader(other)).open()
    assert len(read_log(path)[1]) == 2


def test_merge_and_best_per_workload(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(a, 5)
    other = dict(TASK, workload={"n": 1, "h": 7, "name": None})
    _write(b, 3, task=other, start=100)
    recs = load_records([a, b])
    assert len(recs) == 8
    best = best_per_workload(recs)
    assert len(best) == 2
    assert best[recs[0].workload_key].index == 4
    assert best[recs[-1].workload_key].index == 102
    assert best_per_workload(recs, board="elsewhere") == {}


def test_foreign_records_with_free_form_config(tmp_path):
    path = tmp_path / "ms.jsonl"
    with Journal(path, LogHeader(dict(TASK, template={"template": "metaschedule"}))) as j:
        j.append(Record(workload=TASK["workload"], board="local", tuner="metaschedule", trial=0,
                        config={"trace": [["SampleTile", [4, 16]]], "hash": "abc"}, costs=[2e-4]))
    _, [rec] = read_log(path)
    assert rec.index is None and rec.config["hash"] == "abc" and rec.valid


@pytest.mark.parametrize("field,value,words", [
    ("costs", [5e-324], r"between 1e-12 and 1e\+06 seconds"),
    ("costs", [1e9], r"between 1e-12 and 1e\+06 seconds"),
    ("features", {"f": 1e308}, "finite numbers"),
    ("features", {"f": float("inf")}, "finite numbers"),
    ("features", {"f": float("nan")}, "finite numbers"),
])
def test_costs_and_features_the_models_cannot_take_are_refused_on_read(tmp_path, field, value, words):
    """A 5e-324 cost or a 1e308 feature in a log crashed three tuners on resume (xgb.train, nnls)."""
    path = tmp_path / "a.jsonl"
    _write(path, 2)
    line = json.loads(path.read_text().splitlines()[-1])
    line[field] = value
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")
    with pytest.raises(LogError, match=words):
        read_log(path)


def test_what_a_run_measures_is_written_within_what_is_read_back(tmp_path):
    path = tmp_path / "a.jsonl"
    res = MeasureResult(0, {"t": 1}, costs=[5e-324, float("inf"), 2e-3], features={"ok": 3.0, "bad": float("inf"),
                                                                                    "huge": 1e300})
    with Journal(path, LogHeader(TASK)) as j:
        j.append(Record.from_result(res, trial=0, tuner="random", task=TASK))
    rec = read_log(path)[1][0]
    assert rec.costs == [1e-12, 2e-3] and rec.features == {"ok": 3.0}


def test_a_record_line_copied_twice_is_one_measurement(tmp_path):
    from toolkit.tuning.journal import DuplicateRecordWarning

    path = tmp_path / "a.jsonl"
    _write(path, 3)
    with path.open("a") as f:
        f.write(path.read_text().splitlines()[-1] + "\n")
    with pytest.warns(DuplicateRecordWarning, match=":5: repeats an earlier record"):
        _, recs = read_log(path)
    assert len(recs) == 3


def test_best_rows_read_in_one_bounded_pass_rank_as_a_full_sort_does(tmp_path):
    """``edgetune best`` streams the log and keeps only the top records per workload: the same ranks, ties to the
    earlier trial, as sorting every record would give."""
    import random

    from toolkit.report import best_configs, best_rows

    rng = random.Random(0)
    header = LogHeader(task={"workload": {}, "board": "vta-fsim"})
    log = tmp_path / "l.jsonl"
    records = []
    with Journal(log, header) as j:
        for trial in range(300):
            wl = {"n": 1, "h": 8 + trial % 3, "w": 8, "ci": 16, "co": 16, "kh": 3, "kw": 3, "sh": 1, "sw": 1, "ph": 1,
                  "pw": 1, "name": f"w{trial % 3}"}
            valid = rng.random() > 0.3
            r = Record(workload=wl, board="vta-fsim", tuner="random", trial=trial, index=trial, config={"t": trial},
                       costs=[rng.choice([1e-3, 2e-3, 3e-3, 1e-3 * rng.random() + 1e-4])] if valid else [],
                       error=None if valid else "invalid_config")
            j.append(r)
            records.append(r)
    rows = best_rows([log], top=4)
    for name in ("w0", "w1", "w2"):
        mine = [r for r in records if r.workload["name"] == name]
        expect = [r.trial + 1 for r in best_configs(mine, 4)]
        assert [row["trial"] for row in rows if row["workload"] == name] == expect
        assert {row["trials"] for row in rows if row["workload"] == name} == {100}
