"""AutoTVM and TopHub logs of TVM's VTA conv2d template (``conv2d_packed.vta``) as edgetune logs.

An AutoTVM record (format 0.2, ``{"input", "config", "result", "version"}``, or 0.1, ``{"i", "r", "v"}``)
names a target (``ext_dev -device=vta ... -model=pynq_1x16_i8w8a32_15_15_18_17``), the template and its
arguments (the packed ``NCHW1n16c`` data and ``OIHW16o16i`` kernel tensors, strides, padding, dilation),
and one config of TVM's knobs (``tile_b/h/w/ci/co`` splits, ``oc_nthread``, ``h_nthread``). edgetune's
TVM-compatible VTA space (``tvm_compat=True``) has the same knobs with the same values, so a record maps
to one config of that space. Each workload of the file becomes one edgetune log (resumable, exportable,
and a history for model-based tuners); its records keep AutoTVM's measured costs and say where they
came from. Records of other templates (AutoTVM's CPU and GPU templates have other knobs than edgetune's)
and configs outside edgetune's space are counted and left out.

>>> line = ('{"input": ["ext_dev -device=vta -keys=cpu -model=pynq_1x16_i8w8a32_15_15_18_17", '
...         '"conv2d_packed.vta", [["TENSOR", [1, 16, 14, 14, 1, 16], "int8"], ["TENSOR", [16, 16, 3, 3, 16, 16], '
...         '"int8"], [1, 1], [1, 1, 1, 1], [1, 1], "NCHW1n16c", "int32"], {}], "config": {"index": 3, '
...         '"code_hash": null, "entity": [["tile_b", "sp", [1, 1]], ["tile_h", "sp", [1, 14]], ["tile_w", "sp", '
...         '[1, 14]], ["tile_ci", "sp", [16, 1]], ["tile_co", "sp", [4, 4]], ["oc_nthread", "ot", 2], '
...         '["h_nthread", "ot", 1]]}, "result": [[0.0049], 0, 7.4, 1562809902.1], "version": 0.2}')
>>> rec = parse_record(line, "tophub.log:1")
>>> rec.model, rec.workload.spec(), rec.values["tile_co"], rec.costs
('pynq_1x16_i8w8a32_15_15_18_17', 'conv2d:N=1,H=14,W=14,CI=256,CO=256,K=3,S=1,P=1', [4, 4], [0.0049])
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from toolkit.boards import Board
from toolkit.errors import ConfigError, LogError
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.journal import Record, check_log_path, open_journal
from toolkit.vta.config import get_preset
from toolkit.workloads import Conv2dWorkload, list_named

TEMPLATE = "conv2d_packed.vta"
TUNER = "autotvm-import"
MAX_LINE = 100_000
"""Longer lines are not AutoTVM records (refused, not parsed)."""


@dataclass
class AutoTVMRecord:
    """One AutoTVM record of the VTA conv2d template: workload, hardware model, knob values, result."""

    where: str
    model: str
    workload: Conv2dWorkload
    values: dict[str, Any]
    costs: list[float]
    error_no: int
    timestamp: float
    tvm_version: str = ""


@dataclass
class ImportSummary:
    """What an import wrote: one log per workload, and what it left out (with the reason)."""

    logs: dict[str, Path] = field(default_factory=dict)
    records: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def _ints(value: Any, n: int, what: str, where: str) -> list[int]:
    if (not isinstance(value, list) or len(value) != n
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 20 for v in value)):
        raise LogError(f"{where}: {what} must be {n} non-negative integers; fix or delete that line")
    return value


def _tensor(value: Any, where: str, what: str) -> list[int]:
    if not (isinstance(value, list) and len(value) == 3 and value[0] == "TENSOR"):
        raise LogError(f"{where}: the {what} argument is not a TENSOR; fix or delete that line")
    return _ints(value[1], 6, f"the {what} shape", where)


def parse_record(line: str, where: str) -> AutoTVMRecord | None:
    """The record on ``line``, ``None`` for another template; :class:`LogError` for a malformed line."""
    if len(line) > MAX_LINE:
        raise LogError(f"{where}: a line of {len(line)} characters is not an AutoTVM record")
    try:
        obj = json.loads(line)
    except ValueError:
        raise LogError(f"{where}: not JSON (an AutoTVM log holds one JSON record per line)") from None
    if not isinstance(obj, dict):
        raise LogError(f"{where}: an AutoTVM record is a JSON object")
    if "input" in obj:       # format 0.2
        inp, cfg, res = obj.get("input"), obj.get("config"), obj.get("result")
        entity = cfg.get("entity") if isinstance(cfg, dict) else None
    elif "i" in obj:         # format 0.1: target, name, args, kwargs, workload, config
        inp, res = obj.get("i"), obj.get("r")
        cfg = inp[5] if isinstance(inp, list) and len(inp) > 5 else None
        entity = cfg.get("e") if isinstance(cfg, dict) else None
    else:
        raise LogError(f"{where}: neither an AutoTVM 0.2 record (input/config/result) nor 0.1 (i/r)")
    if not (isinstance(inp, list) and len(inp) >= 3 and isinstance(inp[0], str) and isinstance(inp[1], str)):
        raise LogError(f"{where}: the record's input is not [target, template, args, ...]")
    if inp[1] not in (TEMPLATE, "topi_nn_conv2d"):
        return None
    args = inp[2]
    if not (isinstance(args, list) and len(args) >= 5):
        raise LogError(f"{where}: {inp[1]} needs data, kernel, strides, padding and dilation arguments")
    data, kernel = _tensor(args[0], where, "data"), _tensor(args[1], where, "kernel")
    strides, padding, dilation = _ints(args[2], 2, "strides", where), args[3], _ints(args[4], 2, "dilation", where)
    padding = _ints(padding, 4, "padding", where) if isinstance(padding, list) and len(padding) == 4 else _ints(
        padding, 2, "padding", where) * 2
    if dilation != [1, 1]:
        raise LogError(f"{where}: dilation {dilation} is not supported by edgetune's VTA template (only 1, 1)")
    if padding[0] != padding[2] or padding[1] != padding[3]:
        raise LogError(f"{where}: asymmetric padding {padding} is not supported by edgetune's VTA template")
    batch, cib, h, w, bn, bi = data
    cob, cib2, kh, kw, bo, bi2 = kernel
    if cib2 != cib or bi2 != bi:
        raise LogError(f"{where}: the kernel's input channels {cib2}x{bi2} differ from the data's {cib}x{bi}")
    try:
        workload = Conv2dWorkload(n=batch * bn, h=h, w=w, ci=cib * bi, co=cob * bo, kh=kh, kw=kw, sh=strides[0],
                                  sw=strides[1], ph=padding[0], pw=padding[1])
    except (TypeError, ValueError, ConfigError) as exc:
        raise LogError(f"{where}: {exc}") from None
    match = re.search(r"-model=(\S+)", inp[0])
    if not match:
        raise LogError(f"{where}: the target {inp[0][:80]!r} names no VTA model (-model=TARGET_BITSTREAM)")
    if not isinstance(entity, list):
        raise LogError(f"{where}: the record has no config entity")
    values: dict[str, Any] = {}
    for item in entity:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
            raise LogError(f"{where}: a config entity item is not [name, kind, value]")
        name, kind, value = item
        values[name] = _ints(value, len(value), f"split {name}", where) if kind == "sp" and isinstance(
            value, list) else value
    if not (isinstance(res, list) and len(res) >= 2 and isinstance(res[0], list) and isinstance(res[1], int)):
        raise LogError(f"{where}: the record's result is not [costs, error_no, ...]")
    costs = [float(c) for c in res[0] if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if res[1] == 0 and not (costs and all(math.isfinite(c) and 0 < c < 1e8 for c in costs)):
        raise LogError(f"{where}: a successful record needs positive, finite costs")
    stamp = res[3] if len(res) > 3 and isinstance(res[3], (int, float)) else 0.0
    return AutoTVMRecord(where, match.group(1), workload, values, costs if res[1] == 0 else [], res[1],
                         float(stamp), str(obj.get("tvm_version", "")))


def read_autotvm(path: str | Path) -> tuple[list[AutoTVMRecord], int]:
    """The VTA conv2d records of an AutoTVM log (``#`` lines and blank lines skipped), and how many records
    of other templates it holds."""
    path = Path(path)
    check_log_path(path, must_exist=True)
    out, other = [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            rec = parse_record(line, f"{path}:{n}")
            if rec is None:
                other += 1
            else:
                out.append(rec)
    return out, other


def import_autotvm(path: str | Path, board: Board, out_dir: str | Path, *,
                   make_task: Callable[..., Any], build: Callable[[Any, list], list]) -> ImportSummary:
    """Write one edgetune log per workload of the AutoTVM log ``path`` into ``out_dir`` for ``board``,
    in TVM's space (``tvm_compat``). Only records of the board's VTA model are taken; ``build`` compiles
    a task's configs (their compile-time features go into the records, as a tuning run writes them)."""
    hw = get_preset(board.profile.vta["preset"])
    records, other = read_autotvm(path)
    summary = ImportSummary()
    if other:
        summary.skipped[f"record(s) of other templates (only {TEMPLATE} maps to edgetune's knobs)"] = other
    mine = [r for r in records if r.model == hw.model]
    for r in records:
        if r.model != hw.model:
            summary.skip(f"measured on {r.model}, not this board's {hw.model}")
    names = {w.spec(): w.name for w in list_named()}
    for r in mine:      # a shape of a built-in network gets its name (resnet18.C4)
        r.workload = dataclasses.replace(r.workload, name=names.get(r.workload.spec()))
    groups: dict[str, list[AutoTVMRecord]] = {}
    for r in mine:
        groups.setdefault(r.workload.spec(), []).append(r)
    out_dir = Path(out_dir)
    for spec, recs in groups.items():
        task = make_task(recs[0].workload, board, tvm_compat=True)
        desc = task.describe()
        rows: list[tuple[AutoTVMRecord, int]] = []
        seen: set[int] = set()
        for r in recs:
            try:
                index = task.space.index_of(r.values)
            except (ConfigError, KeyError, ValueError):
                summary.skip("config outside edgetune's TVM-compatible space")
                continue
            if index in seen:
                summary.skip("config already imported (duplicate record)")
                continue
            seen.add(index)
            rows.append((r, index))
        if not rows:
            continue
        built = build(task, [task.space.get(i) for _, i in rows])
        out_dir.mkdir(parents=True, exist_ok=True)
        log = out_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', task.workload.label)}.jsonl"
        journal, earlier = open_journal(log, desc, resume=True)
        assert journal is not None
        known = {rec.index for rec in earlier}
        try:
            trial = len(earlier)
            for (r, index), outcome in zip(rows, built):
                if index in known:
                    summary.skip("config already in the edgetune log")
                    continue
                note = (f"imported from {Path(path).name} (line {r.where.rsplit(':', 1)[-1]}, AutoTVM error_no "
                        f"{r.error_no} on {r.model})")
                result = MeasureResult(index=index, config=task.space.get(index).values, costs=r.costs,
                                       features=dict(getattr(outcome, "features", {}) or {}), timestamp=r.timestamp,
                                       message=note)
                if isinstance(outcome, MeasureResult):        # edgetune cannot build it: its reason is kept
                    result.costs, result.error = [], outcome.error
                    result.message = f"{outcome.message}; {note}"
                elif r.error_no != 0:
                    result.error = ErrorClass.RUNTIME_ERROR
                journal.append(Record.from_result(result, trial=trial, tuner=TUNER, task=desc))
                trial += 1
                summary.records[spec] = summary.records.get(spec, 0) + 1
        finally:
            journal.close()
        summary.logs[spec] = log
    return summary
