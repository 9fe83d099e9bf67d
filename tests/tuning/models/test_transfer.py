"""The cross-task transfer model: fitting, files (and hostile ones), logs as training data, a growing model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from toolkit.errors import LogError
from toolkit.testing.conformance import TunerConformance, synthetic_compile, synthetic_measure, synthetic_space, \
    with_compiler
from toolkit.tuning.core.result import MeasureResult
from toolkit.tuning.models.transfer import GrowingTransfer, TransferModel, log_files, transfer_model_from
from toolkit.tuning.tuners.ml2tuner import ML2Tuner


def physics_task(rng: np.random.Generator, scale: float, n: int = 80, threads: bool = False):
    """Configs of one shape: seconds = 1e-9 * (a + 4 b) (x 0.6 with threads), features in hardware units."""
    out = []
    for _ in range(n):
        a, b = rng.uniform(1, 10) * scale, rng.uniform(1, 10) * scale
        t = float(rng.integers(1, 3)) if threads else 1.0
        secs = 1e-9 * (a + 4 * b) * (0.6 if t > 1 else 1.0)
        out.append(({"time.a": a, "time.b": b, "threads.total": t, "occ.inp": rng.uniform()}, secs))
    return out


def synthetic_records(n: int = 120):
    space = synthetic_space()
    out = []
    for i in np.random.default_rng(3).choice(space.size, n, replace=False):
        f = synthetic_compile(space, [int(i)])[0]
        r = synthetic_measure(space, int(i))
        if isinstance(f, dict) and r.valid:
            out.append((f, r.seconds))
    return out


def test_time_model_extrapolates_to_larger_shapes_and_groups_threads():
    rng = np.random.default_rng(0)
    m = TransferModel(seed=0).fit([physics_task(rng, 1e3, threads=True), physics_task(rng, 4e3, threads=True)])
    held = physics_task(rng, 1e5, threads=True)    # 25x the largest training shape
    pred = m.predict_seconds([f for f, _ in held])
    truth = np.array([s for _, s in held])
    assert np.median(np.abs(pred / truth - 1)) < 0.05
    # ranking within the held-out task: the predicted best is among the truly best few
    assert truth[np.argmin(pred)] <= np.sort(truth)[2]


def test_without_time_terms_it_ranks_within_a_task():
    recs = synthetic_records()
    m = TransferModel(seed=0).fit([recs[:60], recs[60:]])
    pred = m.predict_seconds([f for f, _ in recs])
    truth = np.array([s for _, s in recs])
    assert np.corrcoef(np.argsort(np.argsort(pred)), np.argsort(np.argsort(truth)))[0, 1] > 0.5


def test_fine_tuning_a_base_model_follows_the_new_records():
    rng = np.random.default_rng(1)
    base = TransferModel(seed=0).fit([physics_task(rng, 1e3)])
    slower = [(f, 3 * s) for f, s in physics_task(rng, 2e3)]      # another board: 3x slower, same ranking
    tuned = TransferModel(seed=0).fit([slower], base=base)
    probe = physics_task(rng, 2e3, n=20)
    ratio = tuned.predict_seconds([f for f, _ in probe]) / np.array([s for _, s in probe])
    assert np.median(ratio) == pytest.approx(3.0, rel=0.1)
    with pytest.raises(ValueError, match="not saved"):
        tuned.to_json()


def test_save_and_load_give_the_same_predictions(tmp_path):
    rng = np.random.default_rng(2)
    m = TransferModel(seed=0, rounds=20).fit([physics_task(rng, 1e3), physics_task(rng, 5e3)], trained_on="two")
    path = tmp_path / "model.json"
    m.save(path)
    back = TransferModel.load(path)
    feats = [f for f, _ in physics_task(rng, 3e3, n=10)]
    assert np.allclose(back.predict_seconds(feats), m.predict_seconds(feats))
    assert back.trained_on_ == "two"
    assert transfer_model_from(path).trained_on_ == "two"     # a model file is taken as it is


@pytest.mark.parametrize("content", [
    "", "[1, 2]", "{\"format\": \"edgetune-transfer-model\", \"version\": 99}",
    "{\"format\": \"edgetune-transfer-model\", \"version\": 1, \"params\": {\"evil\": 1}}",
    "{\"format\": \"edgetune-transfer-model\", \"version\": 1, \"params\": {}, \"keys\": [],"
    " \"term_keys\": [\"time.a\"], \"coef\": [1.0], \"scale\": [1.0], \"booster\": {}}",
    "\x00\xff garbage",
])
def test_a_hostile_model_file_is_a_one_line_error(tmp_path, content):
    path = tmp_path / "model.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content)
    with pytest.raises(LogError) as exc:
        TransferModel.load(path)
    assert "\n" not in str(exc.value)


def test_logs_folders_and_bad_sources(tmp_path):
    with pytest.raises(LogError, match="holds no tuning logs"):
        log_files(tmp_path)
    with pytest.raises(LogError, match="does not exist"):
        transfer_model_from(tmp_path / "missing.jsonl")
    (tmp_path / "notes.jsonl").write_text("hello\n")
    with pytest.raises(LogError, match="neither a tuning log nor a transfer model"):
        transfer_model_from(tmp_path / "notes.jsonl")


def test_a_tuning_log_trains_a_model(tmp_path):
    """A real simulator log: the records' compile features (not the simulator's counters) train the model."""
    from toolkit.backends import make_task
    from toolkit.boards import resolve_board
    from toolkit.tuning.session import tune
    from toolkit.tuning.tuners.base import make_tuner
    from toolkit.workloads import parse_workload

    task = make_task(parse_workload("conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1"), resolve_board("vta-fsim"))
    tune(task, make_tuner("random", seed=0), 24, log=tmp_path / "logs" / "a.jsonl")
    model = transfer_model_from(tmp_path / "logs")
    assert model.term_keys_ and not any(k.startswith("sim.") for k in model.keys_)
    assert "1 tasks" in model.trained_on_


def test_growing_model_refits_only_when_records_grow():
    rng = np.random.default_rng(4)
    g = GrowingTransfer(min_records=10, growth=2.0)
    as_results = [MeasureResult(i, {}, costs=[s], features=f) for i, (f, s) in enumerate(physics_task(rng, 1e3, 8))]
    g.add(0, as_results)
    assert g.current() is None                        # 8 < 10 records
    g.add(1, as_results[:4])
    first = g.current()
    assert first is not None and g.current() is first  # 12 records: fitted once, not again
    g.add(2, as_results * 2)
    assert g.current() is not first                    # 28 >= 2 x 12: refitted


def _synthetic_model() -> TransferModel:
    recs = synthetic_records()
    return TransferModel(seed=0, rounds=30).fit([recs])


class TestML2TunerWithTransfer(TunerConformance):
    """ml2tuner starting from a transfer model: the tuner contract still holds."""

    tuner_factory = staticmethod(lambda seed: with_compiler(ML2Tuner(
        seed=seed, plan_size=16, alpha=1, sa_chains=32, sa_steps=100, max_rounds=100, prior_pool=64,
        transfer=_synthetic_model())))


def test_transfer_option_refuses_what_is_not_a_model():
    from toolkit.errors import ConfigError

    with pytest.raises(ConfigError, match="not a transfer model"):
        ML2Tuner(transfer="logs/")
    assert json.dumps(ML2Tuner(transfer="pretrained").params["transfer"]) == '"pretrained"'


def _crafted(tmp_path, change) -> str:
    """The shipped Pynq model with one tree changed by ``change``, written as a model file."""
    import copy

    from toolkit.backends.vta.pretrained import FOLDER

    d = json.loads(sorted(FOLDER.glob("*.json"))[0].read_text())
    d = copy.deepcopy(d)
    change(d["booster"]["learner"]["gradient_booster"]["model"]["trees"][0], d)
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(d))
    return str(path)


CRAFTED = {
    "split feature out of range": lambda t, d: t["split_indices"].__setitem__(0, 10**6),
    "a child loop": lambda t, d: t["left_children"].__setitem__(t["left_children"][0], 0),
    "a shared child": lambda t, d: t["right_children"].__setitem__(0, t["left_children"][0]),
    "a short array": lambda t, d: t["parents"].pop(),
    "a parent out of range": lambda t, d: t["parents"].__setitem__(3, 10**6),
    "a default_left that is not 0 or 1": lambda t, d: t["default_left"].__setitem__(3, 7),
    "another feature count": lambda t, d: d["booster"]["learner"]["learner_model_param"].__setitem__("num_feature",
                                                                                                      "3"),
}


@pytest.mark.parametrize("what", sorted(CRAFTED))
def test_a_crafted_booster_is_refused_before_xgboost_sees_it(tmp_path, what):
    """Each of these segfaulted edgetune in predict (or crashed xgboost) when loaded unchecked."""
    path = _crafted(tmp_path, CRAFTED[what])
    with pytest.raises(LogError) as exc:
        TransferModel.load(path)
    assert "\n" not in str(exc.value)


def test_deeply_nested_json_is_refused_not_a_recursion_traceback(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"format": "edgetune-transfer-model", "booster": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(LogError):
        TransferModel.load(path)
    with pytest.raises(LogError):
        transfer_model_from(path)


def test_a_crafted_transfer_file_is_one_line_and_exit_2_not_a_segfault(tmp_path):
    import subprocess
    import sys

    path = _crafted(tmp_path, CRAFTED["a child loop"])
    proc = subprocess.run([sys.executable, "-m", "toolkit", "tune", "-w", "resnet18.C2", "-b", "vta-fsim", "-n", "2",
                           "--transfer", path, "--log", str(tmp_path / "l.jsonl")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-1000:])
    assert "do not form a tree" in proc.stderr and "Traceback" not in proc.stderr


def _tree_edits():
    from hypothesis import strategies as st

    fields = st.sampled_from(["left_children", "right_children", "parents", "split_indices", "default_left"])
    return st.lists(st.tuples(fields, st.integers(0, 40), st.integers(-3, 10 ** 6)), min_size=1, max_size=4)


def _edited_boosters_load_or_are_refused(tmp: str) -> None:
    """The property of the next test, run in a child process: its examples, the last one written to ``tmp``."""
    import copy

    from hypothesis import given, seed, settings

    from toolkit.backends.vta.pretrained import FOLDER

    base = json.loads(sorted(FOLDER.glob("*.json"))[0].read_text())
    features = [{k: 1.0 for k in ("time.compute", "time.load", "uops", "footprint")}]

    @settings(max_examples=100, deadline=None, database=None)
    @given(_tree_edits())
    def prop(edits):
        d = copy.deepcopy(base)
        tree = d["booster"]["learner"]["gradient_booster"]["model"]["trees"][0]
        for name, pos, value in edits:
            if pos < len(tree[name]):
                tree[name][pos] = value
        path = Path(tmp) / "edited.json"
        path.write_text(json.dumps(d))
        (Path(tmp) / "last-edit.txt").write_text(repr(edits))    # what a crash leaves to read
        try:
            model = TransferModel.load(path)
        except LogError as exc:
            assert "\n" not in str(exc)
            return
        assert np.isfinite(model.predict_seconds(features)).all()

    for n in range(3):   # fixed seeds: the same examples every run
        seed(n)(prop)()


def test_any_edited_booster_loads_and_predicts_or_is_one_line(tmp_path):
    """Property: a shipped model whose first tree's arrays are edited at random either loads and predicts finite
    numbers or is refused with a one-line LogError; never a crash inside XGBoost. The examples run in a spawned
    child (a fork would inherit XGBoost's thread pool), so a crash fails this test, naming the edit, instead of
    ending the session."""
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(target=_edited_boosters_load_or_are_refused,
                                                         args=(str(tmp_path),))
    child.start()
    child.join()
    last = (tmp_path / "last-edit.txt").read_text() if (tmp_path / "last-edit.txt").exists() else "none"
    assert child.exitcode == 0, (f"the property failed or crashed the child (exit code {child.exitcode}); "
                                 f"last edit {last}")
