"""``edgetune bench`` (tuners side by side) and ``edgetune report`` (a tuning log's report)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit import console
from toolkit.backends import backend_for
from toolkit.cli.app import app
from toolkit.errors import ConfigError
from toolkit.cli.options import (BoardOpt, ClusterOpt, InventoryOpt, JsonOpt, TvmCompatOpt, VtaConfigOpt, board_from,
                                 check_folder, template_options)
from toolkit.cluster.nodes import cluster_address
from toolkit.harness import DEFAULT_CACHE_DIR, BenchResult, expand_workloads, run_bench, save_checkpoint, shared_starts


def _command_line(ctx: typer.Context) -> str:
    """The command as typed, rebuilt from the parsed options (those left at their default omitted)."""
    parts = ["edgetune", ctx.info_name or "bench"]
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        if value is None or value == p.default or p.name == "inventory":
            continue
        if getattr(p, "is_flag", False):
            parts.append(p.opts[0] if value else p.secondary_opts[0])
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            parts += [p.opts[0], shlex.quote(str(v))]
    return " ".join(parts)


def _write(result: BenchResult, json_out: Path, plot: Path | None, markdown: Path | None,
           title: str | None) -> None:
    """Write the JSON (and the plot and markdown tables when asked)."""
    save_checkpoint(json_out, result.to_json())
    if plot is not None or markdown is not None:
        from toolkit.report import bench_markdown, plot_bench

        if plot is not None:
            plot.parent.mkdir(parents=True, exist_ok=True)
            plot_bench(result, plot)
        if markdown is not None:
            markdown.parent.mkdir(parents=True, exist_ok=True)
            link = os.path.relpath(plot, markdown.parent) if plot is not None else None   # as the markdown sees it
            markdown.write_text(bench_markdown(result, title, link))


def _split(items: list[str]) -> list[str]:
    return [p.strip() for item in items for p in item.split(",") if p.strip()]


@app.command("bench", rich_help_panel="Tune")
def bench(
    ctx: typer.Context,
    workloads: Annotated[list[str], typer.Option(
        "--workloads", "-w", help="Workloads: network names (resnet18 = C2..C11 on VTA boards), named layers "
                                  "(resnet18.C2,resnet18.C5) or specs (separate specs with ';' or repeat the "
                                  "option).")],
    tuners: Annotated[str, typer.Option("--tuners", "-t", help="Comma-separated tuner names (see `edgetune tuners`).")],
    trials: Annotated[int, typer.Option("--trials", "-n", min=1, help="Trials per run (the same budget for all).")],
    json_out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Write every run and the summary to this JSON file (required).")] = None,
    json_path: Annotated[Optional[Path], typer.Option(
        "--json", hidden=True, help="The old name of --out (a path here, a flag everywhere else).")] = None,
    board: BoardOpt = "vta-fsim",
    seeds: Annotated[int, typer.Option("--seeds", "-s", min=1, help="Seeds 0..K-1 per tuner and workload.")] = 3,
    reference: Annotated[str, typer.Option(help="Tuner whose final best defines trials_to_match.")] = "xgb",
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write the convergence plot (PNG).")] = None,
    markdown: Annotated[Optional[Path], typer.Option("--markdown", help="Write the docs/benchmarks.md tables.")]
    = None,
    title: Annotated[Optional[str], typer.Option(help="Heading of the --markdown section.")] = None,
    tvm_compat: TvmCompatOpt = False,
    vta_config: VtaConfigOpt = None,
    replay: Annotated[bool, typer.Option(
        "--replay/--no-replay", help="Replay measurements from an exhaustive simulator log of each workload "
                                     "(built on first use) instead of measuring every trial.")] = True,
    cache_dir: Annotated[Optional[list[str]], typer.Option(
        "--cache-dir", help="Folders searched for exhaustive logs (repeatable); missing ones are built in the first.")]
    = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Reuse the runs already in --out (same board, trials and options); run only the "
                         "missing workload/tuner/seed runs.")] = False,
    inventory: InventoryOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """Run several tuners on the same workloads, budget, seeds and board; compare them.

    The JSON is rewritten after every run, so an interrupted bench continues with --resume.
    """
    if json_path is not None:
        console.warn("bench --json PATH is now --out PATH (--json is a flag in every other command)")
        json_out = json_out or json_path
    if json_out is None:
        raise ConfigError("give --out FILE.json: the bench writes every run and the summary there")
    brd = board_from(board, inventory, vta_config)
    backend = backend_for(brd.profile)
    options = template_options(brd, tvm_compat)
    wls = expand_workloads(workloads, first_conv_on_cpu=backend.first_conv_on_cpu)
    names = _split([tuners])
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"tuner(s) {', '.join(twice)} given twice in --tuners; give each once (seeds repeat runs)")
    for folder in cache_dir or [DEFAULT_CACHE_DIR]:
        check_folder(Path(folder), "--cache-dir")
    for path, suffix in ((plot, ".png"), (markdown, ".md")):
        if path is not None and path.suffix.lower() != suffix:
            raise ConfigError(f"{path} must end in {suffix}")
    previous = None
    if json_out.exists() and json_out.stat().st_size > 0:
        if not resume:
            raise ConfigError(f"{json_out} already holds a bench; pass --resume to reuse its runs, or choose another "
                              "--out")
        previous = BenchResult.load(json_out)
    command = _command_line(ctx)
    with console.progress() as bar:
        ids: dict[str, int] = {}

        def on_progress(what: str, done: int, total: int) -> None:
            key = "cache" if what.startswith("cache") else "runs"
            if key not in ids:
                ids[key] = bar.add_task("exhaustive cache" if key == "cache" else "bench", total=total, status="")
            bar.update(ids[key], completed=done, total=total, status=what)

        result = run_bench(brd, wls, names, trials, seeds, reference=reference,
                           template_options=options, replay=replay,
                           cache_dirs=cache_dir or [DEFAULT_CACHE_DIR], command=command, progress=on_progress,
                           checkpoint=lambda partial: _write(partial, json_out, None, None, title), previous=previous,
                           cluster=cluster_address(cluster))
    _write(result, json_out, plot, markdown, title)
    rows = [(t, "-" if m["best_vs_optimum"] is None else f"{m['best_vs_optimum']:.4f}",
             "-" if m["trials_to_match_vs_reference"] is None else f"{m['trials_to_match_vs_reference']:.3f}",
             m["unmatched"], "-" if m["invalid_vs_reference"] is None else f"{m['invalid_vs_reference']:.3f}",
             f"{m['wall_s']:.1f}", f"{m['tuner_s']:.1f}") for t, m in result.summary.items()]
    console.table(f"{brd.name}: {len(wls)} workloads x {seeds} seeds x {trials} trials (geometric means)",
                  ["tuner", "best/optimum", f"trials to match {reference}", "never matched", "invalid vs ref",
                   "wall s/run", "tuner s/run"], rows)
    for members, k in shared_starts(result.runs):
        console.warn(f"{', '.join(members)}: the same best-so-far over the first {k} trials of every run (their "
                     "seeded random warm-ups)" + (f"; at {trials} trials they do not differ: give more --trials"
                                                  if k >= trials else ""))
    if replay:
        caches = ", ".join(map(str, cache_dir or [DEFAULT_CACHE_DIR]))
        console.info(f"measurements replayed from the exhaustive logs in {caches} (built once, reused by later runs)")
    missing = [w for w, i in result.workloads.items() if i["optimum"] is None]
    if missing:
        console.info(f"optimum unknown (no exhaustive log) for {', '.join(missing)}")
    console.info(f"wrote {json_out}" + (f", {plot}" if plot else "") + (f", {markdown}" if markdown else ""))


@app.command("report", rich_help_panel="Tune")
def report(
    logs: Annotated[list[Path], typer.Argument(help="Tuning logs (.jsonl) to report on.", exists=True,
                                               dir_okay=False)],
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Report file: .png or .html (PNG embedded + tables); without it the best configs "
                            "are printed, as `edgetune best` does.")] = None,
    top: Annotated[int, typer.Option(min=1, help="How many of the best configs to list per log.")] = 5,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
    json: JsonOpt = False,
) -> None:
    """A tuning log's convergence, valid/invalid trials over time and the best configs' knob values."""
    if out is None:
        return best(logs, top, json)
    from toolkit.report import log_report

    if (out.exists() or out.is_symlink()) and not force:
        raise ConfigError(f"--out {out} exists; pass --force to replace it, or choose another file")

    log_report(logs, out, top)
    console.info(f"wrote {out}")


@app.command("best", rich_help_panel="Tune")
def best(
    logs: Annotated[list[Path], typer.Argument(help="Tuning logs (.jsonl).", exists=True, dir_okay=False)],
    top: Annotated[int, typer.Option(min=1, help="How many of the best configs to list per workload.")] = 5,
    json: JsonOpt = False,
) -> None:
    """The best configs of each workload of tuning logs (trials counted from 1)."""
    from toolkit.report import best_rows
    from toolkit.tuning.core.space import ConfigSpace

    rows = best_rows(logs, top)
    if json:
        console.print_json(rows)
        return
    console.table("best configs", ["workload", "rank", "trial", "latency", "GOPS", "config", "valid / trials"],
                  [(r["workload"], r["rank"] or "-", r["trial"] or "-",
                    f"{r['seconds'] * 1e3:.4f} ms" if r["seconds"] else "no valid config",
                    f"{r['gops']:.2f}" if r["gops"] else "-",
                    (f"#{r['index']} " if r["index"] is not None else "")
                    + (ConfigSpace.format(r["config"]) if r["config"] else "-"), f"{r['valid']} / {r['trials']}")
                   for r in rows])
