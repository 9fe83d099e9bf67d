"""The dashboard in a real browser: a server on loopback in a thread, and Debian's headless Chromium driven by
Selenium through Debian's chromedriver (no browser or driver is downloaded).

``python -m toolkit.testing.browser screenshot OUT.png LOG_OR_FOLDER...`` serves the given logs and writes a
screenshot of the first run's page (``make dashboard-screenshot`` keeps the docs' picture current this way).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000")
"""Chromium offline and headless: without the background-networking flags it keeps trying Google's hosts."""


def browser_missing() -> str | None:
    """Why no browser test can run here (``None``: Chromium and its driver are installed)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    return f"{', '.join(missing)} missing (make system-deps installs Debian's chromium and chromium-driver)" \
        if missing else None


@contextlib.contextmanager
def dashboard_server(roots: list[Path]) -> Iterator[str]:
    """The dashboard of ``roots`` served on a free loopback port in a thread; yields its URL."""
    import uvicorn

    from toolkit.dashboard import bind, check_roots, make_app

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(make_app(check_roots(roots)), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Selenium WebDriver) that records the page's console messages."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="edgetune-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    os.environ.setdefault("SE_OFFLINE", "true")     # Selenium Manager must not look for drivers online
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def run_url(base: str, log: Path) -> str:
    """The URL of a run's page."""
    return f"{base}#/run?path={urllib.parse.quote(str(log.resolve()), safe='')}"


def wait_for(driver: Any, check: Callable[[], Any], timeout: float = 20.0, what: str = "the page") -> Any:
    """Poll ``check`` until it returns something truthy; :class:`TimeoutError` naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.05)


def chart_points(driver: Any, chart_id: str, meta: str) -> int | None:
    """Points Plotly drew in the traces tagged ``meta`` of the chart ``chart_id`` (``None``: not drawn yet)."""
    return driver.execute_script(
        "const gd = document.getElementById(arguments[0]);"
        "if (!gd || !gd.data) { return null; }"
        "return gd.data.filter((t) => t.meta === arguments[1]).reduce((n, t) => n + t.x.length, 0);",
        chart_id, meta)


def console_errors(driver: Any) -> list[str]:
    """The page's console messages of level SEVERE since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def screenshot(out: Path, roots: list[Path]) -> Path:
    """A screenshot of the first run's page of the dashboard serving ``roots``."""
    from toolkit.dashboard.sources import Sources

    sources = Sources([r.resolve() for r in roots])
    sources.scan(force=True)
    if not sources.logs:
        raise SystemExit(f"no tuning log under {', '.join(map(str, roots))}")
    with dashboard_server(roots) as base, chromium() as driver:
        driver.get(run_url(base, sources.logs[0]))
        wait_for(driver, lambda: chart_points(driver, "trials-0", "trials"), what="the first task's chart")
        time.sleep(0.5)     # Plotly's transitions settle
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m toolkit.testing.browser")
    sub = parser.add_subparsers(dest="command", required=True)
    shot = sub.add_parser("screenshot", help="screenshot the dashboard's first run page")
    shot.add_argument("out", type=Path)
    shot.add_argument("roots", type=Path, nargs="+")
    args = parser.parse_args(argv)
    print(screenshot(args.out, args.roots))


if __name__ == "__main__":
    main()
