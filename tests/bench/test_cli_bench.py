"""``edgetune bench`` and ``edgetune report`` end to end on the VTA simulator."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from toolkit.cli.app import app

SMALL = "conv2d:H=4,W=4,CI=16,CO=16,K=3,S=1,P=1"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN_KEYS = {"workload", "tuner", "seed", "trials", "invalid", "best_seconds", "wall_s", "tuner_s", "history",
            "trials_to_match"}


@pytest.fixture(scope="module")
def bench_out(tmp_path_factory):
    """One replayed bench of random and xgb on a 36-config workload (the cache is built on the simulator)."""
    d = tmp_path_factory.mktemp("bench")
    res = CliRunner().invoke(app, ["bench", "--board", "vta-fsim", "--workloads", SMALL, "--tuners", "random,xgb",
                                   "--trials", "12", "--seeds", "2", "--out", str(d / "b.json"),
                                   "--plot", str(d / "b.png"), "--markdown", str(d / "b.md"),
                                   "--cache-dir", str(d / "cache")])
    assert res.exit_code == 0, res.output
    return d, json.loads((d / "b.json").read_text())


def test_bench_json_schema(bench_out):
    d, data = bench_out
    assert {"environment", "settings", "workloads", "runs", "summary"} <= set(data)
    assert {"machine", "command", "date", "edgetune", "tvm"} <= set(data["environment"])
    assert data["environment"]["command"].startswith("edgetune bench")
    (wl,) = data["workloads"].values()
    assert wl["space_size"] == 36 and wl["optimum"] > 0
    runs = data["runs"]
    assert len(runs) == 2 * 2 and {(r["tuner"], r["seed"]) for r in runs} == {(t, s) for t in ("random", "xgb")
                                                                            for s in (0, 1)}
    for r in runs:
        assert RUN_KEYS <= set(r)
        assert r["trials"] == len(r["history"]) == 12
        assert r["best_seconds"] >= wl["optimum"]
        assert r["history"][-1] == r["best_seconds"]
    assert all(r["trials_to_match"] is not None for r in runs if r["tuner"] == "xgb")
    assert set(data["summary"]) == {"random", "xgb"}
    assert data["summary"]["xgb"]["trials_to_match_vs_reference"] == pytest.approx(1.0)
    assert data["summary"]["xgb"]["best_vs_optimum"] >= 1.0


def test_bench_writes_plot_and_markdown(bench_out):
    d, _ = bench_out
    assert (d / "b.png").read_bytes()[:8] == PNG_MAGIC
    md = (d / "b.md").read_text()
    assert "- command: `edgetune bench" in md and "| xgb |" in md


def test_bench_reuses_the_cache_and_rejects_unknown_tuners(bench_out):
    d, first = bench_out
    res = CliRunner().invoke(app, ["bench", "-w", SMALL, "-t", "random,nope", "-n", "4", "--reference", "random",
                                   "--out", str(d / "x.json"), "--cache-dir", str(d / "cache")])
    assert res.exit_code == 2 and "unknown tuner 'nope'" in res.output
    res = CliRunner().invoke(app, ["bench", "-w", SMALL, "-t", "random", "-n", "4", "-s", "1", "--reference",
                                   "random", "--out", str(d / "y.json"), "--cache-dir", str(d / "cache")])
    assert res.exit_code == 0, res.output
    again = json.loads((d / "y.json").read_text())
    assert again["workloads"] == first["workloads"]     # same exhaustive log, same optimum


def test_report_on_a_real_log_writes_png_and_html(bench_out, tmp_path):
    d, data = bench_out
    (wl,) = data["workloads"].values()
    log = wl["cache"]                                  # the exhaustive grid log the bench measured
    res = CliRunner().invoke(app, ["report", log, "--out", str(tmp_path / "r.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r.png").read_bytes()[:8] == PNG_MAGIC
    res = CliRunner().invoke(app, ["report", log, "--out", str(tmp_path / "r.html"), "--top", "3"])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "r.html").read_text()
    assert "data:image/png;base64,iVBORw0KGgo" in page
    assert page.count("<tr>") >= 1 + 1 + 1 + 3        # log table (head + row), best-configs table (head + 3)
    assert "tile_co" in page
    res = CliRunner().invoke(app, ["report", log, "--out", str(tmp_path / "r.png")])
    assert res.exit_code == 2 and "exists; pass --force" in res.output      # an existing file is not overwritten
    assert CliRunner().invoke(app, ["report", log, "--out", str(tmp_path / "r.png"), "--force"]).exit_code == 0
    res = CliRunner().invoke(app, ["report", log, "--out", str(tmp_path / "r.pdf")])
    assert res.exit_code == 2 and ".png or .html" in res.output


def test_live_bench_measures_on_the_simulator(bench_out):
    d, first = bench_out
    res = CliRunner().invoke(app, ["bench", "-w", SMALL, "-t", "random", "-n", "5", "-s", "1", "--reference", "random",
                                   "--no-replay", "--out", str(d / "live.json"), "--cache-dir", str(d / "cache")])
    assert res.exit_code == 0, res.output
    live = json.loads((d / "live.json").read_text())
    (run,) = live["runs"]
    assert run["trials"] == 5 and live["settings"]["replay"] is False
    (wl,) = live["workloads"].values()
    assert wl["optimum"] == next(iter(first["workloads"].values()))["optimum"]  # from the exhaustive log
    assert run["best_seconds"] is None or run["best_seconds"] >= wl["optimum"]
    assert live["settings"]["target"]                                # the target its live runs measured


def test_live_bench_resumes_only_runs_measured_for_the_same_target(bench_out, tmp_path):
    d, _ = bench_out
    out = tmp_path / "live.json"
    args = ["bench", "-w", SMALL, "-t", "random", "-n", "5", "--reference", "random", "--no-replay",
            "--out", str(out), "--cache-dir", str(d / "cache")]
    assert CliRunner().invoke(app, [*args, "-s", "1"]).exit_code == 0
    saved = json.loads(out.read_text())
    for target in ({"kind": "llvm", "mcpu": "znver3"}, None):       # another CPU's runs; runs of no recorded target
        saved["settings"]["target"] = target
        out.write_text(json.dumps(saved))
        res = CliRunner().invoke(app, [*args, "-s", "2", "--resume"])
        assert res.exit_code == 2 and "cannot resume" in res.output and "target" in res.output, res.output
        assert json.loads(out.read_text()) == saved                  # nothing recorded is lost


def test_bench_refuses_to_overwrite_and_resumes_only_the_missing_runs(bench_out, tmp_path):
    d, first = bench_out
    out = tmp_path / "b.json"
    out.write_text(json.dumps(first))
    args = ["bench", "-w", SMALL, "-n", "12", "-s", "2", "--json", str(out), "--cache-dir", str(d / "cache")]
    res = CliRunner().invoke(app, [*args, "-t", "random,xgb"])
    assert res.exit_code == 2 and "pass --resume" in res.output
    assert json.loads(out.read_text()) == first                      # nothing recorded is lost
    res = CliRunner().invoke(app, [*args, "-t", "random,xgb,ga", "--resume"])
    assert res.exit_code == 0, res.output
    assert "bench --json PATH is now --out PATH" in " ".join(res.output.split())   # the old name still works
    data = json.loads(out.read_text())
    assert data["settings"]["resumed_runs"] == 4 and len(data["runs"]) == 6
    old = {(r["tuner"], r["seed"]): r["history"] for r in first["runs"]}
    assert all(r["history"] == old[r["tuner"], r["seed"]] for r in data["runs"] if r["tuner"] != "ga")
    assert {r["seed"] for r in data["runs"] if r["tuner"] == "ga"} == {0, 1}
    res = CliRunner().invoke(app, [*args[:4], "5", *args[5:], "-t", "random,xgb", "--resume"])
    assert res.exit_code == 2 and "cannot resume" in res.output and "trials 12 vs 5" in res.output
