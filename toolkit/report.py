"""Plots and reports (matplotlib, Agg backend): bench curves, bench tables, tuning-log reports.

* :func:`plot_bench`: best-so-far vs trials, one subplot per workload, one line per tuner
  (median over seeds, min-max band), the space's optimum dashed.
* :func:`bench_markdown`: the tables of ``docs/benchmarks.md`` (machine, command, date in the header).
* :func:`log_report`: a tuning log's convergence, valid/invalid trials over time and the knob
  values of the best configs, as a PNG or an HTML page (the PNG embedded as base64, plus tables).
"""

from __future__ import annotations

import base64
import heapq
import html
import io
import math
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from toolkit.errors import ConfigError, LogError
from toolkit.harness import BenchResult, shared_starts
from toolkit.tuning.journal import Record, read_log, stream_log
from toolkit.workloads import Conv2dWorkload


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 4)
    return math.ceil(n / cols), cols


def _curves(histories: Sequence[Sequence[float | None]]) -> np.ndarray:
    """Histories (None = no valid trial yet) as a seeds x trials array in ms, NaN-padded."""
    n = max(len(h) for h in histories)
    arr = np.full((len(histories), n), np.nan)
    for i, h in enumerate(histories):
        arr[i, :len(h)] = [np.nan if v is None or not math.isfinite(v) else v * 1e3 for v in h]
        if h:   # a run that stopped early (space exhausted) keeps its final best
            arr[i, len(h):] = arr[i, len(h) - 1]
    return arr


def plot_bench(result: BenchResult, path: str | Path | None = None):
    """Best-so-far (ms) vs trials per workload; returns the matplotlib Figure (saved to ``path`` if given).

    Each axes holds one line per tuner (the median over seeds, a min-max band as a filled
    area) and, where the optimum is known, one dashed horizontal line.
    """
    plt = _pyplot()
    names = list(result.workloads)
    if not names:
        raise ConfigError("the bench result has no workloads to plot")
    rows, cols = _grid(len(names))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    tuners = result.settings.get("tuners") or list(dict.fromkeys(r.tuner for r in result.runs))
    colors = {t: f"C{i}" for i, t in enumerate(tuners)}
    for ax, wl in zip(axes.flat, names):
        for t in tuners:
            hs = [r.history for r in result.runs if r.workload == wl and r.tuner == t and r.history]
            if not hs:
                continue
            arr = _curves(hs)
            x = np.arange(1, arr.shape[1] + 1)
            none_yet = np.where(np.isnan(arr), np.inf, arr)   # no valid config yet: infinitely slow
            with warnings.catch_warnings():   # all-NaN columns (no valid trial yet) stay NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                med, lo, hi = np.median(none_yet, 0), np.nanmin(arr, 0), np.max(none_yet, 0)
            med, hi = np.where(np.isinf(med), np.nan, med), np.where(np.isinf(hi), np.nan, hi)
            ax.plot(x, med, color=colors[t], label=t, lw=1.4)
            ax.fill_between(x, lo, hi, color=colors[t], alpha=0.15, lw=0)
        opt = result.workloads[wl].get("optimum")
        if opt:
            ax.axhline(opt * 1e3, color="black", ls="--", lw=1, label="optimum")
            ax.set_ylim(opt * 1e3 * 0.97, None)
        ax.set_title(wl, fontsize=9)
        ax.set_xscale("log")
        ax.set_xlabel("trials (log scale)", fontsize=8)
        ax.set_ylabel("best latency (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
        _clip_top(ax, opt)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    s = result.settings
    fig.suptitle(f"{s.get('board')}: {s.get('trials')} trials, {s.get('seeds')} seed(s) (median, min-max band; "
                 "a seed without a valid config yet counts as infinitely slow)", fontsize=9, y=0.995)
    top = 1 - 0.55 / fig.get_figheight()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, top + 0.2 / fig.get_figheight()),
               ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, top - 0.1 / fig.get_figheight()))
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    return fig


def _clip_top(ax, opt: float | None) -> None:
    """Keep the interesting part visible: at most 3x the optimum (first trials can be 100x slower)."""
    if opt:
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, min(hi, opt * 1e3 * 3))


