"""Reliability benchmark: SIGKILLs at random points then resume, two writers on one log, a board killed
mid-run, a board gone for good (the wait against ``--wait-board``), a full disk, a 100,000-record log, and
hostile inputs through the real CLI.

    python -m bench.bench_reliability [--kills 10] [--seed 0] [--write-docs]

Everything runs on this machine: the ``vta-fsim`` board, a loopback tracker and a simulator agent started
as a real process. Figures: records lost (a record present after a kill that is gone at the end), duplicate
trial numbers, configs measured twice, runs refused, and for the hostile inputs the cases tried, tracebacks,
exits other than the one-line error, and silent successes. Results: ``bench/out/reliability.json`` and, with
``--write-docs``, the "Reliability" section of bench/archive.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.reliability_report import SECTION, section
from toolkit.harness import environment, write_doc_section
from toolkit.testing.bad_inputs import CASES, Case, run_case
from toolkit.tuning.journal import read_log

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "reliability.json"
DOC = ROOT / "bench" / "archive.md"
SMALL = "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1"
EDGETUNE = [sys.executable, "-m", "toolkit"]


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(home / "state"),
            "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
            "EDGETUNE_INVENTORY": str(home / "inventory.toml")}


def _tune(log: Path, env: dict[str, str], *extra: str, n: int = 200, workload: str = SMALL,
          seed: int = 0) -> subprocess.Popen:
    return subprocess.Popen([*EDGETUNE, "tune", "-b", "vta-fsim", "-w", workload, "-t", "random", "-n", str(n),
                             "--seed", str(seed), "--log", str(log), "--resume", *extra], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _lines(log: Path) -> list[str]:
    if not log.exists():
        return []
    data = log.read_text()
    complete = data.split("\n")[:-1]      # a cut last line is not a record yet
    return complete[1:]


def _audit(log: Path, n: int, snapshots: list[list[str]]) -> dict[str, Any]:
    _, recs = read_log(log)
    final = _lines(log)
    lost = sum(len(set(snap) - set(final)) for snap in snapshots)
    trials = Counter(r.trial for r in recs)
    configs = Counter(r.index for r in recs)
    return {"records": len(recs), "expected": n, "lost": lost,
            "duplicate_trials": sum(c - 1 for c in trials.values() if c > 1),
            "configs_measured_twice": sum(c - 1 for c in configs.values() if c > 1),
            "trials_in_order": [r.trial for r in recs] == list(range(len(recs)))}


KILL_TRIALS = 1500
"""Budget of the SIGKILL scenario: resnet18.C2 (2304 configs) runs several seconds, so kills land mid-run."""


def sigkills(kills: int, rng: random.Random, home: Path) -> dict[str, Any]:
    """Kill a tune at random moments, resume each time, then let it finish."""
    env, log = _env(home), home / "kill.jsonl"
    snapshots, killed_at = [], []
    for _ in range(kills):
        proc = _tune(log, env, n=KILL_TRIALS, workload="resnet18.C2")
        delay = rng.uniform(1.0, 3.0)       # imports take ~1 s: the kills land mid-tuning
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at.append(round(delay, 2))
        snapshots.append(_lines(log))
    final = _tune(log, env, n=KILL_TRIALS, workload="resnet18.C2")
    rc = final.wait(timeout=900)
    return {"kills": kills, "kill_after_s": killed_at, "final_rc": rc,
            "records_at_kills": [len(s) for s in snapshots], **_audit(log, KILL_TRIALS, snapshots)}


def two_writers(home: Path) -> dict[str, Any]:
    """A second `tune --resume` on a log another run is writing."""
    env, log = _env(home), home / "two.jsonl"
    first = _tune(log, env, n=400, workload="resnet18.C5", seed=3)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_lines(log)) < 10:
        time.sleep(0.05)
    second = subprocess.run([*EDGETUNE, "tune", "-b", "vta-fsim", "-w", "resnet18.C5", "-t", "random", "-n", "400",
                             "--seed", "4", "--log", str(log), "--resume"], env=env, capture_output=True, text=True,
                            timeout=600)
    rc = first.wait(timeout=600)
    error = next((ln for ln in second.stderr.splitlines() if ln.startswith("error:")), "")
    return {"first_rc": rc, "second_rc": second.returncode, "second_refused": "being written by" in error,
            "second_error": error[:160], **_audit(log, 400, [])}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def board_killed(home: Path) -> dict[str, Any]:
    """A simulator agent (a real process behind a loopback tracker) killed mid-tune and started again."""
    env, log = _env(home), home / "board.jsonl"
    port = _free_port()
    subprocess.run([*EDGETUNE, "tracker", "start", "--port", str(port)], env=env, check=True, capture_output=True)
    subprocess.run([*EDGETUNE, "board", "add", "simagent", "--type", "vta-fsim", "--host", "127.0.0.1"], env=env,
                   check=True, capture_output=True)

    def agent() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "toolkit.rpc.agent", "--tracker", f"127.0.0.1:{port}",
                                 "--key", "vta-fsim", "--executor", "fsim", "--name", "simagent"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    board = agent()
    try:
        tune = subprocess.Popen([*EDGETUNE, "tune", "-b", "simagent", "-w", SMALL, "-t", "random", "-n", "60",
                                 "--log", str(log)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(_lines(log)) < 15:
            time.sleep(0.1)
        at_kill = _lines(log)
        os.killpg(board.pid, signal.SIGKILL)
        board.wait()
        time.sleep(3.0)
        board = agent()
        rc = tune.wait(timeout=600)
        return {"tune_rc": rc, "records_at_kill": len(at_kill), "stderr_tail": tune.stderr.read()[-200:],
                **_audit(log, 60, [at_kill])}
    finally:
        os.killpg(board.pid, signal.SIGKILL)
        subprocess.run([*EDGETUNE, "tracker", "stop"], env=env, capture_output=True)


def board_gone(home: Path, wait_s: int = 10) -> dict[str, Any]:
    """The board's agent killed for good mid-tune: how long the run waits (against ``--wait-board``) and how it
    ends (exit 2, one line, every finished trial in the log)."""
    env, log = _env(home), home / "gone.jsonl"
    port = _free_port()
    subprocess.run([*EDGETUNE, "tracker", "start", "--port", str(port)], env=env, check=True, capture_output=True)
    subprocess.run([*EDGETUNE, "board", "add", "simgone", "--type", "vta-fsim", "--host", "127.0.0.1"], env=env,
                   check=True, capture_output=True)
    board = subprocess.Popen([sys.executable, "-m", "toolkit.rpc.agent", "--tracker", f"127.0.0.1:{port}", "--key",
                              "vta-fsim", "--executor", "fsim", "--name", "simgone"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        tune = subprocess.Popen([*EDGETUNE, "tune", "-b", "simgone", "-w", SMALL, "-t", "random", "-n", "400",
                                 "--wait-board", str(wait_s), "--log", str(log)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(_lines(log)) < 15:
            time.sleep(0.1)
        at_kill = _lines(log)
        os.killpg(board.pid, signal.SIGKILL)
        killed = time.monotonic()
        rc = tune.wait(timeout=30 * wait_s)
        waited = time.monotonic() - killed
        err = [ln for ln in tune.stderr.read().splitlines() if ln.strip() and ln.startswith("error")]
        return {"wait_board_s": wait_s, "waited_s": round(waited, 1), "ratio": round(waited / wait_s, 2),
                "tune_rc": rc, "error": err[-1][:400] if err else "", "records_at_kill": len(at_kill),
                **_audit(log, len(_lines(log)), [at_kill])}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(board.pid, signal.SIGKILL)
        subprocess.run([*EDGETUNE, "tracker", "stop"], env=env, capture_output=True)


def disk_full(home: Path) -> dict[str, Any]:
    """``tune`` and ``export`` under a file-size limit (a full disk as the writer sees it: writes fail)."""
    import resource

    def limit(size: int):
        def apply() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        return apply

    env, log = _env(home), home / "full.jsonl"
    t = subprocess.run([*EDGETUNE, "tune", "-w", SMALL, "-t", "random", "-n", "200", "--log", str(log)], env=env,
                       preexec_fn=limit(20000), capture_output=True, text=True)
    e = subprocess.run([*EDGETUNE, "export", "--log", str(log), "--out", str(home / "exp")], env=env,
                       preexec_fn=limit(3000), capture_output=True, text=True)

    def one_line(p: subprocess.CompletedProcess) -> str:
        """The one error line (progress lines off a terminal are not errors), else how many there were."""
        errors = [ln.replace(f"{home}/", "") for ln in p.stderr.splitlines() if ln.startswith("error")]
        return errors[0][:200] if len(errors) == 1 and "Traceback" not in p.stderr else f"{len(errors)} error lines"

    with warnings_ignored():
        kept = len(read_log(log)[1])
    return {"tune_rc": t.returncode, "tune_error": one_line(t), "records_kept": kept, "export_rc": e.returncode,
            "export_error": one_line(e), "export_left": sorted(p.name for p in home.iterdir() if "exp" in p.name)}


def large_log(home: Path, n: int = 100_000) -> dict[str, Any]:
    """``best``, ``export`` and ``tune --more 1`` on an ``n``-record log: seconds and peak memory of each."""
    env, small, big = _env(home), home / "seed.jsonl", home / "big.jsonl"
    subprocess.run([*EDGETUNE, "tune", "-w", SMALL, "-t", "random", "-n", "64", "--log", str(small)], env=env,
                   check=True, capture_output=True)
    lines = small.read_text().splitlines()
    records = [json.loads(ln) for ln in lines[1:]]
    with big.open("w") as f:
        f.write(lines[0] + "\n")
        for i in range(n):
            r = dict(records[i % len(records)], trial=i)
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    out: dict[str, Any] = {"records": n, "mib": round(big.stat().st_size / 2 ** 20)}
    for name, args in (("best", ["best", str(big), "--top", "3"]),
                       ("export", ["export", "--log", str(big), "--out", str(home / "bigexp")]),
                       ("tune --more 1", ["tune", "-w", SMALL, "-t", "random", "--more", "1", "--log", str(big)])):
        p = subprocess.run(["/usr/bin/time", "-f", "%e %M", *EDGETUNE, *args], env=env, capture_output=True,
                           text=True)
        seconds, kib = p.stderr.strip().splitlines()[-1].split()
        out[name] = {"rc": p.returncode, "s": float(seconds), "mib": round(int(kib) / 1024)}
    return out


def export_kills(home: Path, kills: int, rng: random.Random) -> dict[str, Any]:
    """``export --force`` SIGKILLed at random moments over an earlier export: afterwards the folder holds one
    whole export (the old or the new: every listed file present with its hash) and no stage is left for long."""
    from toolkit.export import load_export

    env, log, out = _env(home), home / "e.jsonl", home / "exp"
    subprocess.run([*EDGETUNE, "tune", "-w", SMALL, "-t", "random", "-n", "16", "--log", str(log)], env=env,
                   check=True, capture_output=True)
    subprocess.run([*EDGETUNE, "export", "--log", str(log), "--out", str(out)], env=env, check=True,
                   capture_output=True)
    broken, after = 0, []
    for _ in range(kills):
        p = subprocess.Popen([*EDGETUNE, "export", "--log", str(log), "--out", str(out), "--force"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait = rng.uniform(0.3, 2.5)
        after.append(round(wait, 2))
        time.sleep(wait)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        try:
            load_export(out)            # checks every listed file against its hash
        except Exception:  # noqa: BLE001 - any failure to load is a broken export
            broken += 1
    final = subprocess.run([*EDGETUNE, "export", "--log", str(log), "--out", str(out), "--force"], env=env,
                           capture_output=True, text=True)
    stages = [p.name for p in home.glob(".exp.*")]
    return {"kills": kills, "kill_after_s": after, "broken": broken, "final_rc": final.returncode,
            "stages_left": len(stages)}


def planted_links(home: Path) -> dict[str, Any]:
    """A tuning log path that is a symlink (to another file, or dangling): refused, nothing written through it."""
    env = _env(home)
    victim = home / "victim.txt"
    victim.write_text("keep me\n")
    (home / "to_victim.jsonl").symlink_to(victim)
    (home / "dangling.jsonl").symlink_to(home / "nowhere.jsonl")
    rows = []
    for link in ("to_victim.jsonl", "dangling.jsonl"):
        r = subprocess.run([*EDGETUNE, "tune", "-w", SMALL, "-t", "random", "-n", "2", "--log", str(home / link)],
                           env=env, capture_output=True, text=True)
        rows.append(r.returncode)
    written = victim.read_text() != "keep me\n" or (home / "nowhere.jsonl").exists()
    return {"cases": len(rows), "refused": sum(rc == 2 for rc in rows), "written_through": int(written)}


def dead_tracker(home: Path) -> dict[str, Any]:
    """``tune -b local`` whose own loopback tracker and server are SIGKILLed mid-run: edgetune starts them again
    and the run finishes."""
    import psutil

    env, log = _env(home), home / "local.jsonl"
    small = "conv2d:H=8,W=8,CI=8,CO=8,K=3,S=1,P=1"
    tune = subprocess.Popen([*EDGETUNE, "tune", "-b", "local", "-w", small, "-t", "random", "-n", "24", "--log",
                             str(log)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(_lines(log)) < 6:
        time.sleep(0.2)
    at_kill = _lines(log)
    killed = 0
    for child in psutil.Process(tune.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error, ProcessLookupError):   # one may take the other down with it
            if "rpc_tracker" in " ".join(child.cmdline()) or "rpc_server" in " ".join(child.cmdline()):
                os.killpg(child.pid, signal.SIGKILL)
                killed += 1
    rc = tune.wait(timeout=900)
    return {"tune_rc": rc, "processes_killed": killed, "records_at_kill": len(at_kill), **_audit(log, 24, [at_kill])}


def agent_frames(home: Path) -> dict[str, Any]:
    """Malformed and stalled handshakes sent to a board agent's port, each followed by a real client's call."""
    import json as _json
    import struct

    from toolkit.rpc.agent_control import call_health
    from toolkit.rpc.tracker import require_server, start_tracker

    magic = struct.pack("<i", 0xFF271)
    frames = [magic + struct.pack("<i", -1), magic + struct.pack("<i", 0),
              magic + struct.pack("<i", 4) + b"\xff\xfe\xfd\xfc", magic + struct.pack("<i", 3) + b"   ",
              magic + struct.pack("<i", 22) + b"client:x -timeout=abcd",
              magic + struct.pack("<i", 2 ** 31 - 1), b"\x71", magic + struct.pack("<i", 40) + b"client:",
              b"GET / HTTP/1.1\r\n\r\n", bytes(range(256))]
    tracker = start_tracker()
    host, port = tracker.address
    state = home / "agent.json"
    agent = subprocess.Popen([sys.executable, "-m", "toolkit.rpc.agent", "--tracker", f"{host}:{port}", "--key",
                              "frames", "--executor", "fsim", "--name", "f", "--state-file", str(state)],
                             env=_env(home), start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    answered = 0
    try:
        require_server(host, port, "frames", "f", grace_s=90)
        agent_port = _json.loads(state.read_text())["port"]
        for frame in frames:
            with socket.create_connection(("127.0.0.1", agent_port)) as s:
                s.sendall(frame)
                time.sleep(0.1)
                with contextlib.suppress(Exception):
                    answered += call_health((host, port), "frames", "f", timeout=60).get("name") == "f"
        alive = agent.poll() is None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        tracker.stop()
    return {"frames": len(frames), "answered_after": answered, "agent_alive": alive}


@contextlib.contextmanager
def warnings_ignored():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# -- hostile inputs --------------------------------------------------------------------------------------------
def hostile(home: Path) -> dict[str, Any]:
    """Every case of the bad-input suite (:mod:`toolkit.testing.bad_inputs`), each a fresh process and folder."""
    import concurrent.futures as cf

    def one(case: Case):
        return run_case(case, Path(tempfile.mkdtemp(dir=home)))

    with cf.ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = list(pool.map(one, CASES))
    rows = [{"case": o.case.name, "rc": o.rc, "seconds": round(o.seconds, 2), "traceback": o.traceback,
             "silent_success": o.silent_success, "right": o.right, "error": (o.errors or [""])[0][:150]}
            for o in outcomes]
    return {"cases": len(rows), "tracebacks": sum(r["traceback"] for r in rows),
            "silent_successes": sum(r["silent_success"] for r in rows),
            "not_right": sum(not r["right"] for r in rows), "slowest_s": max(r["seconds"] for r in rows),
            "slowest_case": max(rows, key=lambda r: r["seconds"])["case"], "rows": rows}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bench_reliability", description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="edgetune-reliability-") as d:
        home = Path(d)
        for sub in ("k", "w", "b", "g", "d", "l", "e", "p", "t", "a"):
            (home / sub).mkdir()
        result = {"environment": environment("python -m bench.bench_reliability " + " ".join(argv or sys.argv[1:])),
                  "sigkill": sigkills(args.kills, rng, home / "k"), "two_writers": two_writers(home / "w"),
                  "board_killed": board_killed(home / "b"), "board_gone": board_gone(home / "g"),
                  "disk_full": disk_full(home / "d"), "large_log": large_log(home / "l"),
                  "export_kills": export_kills(home / "e", 8, rng), "planted_links": planted_links(home / "p"),
                  "dead_tracker": dead_tracker(home / "t"), "agent_frames": agent_frames(home / "a"),
                  "hostile": hostile(home)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    text = section(result)
    print(text)
    if args.write_docs:
        write_doc_section(DOC, SECTION, text)


if __name__ == "__main__":
    main()
