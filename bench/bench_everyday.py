"""Everyday commands: how long the commands a user types all day take, each in a fresh process.

    python -m bench.bench_everyday [--repeat 5] [--repeat-long 3] [--baseline REV] [--write-docs]

Each command runs ``--repeat`` times as ``python -m toolkit ...`` in a fresh process with an empty
inventory and state (process start included, as a user sees it); the figure is the median wall time.
Target: every one under 1.5 s. The long commands (tuning, exporting and running a model) run
``--repeat-long`` times on a pseudo-terminal and into a pipe: the seconds to their first output and their
longest silence, against a target of 2 s. A board that never comes (a tracker, no agent) is waited for as
``--wait-board`` says: the wait against it, target 1.5x. ``--baseline REV`` runs the long commands with the code
of another revision too, in the same rounds, for a before/after on one machine state. Results:
``bench/out/everyday.json`` and, with ``--write-docs``, the "Everyday commands" section of bench/archive.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from toolkit.harness import environment, write_doc_section

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "everyday.json"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Everyday commands"
TARGET_S = 1.5
COMMANDS = (["--help"], ["--version"], ["board", "list"], ["board", "types"], ["board", "show", "vta-fsim"],
            ["tuners"], ["tuners", "xgb"], ["workloads", "list"], ["bitstream", "list"], ["tune", "--help"])
SILENCE_S = 2.0
LONG = (["workloads", "extract", "resnet18"],
        ["tune", "-b", "vta-fsim", "-w", "resnet18.C5", "--trials", "8", "--log", "v.jsonl"],
        ["tune", "-b", "local", "-w", "resnet18.C5", "--trials", "4", "--log", "l.jsonl"],
        ["export", "--model", "resnet18", "-b", "local", "--out", "ex", "--force"],
        ["run", "ex", "-b", "local"],
        ["export", "--model", "resnet18", "-b", "vta-fsim", "--out", "exv", "--force"],
        ["run", "exv", "-b", "vta-fsim"])
"""Commands of seconds, in order (each run needs the export before it); a tuning log is removed before each run."""
WAITS = (2, 30)
"""``--wait-board`` values tried on a board registered with a running tracker whose agent never starts."""
WAIT_FACTOR = 1.5


def _fresh_env(home: str) -> dict[str, str]:
    """A new user's environment under ``home``: empty config, state and cache, the default inventory not there yet."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": f"{home}/config",
           "XDG_STATE_HOME": f"{home}/state", "XDG_CACHE_HOME": f"{home}/cache"}
    env.pop("EDGETUNE_INVENTORY", None)
    return env


