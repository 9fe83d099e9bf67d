"""Everyday commands: how long the commands a user types all day take, each in a fresh process.

    python -m bench.bench_everyday [--repeat 5] [--write-docs]

Each command runs ``--repeat`` times as ``python -m toolkit ...`` in a fresh process with an empty
inventory and state (process start included, as a user sees it); the figure is the median wall time.
Target: every one under 1.5 s. Results: ``bench/out/everyday.json`` and, with ``--write-docs``, the
"Everyday commands" section of bench/archive.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from toolkit.harness import environment, write_doc_section

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "everyday.json"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Everyday commands"
TARGET_S = 1.5
COMMANDS = (["--help"], ["--version"], ["board", "list"], ["board", "types"], ["board", "show", "vta-fsim"],
            ["tuners"], ["tuners", "xgb"], ["workloads", "list"], ["bitstream", "list"], ["tune", "--help"])


def measure(repeat: int) -> list[dict]:
    """Median and spread of each command's wall time over ``repeat`` fresh processes."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgetune-everyday-") as home:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": f"{home}/config",
               "XDG_STATE_HOME": f"{home}/state", "XDG_CACHE_HOME": f"{home}/cache"}
        env.pop("EDGETUNE_INVENTORY", None)       # a new user's default inventory: not there yet
        for argv in COMMANDS:
            times = []
            for _ in range(repeat):
                start = time.monotonic()
                r = subprocess.run([sys.executable, "-m", "toolkit", *argv], env=env, capture_output=True,
                                   timeout=120)
                times.append(time.monotonic() - start)
                if r.returncode != 0:
                    raise SystemExit(f"edgetune {' '.join(argv)} failed: {r.stderr.decode()[-300:]}")
            rows.append({"command": "edgetune " + " ".join(argv), "median_s": statistics.median(times),
                         "min_s": min(times), "max_s": max(times)})
    return rows


def markdown(result: dict) -> str:
    env, rows = result["environment"], result["rows"]
    slowest = max(rows, key=lambda r: r["median_s"])
    table = "\n".join(f"| `{r['command']}` | {r['median_s']:.2f} | {r['min_s']:.2f}-{r['max_s']:.2f} |" for r in rows)
    return f"""{SECTION}

Machine: {env['machine']}; Python {env['python']}, apache-tvm {env['tvm']}. Date: {env['date']}.
Command: `python -m bench.bench_everyday --repeat {result['repeat']} --write-docs`. Each command in a fresh
process (`python -m toolkit ...`, process start included), empty inventory and state; median of
{result['repeat']} runs. Target: under {TARGET_S} s each. **Slowest: `{slowest['command']}`,
{slowest['median_s']:.2f} s** ({'within' if slowest['median_s'] < TARGET_S else 'over'} the target).

| command | median s | range s |
|---|---|---|
{table}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    result = {"environment": environment("python -m bench.bench_everyday"), "repeat": args.repeat,
              "rows": measure(args.repeat)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    if args.write_docs:
        write_doc_section(DOC, SECTION, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
