"""The bench plot and markdown tables, from a hand-made result."""

from __future__ import annotations

from toolkit.report import bench_markdown, plot_bench
from toolkit.harness import BenchResult, BenchRun, assign_trials_to_match, summarize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _result() -> BenchResult:
    runs = []
    for wl in ("a", "b", "c"):
        for tuner in ("random", "xgb", "ml2tuner"):
            for seed in range(2):
                h = [None, 3.0, 2.0 - 0.1 * seed, 1.5]
                runs.append(BenchRun(wl, tuner, seed, 4, 1, 1.5, 0.1, 0.01, h))
    assign_trials_to_match(runs, "xgb")
    opt = {"a": 1.0, "b": 1.2, "c": None}
    return BenchResult({"machine": "test box", "command": "edgetune bench ...", "date": "today"},
                       {"board": "vta-fsim", "tuners": ["random", "xgb", "ml2tuner"], "reference": "xgb",
                        "trials": 4, "seeds": 2, "replay": True},
                       {k: {"optimum": v, "space_size": 10} for k, v in opt.items()}, runs,
                       summarize(runs, opt, "xgb"))


def test_plot_has_one_line_per_tuner_and_the_optimum_dashed(tmp_path):
    path = tmp_path / "bench.png"
    fig = plot_bench(_result(), path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["a", "b", "c"]
    assert [len(ax.get_lines()) for ax in axes] == [4, 4, 3]   # 3 tuners (+ optimum where known)
    dashed = [line for line in axes[0].get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_ydata()[0] == 1.0e3
    assert len(axes[0].collections) == 3                      # one min-max band per tuner


def test_markdown_names_machine_command_date_and_every_tuner():
    md = bench_markdown(_result(), "pynq")
    assert md.startswith("### pynq")
    for text in ("test box", "`edgetune bench ...`", "today", "| random |", "| xgb |", "| ml2tuner |",
                 "| c | 10 | - |"):
        assert text in md


def test_the_log_report_does_not_turn_a_small_gain_into_a_cliff_and_says_it_is_simulated(tmp_path):
    """A layer log whose best improves by a few percent: a linear axis from zero (no log axis), the title says the
    latency comes from the simulator's timing model, the invalid panel is a share in 0..100 %."""
    from toolkit.backends import make_task
    from toolkit.boards import resolve_board
    from toolkit.report import log_report
    from toolkit.tuning.session import tune
    from toolkit.tuning.tuners.base import make_tuner
    from toolkit.workloads import parse_workload

    log = tmp_path / "c2.jsonl"
    tune(make_task(parse_workload("resnet18.C2"), resolve_board("vta-fsim")), make_tuner("random", seed=0), 24,
         log=log)
    fig = log_report([log], tmp_path / "r.png")
    conv, invalid = fig.axes[0], fig.axes[1]
    assert conv.get_yscale() == "linear" and conv.get_ylim()[0] == 0
    assert "simulated" in conv.get_title()
    assert invalid.get_ylim() == (0, 100) and len(invalid.lines) == 1