def _fmt(v: float | None, spec: str = ".3f") -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def bench_markdown(result: BenchResult, title: str | None = None, plot: str | None = None) -> str:
    """Markdown: a header (machine, command, date, versions), the per-tuner summary, per-workload medians."""
    e, s = result.environment, result.settings
    ref = s.get("reference")
    lines = [f"### {title or s.get('board')}", "",
             f"- machine: {e.get('machine')}", f"- command: `{e.get('command')}`", f"- date: {e.get('date')}",
             f"- versions: edgetune {e.get('edgetune')}, TVM {e.get('tvm')}, Python {e.get('python')}"
             + "".join(f", {k} {v}" for k, v in (e.get("libraries") or {}).items()),
             f"- settings: board `{s.get('board')}`"
             + (f" (VTA config {s['vta_config']})" if s.get("vta_config") else "") + ", template options "
             f"{s.get('template_options') or '{}'}, {s.get('trials')} trials, {s.get('seeds')} seed(s), "
             f"{'measurements replayed from exhaustive simulator logs' if s.get('replay') else 'live measurements'}, "
             f"reference `{ref}`"]
    for members, k in shared_starts(result.runs):
        lines.append(f"- {', '.join(f'`{m}`' for m in members)}: the same best-so-far over the first {k} trials of "
                     "every run (seeded random warm-ups" + ("; at this budget they do not differ at all)"
                                                           if k >= (s.get("trials") or 0) else ")"))
    planned = s.get("runs_planned")
    if planned and len(result.runs) < planned:
        lines.append(f"- **partial**: {len(result.runs)} of {planned} runs finished (partial result)")
    lines.append("")
    lines += ["| tuner | best / optimum (geomean) | runs at optimum | trials to match ref. (ratio, geomean) | "
              "never matched | invalid vs ref. ((n+1) ratio, geomean) | invalid share | wall s / run | "
              "tuner s / run |", "|---|---|---|---|---|---|---|---|---|"]
    for t, m in result.summary.items():
        at_opt = f"{m['found_optimum']}/{m['runs']}" if m["best_vs_optimum"] is not None else "-"
        lines.append(f"| {t} | {_fmt(m['best_vs_optimum'], '.4f')} | {at_opt} | "
                     f"{_fmt(m['trials_to_match_vs_reference'], '.3f')} | {m['unmatched']} | "
                     f"{_fmt(m['invalid_vs_reference'], '.3f')} | {m['invalid_share']:.1%} | {m['wall_s']:.2f} | "
                     f"{m['tuner_s']:.2f} |")
    tuners = list(result.summary)
    lines += ["", "Per workload, the median over seeds of best / optimum (where the space was not enumerated, "
              "optimum `-`: the median best latency in ms):", "",
              "| workload | space | optimum ms | " + " | ".join(tuners) + " |",
              "|---|---|---|" + "---|" * len(tuners)]
    for wl, info in result.workloads.items():
        opt = info.get("optimum")
        cells = []
        for t in tuners:
            bs = [r.best() for r in result.runs if r.workload == wl and r.tuner == t]
            med = float(np.median(bs)) if bs else math.inf
            cells.append(_fmt(med / opt if opt else med * 1e3, ".4f"))
        lines.append(f"| {wl} | {info.get('space_size')} | {_fmt(opt * 1e3 if opt else None, '.4f')} | "
                     + " | ".join(cells) + " |")
    if plot:
        lines += ["", f"![{s.get('board')} convergence]({plot})"]
    return "\n".join(lines) + "\n"


# -- tuning-log reports --------------------------------------------------------------------------------
def _load(paths: Sequence[str | Path]) -> list[tuple[str, list[Record]]]:
    """``(label, records)`` per workload of every log (a whole-network log gives one entry per task), records
    in trial order. A label names the workload, the board and the log file, so logs of one layer stay apart."""
    if not paths:
        raise ConfigError("no tuning log given; pass one or more .jsonl logs (edgetune tune --log)")
    out = []
    for p in paths:
        header, records = read_log(p)
        if not records:
            raise LogError(f"tuning log {p} has no records (only its header); tune first, then report")
        by_workload: dict[str, list[Record]] = {}
        for r in sorted(records, key=lambda r: r.trial):
            by_workload.setdefault(r.workload_key, []).append(r)
        for recs in by_workload.values():
            label = Conv2dWorkload.from_dict(recs[0].workload).label
            out.append((f"{label} on {header.task.get('board')} ({Path(p).name})", recs))
    return out


