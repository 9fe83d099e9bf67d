"""All rich output of the CLI: tables, progress bars, JSON and the one-line error style.

Library code never prints; it returns data or raises. The CLI turns both into output here.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def error(message: str) -> None:
    """Print a one-line error to stderr."""
    err.print(f"[bold red]error:[/] {_one_line(message)}", markup=True)


def warn(message: str) -> None:
    """Print a one-line warning to stderr."""
    err.print(f"[yellow]warning:[/] {_one_line(message)}", markup=True)


def info(message: str) -> None:
    """Print a plain line to stdout."""
    out.print(message, markup=False)


def _one_line(message: str) -> str:
    return " ".join(str(message).split()).replace("[", r"\[")


def print_json(obj: Any) -> None:
    """Print ``obj`` as JSON to stdout (machine readable: no colour, no wrapping)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print a table to stdout."""
    t = Table(title=title, show_lines=False)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    out.print(t)


def progress(transient: bool = False) -> Progress:
    """A progress bar for long jobs (trials, builds, benchmarks); writes to stderr."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=transient,
    )
