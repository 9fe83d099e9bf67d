"""Helpers the CLI tests share: the one-line error check, and a board agent with the simulated VTA device."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def one_line_error(result: Any, code: int = 2) -> str:
    """The single line a bad input must get (warnings and ``wait:`` lines aside): exit ``code``, no traceback;
    returns the line.
    ``result``: a ``CliRunner`` result (its output) or a ``subprocess.CompletedProcess`` (its stderr)."""
    if isinstance(result, subprocess.CompletedProcess):
        output, exit_code = result.stderr, result.returncode
    else:
        output, exit_code = result.output, result.exit_code
    from toolkit.errors import WAIT

    lines = [ln for ln in output.splitlines() if ln.strip() and not ln.startswith(("warning:", WAIT))]
    assert exit_code == code, output
    assert "Traceback" not in output and len(lines) == 1, output
    return lines[0]


@contextlib.contextmanager
def sim_agent(host: str, port: int, key: str, name: str, log: Path,
              timeout_s: float = 60.0) -> Iterator[subprocess.Popen]:
    """A board agent (``--executor fsim``) registered with the tracker at ``host:port`` under ``key``, its
    output in ``log`` (the context gives its process, the leader of its group); stopped (its group) on exit."""
    from toolkit.rpc.tracker import tracker_summary

    def registered() -> int:
        return sum(s.get("key") == f"server:{key}" for s in tracker_summary(host, port).get("server_info", []))

    before = registered()
    with open(log, "w") as out:
        agent = subprocess.Popen([sys.executable, "-m", "toolkit.rpc.agent", "--tracker", f"{host}:{port}", "--key",
                                  key, "--executor", "fsim", "--name", name], stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while registered() <= before:
            assert agent.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield agent
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
