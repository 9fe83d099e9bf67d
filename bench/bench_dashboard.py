"""The dashboard on a long run: how fast a 100,000-record log renders, and how soon an appended record shows.

``.venv/bin/python -m bench.bench_dashboard`` (``--records N``, ``--repeat K``, ``--no-doc``) writes a log of N
records of the VTA simulator's kind (each with its DRAM traffic counters, as the simulator records them), serves
it with ``edgetune dashboard``'s app on loopback and measures, K times each, median and range:

* the API: the run page's JSON on a server that has not read the log (every record parsed), and again after one
  more record is appended (only that record read);
* the browser (Debian's headless Chromium): from asking for the run page to its charts drawn, with Plotly's script
  cached and not; and from a record appended to the running log to its point on the chart, page not reloaded;
* the baseline of the same run: reading the log with edgetune's log reader (``read_log``, what ``best``,
  ``report`` and ``export`` do first).

Writes the section "## Dashboard: a 100,000-record log" of ``bench/archive.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from toolkit.backends import make_task
from toolkit.boards import resolve_board
from toolkit.harness import cpu_name, write_doc_section
from toolkit.testing.browser import chart_points, chromium, dashboard_server, run_url, wait_for
from toolkit.tuning.journal import Journal, LogHeader, Record, read_log
from toolkit.workloads import parse_workload

ARCHIVE = Path(__file__).resolve().parent / "archive.md"
HEADING = "## Dashboard: a 100,000-record log"
WORKLOAD = "resnet18.C5"


def write_log(path: Path, n: int) -> dict:
    """``n`` records of one VTA task, latencies scattered with a slowly improving best, as a long run leaves."""
    task = make_task(parse_workload(WORKLOAD), resolve_board("vta-fsim")).describe()
    base = Record(workload=task["workload"], board=task["board"], tuner="ml2tuner", trial=0, index=0,
                  config={"tile_h": [7, 2], "tile_w": [14, 1], "tile_ci": [4, 2], "tile_co": [2, 4]},
                  costs=[1e-3]).to_json()
    with path.open("w") as f:
        f.write(json.dumps(LogHeader(task).to_json()) + "\n")
        for i in range(n):
            wild = (i * 2654435761) % 1000 / 1000
            valid = wild > 0.2
            base.update(trial=i, index=i % 5000, timestamp=1e9 + i * 0.05,
                        costs=[0.004 * (1 + 3 * wild) * (1 + 50 / (i + 50))] if valid else [],
                        error=None if valid else "invalid_config",
                        features={"sim.inp_load_nbytes": 2e5 * (1 + wild), "sim.wgt_load_nbytes": 6e5,
                                  "sim.out_store_nbytes": 1e5, "sim.uop_load_nbytes": 4e3} if valid else {})
            f.write(json.dumps(base) + "\n")
    return task


def api_seconds(base: str, log: Path) -> float:
    url = f"{base}api/run?path={urllib.parse.quote(str(log))}"
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as r:
        json.loads(r.read())
    return time.perf_counter() - t0


def record(task: dict, trial: int) -> Record:
    return Record(workload=task["workload"], board=task["board"], tuner="ml2tuner", trial=trial, index=1, config={},
                  costs=[0.0035])


def page_seconds(driver, base: str, log: Path, *, clear_cache: bool) -> float:  # noqa: ANN001
    """From asking for the run page to its trials chart drawn (``clear_cache``: Plotly's script not cached)."""
    driver.get("about:blank")
    if clear_cache:
        driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    t0 = time.perf_counter()
    driver.get(run_url(base, log))
    wait_for(driver, lambda: chart_points(driver, "trials-0", "trials"), timeout=120, what="the run page")
    return time.perf_counter() - t0


def navigate_seconds(driver, base: str, log: Path) -> float:  # noqa: ANN001
    """From the runs page (already open) to the run's charts drawn, following its link (no page load)."""
    driver.get(base + "#/")
    wait_for(driver, lambda: driver.find_elements("css selector", ".card[data-path] a"), what="the runs page")
    t0 = time.perf_counter()
    driver.find_element("css selector", ".card[data-path] a").click()
    wait_for(driver, lambda: chart_points(driver, "trials-0", "trials"), timeout=120, what="the run page")
    return time.perf_counter() - t0


def measure(records: int, repeat: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in ROWS}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "long.jsonl"
        task = write_log(log, records)
        print(f"wrote {records} records ({log.stat().st_size >> 20} MiB)", flush=True)
        with Journal(log, LogHeader(task)) as journal, chromium() as driver:   # the run still writing it
            trial = records
            for k in range(repeat):
                t0 = time.perf_counter()
                read_log(log)
                out["read_log"].append(time.perf_counter() - t0)
                with dashboard_server([Path(tmp)]) as base:
                    out["api_cold"].append(api_seconds(base, log))
                    journal.append(record(task, trial))
                    trial += 1
                    out["api_append"].append(api_seconds(base, log))
                    out["page_first"].append(page_seconds(driver, base, log, clear_cache=True))
                    out["page"].append(page_seconds(driver, base, log, clear_cache=False))
                    out["page_nav"].append(navigate_seconds(driver, base, log))
                    t0 = time.perf_counter()
                    journal.append(record(task, trial))
                    trial += 1
                    wait_for(driver, lambda: f" {trial} trials" in driver.find_element("id", "run-info").text,
                             timeout=60, what="the appended record")
                    out["live"].append(time.perf_counter() - t0)
                print(f"round {k + 1}/{repeat}: " + ", ".join(f"{n} {v[-1]:.2f} s" for n, v in out.items()),
                      flush=True)
    return out


ROWS = {
    "read_log": "baseline: edgetune's log reader, the whole log (`read_log`)",
    "api_cold": "API: the run page's JSON, on a server that has not read the log yet",
    "api_append": "API: the same after one record is appended (only that record is read)",
    "page_nav": "browser: from the runs page to the run's charts drawn (its link followed: no page load)",
    "page": "browser: the run page, asked for to its charts drawn (the log followed, Plotly's script cached)",
    "page_first": "browser: the same, Plotly's script not cached (its 4.8 MB compiled first)",
    "live": "browser: a record appended to its point on the chart (the page asks every 1 s)",
}


def section(results: dict[str, list[float]], records: int, repeat: int, command: str) -> str:
    load = os.getloadavg()[0]
    lines = [HEADING, "",
             f"Machine: {cpu_name()}, {os.cpu_count()} cores, 1-min load average {load:.1f}. Command: `{command}`. "
             f"Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC. Chromium from Debian, headless, "
             "driven by Selenium.", "",
             f"A log of {records:,} records of one VTA task (each with the simulator's DRAM counters, so the "
             "roofline uses measured traffic). The scatter is downsampled to 1,000 points, every best-so-far point "
             f"kept. Median of {repeat} rounds, range in brackets. Target: renders in under 2 s.", ""]
    for title, keys in (("", HEADLINE), ("Every figure of the run:", list(ROWS))):
        lines += [title, ""] if title else []
        lines += ["| what | seconds |", "|---|---|"]
        for key in keys:
            v = results[key]
            lines.append(f"| {ROWS[key]} | {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) |")
        lines.append("")
    lines.append(NOTE)
    return "\n".join(lines) + "\n"


HEADLINE = ("page_nav", "live", "api_cold")
"""The rows of the first table (the one the results page shows)."""

NOTE = ("What bounds each figure: the first read of a log is JSON parsing and validating every record, as "
        "edgetune's own reader does (the dashboard starts reading every log when it starts, so a page usually "
        "opens on a log already read); a log being followed costs only its new records; a page load is bound by "
        "the browser compiling Plotly's 4.8 MB script (cached compiled code is used from the third load on), a "
        "link followed inside the dashboard loads nothing and draws the downsampled charts.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-doc", action="store_true", help="print the section, do not write bench/archive.md")
    args = parser.parse_args(argv)
    results = measure(args.records, args.repeat)
    command = ".venv/bin/python -m bench.bench_dashboard" + (f" --records {args.records}"
                                                             if args.records != 100_000 else "")
    text = section(results, args.records, args.repeat, command)
    print(text)
    if not args.no_doc:
        write_doc_section(ARCHIVE, HEADING, text)


if __name__ == "__main__":
    main()
