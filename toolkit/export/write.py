"""Writing an export: the best valid record per workload of a log, rebuilt by its backend into a folder.

CPU/GPU boards get one TVM shared library per workload (``kernels/<label>.so``), VTA boards a program
file per workload with its raw images and parameters; every folder has ``manifest.json``
(:class:`~toolkit.manifest.ExportManifest`), the tuning log (``tuning-log.jsonl``) and a README.
"""

from __future__ import annotations

import errno
import json
import os
import re
import warnings
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Iterable, Iterator

from toolkit.backends import backend_for
from toolkit.backends.registry import tuned_profile
from toolkit.boards import BUILTIN_BOARDS, Board, BoardProfile, Inventory, load_profile, resolve_board
from toolkit.errors import BoardError, EdgetuneError, WorkloadError
from toolkit.manifest import (KERNEL_DIR, LOG_FILE, MANIFEST, README, ExportError, ExportManifest,
                                     KernelEntry, sha256_file)
from toolkit.export.readme import kernel_readme
from toolkit.export.run import read_manifest
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Template
from toolkit.tuning.journal import Record, best_per_workload, stream_log
from toolkit.workloads import Conv2dWorkload, parse_workload


def target_profile(board: str | Board | BoardProfile, inventory: Inventory | None) -> tuple[str, BoardProfile]:
    """(name, profile) of the board (name or board type) an export is made for."""
    if isinstance(board, BoardProfile):
        return board.name, board
    if isinstance(board, Board):
        return board.name, board.profile
    try:
        b = resolve_board(board, inventory)
        return b.name, b.profile
    except BoardError as exc:
        try:
            return board, load_profile(board)
        except BoardError:
            raise BoardError(f"{exc}; or give a board type") from None


def registered_board(name: str, inventory: Inventory | None) -> Board | None:
    """The inventory's board ``name`` (``None`` for a board type or a built-in board)."""
    if name in BUILTIN_BOARDS:
        return None
    try:
        return resolve_board(name, inventory)
    except BoardError:
        return None


class RepeatedWorkloadWarning(UserWarning):
    """The same workload was asked for more than once (it is exported once)."""


class MissingKernelWarning(UserWarning):
    """An export leaves out a workload of the log that has no valid record."""


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_")


def _select(records: Iterable[Record], workloads: Sequence[str | Conv2dWorkload] | None, log: Path) -> list[Record]:
    """Best valid record per workload (in first-seen order), optionally only ``workloads``; one pass over
    ``records`` (a stream: the log is never held whole)."""
    seen: dict[str, str] = {}         # workload key -> label, first-seen order
    errors: dict[str, int] = {}

    def tallied(rs: Iterable[Record]) -> Iterator[Record]:
        for r in rs:
            if r.workload_key not in seen:
                seen[r.workload_key] = Conv2dWorkload.from_dict(r.workload).label
            if not r.valid:
                errors[r.error or "no_cost"] = errors.get(r.error or "no_cost", 0) + 1
            yield r

    best = best_per_workload(tallied(records))
    if not seen:
        raise ExportError(f"tuning log {log} has no records (only its header); tune first, then export")
    if not best:
        why = ", ".join(f"{k} {e}" for e, k in sorted(errors.items()))
        raise ExportError(f"tuning log {log} has no valid record ({sum(errors.values())} trials, all failed: {why}); "
                          "nothing to export: tune longer or fix the board")
    best = {k: best[k] for k in seen if k in best}
    if not workloads:
        missing = [label for key, label in seen.items() if key not in best]
        if missing:
            warnings.warn(f"{len(missing)} workload(s) of {log.name} have no valid record and are not in the export: "
                          f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; tune them longer "
                          "(tune --more) and export again", MissingKernelWarning, stacklevel=3)
        return list(best.values())
    picked = []
    labels = {Conv2dWorkload.from_dict(r.workload).label: r for r in best.values()}
    known = ", ".join(labels)
    for spec in workloads:
        if isinstance(spec, str) and spec in labels:    # a label the log prints (a model layer: make_net.L2)
            picked.append(labels[spec])
            continue
        try:
            wl = spec if isinstance(spec, Conv2dWorkload) else parse_workload(spec)
        except WorkloadError:
            raise ExportError(f"tuning log {log} has no workload {spec!r}; it has: {known}") from None
        hit = next((r for r in best.values() if Conv2dWorkload.from_dict(r.workload) == wl), None)
        if hit is None:
            raise ExportError(f"tuning log {log} has no valid record of workload {wl.label}; it has: {known}")
        picked.append(hit)
    unique = list({r.workload_key: r for r in picked}.values())
    if len(unique) < len(picked):
        warnings.warn(f"{len(picked) - len(unique)} repeated workload(s) given with -w: each is exported once",
                      RepeatedWorkloadWarning, stacklevel=3)
    return unique


