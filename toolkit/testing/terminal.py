"""Run ``python -m toolkit ARGS`` as a user sees it, on a pseudo-terminal or into a pipe (a log, a CI job): what it
printed, when its first output came, its longest silence and when a text first appeared (the tests of waiting
lines and the everyday-commands benchmark)."""

from __future__ import annotations

import codecs
import os
import pty
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TerminalRun:
    """What a command printed, and when: seconds to its first output, its longest silence (between outputs, from
    start to the first and from the last to its end), its wall time and each output's time."""

    text: str
    returncode: int
    first_output_s: float
    longest_silence_s: float
    wall_s: float
    chunks: list[tuple[float, str]] = field(default_factory=list, repr=False)

    def at(self, text: str) -> float | None:
        """Seconds from the start until ``text`` had been printed (``None``: never)."""
        seen = ""
        for t, chunk in self.chunks:
            seen += chunk
            if text in seen:
                return t
        return None


def on_a_terminal(args: list[str], *, env: dict[str, str] | None = None, cwd: Path | str | None = None,
                  timeout: float = 300.0, terminal: bool = True) -> TerminalRun:
    """Run ``python -m toolkit ARGS`` with stdout and stderr on a pseudo-terminal (``terminal=False``: into one
    pipe) until it ends; an :class:`AssertionError` when it prints nothing for ``timeout`` seconds."""
    master, slave = pty.openpty() if terminal else os.pipe()
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", *args], stdout=slave, stderr=slave,
                            stdin=slave if terminal else subprocess.DEVNULL,
                            env={**(env or os.environ), "COLUMNS": "200", "TERM": "xterm"}, cwd=cwd,
                            close_fds=True)
    os.close(slave)
    chunks: list[tuple[float, str]] = []
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode   # a character may span two reads
    first = None
    last = start
    longest = 0.0
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                raise AssertionError(f"no output for {timeout} s: {''.join(c for _, c in chunks)[-500:]!r}")
            try:
                chunk = os.read(master, 65536)
            except OSError:     # the child closed the terminal
                break
            if not chunk:
                break
            now = time.monotonic()
            first = now - start if first is None else first
            longest, last = max(longest, now - last), now
            chunks.append((now - start, decode(chunk)))
    finally:
        proc.wait(timeout=60)
        os.close(master)
    end = time.monotonic()
    return TerminalRun("".join(c for _, c in chunks), proc.returncode,
                       first if first is not None else end - start, max(longest, end - last), end - start, chunks)
