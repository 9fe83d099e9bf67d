"""bench.headline rebuilds its docs section from the JSONs it has and keeps the tables it has not."""

from __future__ import annotations

import json

from toolkit.boards import resolve_board
from toolkit.harness import run_bench
from toolkit.workloads import parse_workload

import bench.headline as headline

PYNQ = f"### {headline.SETTINGS['pynq']['title']}"
ZCU = f"### {headline.SETTINGS['zcu102']['title']}"


def test_a_setting_without_its_json_keeps_its_table(tmp_path, monkeypatch):
    doc, out, img = tmp_path / "benchmarks.md", tmp_path / "headline", tmp_path / "img"
    out.mkdir()
    monkeypatch.setattr(headline, "DOC", doc)
    monkeypatch.setattr(headline, "OUT", out)
    monkeypatch.setattr(headline, "IMG", img)
    note = "**Stop 9.** What changed.\n"
    doc.write_text(f"# Benchmarks\n\n{headline.INTRO}\n{note}\n{PYNQ}\n\nold pynq numbers\n\n{ZCU}\n\n"
                   "zcu102 numbers, not rerun\n\n## Next section\n\nuntouched\n")
    res = run_bench(resolve_board("vta-fsim"), [parse_workload("conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1")],
                    ["random", "xgb"], 4, 1, cache_dirs=[tmp_path / "cache"])
    (out / "pynq.json").write_text(json.dumps(res.to_json()))
    headline.write_section()
    text = doc.read_text()
    assert "old pynq numbers" not in text and text.count(PYNQ) == 1           # rebuilt from the JSON
    assert "| xgb |" in text.split(PYNQ)[1].split(ZCU)[0]
    assert f"{ZCU}\n\nzcu102 numbers, not rerun\n" in text                    # no JSON: kept
    assert text.index(PYNQ) < text.index(ZCU)
    assert note in text and text.endswith("## Next section\n\nuntouched\n")
    assert (img / "headline_pynq.png").stat().st_size > 0


def test_an_earlier_intro_is_replaced_and_the_note_kept(tmp_path, monkeypatch):
    doc, out = tmp_path / "benchmarks.md", tmp_path / "headline"
    out.mkdir()
    monkeypatch.setattr(headline, "DOC", doc)
    monkeypatch.setattr(headline, "OUT", out)
    monkeypatch.setattr(headline, "IMG", tmp_path / "img")
    older = "An earlier wording of the intro.\n\n" + headline.INTRO_END + "\n"
    note = "**What ran.** Five seeds.\n"
    doc.write_text(f"# Benchmarks\n\n{headline.SECTION}\n\n{older}\n{note}\n{ZCU}\n\nnumbers\n")
    headline.write_section()
    text = doc.read_text()
    assert "An earlier wording" not in text and text.count(headline.INTRO_END) == 1
    assert text.count(note) == 1 and text.index(note) < text.index(ZCU)
    assert f"{ZCU}\n\nnumbers\n" in text
