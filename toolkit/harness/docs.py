"""Bench results into ``docs/benchmarks.md``: one section per bench, replaced in place."""

from __future__ import annotations

from pathlib import Path


def write_doc_section(path: str | Path, heading: str, text: str) -> None:
    """Replace the section ``heading`` (a ``## `` line, up to the next ``## `` heading) of the markdown file
    ``path`` with ``text``, or append it; the other sections are left as they are."""
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
    path.write_text(new)
