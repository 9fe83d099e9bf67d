"""Bench results into markdown: each bench's full section in an archive, and the results page built from it.

The archive (``bench/archive.md``) holds one ``## `` section per benchmark, replaced in place when its bench runs
(:func:`write_doc_section`): every table, the runs behind them, their history and the decisions they led to. An
archive names its results page in a ``<!-- results page: PATH -->`` line (relative to the archive); each write
rebuilds that page (:func:`results_page`): per section, what was measured where and when, the command, and the
section's first table.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from toolkit.files import atomic_write_text

PAGE_MARK = re.compile(r"<!-- results page: (\S+) -->")
PAGE_INTRO = """# Benchmarks

The current figures: for each benchmark, the machine and date it ran on, the command that measures it and its
main table. Each section's full text (every table, the runs behind them, their history and the decisions they
led to) is in the benchmark archive, [bench/archive.md](../bench/archive.md), which every benchmark script writes
and from which this page is built (`python -m bench.results_page` rebuilds it). Figures replayed on the VTA
simulator do not depend on the machine; timings do.
"""


def write_doc_section(path: str | Path, heading: str, text: str) -> None:
    """Replace the section ``heading`` (a ``## `` line, up to the next ``## `` heading) of the markdown file
    ``path`` with ``text``, or append it; the other sections are left as they are. When ``path`` names a results
    page, that page is rebuilt."""
    path = Path(path)
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = old.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
    body = text.rstrip("\n") + "\n"
    if start is None:
        new = old.rstrip("\n") + "\n\n" + body
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
        new = "".join(lines[:start]) + body + ("\n" + "".join(lines[end:]) if end < len(lines) else "")
    atomic_write_text(path, new)
    mark = PAGE_MARK.search(new)
    if mark:
        page = path.parent / mark.group(1)
        link = os.path.relpath(path.resolve(), page.resolve().parent)
        atomic_write_text(page, results_page(new, Path(link).as_posix()))


def results_page(archive: str, link: str = "../bench/archive.md") -> str:
    """The results page of an archive's text: per ``## `` section its machine and date, command and first table,
    and a link to the whole section (``link``: the archive as the page reaches it)."""
    parts = [PAGE_INTRO.replace("../bench/archive.md", link)]
    for section in re.split(r"(?m)^(?=## )", archive)[1:]:
        lines = section.rstrip("\n").splitlines()
        heading = lines[0]
        title = heading[3:].strip()
        where = _measured(section)
        command = _command(section)
        parts.append(f"{heading}\n\n- measured: {where}\n- command: {command}\n"
                     f"- the whole section: [{link.rsplit('/', 1)[-1]}, {title}]({link}#{_anchor(title)})\n")
        table = _first_table(lines)
        if table:
            parts.append("\n".join(table) + "\n")
    return "\n".join(parts)


def _measured(section: str) -> str:
    """The section's machine and date, as it states them."""
    machine = re.search(r"[Mm]achine:\s*([^\n]*?)(?:\.\s|;\s*date|\n|$)", section)
    date = re.search(r"\b(20\d\d-\d\d-\d\d)(?: \d\d:\d\d UTC)?", section)
    named = re.sub(r"[;,]?\s*20\d\d-\d\d-\d\d.*$", "", machine.group(1)).strip().rstrip(".") if machine else ""
    out = [named[:160] or "the machine is named in the section"]
    out.append(date.group(0) if date else "not run yet")
    return "; ".join(out)


def _command(section: str) -> str:
    """The first command the section gives (a bench script, ``edgetune bench``, a make target)."""
    found = re.search(r"`([^`\n]*(?:-m bench\.|edgetune bench|make (?:bench|gpu-check))[^`\n]*)`", section)
    return f"`{found.group(1)}`" if found else "in the section"


def _first_table(lines: list[str]) -> list[str]:
    for i, line in enumerate(lines[:-1]):
        if line.startswith("|") and re.match(r"^\|\s*:?-", lines[i + 1]):
            end = next((j for j in range(i, len(lines)) if not lines[j].startswith("|")), len(lines))
            return lines[i:end]
    return []


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
