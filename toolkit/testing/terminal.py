"""Run ``python -m toolkit ARGS`` on a pseudo-terminal, as a user at a terminal sees it: what it printed, when
its first output came and its longest silence (the tests of waiting lines and the everyday-commands benchmark)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class TerminalRun:
    """What a command printed on a terminal, and when: seconds to its first output, its longest silence
    (between outputs, from start to the first and from the last to its end) and its wall time."""

    text: str
    returncode: int
    first_output_s: float
    longest_silence_s: float
    wall_s: float


def on_a_terminal(args: list[str], *, env: dict[str, str] | None = None, cwd: Path | str | None = None,
                  timeout: float = 300.0) -> TerminalRun:
    """Run ``python -m toolkit ARGS`` with stdout and stderr on a pseudo-terminal until it ends; an
    :class:`AssertionError` when it prints nothing for ``timeout`` seconds."""
    master, slave = pty.openpty()
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", *args], stdout=slave, stderr=slave, stdin=slave,
                            env={**(env or os.environ), "COLUMNS": "200", "TERM": "xterm"}, cwd=cwd,
                            close_fds=True)
    os.close(slave)
    out = b""
    first = None
    last = start
    longest = 0.0
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                raise AssertionError(f"no output for {timeout} s: {out[-500:]!r}")
            try:
                chunk = os.read(master, 65536)
            except OSError:     # the child closed the terminal
                break
            if not chunk:
                break
            now = time.monotonic()
            first = now - start if first is None else first
            longest, last = max(longest, now - last), now
            out += chunk
    finally:
        proc.wait(timeout=60)
        os.close(master)
    end = time.monotonic()
    return TerminalRun(out.decode(errors="replace"), proc.returncode, first if first is not None else end - start,
                       max(longest, end - last), end - start)
