"""Regenerate bench/archive.md's "## Development set: tuners side by side (ResNet-18 C2-C11)" from ``edgetune
bench`` runs.

Each setting is one ``edgetune bench`` command (run as a subprocess, so the tables name the
exact command); its JSON and markdown land in ``bench/out/headline/`` and its plot in
``docs/img/`` (the JSONs are kept in git). The section is rebuilt from every setting's JSON found
there; a table whose JSON is not there (removed, or never kept) stays as it is.

    .venv/bin/python -m bench.headline                       # everything (hours on 2 cores)
    .venv/bin/python -m bench.headline --settings pynq --seeds 1 --layers C2,C5
    .venv/bin/python -m bench.headline --doc-only            # only rebuild the section
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from toolkit.report import bench_markdown, plot_bench
from toolkit.harness import BenchResult

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "headline"
IMG = ROOT / "docs" / "img"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Development set: tuners side by side (ResNet-18 C2-C11)"
VTA_TUNERS = "random,xgb,chameleon,chameleon+,ml2tuner,chameleon-ml2"
CACHES = ("bench/out/headline-cache", "bench/out/tuning-cache", "bench/out/ml2-cache")
"""Exhaustive simulator logs are looked up here (other benchmarks' caches included); missing ones are built
in the first folder."""

SETTINGS: dict[str, dict] = {
    "pynq": {"title": "VTA simulator, Pynq config, edgetune's space",
             "args": ["--board", "vta-fsim"], "layers": [f"C{i}" for i in range(2, 12)], "tuners": VTA_TUNERS,
             "trials": 400, "seeds": 5},
    "zcu102": {"title": "VTA simulator, ZCU102 config (ML2Tuner's enlarged VTA), TVM-compatible space",
               "args": ["--board", "vta-fsim", "--vta-config", "zcu102", "--tvm-compat"],
               "layers": [f"C{i}" for i in range(2, 12)], "tuners": VTA_TUNERS, "trials": 400, "seeds": 5},
    "local": {"title": "local CPU, real TVM builds and measurements",
              "args": ["--board", "local", "--no-replay"], "layers": ["C2", "C5", "C8"],
              "tuners": "xgb,chameleon+,chameleon-ml2,ml2tuner,metaschedule", "trials": 200, "seeds": 3},
}

INTRO = f"""{SECTION}

These are **development-set** figures (ResNet-18 C2-C11, the layers the defaults were chosen on); the
headline is the test set above. Every tuner runs on every workload with every seed, with the same trial budget on
the same board
(`edgetune bench`; the tuners take turns inside each workload/seed block). On the simulator the
measurements are replayed from an exhaustive log of each layer's space (every config compiled and
simulated once), which also gives the space's optimum. Columns:

- **best / optimum**: geometric mean over (layer, seed) of the best latency found / the space's optimum
  (1.0 = the optimum was found).
- **trials to match ref.**: a run's *trials_to_match* is the first trial whose best-so-far is within 1 % of
  the reference tuner's (`xgb`) final best on the same layer **and seed**; the column is the geometric mean
  of its ratio to the reference's own trials_to_match (< 1: faster than xgb). A run that never matched
  counts with its whole budget (a lower bound); *never matched* counts them.
