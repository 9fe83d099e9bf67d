"""The ``edgetune`` console script: loads the command line, so that a Ctrl-C (or a SIGTERM) while it loads (a
second or two of imports) ends with one line, as it does once a command runs."""

from __future__ import annotations

import signal
import sys


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM ends a command as Ctrl-C does: its one line, what it keeps, exit 130."""
    raise KeyboardInterrupt


def main() -> None:
    """Console-script entry point (``edgetune``, ``python -m toolkit``)."""
    signal.signal(signal.SIGTERM, _terminated)
    try:
        from toolkit.cli import main as run
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted while starting; nothing was done\n")
        raise SystemExit(130) from None
    run()
