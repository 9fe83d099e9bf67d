"""Whole-network tuning on 1 and 3 boards at once: ResNet-18 on board agents (the simulated VTA device) behind one
tracker key on loopback, in wall time and records.

``.venv/bin/python -m bench.bench_boards`` (options ``--trials``, ``--no-doc``). Writes the section
"## Several boards at once" of ``bench/archive.md``.

The agents run the simulator on this machine's two cores, so a board's measurement costs CPU here that a real
board would spend on its own; the figures bound what N real boards give from above by the tracker and driver
overheads they show, not by board speed.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Several boards at once"


def run(trials: int) -> dict[str, Any]:
    from toolkit.backends import backend_for, network_tasks
    from toolkit.boards import BoardEntry, Inventory, resolve_board
    from toolkit.harness import environment
    from toolkit.rpc.tracker import ensure_local_rpc
    from toolkit.testing.cli import sim_agent
    from toolkit.tuning.journal import read_log
    from toolkit.tuning.network import tune_network
    from toolkit.tuning.scheduler import GradientScheduler
    from toolkit.workloads.networks import get_network

    result: dict[str, Any] = {"environment": environment("python -m bench.bench_boards"), "trials": trials, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["EDGETUNE_INVENTORY"] = str(Path(tmp) / "inventory.toml")
        host, port, stop = ensure_local_rpc("local")
        Inventory().add(BoardEntry("pz", "pynq-z1", host="127.0.0.1", rpc_key="bench-boards"))
        board = resolve_board("pz")
        plan, tasks = network_tasks(get_network("resnet18"), board)
        backend = backend_for(board.profile)
        try:
            with ExitStack() as agents:
                for k in range(3):
                    agents.enter_context(sim_agent(host, port, "bench-boards", f"b{k}", Path(tmp) / f"a{k}.log"))
                for n in (1, 3):
                    lanes = [(backend.default_builder(board), backend.make_runner(board, tracker=(host, port)))
                             for _ in range(n)]
                    log = Path(tmp) / f"net{n}.jsonl"
                    t0 = time.perf_counter()
                    s = tune_network(plan, tasks, "random", trials, scheduler=GradientScheduler(trials_per_round=8),
                                     log=log, lanes=lanes)
                    wall = time.perf_counter() - t0
                    for b, r in lanes:
                        r.close()
                        b.close()
                    result["runs"][str(n)] = {"wall_s": wall, "records": len(read_log(log)[1]),
                                              "trials": s.trials, "total_ms": s.total_seconds * 1e3}
        finally:
            stop()
    return result


def section(r: dict[str, Any]) -> str:
    one, three = r["runs"]["1"], r["runs"]["3"]
    return "\n".join([
        SECTION, "",
        f"Command: `python -m bench.bench_boards`. Machine: {r['environment']['machine']}. "
        f"Date: {r['environment']['date']}.", "",
        f"ResNet-18's conv tasks on a Pynq-Z1 board type, `random` tuner, {r['trials']} trials in all, rounds of 8, "
        "gradient scheduler; three board agents with the simulated VTA device behind one tracker key on loopback. "
        "One log either way.", "",
        "| boards | wall s | records | trials/s | network conv ms | vs 1 board |",
        "|---|---|---|---|---|---|",
        f"| 1 (the baseline) | {one['wall_s']:.1f} | {one['records']} | {one['trials'] / one['wall_s']:.2f} | "
        f"{one['total_ms']:.2f} | 1.00x |",
        f"| 3 | {three['wall_s']:.1f} | {three['records']} | {three['trials'] / three['wall_s']:.2f} | "
        f"{three['total_ms']:.2f} | "
        f"{one['wall_s'] / three['wall_s']:.2f}x |", "",
        f"Reading: on one board a trial takes {one['wall_s'] / one['trials']:.2f} s, mostly waiting (a session from "
        "the tracker per measurement, the agent's reply), not computing, so boards measuring at once overlap that "
        "wait and three come close to 3x even though their simulators share this machine's two cores with the driver. "
        "What is shared is the driver (the tuners, the in-process VTA compiles, one log) and the tracker (one "
        "request per measurement on VTA boards); builds can go to a Ray cluster with `--cluster` (section \"Ray "
        "cluster\"). The network's conv latency reached is about the same either way (random tuner, same budget).",
        "",
    ])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_boards", description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=192, help="trials in all per run (default 192)")
    ap.add_argument("--no-doc", action="store_true", help="do not write bench/archive.md")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "boards.json", help="the result JSON")
    ap.add_argument("--doc-only", action="store_true", help="rewrite the docs section from --out, run nothing")
    args = ap.parse_args(argv)
    from toolkit import console
    from toolkit.harness import save_checkpoint, write_doc_section

    if args.doc_only:
        result = json.loads(args.out.read_text())
    else:
        result = run(args.trials)
        save_checkpoint(args.out, result, indent=1)
    console.info(json.dumps(result["runs"]))
    if not args.no_doc:
        write_doc_section(DOC, SECTION, section(result))
        console.info(f"wrote the section '{SECTION}' of bench/archive.md")


if __name__ == "__main__":
    main()
