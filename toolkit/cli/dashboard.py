"""``edgetune dashboard``: a live web view of tuning runs, bench results, boards and exports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit import console
from toolkit.cli.app import app
from toolkit.procs import LOOPBACK

DEFAULT_PORT = 8765


@app.command("dashboard", rich_help_panel="Measurement")
def dashboard(
    paths: Annotated[Optional[list[Path]], typer.Argument(
        help="Folders of tuning logs, bench results and exports, or log files (default: the current folder).",
        show_default=False)] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to serve on (0: any free one).")] = DEFAULT_PORT,
    expose: Annotated[bool, typer.Option(
        "--expose", help="Listen on every interface instead of loopback (anyone on the network can then read "
                         "the logs).")] = False,
) -> None:
    """Serve a live, read-only web view of the runs under PATHS on 127.0.0.1 (open the printed URL)."""
    from toolkit.dashboard import bind, check_roots, serve

    roots = check_roots(list(paths or []))
    if expose:
        console.warn("the dashboard listens on 0.0.0.0: anyone who can reach this machine can read these logs; "
                     "prefer the default and an SSH tunnel")
    sock = bind("0.0.0.0" if expose else LOOPBACK, port)
    host, bound = sock.getsockname()[:2]
    console.info(f"dashboard of {', '.join(str(r) for r in roots)} on http://{LOOPBACK if expose else host}:{bound}/ "
                 "(read-only; Ctrl-C stops it)")
    try:
        serve(roots, sock)
    except KeyboardInterrupt:       # uvicorn shut down cleanly, then passes Ctrl-C on: the way a server stops
        pass
    finally:
        sock.close()
    console.info("dashboard stopped")
