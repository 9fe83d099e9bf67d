"""The dashboard's JSON API, in process: a real server on loopback over real logs, and its pieces directly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from toolkit.dashboard.logview import MAX_POINTS, LogView, downsample
from toolkit.dashboard.pages import compare, run_detail
from toolkit.export.last_run import record_run
from toolkit.testing.browser import dashboard_server
from toolkit.testing.cli import one_line_error

from toolkit.tuning.tuners.base import DEFAULT_TUNER

from tests.dashboard.conftest import TRIALS, demo_log, record, task_dict, write_lines


def get(base: str, route: str, **params: str) -> tuple[int, dict]:
    url = base + route.lstrip("/") + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_every_log_gets_a_card_with_its_state_and_a_broken_one_its_own_error(runs_dir):
    with dashboard_server([runs_dir]) as base:
        status, data = get(base, "/api/runs")
    assert status == 200
    cards = {Path(r["path"]).name: r for r in data["runs"]}
    assert set(cards) == {demo_log(runs_dir).name, "corrupt.jsonl", "cut.jsonl"}
    demo = cards[demo_log(runs_dir).name]
    assert (demo["state"], demo["trials"], demo["board"], demo["error"]) == ("finished", TRIALS, "vta-fsim", None)
    assert demo["best_s"] > 0 and demo["tuners"] == [DEFAULT_TUNER]
    assert cards["corrupt.jsonl"]["state"] == "corrupt" and cards["corrupt.jsonl"]["trials"] == 5
    assert "corrupt.jsonl:7: not valid JSON" in cards["corrupt.jsonl"]["error"]
    assert (cards["cut.jsonl"]["state"], cards["cut.jsonl"]["trials"], cards["cut.jsonl"]["truncated"]) == \
        ("stopped", 3, True)


def test_a_run_page_has_a_point_per_trial_and_the_boards_roofline(runs_dir):
    with dashboard_server([runs_dir]) as base:
        status, run = get(base, "/api/run", path=str(demo_log(runs_dir)))
    assert status == 200 and len(run["tasks"]) == 1
    task = run["tasks"][0]
    assert len(task["points"]["trial"]) + len(task["invalid_points"]["trial"]) == TRIALS == task["trials"]
    assert task["best_curve"]["seconds"] == sorted(task["best_curve"]["seconds"], reverse=True)
    assert min(task["points"]["seconds"]) == task["best_s"] == task["best_curve"]["seconds"][-1]
    assert task["top"][0]["seconds"] == task["best_s"] and task["top"][0]["config"]
    roof = task["roofline"]
    assert roof["roof"]["peak_gflops"] == pytest.approx(51.2)     # 256 MACs/cycle at 100 MHz: the Pynq's VTA
    assert roof["traffic"] == "measured" and len(roof["ai"]) == task["valid"]
    assert all(g <= roof["roof"]["peak_gflops"] for g in roof["gflops"])


def test_a_record_appended_to_a_running_log_is_read_and_a_half_line_waits(live_log):
    path, journal, task = live_log
    view = LogView(path)
    assert view.refresh() and view.n == 2 and view.state() == "running"
    assert not view.refresh()                                   # nothing new: the same version
    journal.append(record(2, 1e-3, task))
    assert view.refresh() and view.n == 3
    with path.open("a") as f:                                   # a writer mid-line
        f.write('{"workload": ')
    view.refresh()
    assert view.n == 3 and view.error is None and not view.truncated   # its writer still holds the lock
    detail = run_detail(view, None)
    assert detail["tasks"][0]["best_s"] == pytest.approx(1e-3)


def test_a_100k_record_log_is_downsampled_keeping_every_best_point(tmp_path):
    path = tmp_path / "long.jsonl"
    write_lines(path, task_dict(), 100_000, seconds=lambda i: 1.0 / (i + 1) if i % 1000 == 0 else 2.0 + i % 7)
    view = LogView(path)
    view.refresh()
    task = run_detail(view, None)["tasks"][0]
    shown = task["points"]
    assert task["trials"] == 100_000 and shown["downsampled"]
    assert 0.9 * MAX_POINTS <= len(shown["trial"]) <= MAX_POINTS
    bests = set(task["best_curve"]["trial"])
    assert len(bests) == 100 and bests <= set(shown["trial"])


def test_downsample_keeps_what_it_must():
    assert downsample(5, set(), 10) == [0, 1, 2, 3, 4]
    picked = downsample(1000, {3, 999, 500}, 20)
    assert {0, 3, 500, 999} <= set(picked) and len(picked) <= 23 and picked == sorted(set(picked))


def test_paths_outside_the_folders_are_refused(runs_dir, tmp_path):
    outside = tmp_path / "elsewhere.jsonl"
    write_lines(outside, task_dict(), 2)
    link = runs_dir / "logs" / "planted.jsonl"
    link.symlink_to(outside)
    try:
        with dashboard_server([runs_dir]) as base:
            for path in ("/etc/passwd", str(outside), str(link), str(runs_dir / ".." / "x.jsonl")):
                status, body = get(base, "/api/run", path=path)
                assert status == 403 and "outside the folders" in body["error"], path
            _, runs = get(base, "/api/runs")
        assert "planted.jsonl" not in {Path(r["path"]).name for r in runs["runs"]}
    finally:
        link.unlink()


def test_the_dashboard_writes_nothing(runs_dir):
    before = snapshot(runs_dir)
    with dashboard_server([runs_dir]) as base:
        for route in ("/api/runs", "/api/benches", "/api/exports", "/api/boards"):
            assert get(base, route)[0] == 200
        for log in (runs_dir / "logs").rglob("*.jsonl"):
            get(base, "/api/run", path=str(log))
        get(base, "/api/export", path=str(runs_dir / "export"))
        get(base, "/api/compare", path=str(runs_dir / "bench.json"))
    assert snapshot(runs_dir) == before


def test_compare_gives_medians_spread_and_trials_to_the_optimum(runs_dir):
    data = compare(json.loads((runs_dir / "bench.json").read_text()))
    rows = {t["tuner"]: t for t in data["workloads"][0]["tuners"]}
    assert rows["random"]["median"] == [3e-3, 2.5e-3, 2e-3, 1.5e-3]
    assert (rows["random"]["low"][-1], rows["random"]["high"][-1]) == (1e-3, 2e-3)
    assert (rows["random"]["reached_optimum"], rows["random"]["trials_to_optimum_median"]) == (1, 4)
    assert (rows["xgb"]["reached_optimum"], rows["xgb"]["trials_to_optimum_median"]) == (2, 2)


def test_the_demos_export_shows_its_layers_and_last_run(runs_dir, tmp_path):
    import shutil

    from toolkit.demo import run_export_demo

    folder = tmp_path / "demo" / "export"
    run_export_demo(demo_log(runs_dir), folder)       # the demo's last step, with this test's state folder
    with dashboard_server([tmp_path / "demo"]) as base:
        _, listing = get(base, "/api/exports")
        status, page = get(base, "/api/export", path=str(folder))
    assert [e["last_run"] for e in listing["exports"]] == [True]          # the demo ran it
    assert status == 200 and page["runs_on"] == "VTA" and page["schedules"] == {"tuned": 1}
    assert page["layers"][0]["workload"].startswith("conv2d:") and page["last_run"]["board"] == "vta-fsim"
    assert page["last_run"]["result"]["kernels"][0]["correct"] is True
    assert page["log"] and Path(page["log"]).is_file()
    fresh = tmp_path / "never-run"
    shutil.copytree(folder, fresh)
    with dashboard_server([tmp_path]) as base:
        assert get(base, "/api/export", path=str(fresh))[1]["last_run"] is None
        record_run(fresh, "vta-fsim", {"kernels": [{"correct": False}]})
        assert get(base, "/api/export", path=str(fresh))[1]["last_run"]["result"]["kernels"][0]["correct"] is False


def test_boards_lists_the_inventory_and_says_no_tracker_runs(tmp_path):
    from toolkit.boards import BoardEntry, Inventory

    Inventory(None).add(BoardEntry(name="pi", type="rpi4", host="10.0.0.2"))
    with dashboard_server([tmp_path]) as base:
        status, data = get(base, "/api/boards")
    assert status == 200
    assert {"pi", "vta-fsim", "local"} <= {b["name"] for b in data["boards"]}
    assert data["tracker"]["running"] is False and data["health"] == []


def test_a_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "toolkit", "dashboard", str(tmp_path), "--port", str(port)],
                                capture_output=True, text=True, timeout=120)
    assert "choose another --port" in one_line_error(result)


def test_the_server_prints_its_url_serves_and_stops_on_ctrl_c(runs_dir):
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "dashboard", str(runs_dir), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line and "read-only" in line
        base = line[line.index("http://"):].split()[0]
        status, data = get(base, "/api/runs")
        assert status == 200 and len(data["runs"]) == 3
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "dashboard stopped" in out and "Traceback" not in err


@pytest.mark.parametrize("board, peak, bandwidth", [("pynq-z1", 51.2, 0.8), ("zcu102", 170.496, 5.328),
                                                    ("rpi4", 48.0, 12.8), ("local", None, None)])
def test_each_family_gives_its_roofs(board, peak, bandwidth):
    from toolkit.backends.registry import backend_for
    from toolkit.boards import load_profile

    profile = load_profile(board)
    roof = backend_for(profile).roofline(profile)
    if peak is None:
        assert roof is None                                     # the dashboard measures this machine instead
    else:
        assert (roof.peak_gflops, roof.bandwidth_gbs) == pytest.approx((peak, bandwidth)) and roof.source


def test_edgetune_run_keeps_the_exports_last_run(runs_dir, tmp_path):
    import shutil

    from toolkit.export.last_run import last_run

    folder = tmp_path / "export"
    shutil.copytree(runs_dir / "export", folder)
    assert last_run(folder) is None
    result = subprocess.run([sys.executable, "-m", "toolkit", "run", str(folder), "--board", "vta-fsim"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    kept = last_run(folder)
    assert kept["board"] == "vta-fsim" and kept["result"]["kernels"][0]["correct"] is True
