"""The test-set benchmark: tuners on conv layers no default was chosen on, measured by what luck cannot win.

``.venv/bin/python -m bench.bench_testset`` runs every tuner on every layer of a split
(:mod:`toolkit.workloads.splits`; ``--split test`` by default, ``--split development`` to choose defaults)
with ``--seeds`` seeds and ``--trials`` trials each, in both VTA settings of the headline (the simulator with
the Pynq preset in edgetune's own space; with the ZCU102 preset in the TVM-compatible space), replaying every
measurement from an exhaustive simulator log of the layer's space (built first where missing, resumably, in
``bench/out/testset-cache/``; ``--caches-only`` builds them and stops). Runs are saved after each one in
``bench/out/testset/<split>-<setting>.json`` and an interrupted run resumes. ``--report-only`` rewrites the
docs section from the saved runs.

Tuner labels: a tuner name, or ``NAME:transfer=pretrained``: that tuner starting from the transfer model edgetune ships
for the setting's preset (:mod:`toolkit.backends.vta.pretrained`, trained on the development set only).

Figures, per setting and tuner, from each run's best-so-far history (:mod:`toolkit.tuning.metrics`):
trials to the space's exact optimum (geometric mean over layer x seed; a run that never reaches it counts
with the whole budget) and its ratio to ``xgb``'s; median trials to within 0.5 % and 1 % of the optimum;
mean regret (best / optimum - 1) over the budget and at trials 10, 25, 50, 100; the paired difference
against ``xgb`` of log2(trials to the optimum) with its standard error; tuner seconds per trial; and the
modelled time to the optimum on a board (below).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from bench.testset_figures import (CHECKPOINTS, REFERENCE, cell, cold_start, figures, last_steps, parse_label, plot,
                                   transfer_check, transfers)
from toolkit.boards import Board
from toolkit.harness import BenchResult, run_bench, save_checkpoint, write_doc_section

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "testset"
CACHE = ROOT / "bench" / "out" / "testset-cache"
DEV_CACHE = ROOT / "bench" / "out" / "headline-cache"
IMG = ROOT / "docs" / "img"
DOC = ROOT / "bench" / "archive.md"
SECTION = "## Headline: the test set"
EMULATED = ROOT / "bench" / "out" / "emulated.json"

SETTINGS: dict[str, dict[str, Any]] = {
    "pynq": {"title": "VTA simulator, Pynq preset, edgetune's space", "preset": "pynq", "options": {}},
    "zcu102": {"title": "VTA simulator, ZCU102 preset (ML2Tuner's enlarged VTA), TVM-compatible space",
               "preset": "zcu102", "options": {"tvm_compat": True}},
}
TUNERS = "xgb,ml2tuner,ml2tuner:transfer=pretrained,chameleon-ml2:transfer=pretrained"


def board_for(preset: str) -> Board:
    """The simulator board with the VTA hardware preset ``preset`` (``vta-fsim`` itself for its own, ``pynq``)."""
    from toolkit.backends import board_for as backend_board

    return backend_board("vta-fsim", preset=None if preset == "pynq" else preset)


def variants(labels: Sequence[str], preset: str, model: Any = None) -> dict[str, tuple[str, dict[str, Any]]]:
    """Labels -> (tuner name, options): ``transfer=pretrained`` is the preset's shipped model (or ``model`` when
    given: the leave-one-layer-out model of a development layer); a label without ``transfer`` of a tuner that
    can transfer starts cold (``transfer=None``), whatever that tuner's default."""
    from toolkit.backends.vta.pretrained import load_pretrained
    from toolkit.tuning.tuners.base import tuner_class

    out = {}
    for label in labels:
        name, options = parse_label(label)
        opts: dict[str, Any] = dict(options)
        if transfers(label):
            opts["transfer"] = model if model is not None else load_pretrained(preset)
            if opts["transfer"] is None:
                sys.exit(f"no pretrained model for {preset}; build them with make pretrained")
        elif "transfer" in tuner_class(name).options:
            opts["transfer"] = None
        if opts or name != label:
            out[label] = (name, opts)
    return out