def measure(repeat: int) -> list[dict]:
    """Median and spread of each command's wall time over ``repeat`` fresh processes."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgetune-everyday-") as home:
        env = _fresh_env(home)
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


def measure_long(repeat: int, baseline: Path | None = None) -> list[dict]:
    """Seconds to the first output, longest silence and wall time of each long command on a terminal, and first
    output and longest silence into a pipe (medians over ``repeat`` rounds of the whole sequence); with
    ``baseline`` (another checkout) its wall time on a terminal too, in the same rounds, in a home of its own."""
    from toolkit.testing.terminal import on_a_terminal

    runs: dict[str, dict[str, list]] = {}
    with tempfile.TemporaryDirectory(prefix="edgetune-everyday-") as home, \
            tempfile.TemporaryDirectory(prefix="edgetune-everyday-before-") as before:
        variants = [("terminal", home, ROOT), ("pipe", home, ROOT)] + ([("before", before, baseline)]
                                                                       if baseline else [])
        for _ in range(repeat):
            for argv in LONG:
                for variant, folder, code in variants:
                    for log in ("v.jsonl", "l.jsonl"):
                        Path(folder, log).unlink(missing_ok=True)
                    env = {**_fresh_env(folder), "PYTHONPATH": str(code)}
                    r = on_a_terminal(argv, env=env, cwd=folder, timeout=600, terminal=variant != "pipe")
                    if r.returncode != 0:
                        raise SystemExit(f"edgetune {' '.join(argv)} ({variant}) failed: {r.text[-300:]}")
                    runs.setdefault("edgetune " + " ".join(argv), {}).setdefault(variant, []).append(r)
    rows = []
    for cmd, rs in runs.items():
        term, pipe = rs["terminal"], rs["pipe"]
        rows.append({"command": cmd, "first_output_s": statistics.median(r.first_output_s for r in term),
                     "longest_silence_s": statistics.median(r.longest_silence_s for r in term),
                     "worst_silence_s": max(r.longest_silence_s for r in term),
                     "pipe_first_output_s": statistics.median(r.first_output_s for r in pipe),
                     "pipe_worst_silence_s": max(r.longest_silence_s for r in pipe),
                     "median_s": statistics.median(r.wall_s for r in term), "min_s": min(r.wall_s for r in term),
                     "max_s": max(r.wall_s for r in term),
                     **({"before_median_s": statistics.median(r.wall_s for r in rs["before"])}
                        if "before" in rs else {})})
    return rows


def measure_waits() -> list[dict]:
    """``tune`` on a board registered with a running tracker whose agent never starts, per ``--wait-board`` of
    :data:`WAITS`: wall time, the wait it announced and the wait from that line to its error."""
    from toolkit.testing.terminal import on_a_terminal

    rows = []
    with tempfile.TemporaryDirectory(prefix="edgetune-everyday-") as home:
        env = {**_fresh_env(home), "EDGETUNE_INVENTORY": f"{home}/inventory.toml"}
        started = subprocess.run([sys.executable, "-m", "toolkit", "tracker", "start", "--port", "0", "--json"],
                                 env=env, capture_output=True, text=True, timeout=120)
        if started.returncode != 0:
            raise SystemExit(f"edgetune tracker start failed: {started.stderr[-300:]}")
        try:
            subprocess.run([sys.executable, "-m", "toolkit", "board", "add", "pz", "--type", "pynq-z1", "--host",
                            "127.0.0.1", "--rpc-key", "no-agent"], env=env, check=True, capture_output=True)
            for wait in WAITS:
                argv = ["tune", "-b", "pz", "-w", "resnet18.C5", "--trials", "4", "--wait-board", str(wait)]
                r = on_a_terminal(argv, env=env, cwd=home, timeout=600)
                said, failed = r.at("waiting up to"), r.at("error:")
                if r.returncode != 2 or said is None or failed is None:
                    raise SystemExit(f"edgetune {' '.join(argv)} did not wait and fail: {r.text[-400:]}")
                announced = float(r.text.split("waiting up to", 1)[1].split()[0])
                rows.append({"command": "edgetune " + " ".join(argv), "wait_board_s": wait, "wall_s": r.wall_s,
                             "first_output_s": r.first_output_s, "announced_s": announced, "waited_s": failed - said})
        finally:
            subprocess.run([sys.executable, "-m", "toolkit", "tracker", "stop"], env=env, capture_output=True,
                           timeout=120)
    return rows


def markdown(result: dict) -> str:
    env, rows, long = result["environment"], result["rows"], result.get("long") or []
    before = {r["command"]: r["before_median_s"] for r in long if "before_median_s" in r}

    def was(cmd: str) -> str:
        return f"{before[cmd]:.1f}" if cmd in before else "-"

    slowest = max(rows, key=lambda r: r["median_s"])
    table = "\n".join(f"| `{r['command']}` | {r['median_s']:.2f} | {r['min_s']:.2f}-{r['max_s']:.2f} | "
                      f"{was(r['command'])} | - | - | - | - |" for r in rows)
    table += "".join(f"\n| `{r['command']}` | {r['median_s']:.1f} | {r['min_s']:.1f}-{r['max_s']:.1f} | "
                     f"{was(r['command'])} | {r['first_output_s']:.1f} | {r['longest_silence_s']:.1f} "
                     f"({r['worst_silence_s']:.1f}) | {_pipe(r, 'pipe_first_output_s')} | "
                     f"{_pipe(r, 'pipe_worst_silence_s')} |" for r in long)
    verdict = "within" if slowest["median_s"] < TARGET_S else "over"
    command = f"python -m bench.bench_everyday --repeat {result['repeat']} --repeat-long {result.get('repeat_long', 0)}"
    if result.get("baseline"):
        command += f" --baseline {result['baseline']}"
    text = f"""{SECTION}

