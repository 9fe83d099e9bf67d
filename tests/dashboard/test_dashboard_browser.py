"""The dashboard in Debian's headless Chromium, driven by Selenium: every page loads without a console error, a
chart draws a point per trial, a record appended to a running log appears without a reload, and a broken log's
card shows its error while the others render."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from toolkit.testing.browser import (browser_missing, chart_points, chromium, console_errors, dashboard_server,
                                     run_url, wait_for)

from tests.dashboard.conftest import TRIALS, demo_log, record

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))

LIVE_WAIT_S = 15.0
"""How long the test waits for an appended record to show (the page polls every second; the margin is for a
loaded test machine, not a latency target)."""


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


def cards(driver) -> dict[str, str]:
    return {el.get_attribute("data-path").rsplit("/", 1)[-1]: el.text
            for el in driver.find_elements("css selector", ".card[data-path]")}


def test_runs_page_renders_every_card_and_a_broken_log_only_on_its_own(runs_dir, browser):
    with dashboard_server([runs_dir]) as base:
        browser.get(base)
        shown = wait_for(browser, lambda: len(cards(browser)) == 3 and cards(browser), what="three run cards")
        assert "not valid JSON" in shown["corrupt.jsonl"] and "corrupt" in shown["corrupt.jsonl"]
        assert "last line truncated" in shown["cut.jsonl"]
        demo = shown[demo_log(runs_dir).name]
        assert f"{TRIALS} trials" in demo and "finished" in demo
        assert console_errors(browser) == []


def test_a_run_chart_has_a_point_per_trial_and_a_roofline(runs_dir, browser, tmp_path):
    with dashboard_server([runs_dir]) as base:
        browser.get(run_url(base, demo_log(runs_dir)))
        drawn = wait_for(browser, lambda: ((chart_points(browser, "trials-0", "trials") or 0)
                                           + (chart_points(browser, "trials-0", "invalid") or 0)),
                         what="the trials chart")
        assert drawn == TRIALS
        assert chart_points(browser, "roof-0", "roofline") == chart_points(browser, "trials-0", "trials")
        assert chart_points(browser, "roof-0", "roof") == 3
        shot = tmp_path / "run.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        assert console_errors(browser) == []


def test_a_record_appended_to_a_running_log_shows_without_a_reload(live_log, browser):
    path, journal, task = live_log
    with dashboard_server([path.parent]) as base:
        browser.get(run_url(base, path))
        wait_for(browser, lambda: chart_points(browser, "trials-0", "trials") == 2, what="the first two trials")
        browser.execute_script("window.notReloaded = true;")
        journal.append(record(2, 5e-4, task))
        wait_for(browser, lambda: chart_points(browser, "trials-0", "trials") == 3, timeout=LIVE_WAIT_S,
                 what="the appended trial")
        assert browser.execute_script("return window.notReloaded === true;")
        assert "running" in browser.find_element("id", "run-info").text
        assert console_errors(browser) == []


def test_compare_boards_and_exports_pages_load_without_errors(runs_dir, browser):
    with dashboard_server([runs_dir]) as base:
        browser.get(base + "#/compare?path=" + str(runs_dir / "bench.json"))
        wait_for(browser, lambda: chart_points(browser, "cmp-0", None) is not None, what="the compare chart")
        assert "random" in browser.find_element("id", "cmp-table-0").text
        for route, text in (("#/boards", "vta-fsim"), ("#/exports", "tuned: 1")):
            browser.get(base + route)
            wait_for(browser, lambda: text in browser.find_element("id", "page").text, what=route)
        assert console_errors(browser) == []


def test_screenshot_command_writes_the_docs_picture(runs_dir, tmp_path):
    from toolkit.testing.browser import screenshot

    out = screenshot(tmp_path / "dashboard.png", [runs_dir / "logs" / "vta-fsim"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_browser_download_is_needed():
    assert shutil.which("chromium") and Path("/usr/bin/chromedriver").exists()