def held_out_models(preset: str, workloads: Sequence[Any]) -> dict[str, Any]:
    """Per development layer, a transfer model fitted like the shipped one on the other development layers
    only (so ``transfer=pretrained`` never saw the layer it tunes)."""
    from bench.pretrain import development_records, train
    from toolkit.workloads.splits import development_set

    records = dict(zip([w.label for w in development_set()], development_records(preset, [DEV_CACHE])))
    return {w.label: train(preset, [r for label, r in records.items() if label != w.label]) for w in workloads}


def json_path(split: str, setting: str, part: str | None = None) -> Path:
    return OUT / f"{split}-{setting}{'-' + part if part else ''}.json"


def load_setting(split: str, setting: str) -> BenchResult | None:
    """Every saved part of a setting's runs as one result (a run present in several parts counts once)."""
    parts = sorted(OUT.glob(f"{split}-{setting}.json")) + sorted(OUT.glob(f"{split}-{setting}-*.json"))
    if not parts:
        return None
    results = [BenchResult.load(p) for p in parts]
    merged = BenchResult(results[0].environment, dict(results[0].settings), {}, [])
    seen: set[tuple[str, str, int]] = set()
    for r in results:
        merged.workloads.update(r.workloads)
        for run_ in r.runs:
            if (run_.workload, run_.tuner, run_.seed) not in seen:
                seen.add((run_.workload, run_.tuner, run_.seed))
                merged.runs.append(run_)
    if len(results) > 1:
        merged.environment = {**merged.environment,
                              "command": "; ".join(dict.fromkeys(r.environment["command"] for r in results))}
        merged.settings["seeds"] = max(int(r.settings["seeds"]) for r in results)
    return merged


def run(split: str, setting: str, labels: list[str], trials: int, seeds: int, layers: list[str] | None,
        caches_only: bool, part: str | None = None) -> None:
    from toolkit import console
    from toolkit.backends import make_task
    from toolkit.harness import ensure_cache
    from toolkit.workloads import parse_workload
    from toolkit.workloads.splits import development_set, test_set

    s = SETTINGS[setting]
    board = board_for(s["preset"])
    workloads = [parse_workload(x) for x in layers] if layers else (
        test_set() if split == "test" else development_set())
    dirs = [CACHE, DEV_CACHE] if split == "test" else [DEV_CACHE, CACHE]
    if caches_only:
        for wl in workloads:
            task = make_task(wl, board, **s["options"])
            ensure_cache(task, dirs)
            print(f"{setting} {wl.label}: {task.space.size} configs cached", flush=True)
        return
    path = json_path(split, setting, part)
    previous = BenchResult.load(path) if path.exists() else None
    command = "python -m bench.bench_testset " + " ".join(sys.argv[1:])

    def save(result: BenchResult) -> None:
        save_checkpoint(path, result.to_json(), indent=None)

    loo = split == "development" and any(transfers(x) for x in labels)
    models = held_out_models(s["preset"], workloads) if loo else {}
    blocks = [[wl] for wl in workloads] if loo else [workloads]
    result = previous
    with console.progress() as bar:
        tid = bar.add_task(f"{split} {setting}", total=len(workloads) * seeds * len(labels), status="")
        for bi, block in enumerate(blocks):
            offset = bi * seeds * len(labels)
            part_result = run_bench(board, block, labels, trials, seeds, reference=REFERENCE,
                                    template_options=s["options"], cache_dirs=dirs, command=command,
                                    progress=lambda what, done, total: bar.update(tid, completed=offset + done,
                                                                                  status=what),
                                    checkpoint=lambda r: save(merged(result, r)), previous=result,
                                    variants=variants(labels, s["preset"], models.get(block[0].label)),
                                    stop_at_optimum=True)
            result = merged(result, part_result)
            save(result)


def merged(old: BenchResult | None, new: BenchResult) -> BenchResult:
    """``new`` with the runs and layers of ``old`` it does not have (a rerun replaces a run)."""
    if old is None:
        return new
    have = {(r.workload, r.tuner, r.seed) for r in new.runs}
    out = BenchResult(new.environment, {**old.settings, **new.settings}, {**old.workloads, **new.workloads},
                      [r for r in old.runs if (r.workload, r.tuner, r.seed) not in have] + list(new.runs))
    out.settings["runs_planned"] = len(out.runs)
    return out