Machine: {env['machine']}; Python {env['python']}, apache-tvm {env['tvm']}. Date: {env['date']}.
Command: `{command} --write-docs`.
Each command in a fresh process (`python -m toolkit ...`, process start included), empty inventory and state;
median of {result['repeat']} runs. Target for these quick commands: under {TARGET_S} s each. **Slowest:
`{slowest['command']}`, {slowest['median_s']:.2f} s** ({verdict} the target)."""
    if result.get("baseline"):
        text += f"""

"before": the same commands with the code of {result['baseline']} (a checkout of it, its own empty home), in
the same rounds on this machine, on a terminal."""
    if long:
        worst = max(long, key=lambda r: r["worst_silence_s"])
        text += f"""

The long commands (tuning, exporting and running a model; {result['repeat_long']} rounds, medians) run on a
pseudo-terminal, as a user sees them: seconds to their first output, and their longest silence (between two
outputs, a spinner or progress redraw included, or before the first or after the last; in brackets the worst
run); and into a pipe, as a log or a CI job sees them (worst run). Target: silent for at most {SILENCE_S:g} s on a
terminal. **Longest silence on a terminal: `{worst['command']}`, {worst['worst_silence_s']:.1f} s**
({'within' if worst['worst_silence_s'] <= SILENCE_S else 'over'} the target)."""
    columns = ["command", "median s", "range s", "before: median s", "first output s (terminal)",
               "longest silence s (terminal)", "first output s (pipe)", "longest silence s (pipe)"]
    text += f"""

| {' | '.join(columns)} |
|{'---|' * len(columns)}
{table}
"""
    waits = result.get("waits") or []
    if waits:
        text += f"""
A board registered with a running tracker whose agent never starts (`tracker start`, `board add pz`), on a
terminal: the wait the command announces and the seconds from that line to its error. A board never seen is
waited for at most 10 s whatever `--wait-board` says (a board lost mid-run gets the whole `--wait-board`).
Target: the wait within {WAIT_FACTOR:g}x of what was announced.

| command | wall s | first output s | announced wait s | waited s | waited / announced |
|---|---|---|---|---|---|
""" + "".join(f"| `{r['command']}` | {r['wall_s']:.1f} | {r['first_output_s']:.1f} | {r['announced_s']:.0f} | "
              f"{r['waited_s']:.1f} | {r['waited_s'] / r['announced_s']:.2f}x |\n" for r in waits)
    return text


@contextlib.contextmanager
def _checkout(revision: str | None) -> Iterator[Path | None]:
    """A temporary checkout of ``revision`` of this repository (``None``: none)."""
    if revision is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="edgetune-baseline-") as folder:
        try:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", folder, revision], check=True,
                           capture_output=True)
        except subprocess.CalledProcessError as exc:
            raise SystemExit(f"--baseline {revision}: {exc.stderr.decode().strip()[-200:]}") from None
        try:
            yield Path(folder)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", folder], capture_output=True)


def _pipe(row: dict, key: str) -> str:
    return f"{row[key]:.1f}" if key in row else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--repeat-long", type=int, default=3, help="rounds of the long commands (0: none)")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--baseline", help="a git revision whose code runs the long commands too, in the same "
                                               "rounds (its checkout made in a temporary folder)")
    parser.add_argument("--doc-only", action="store_true", help="rewrite the docs from bench/out/everyday.json")
    args = parser.parse_args(argv)
    if args.doc_only:
        result = json.loads(OUT.read_text())
    else:
        with _checkout(args.baseline) as baseline:
            result = {"environment": environment("python -m bench.bench_everyday"), "repeat": args.repeat,
                      "rows": measure(args.repeat), "repeat_long": args.repeat_long, "baseline": args.baseline,
                      "long": measure_long(args.repeat_long, baseline) if args.repeat_long else [],
                      "waits": measure_waits()}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    if args.write_docs:
        write_doc_section(DOC, SECTION, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