def network_total(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    """The sum over tasks of each task's best latency (ms, each task once) after each record of a whole-network
    log, in the log's order: ``(record number from 1, total_ms)``, NaN until every task has a valid config."""
    keys = list(dict.fromkeys(r.workload_key for r in records))
    best = dict.fromkeys(keys, math.inf)
    totals = []
    for r in records:
        best[r.workload_key] = min(best[r.workload_key], r.seconds)
        total = sum(best.values())
        totals.append(total * 1e3 if math.isfinite(total) else np.nan)
    return np.arange(1, len(records) + 1), np.asarray(totals)


def best_rows(paths: Sequence[str | Path], top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` fastest valid records of every workload of every log, fastest first, as rows: ``log``,
    ``workload``, ``rank``, ``trial`` (counted from 1), ``seconds``, ``gops``, ``index``, ``config``, ``tuner``,
    and the workload's ``trials`` and ``valid`` counts. A workload without a valid record has one row with
    ``rank`` ``None``."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        _, records = stream_log(path)
        tally: dict[str, _Top] = {}          # one pass, bounded memory: counts and the top records per workload
        for r in records:
            tally.setdefault(r.workload_key, _Top(r, top)).add(r)
        if not tally:
            raise LogError(f"tuning log {path} has no records (only its header); tune first")
        for t in tally.values():
            wl = Conv2dWorkload.from_dict(t.first.workload)
            common = {"log": str(path), "workload": wl.label, "trials": t.trials, "valid": t.valid}
            best = t.best()
            if not best:
                rows.append({**common, "rank": None, "trial": None, "seconds": None, "gops": None, "index": None,
                             "config": None, "tuner": t.first.tuner})
            for rank, r in enumerate(best, 1):
                rows.append({**common, "rank": rank, "trial": r.trial + 1, "seconds": r.seconds,
                             "gops": wl.flops / r.seconds / 1e9, "index": r.index, "config": r.config,
                             "tuner": r.tuner})
    return rows


class _Top:
    """The ``k`` fastest valid records of a workload seen so far (ties: the earlier first) and its counts."""

    def __init__(self, first: Record, k: int) -> None:
        self.first, self.k = first, k
        self.trials = self.valid = 0
        self._heap: list[tuple[float, int, Record]] = []   # (-seconds, -order, record): the worst kept on top

    def add(self, r: Record) -> None:
        self.trials += 1
        if not r.valid:
            return
        self.valid += 1
        item = (-r.seconds, -self.trials, r)
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, item)
        elif item > self._heap[0]:
            heapq.heapreplace(self._heap, item)

    def best(self) -> list[Record]:
        return [r for _, _, r in sorted(self._heap, key=lambda x: (-x[0], -x[1]))]


def best_configs(records: Sequence[Record], k: int = 5) -> list[Record]:
    """The ``k`` fastest valid records, fastest first."""
    return sorted((r for r in records if r.valid), key=lambda r: r.seconds)[:k]


def _knob_value(v: Any, width: int = 40) -> str:
    """A knob value for a table cell; long ones (a MetaSchedule trace) are cut to ``width`` characters."""
    text = "x".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
    return text if len(text) <= width else text[:width - 3] + "..."


def plot_log_report(logs: Sequence[tuple[str, list[Record]]], top: int = 5,
                    network: Sequence[Record] | None = None):
    """Figure: convergence (one curve per log and task, trials counted from 1), valid/invalid over time, a
    table of the best configs' knob values, and for a whole-network log (``network``: its records in log
    order) the network total against the log's trials. Latency is on a linear axis from zero unless it spans
    over 10x (then a log axis, said on the label); the title says whether it was simulated or measured."""
    plt = _pyplot()
    rows, cols = [], ["log", "rank", "ms", "trial"]
    for name, recs in logs:
        cols += [k for k in (recs[0].config if recs else {}) if k not in cols]
        rows += [{"log": name, "rank": str(rank), "ms": f"{r.seconds * 1e3:.4f}", "trial": str(r.trial + 1),
                  **{k: _knob_value(v) for k, v in r.config.items()}}
                 for rank, r in enumerate(best_configs(recs, top), 1)]
    panels = 3 if network is not None else 2
    fig = plt.figure(figsize=(5.2 * panels, 4.6 + 0.22 * max(1, len(rows)) + 0.14 * len(logs)))
    gs = fig.add_gridspec(2, panels, height_ratios=(3, 0.4 + 0.22 * max(1, len(rows))))
    conv, valid, tab = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, :])
    lows, highs = [], []
    for i, (name, recs) in enumerate(logs):
        best, hist = math.inf, []
        for r in recs:
            best = min(best, r.seconds)
            hist.append(best * 1e3 if math.isfinite(best) else np.nan)
        x = np.asarray([r.trial + 1 for r in recs])
        conv.plot(x, hist, color=f"C{i % 10}", label=name, lw=1.2, marker="." if len(recs) < 20 else None)
        valid.plot(x, 100.0 * np.cumsum([not r.valid for r in recs]) / np.arange(1, len(recs) + 1),
                   color=f"C{i % 10}", lw=1.2)
        if not np.isnan(hist).all():
            lows.append(np.nanmin(hist))
            highs.append(np.nanmax(hist))
    simulated = all(any("sim.cycles" in r.features for r in recs) for _, recs in logs)
    wide = bool(lows) and max(highs) > 10 * min(lows)   # a log axis only where latencies span over 10x
    conv.set(title="best latency so far" + (" (simulated: VTA timing model)" if simulated else " (measured)"),
             xlabel="trial of the task (from 1)", ylabel="best latency (ms)" + (", log scale" if wide else ""))
    if wide:
        conv.set_yscale("log")
    else:
        conv.set_ylim(bottom=0)      # from zero: a 3 % gain looks like 3 %, not a cliff
    valid.set(title="invalid trials so far (% of the task's trials)", xlabel="trial of the task (from 1)",
              ylabel="invalid (%)", ylim=(0, 100))
    if network is not None:
        net = fig.add_subplot(gs[0, 2])
        x, total = network_total(network)
        if np.isnan(total).all():
            net.text(0.5, 0.5, "no total yet:\na task has no valid config", ha="center", va="center",
                     transform=net.transAxes)
        else:
            net.plot(x, total, color="black", lw=1.6)
            if np.nanmax(total) > 10 * np.nanmin(total):
                net.set_yscale("log")
            else:
                net.set_ylim(bottom=0)
        net.set(title="network total: the tasks' best, each once\n(tune-model's total weights each task by its "
                      "uses)", xlabel="trial of the log (from 1)", ylabel="latency (ms)")
    fig.legend(*conv.get_legend_handles_labels(), fontsize=7, loc="lower left", ncol=min(3, len(logs)),
               frameon=False, bbox_to_anchor=(0.01, 0.0))
    tab.axis("off")
    if rows:
        t = tab.table(cellText=[[row.get(c, "") for c in cols] for row in rows], colLabels=cols, loc="upper center",
                      cellLoc="center")
        t.auto_set_font_size(False)
        t.set_fontsize(7)
        t.auto_set_column_width(list(range(len(cols))))
        tab.set_title(f"best {top} configs of each task (knob values; trials counted from 1)", fontsize=9)
    fig.tight_layout(rect=(0, 0.03 + 0.012 * math.ceil(len(logs) / 3), 1, 1))
    return fig


def log_report(paths: Sequence[str | Path], out: str | Path, top: int = 5):
    """Write the report of tuning logs ``paths`` to ``out`` (``.png`` or ``.html``); returns the Figure."""
    out = Path(out)
    if out.suffix.lower() not in (".png", ".html"):
        raise ConfigError(f"--out {out} must end in .png or .html")
    logs = _load(paths)
    network = read_log(paths[0])[1] if len(paths) == 1 and len(logs) > 1 else None
    fig = plot_log_report(logs, top, network=network)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".png":
        fig.savefig(out, dpi=110)
        return fig
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    out.write_text(_html(logs, base64.b64encode(buf.getvalue()).decode(), top))
    return fig


def _table(cols: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html(logs: Sequence[tuple[str, list[Record]]], png_b64: str, top: int) -> str:
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>edgetune report</title><style>"
             "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px}</style></head><body>",
             "<h1>edgetune tuning report</h1>", f"<img alt='report' src='data:image/png;base64,{png_b64}'>"]
    summary = []
    for name, recs in logs:
        valid = [r for r in recs if r.valid]
        errors: dict[str, int] = {}
        for r in recs:
            if not r.valid:
                errors[r.error or "no_cost"] = errors.get(r.error or "no_cost", 0) + 1
        best = min((r.seconds for r in valid), default=math.inf)
        summary.append((name, len(recs), len(valid), len(recs) - len(valid),
                        ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "-",
                        f"{best * 1e3:.4f}" if math.isfinite(best) else "-"))
    parts += ["<h2>Logs</h2>", _table(["log", "trials", "valid", "invalid", "errors", "best ms"], summary)]
    for name, recs in logs:
        bests = best_configs(recs, top)
        knobs = list(bests[0].config) if bests else []
        parts += [f"<h2>Best {top} configs: {html.escape(name)}</h2>",
                  _table(["rank", "ms", "trial", "index", *knobs],
                         [(i, f"{r.seconds * 1e3:.4f}", r.trial + 1, r.index,
                           *(_knob_value(r.config.get(k)) for k in knobs))
                          for i, r in enumerate(bests, 1)])]
    parts.append("</body></html>")
    return "\n".join(parts)
