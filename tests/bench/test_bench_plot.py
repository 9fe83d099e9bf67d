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
    for text in ("test box", "`edgetune bench ...`", "today", "| random |", "| xgb |", "| ml2tuner |", "| c | 10 | - |"):
        assert text in md
