"""Emulated aarch64 boards: what each step of the board flows costs under qemu-user.

    python -m bench.bench_emulated [--trials 20] [--write-docs]

Starts an emulated ``rpi4`` and an emulated ``zcu102`` (``toolkit.testing.emulated_board``; the image is
built first if this machine has none) and times, through the real CLI in fresh processes: the board's
start (until its sshd answers), ``board check``, ``board provision`` (first and second run), a
``tune`` of ``--trials`` random configs, ``export`` and ``run --check``. The timings of kernels are
emulated (qemu-user on this machine), not a Raspberry Pi's or a ZCU102's. Results:
``bench/out/emulated.json`` and, with ``--write-docs``, the "Emulated aarch64 boards" section of
bench/archive.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from toolkit.harness import environment, write_doc_section
from toolkit.testing import emulated_board as emu

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "emulated.json"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Emulated aarch64 boards"
FLOWS = {"rpi4": ("rpi4", "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1", ()),
         "zcu102": ("zcu102", "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1", ("--executor", "fsim"))}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(env: dict[str, str], *args: Any, ok: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], env=env, capture_output=True, text=True,
                       timeout=1800)
    if ok and r.returncode != 0:
        raise SystemExit(f"edgetune {' '.join(map(str, args))} failed: {r.stderr.strip()[-400:]}")
    return time.monotonic() - start, r


def _flow(name: str, image: Path, trials: int, home: Path) -> dict[str, Any]:
    type_, workload, provision_extra = FLOWS[name]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(home / "state"),
           "XDG_CONFIG_HOME": str(home / "config"), "EDGETUNE_INVENTORY": str(home / "inventory.toml"),
           "EDGETUNE_KNOWN_HOSTS": str(home / "known_hosts"), "EDGETUNE_SSH_CONFIG": str(home / "none")}
    env.pop("SSH_AUTH_SOCK", None)
    t0 = time.monotonic()
    board = emu.start_board(image)
    out: dict[str, Any] = {"board": name, "workload": workload, "trials": trials,
                           "start_s": time.monotonic() - t0}
    try:
        (home / "known_hosts").write_text(board.known_hosts_line)
        _cli(env, "board", "add", name, "--type", type_, "--host", board.address, "--user", "root",
             "--key", board.client_key)
        out["check_s"], _ = _cli(env, "board", "check", name, ok=False)
        _cli(env, "tracker", "start", "--port", _free_port())
        out["provision_s"], _ = _cli(env, "board", "provision", name, "--system-site-packages", *provision_extra)
        out["provision_again_s"], _ = _cli(env, "board", "provision", name, "--system-site-packages",
                                           *provision_extra)
        log = home / f"{name}.jsonl"
        out["tune_s"], r = _cli(env, "tune", "--board", name, "-w", workload, "--tuner", "random", "--trials",
                                trials, "--log", log, "--json")
        summary = json.loads(r.stdout)
        out["best_ms"] = summary.get("best_ms")
        out["export_s"], _ = _cli(env, "export", "--log", log, "--out", home / f"{name}-export", "--board", name)
        out["run_s"], r = _cli(env, "run", home / f"{name}-export", "--board", name, "--json")
        res = json.loads(r.stdout)["results"][0]
        out["run_output"] = res.get("message")
        out["run_correct"] = res.get("correct")
        out["stop_s"], _ = _cli(env, "board", "stop", name)
    finally:
        _cli(env, "board", "stop", name, ok=False)
        _cli(env, "tracker", "stop", ok=False)
        board.stop()
    return out


def _markdown(result: dict[str, Any]) -> str:
    env, image = result["environment"], result["image"]
    rows = "\n".join(
        f"| {f['board']} | {f['workload']} | {f['start_s']:.1f} | {f['check_s']:.1f} | {f['provision_s']:.1f} | "
        f"{f['provision_again_s']:.1f} | {f['tune_s']:.1f} ({f['tune_s'] / f['trials']:.2f}/trial) | "
        f"{f['export_s']:.1f} | {f['run_s']:.1f} | {'correct' if f['run_correct'] else 'WRONG'} "
        f"({f['run_output']}) |" for f in result["flows"])
    header = ("| board | workload | start (s) | board check (s) | provision (s) | provision again (s) | "
              f"tune {result['trials']} trials (s) | export (s) | run --check (s) | output |")
    return f"""{SECTION}

Machine: {env['machine']}; Python {env['python']}, apache-tvm {env['tvm']}. Date: {env['date']}.
Command: `python -m bench.bench_emulated --trials {result['trials']} --write-docs`. Each board is a Debian
{image['recipe']['suite']} {image['recipe']['arch']} userland under qemu-user (binfmt_misc) in its own network
and process namespaces, reached over SSH only (docs/boards.md, "Emulated aarch64 boards"); every step is
the real CLI in a fresh process, the board's side is aarch64 Python 3.11 with the aarch64 apache-tvm
{image['tvm']} wheel. Kernel latencies are emulated (qemu on this machine), not a board's.

Image: {image['bytes'] / 2**20:.0f} MiB, built in {image['seconds']:.0f} s from an empty cache
({image['debian_seconds']:.0f} s of it mmdebstrap), then reused (key `{image['key']}`).

{header}
|---|---|---|---|---|---|---|---|---|---|
{rows}

`zcu102` runs the agent and the register-level VTA driver against the simulated device
(`board provision --executor fsim`); its `board check` reports the missing `pynq` package and FPGA
manager, as it should. The CUDA template has not been measured on a GPU: this machine has none.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    if emu.skip_reason():
        print(f"emulated boards skipped: {emu.skip_reason()}", file=sys.stderr)
        return 1
    image = emu.build_image(say=lambda m: print(m, file=sys.stderr, flush=True))
    result: dict[str, Any] = {"environment": environment("python -m bench.bench_emulated"),
                              "image": emu.image_info(), "trials": args.trials, "flows": []}
    for name in FLOWS:
        print(f"{name}: start, check, provision, tune {args.trials} trials, export, run --check ...",
              file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="edgetune-bench-") as home:
            result["flows"].append(_flow(name, image, args.trials, Path(home)))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(_markdown(result))
    if args.write_docs:
        write_doc_section(DOC, SECTION, _markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