# -- figures ------------------------------------------------------------------------------------------
def per_trial_board_s() -> tuple[float, str]:
    """Seconds a trial costs on a board besides compiling: the emulated ZCU102 board's measured tune time
    per trial (``bench.bench_emulated``: SSH tunnel, RPC upload, the board's driver and device)."""
    try:
        flows = json.loads(EMULATED.read_text())["flows"]
        flow = next(f for f in flows if f["board"] == "zcu102")
        return float(flow["tune_s"]) / float(flow["trials"]), "the emulated ZCU102 board's tune time per trial"
    except (OSError, ValueError, KeyError, StopIteration):
        return 1.0, "an assumed 1 s per trial (bench/out/emulated.json not found)"


def table(result: BenchResult, setting: str, split: str, board_s: float, board_src: str) -> str:
    s = SETTINGS[setting]
    fig = figures(result, board_s)
    env, st = result.environment, result.settings
    budget = st["trials"]
    png = (IMG if split == "test" else OUT) / f"testset_{split}-{setting}.png"
    plot(result, png, s["title"])
    lines = [f"### {s['title']} ({split} set)", "",
             f"- machine: {env['machine']}; date: {env['date']}",
             f"- command: `{env['command']}`",
             f"- {len(result.workloads)} layers x {st['seeds']} seeds x {budget} trials; replayed from exhaustive "
             f"simulator logs; reference `{REFERENCE}`; board time per trial besides compiling: {board_s:.2f} s "
             f"({board_src})", "",
             "| tuner | exact optimum: trials (geomean) | vs xgb | log2 diff vs xgb (± s.e.) | reached | "
             "to 0.5 % (median) | to 1 % (median) | mean regret | regret @10 / 25 / 50 / 100 | "
             "tuner s / trial (worst layer) | "
             "board time to optimum (geomean) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t, f in fig.items():
        d = f["log2_diff"]
        diff = "-" if t == REFERENCE or d.n == 0 else f"{d.mean:+.2f} ± {d.se:.2f}"
        lines.append(f"| {t} | {cell(f['t_opt'], '.1f')} | {cell(f['t_opt_vs_ref'])} | {diff} | "
                     f"{f['reached']}/{f['runs']} | {f['t_05_median']:.0f} | {f['t_1_median']:.0f} | "
                     f"{f['mean_regret']:.4f} | " + " / ".join(f"{f[f'r{k}']:.3f}" for k in CHECKPOINTS) +
                     f" | {f['tuner_s_per_trial']:.3f} ({f['tuner_s_per_trial_worst_layer']:.3f}) | "
                     f"{cell(f['board_s_to_opt'], '.0f')} s |")
    lines += cold_start(result)
    lines += last_steps(result)
    lines += transfer_check(result)
    lines += ["", f"![{split} set, {setting}: mean regret per trial](img/{png.name})", ""]
    return "\n".join(lines)


INTRO = f"""{SECTION}

The figures here are measured on the **test set** (`toolkit.workloads.splits.TEST`): 22 conv layers of
ResNet-50, VGG-16, MobileNet v1, YOLOv3-tiny and four synthetic shapes (3x3 and 1x1, strides 1 and 2, 14x14 to
56x56, 64 to 512 channels) that no default or option of edgetune's tuners was chosen on; those were chosen on
the **development set**, ResNet-18 C2-C11, whose figures follow in their own sections ("Development set: tuners
side by side" and after). The tables say how many of the 22 layers each setting ran. The shipped transfer models
(`:transfer=pretrained`) were trained on the development set only;
`ml2tuner:transfer=pretrained` is `ml2tuner+`, edgetune's default tuner; a label's options are the
tuner's options (`prior_check=False`: without the prior check, docs/tuners.md, section transfer).

Each run's figures come from its best-so-far history against the layer's exact optimum (every config of the
space measured once on the simulator), so no figure depends on another tuner's luck:

- **exact optimum: trials**: the first trial at the space's optimum, geometric mean over layer x seed (a run
  that never reaches it counts with the whole budget: a lower bound); **vs xgb**: that over xgb's;
  **log2 diff vs xgb**: mean of the paired (same layer, same seed) difference of log2(trials) with its standard
  error (-1 = half xgb's trials);
- **to 0.5 % / 1 %**: median trials until the best is within that of the optimum (budget if never);
- **mean regret**: best / optimum - 1 averaged over the trials of the budget (the area under the regret curve:
  rewards being good early; a trial before any valid config counts 10); **regret @k**: the mean over runs
  after k trials;
- **tuner s / trial**: the tuner's own time (models, search), on this machine; in brackets, the layer where it is
  highest (mean over seeds);
- **board time to optimum**: modelled for a board: trials to the optimum x (the trial's recorded compile time +
  the board's time per trial) + the configs compiled only for their features and the tuner's time (all of
  them for a run stopped at the optimum: they came before its last round; in proportion otherwise; geometric
  mean).

Regenerate with `.venv/bin/python -m bench.bench_testset` (hours on 2 cores; `--caches-only` first builds the
exhaustive logs, resumably; `--report-only` rewrites this section from `bench/out/testset/`).
"""


def report(split: str = "test") -> None:
    board_s, src = per_trial_board_s()
    parts = [INTRO]
    note = OUT / "note.md"
    if note.exists():
        parts.append(note.read_text())
    for setting in SETTINGS:
        result = load_setting(split, setting)
        if result is not None:
            parts.append(table(result, setting, split, board_s, src))
    parts += development_transfer()
    write_doc_section(DOC, SECTION, "\n".join(parts))


def development_transfer() -> list[str]:
    """The development set's transfer check (leave-one-layer-out models): where the prior check was shown."""
    lines = []
    for setting in SETTINGS:
        result = load_setting("development", setting)
        if result is None:
            continue
        fig = figures(result, 0.0)
        env = result.environment
        lines += ["", f"**{SETTINGS[setting]['title']}, development set** ({len(result.workloads)} layers x "
                  f"{result.settings['seeds']} seeds; each layer's `transfer=pretrained` model fitted on the other "
                  f"nine; {env['machine']}, {env['date']}; `{env['command']}`): trials to the exact optimum "
                  "(geomean) " + ", ".join(f"`{t}` {f['t_opt']:.1f} ({cell(f['t_opt_vs_ref'])}x xgb)"
                                           for t, f in fig.items()) + "."]
        lines += transfer_check(result)[2:]
    if lines:
        lines = ["", "### Transfer against a cold start on the development set", "",
                 "The same comparison with transfer models that never saw the layer they tune; the prior check's "
                 "threshold (docs/tuners.md, section transfer) was fixed beforehand, not tuned on either set."] + lines
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="test", choices=("test", "development"))
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    ap.add_argument("--tuners", default=TUNERS, help="comma-separated tuner labels (NAME or NAME:transfer=pretrained)")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--layers", help="workloads instead of the split's, comma- or semicolon-separated "
                    "(resnet50.L2,conv2d:H=14,W=14,...)")
    ap.add_argument("--caches-only", action="store_true", help="build the exhaustive logs and stop")
    ap.add_argument("--report-only", action="store_true", help="rewrite the docs section from the saved runs")
    ap.add_argument("--no-doc", action="store_true", help="do not rewrite bench/archive.md")
    ap.add_argument("--part", help="save the runs as <split>-<setting>-<part>.json (the report merges the parts)")
    ap.add_argument("--note", help="what this run cut (kept in bench/out/testset/note.md)")
    args = ap.parse_args(argv)
    if args.note is not None:
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "note.md").write_text(args.note.rstrip("\n") + "\n")
    if not args.report_only:
        labels = [t for t in args.tuners.split(",") if t]
        if REFERENCE not in labels:
            labels.insert(0, REFERENCE)
        for setting in args.settings.split(","):
            run(args.split, setting, labels, args.trials, args.seeds,
                re.split(r";|,(?=[a-z])", args.layers) if args.layers else None, args.caches_only, args.part)
    if args.caches_only:
        return
    if args.split == "test" and not args.no_doc:
        report(args.split)
    elif args.split != "test":   # development-set figures are printed, never the docs' headline
        board_s, src = per_trial_board_s()
        for setting in args.settings.split(","):
            result = load_setting(args.split, setting)
            if result is not None:
                print(table(result, setting, args.split, board_s, src))


if __name__ == "__main__":
    main()
