"""All rich output of the CLI: tables, progress bars, JSON and the one-line error style.

Library code never prints; it returns data or raises. The CLI turns both into output here.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.measure import Measurement
from rich.table import Table

from toolkit.errors import WAIT, one_line

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def error(message: str, *, as_json: bool = False) -> None:
    """Print a one-line error to stderr (and with ``as_json`` also ``{"error": message}`` to stdout)."""
    err.print(f"[bold red]error:[/] {_one_line(message)}", markup=True)
    if as_json:
        print_json({"error": " ".join(str(message).split())})


def warn(message: str) -> None:
    """Print a one-line warning to stderr."""
    err.print(f"[yellow]warning:[/] {_one_line(message)}", markup=True)


def info(message: str) -> None:
    """Print a plain line to stdout."""
    out.print(message, markup=False)


def say(message: str) -> None:
    """Print a plain line of progress to stderr (what a long command has done so far; stdout keeps the data)."""
    err.print(message, markup=False)


WAIT_EVERY_S = 30.0
"""Off a terminal, how often a long wait says again that it still waits."""


@contextlib.contextmanager
def waiting(message: str) -> Iterator[None]:
    """While the block runs, say what the command waits for (a model traced, a board started). On a terminal a
    spinner with the seconds so far; the line stays, with the time it took. Off a terminal plain lines (for logs
    and pipes): ``wait: MESSAGE`` at once, every :data:`WAIT_EVERY_S` while it lasts, and its time when it took
    over a second."""
    if err.is_terminal:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err) as bar:
            bar.add_task(message, total=None)
            yield
        return
    text, t0, done = _one_line(message), time.monotonic(), threading.Event()
    err.print(f"{WAIT} {text}", markup=True)

    def remind() -> None:
        while not done.wait(WAIT_EVERY_S):
            err.print(f"{WAIT} {text}: {time.monotonic() - t0:.0f} s so far", markup=True)

    reminder = threading.Thread(target=remind, daemon=True)
    reminder.start()
    try:
        yield
    finally:
        done.set()
        reminder.join()
    if time.monotonic() - t0 >= 1.0:
        err.print(f"{WAIT} {text}: done in {time.monotonic() - t0:.1f} s", markup=True)


def command_seconds() -> float:
    """Seconds since this process started: what a summary says the whole command took (imports, board start-up
    and tracing included)."""
    import psutil

    return time.time() - psutil.Process().create_time()


def _one_line(message: str) -> str:
    """``message`` on one line, Rich's markup escaped."""
    return one_line(message, limit=None).replace("[", r"\[")


def print_json(obj: Any) -> None:
    """Print ``obj`` as JSON to stdout (machine readable: no colour, no wrapping)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print a table to stdout: no cell is cut. On a terminal a long cell folds inside its column; off a terminal
    (a pipe, a file) the table is as wide as its longest row, so specs and paths stay whole on one line."""
    t = Table(title=title, show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    if out.is_terminal:
        out.print(t)
    else:
        wide = Measurement.get(out, out.options.update(max_width=1 << 14), t).maximum
        Console(file=out.file, width=max(out.width, wide), highlight=False, soft_wrap=True).print(t)


class PlainProgress:
    """Progress as plain lines on stderr, for logs and pipes (no terminal): a ``wait:`` line when a task starts,
    one each time it passes another tenth of its total, or every :attr:`every_s` seconds while it advances, and its last
    state when the job ends. The subset of rich's ``Progress`` edgetune uses."""

    every_s = 30.0
    status_every_s = 2.0

    def __init__(self, transient: bool = False) -> None:
        self._tasks: dict[int, dict[str, Any]] = {}
        self.transient = transient
        """A transient bar (a wait inside a command) prints only its status as it changes, a ``wait:`` line at most
        every :attr:`status_every_s` seconds."""
        self._said = -math.inf

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        for t in self._tasks.values():
            if t["completed"] != t["printed"]:
                self._print(t)

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> int:
        task_id = len(self._tasks)
        self._tasks[task_id] = {"description": description, "total": total, "completed": 0, "fields": fields,
                                "printed": 0, "at": time.monotonic()}
        if not self.transient:      # said as what the command now waits for: no line but errors and these
            err.print(f"{WAIT} {_one_line(description)}: started", markup=True)
        return task_id

    def update(self, task_id: int, *, completed: float | None = None, advance: float | None = None,
               total: float | None = None, description: str | None = None, **fields: Any) -> None:
        t = self._tasks[task_id]
        if total is not None:
            t["total"] = total
        if description is not None:
            t["description"] = description
        if self.transient and fields.get("status") and fields["status"] != t["fields"].get("status") \
                and time.monotonic() - self._said >= self.status_every_s:
            err.print(f"{WAIT} {t['description']}: {_one_line(fields['status'])}", markup=True)
            self._said = time.monotonic()
        t["fields"].update(fields)
        if advance:
            t["completed"] += advance
        if completed is not None:
            t["completed"] = completed
        total_ = t["total"] or 0
        tenth = max(total_ / 10, 1e-9) if total_ else None
        crossed = tenth is not None and int(t["completed"] / tenth) > int(t["printed"] / tenth)
        if t["completed"] != t["printed"] and (crossed or time.monotonic() - t["at"] >= self.every_s):
            self._print(t)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def start(self) -> None:
        """Nothing to start: lines are printed as tasks advance."""

    def stop(self) -> None:
        """Print the last state of tasks that advanced since their last line."""
        self.__exit__()

    def _print(self, t: dict[str, Any]) -> None:
        if self.transient:
            return
        total = f"/{t['total']:g}" if t["total"] else ""
        status = t["fields"].get("status", "")
        err.print(f"{t['description']}: {t['completed']:g}{total} {status}".rstrip(), markup=False, highlight=False)
        t["printed"], t["at"] = t["completed"], time.monotonic()


def progress(transient: bool = False) -> Progress | PlainProgress:
    """A progress bar for long jobs (trials, builds, benchmarks) on stderr; plain lines when stderr is not a
    terminal (:class:`PlainProgress`)."""
    if not err.is_terminal:
        return PlainProgress(transient)
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
