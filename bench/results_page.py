"""Rebuild docs/benchmarks.md (the results page) from bench/archive.md, as every benchmark script does when it
writes its section: ``python -m bench.results_page``."""

from __future__ import annotations

import argparse
from pathlib import Path

from toolkit.harness.docs import PAGE_MARK, results_page

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "bench" / "archive.md"
"""Every benchmark's whole section (its scripts write here); its first lines name the results page."""


def page_path(archive: Path = ARCHIVE) -> Path:
    """The results page the archive names."""
    mark = PAGE_MARK.search(archive.read_text())
    if mark is None:
        raise SystemExit(f"{archive} names no results page (a '<!-- results page: PATH -->' line)")
    return (archive.parent / mark.group(1)).resolve()


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m bench.results_page", description=__doc__.splitlines()[0]).parse_args(argv)
    page = page_path()
    page.write_text(results_page(ARCHIVE.read_text()))
    print(f"wrote {page.relative_to(ROOT)} from {ARCHIVE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