def _template(backend: Any, record: Record, profile: BoardProfile) -> Template:
    options = {k: v for k, v in (record.template or {}).items() if k != "template"}
    return backend.template(Conv2dWorkload.from_dict(record.workload), profile, **options)


def record_config(template: Template, record: Record, log: Path) -> Config:
    """The record's config as a point of ``template``'s space (its values must match the index)."""
    space = template.space()
    try:
        index = record.index if record.index is not None else space.index_of(record.config)
        config = space.get(index)
    except (EdgetuneError, IndexError, ValueError) as exc:
        raise ExportError(f"{log}: the best config of {template.workload.label} is not in the "
                          f"{template.name} space ({exc}); was it tuned with another edgetune version?") from None
    if json.dumps(config.values, sort_keys=True) != json.dumps(record.config, sort_keys=True):
        raise ExportError(f"{log}: config #{index} of {template.workload.label} differs from the template's; "
                          "the log comes from another edgetune version: tune again")
    return Config(index, config.values)


def export(log: str | Path, out_dir: str | Path, board: str | Board | BoardProfile | None = None,
           workloads: Sequence[str | Conv2dWorkload] | None = None, *, inventory: Inventory | None = None,
           force: bool = False, progress: Callable[[str], None] | None = None) -> ExportManifest:
    """Export the best valid record per workload of ``log`` into ``out_dir``.

    ``board``: the board (registered name, ``local``/``vta-fsim``) or board type to build for;
    default: the log's board type. It must be of the log's family (and, for VTA, of its hardware
    config). ``workloads`` keeps only those. ``out_dir`` must be empty or absent (``force``
    replaces an earlier export there). ``progress(label)`` is called before each build.
    """
    log = Path(log)
    header, records = stream_log(log)
    on = header.tuned_on()
    tuned_type, tuned = on.board_type, tuned_profile(on, log)
    name, profile = (tuned_type, tuned) if board is None else target_profile(board, inventory)
    backend = backend_for(profile)
    if backend is not backend_for(tuned):
        raise ExportError(f"{log} was tuned on a {tuned.family} board ({tuned_type}); it cannot be exported "
                          f"for {name} ({profile.family}): export for a {tuned.family} board")
    backend.check_export_target(profile, tuned, name, log)
    hardware = backend.hardware(profile)
    picked = _select(records, workloads, log)

    log_sha = sha256_file(log)

    def fill(stage: Path) -> ExportManifest:
        kernels = []
        (stage / KERNEL_DIR).mkdir()
        for rec in picked:
            template = _template(backend, rec, profile)
            if progress is not None:
                progress(template.workload.label)
            traced = backend.record_template(template, rec.config)   # e.g. a MetaSchedule trace
            template, config = ((traced, Config(-1, rec.config)) if traced is not None
                                else (template, record_config(template, rec, log)))
            files, signature = backend.write_kernel(template, config, stage,
                                                    f"{KERNEL_DIR}/{_slug(template.workload.label)}")
            kernels.append(KernelEntry(label=template.workload.label, workload=rec.workload, config=config.values,
                                       index=config.index if config.index >= 0 else None, latency_s=rec.seconds,
                                       tuner=rec.tuner, template=template.describe(), files=files,
                                       signature=signature))
        shutil.copyfile(log, stage / LOG_FILE)
        manifest = ExportManifest(
            kind=backend.export_kind, board=name, board_type=profile.name,
            family=profile.family, arch=profile.arch, target=_plain_target(profile), hardware=hardware,
            bitstream=backend.bitstream(profile),
            log={"file": LOG_FILE, "sha256": log_sha, "source": str(log)},
            tuned_on={"board": on.board, "board_type": on.board_type, "target": on.target}, kernels=kernels)
        (stage / README).write_text(kernel_readme(manifest, str(out_dir)))
        return manifest

    return staged(Path(out_dir), force, fill)


