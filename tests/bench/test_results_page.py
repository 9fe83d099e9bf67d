"""docs/benchmarks.md is the results page of bench/archive.md: built from it, short, every benchmark once."""

from __future__ import annotations

import re
from pathlib import Path

from bench import results_page as page_script
from toolkit.harness.docs import results_page, write_doc_section

ARCHIVE = page_script.ARCHIVE


def test_the_committed_page_is_the_archives_results_page_and_under_400_lines():
    page = page_script.page_path()
    assert page == page_script.ROOT / "docs" / "benchmarks.md"
    text = page.read_text()
    assert text == results_page(ARCHIVE.read_text()), "run `python -m bench.results_page`"
    assert len(text.splitlines()) < 400


def test_every_benchmark_is_on_the_page_once_with_where_when_and_how():
    archive, text = ARCHIVE.read_text(), page_script.page_path().read_text()
    headings = re.findall(r"(?m)^## .*$", archive)
    assert headings and re.findall(r"(?m)^## .*$", text) == headings
    for section in re.split(r"(?m)^(?=## )", text)[1:]:
        assert "- measured: " in section and "- command: " in section and "](../bench/archive.md#" in section


def test_a_bench_writing_its_section_rebuilds_the_page_its_archive_names(tmp_path: Path):
    archive = tmp_path / "bench" / "archive.md"
    archive.parent.mkdir()
    archive.write_text("# Archive\n\n<!-- results page: ../docs/results.md -->\n\n## Old\n\nkept\n")
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n"
    write_doc_section(archive, "## New", f"## New\n\nMachine: box, 2 cores. Date 2026-01-02.\n"
                                         f"Command: `python -m bench.bench_new --x 1`.\n\n{table}\nmore text\n")
    page = (tmp_path / "docs" / "results.md").read_text()
    new = page.split("## New")[1]
    assert "- measured: box, 2 cores; 2026-01-02" in new and "`python -m bench.bench_new --x 1`" in new
    assert table.strip() in new and "more text" not in new
    assert "](../bench/archive.md#new)" in new and "## Old" in page
    plain = tmp_path / "plain.md"
    write_doc_section(plain, "## S", "## S\n\ntext\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "docs", "plain.md"]
