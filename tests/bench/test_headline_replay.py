"""The committed headline runs (bench/out/headline/*.json) come out again, trial for trial.

A sample of runs is tuned live on the simulator board with the run's seed and the bench's settings
(board, VTA config, template options, no output check); the best-so-far history of the first
:data:`TRIALS` trials must equal the committed one exactly. The bench replayed an exhaustive cache
of the same simulator, so a live run sees the same costs and compile features.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.testset_figures import parse_label
from toolkit.backends import make_task
from toolkit.backends.vta.backend import with_vta_preset
from toolkit.boards import resolve_board
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.session import tune
from toolkit.tuning.tuners.base import make_tuner, tuner_class
from toolkit.workloads import parse_workload

HEADLINE = Path(__file__).resolve().parents[2] / "bench" / "out" / "headline"
TRIALS = 48
SAMPLE = [("pynq", "resnet18.C11", "random"), ("pynq", "resnet18.C11", "xgb"), ("pynq", "resnet18.C11", "chameleon"),
          ("pynq", "resnet18.C11", "ml2tuner:round_order=explore_last"), ("zcu102", "resnet18.C11", "xgb"),
          ("zcu102", "resnet18.C11", "chameleon-ml2:round_order=explore_last")]


@pytest.mark.parametrize("setting,workload,tuner", SAMPLE)
def test_a_committed_headline_run_replays_trial_for_trial(setting, workload, tuner):
    """A label names the options the run set besides the defaults (``NAME:KEY=VALUE...``)."""
    bench = json.loads((HEADLINE / f"{setting}.json").read_text())
    st = bench["settings"]
    run = next(r for r in bench["runs"] if (r["workload"], r["tuner"], r["seed"]) == (workload, tuner, 0))
    board = with_vta_preset(resolve_board(st["board"].removesuffix(f"-{st['vta_config']}")), st["vta_config"])
    task = make_task(parse_workload(workload), board, **st["template_options"])
    name, options = parse_label(tuner)
    cold = {"transfer": None} if "transfer" in tuner_class(name).options else {}   # the headline ran them cold
    s = tune(task, make_tuner(name, seed=run["seed"], **cold, **options), TRIALS, measure_options=MeasureOptions())
    assert [h if math.isfinite(h) else None for h in s.history] == run["history"][:TRIALS]
