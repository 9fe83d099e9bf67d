"""The ``edgetune`` console script: loads the command line, so that a Ctrl-C while it loads (a second or two of
imports) ends with one line, as it does once a command runs."""

from __future__ import annotations

import sys


def main() -> None:
    """Console-script entry point (``edgetune``, ``python -m toolkit``)."""
    try:
        from toolkit.cli import main as run
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted while starting; nothing was done\n")
        raise SystemExit(130) from None
    run()