- **invalid vs ref.**: geometric mean of (invalid trials + 1) / (xgb's invalid trials + 1).
- wall / tuner seconds per run: the whole run, and the time spent inside the tuner (replayed runs spend
  almost all their time in the tuner).

Regenerate with `.venv/bin/python -m bench.headline` (options cut seeds, layers or trials). What ran
below is exactly the command in each table's header.
"""


INTRO_END = INTRO.rstrip("\n").splitlines()[-1]
"""The intro's last line: what follows it in the docs (up to the first table) is the section's note."""


def command(name: str, layers: list[str], seeds: int, trials: int, tuners: str, out_name: str) -> list[str]:
    s = SETTINGS[name]
    out, img = OUT.relative_to(ROOT), IMG.relative_to(ROOT)
    cmd = [str(Path(sys.executable).parent / "edgetune"), "bench", *s["args"],
           "--workloads", ",".join(f"resnet18.{layer}" for layer in layers), "--tuners", tuners,
           "--trials", str(trials), "--seeds", str(seeds), "--out", str(out / f"{out_name}.json"),
           "--plot", str(img / f"headline_{out_name}.png"), "--markdown", str(out / f"{out_name}.md"),
           "--title", s["title"], "--resume"]   # an interrupted setting continues where it stopped
    for c in CACHES:
        cmd += ["--cache-dir", c]
    return cmd


def _tables(section: str) -> dict[str, str]:
    """The ``### `` tables of a rendered section, by heading line (in order)."""
    parts = re.split(r"^(?=### )", section, flags=re.M)
    return {p.splitlines()[0]: p for p in parts if p.startswith("### ")}


def write_section() -> None:
    """Rebuild the section from every bench JSON in ``bench/out/headline`` (and ``note.md``); a table
    already in the docs whose JSON is not here is kept as it is."""
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    old = pattern.search(doc)
    tables = _tables(old.group(0)) if old else {}
    intro = [INTRO]
    if (OUT / "note.md").exists():
        intro.append((OUT / "note.md").read_text())
    elif old:   # the note is kept with the tables it explains
        body = old.group(0)
        first = re.search(r"^### ", body, re.M)
        end = first.start() if first else len(body)
        marker = body.find(INTRO_END, 0, end)   # an earlier wording of the intro is replaced, not kept
        start = marker + len(INTRO_END) if marker >= 0 else len(SECTION) + 1
        kept = body[start:end].strip("\n")
        intro.append(kept + "\n" if kept else "")
    names = sorted({p.stem for p in OUT.glob("*.json")}, key=lambda n: (list(SETTINGS).index(n.split("-")[0])
                                                                          if n.split("-")[0] in SETTINGS else 99, n))
    for name in names:
        js = OUT / f"{name}.json"
        result = BenchResult.load(js)   # the tables are rebuilt from the JSON, so they follow toolkit.report's format
        title = SETTINGS.get(name.split("-")[0], {}).get("title")
        if title and name not in SETTINGS:   # a second table of a setting (--suffix)
            title = f"{title} ({name}.json)"
        png = IMG / f"headline_{name}.png"
        plot_bench(result, png)
        text = bench_markdown(result, title, f"img/{png.name}")
        tables[text.splitlines()[0]] = text
    text = "\n".join([p for p in intro if p] + [t.rstrip("\n") + "\n" for t in tables.values()]).rstrip("\n") + "\n\n"
    doc = pattern.sub(lambda _: text, doc) if old else doc.rstrip("\n") + "\n\n" + text
    DOC.write_text(doc)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    ap.add_argument("--layers", help="comma-separated ResNet-18 layers (default: each setting's)")
    ap.add_argument("--seeds", type=int, help="seeds per tuner and layer (default: each setting's)")
    ap.add_argument("--trials", type=int, help="trials per run (default: each setting's)")
    ap.add_argument("--tuners", help="comma-separated tuners (default: each setting's)")
    ap.add_argument("--suffix", help="write <setting><suffix>.json/.md (a second table) instead of <setting>.*")
    ap.add_argument("--parallel", action="store_true", help="run the settings at the same time")
    ap.add_argument("--note", help="what this run cut or could not run (kept in bench/out/headline/note.md)")
    ap.add_argument("--doc-only", action="store_true", help="only rebuild the docs section from bench/out/headline")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    IMG.mkdir(parents=True, exist_ok=True)
    if args.note is not None:
        (OUT / "note.md").write_text(args.note.rstrip("\n") + "\n")
    if not args.doc_only:
        procs = []
        for name in args.settings.split(","):
            s = SETTINGS[name]
            cmd = command(name, args.layers.split(",") if args.layers else s["layers"], args.seeds or s["seeds"],
                          args.trials or s["trials"], args.tuners or s["tuners"], name + (args.suffix or ""))
            print(" ".join(cmd), flush=True)
            p = subprocess.Popen(cmd, cwd=ROOT)
            if args.parallel:
                procs.append(p)
            elif p.wait() != 0:
                print(f"{name}: edgetune bench failed (exit {p.returncode})", file=sys.stderr)
        for p in procs:
            p.wait()
    write_section()


if __name__ == "__main__":
    main()