def staged(out_dir: Path, force: bool, fill: Callable[[Path], ExportManifest]) -> ExportManifest:
    """Write an export through a stage folder beside ``out_dir``: ``fill(stage)`` writes the files and returns
    the manifest, whose ``files`` (every file of the stage, hashed) are filled in and which is written last; the
    stage then takes ``out_dir``'s place. An
    earlier export (``force``) is renamed aside first and deleted after, so a kill at any point leaves the
    old export or the new one; stage folders a killed export left beside ``out_dir`` are removed."""
    _check_out_dir(out_dir, force)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create export folder {out_dir}: {exc.strerror or exc}; choose another --out") \
            from None
    _remove_stale_stages(out_dir)
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    except OSError as exc:     # a folder nothing can be created in (/proc, read-only): say the user's path
        raise ExportError(f"cannot create export folder {out_dir}: {out_dir.parent} takes no new folders "
                          f"({exc.strerror or exc}); choose another --out") from None
    try:
        manifest = fill(stage)
        manifest.files = {str(p.relative_to(stage)): sha256_file(p) for p in sorted(stage.rglob("*")) if p.is_file()}
        (stage / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=2) + "\n")
        if out_dir.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
            os.replace(out_dir, aside / "export")
            os.replace(stage, out_dir)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(stage, out_dir)
    except OSError as exc:   # a full disk while writing: name the export, not a file in the stage
        shutil.rmtree(stage, ignore_errors=True)
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS):
            raise
        raise ExportError(f"cannot write export {out_dir}: {exc.strerror}; nothing was changed there (free space "
                          "and export again)") from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return manifest


STAGE_MAX_AGE_S = 3600.0
"""A stage folder older than this, beside an export being written, was left by a killed export."""


def _remove_stale_stages(out_dir: Path) -> None:
    """Delete ``.NAME.*`` stage folders beside ``out_dir`` left by a killed export (older than an hour, so
    a concurrent export's stage stays)."""
    import time

    for p in out_dir.parent.glob(f".{out_dir.name}.*"):
        try:
            if p.is_dir() and not p.is_symlink() and time.time() - p.stat().st_mtime > STAGE_MAX_AGE_S:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            continue


def _check_out_dir(out_dir: Path, force: bool) -> None:
    """Refuse an ``--out`` that is a symlink or a file, or a non-empty folder that ``force`` may not replace:
    it replaces only an edgetune export holding nothing but the files its manifest lists."""
    if out_dir.is_symlink():
        raise ExportError(f"export folder {out_dir} is a symlink; give a plain folder for --out")
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"export folder {out_dir} is a file; choose a new --out folder")
    for parent in out_dir.resolve().parents:
        if (parent / MANIFEST).is_file():
            raise ExportError(f"--out {out_dir} lies inside {parent}, an export (it has a {MANIFEST}): an export "
                              "holds only the files its manifest lists; choose a folder outside it")
    if out_dir.resolve() == Path.cwd().resolve() and any(out_dir.iterdir()):
        raise ExportError("--out is the current folder, which is not empty; give the name of a new folder")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return
    if not force:
        raise ExportError(f"export folder {out_dir} is not empty; choose a new --out folder or pass --force")
    try:
        listed = set(ExportManifest.from_json(read_manifest(out_dir), str(out_dir / MANIFEST)).files)
    except ExportError:
        raise ExportError(f"export folder {out_dir} is not an edgetune export; --force replaces only an earlier "
                          "export: choose a new --out folder") from None
    present = {str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if not p.is_dir()} - {MANIFEST}
    extra = sorted(present - listed)
    if extra:
        raise ExportError(f"export folder {out_dir} holds files its manifest does not list ({', '.join(extra[:3])}); "
                          "--force replaces only an earlier export: move them or choose a new --out folder")


def _plain_target(profile: BoardProfile) -> dict[str, Any]:
    return json.loads(json.dumps(profile.target))
