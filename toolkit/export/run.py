"""Reading an export back (every listed file hashed) and running its kernels through their backend."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.backends import backend_for
from toolkit.boards import Board, BoardProfile, Inventory, resolve_board
from toolkit.export.manifest import (MANIFEST, MAX_MANIFEST_BYTES, ExportError, ExportManifest, KernelEntry, inside,
                                     sha256_file)
from toolkit.tuning.core.template import Template
from toolkit.workloads import Conv2dWorkload, parse_workload


@dataclass
class RunResult:
    """One kernel run: outputs by name, mean seconds, whether the output matched the reference."""

    workload: str
    board: str
    outputs: dict[str, np.ndarray]
    seconds: float
    correct: bool | None
    expected_seconds: float
    """The latency in the manifest (measured while tuning, on ``tuned_on``)."""
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "board": self.board, "seconds": self.seconds,
                "manifest_seconds": self.expected_seconds, "correct": self.correct, "message": self.message,
                "outputs": {k: list(v.shape) for k, v in self.outputs.items()}}


def load_export(path: str | Path) -> Export:
    """Read an export folder; :class:`ExportError` if the manifest is bad or a file's sha256 differs."""
    path = Path(path)
    obj = read_manifest(path)
    manifest = ExportManifest.from_json(obj, str(path / MANIFEST))
    for rel, digest in manifest.files.items():
        f = inside(path, rel, str(path / MANIFEST))
        if sha256_file(f) != digest:
            raise ExportError(f"{path}: {rel} does not match its sha256 in the manifest (modified or corrupt); "
                              "re-export the folder")
    return Export(path, manifest)


def read_manifest(path: Path) -> Any:
    """The parsed ``manifest.json`` of the export folder ``path`` (a regular file, bounded in size)."""
    mpath = path / MANIFEST
    if not path.is_dir():
        raise ExportError(f"{path} is not an edgetune export folder; give the folder `edgetune export` wrote")
    if not mpath.is_file() or mpath.is_symlink():
        raise ExportError(f"{path} is not an edgetune export (no {MANIFEST}); create one with `edgetune export`")
    if mpath.stat().st_size > MAX_MANIFEST_BYTES:
        raise ExportError(f"{mpath} is larger than {MAX_MANIFEST_BYTES >> 20} MiB; re-export the folder")
    try:
        return json.loads(mpath.read_text())
    except RecursionError:
        raise ExportError(f"{mpath} is nested too deeply; re-export the folder") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ExportError(f"{mpath} is unreadable ({str(exc)[:100]}); re-export the folder") from None


@dataclass
class Export:
    """An export folder read back by :func:`load_export`."""

    path: Path
    manifest: ExportManifest

    @property
    def kernels(self) -> list[KernelEntry]:
        return self.manifest.kernels

    def kernel(self, workload: str | Conv2dWorkload | None = None) -> KernelEntry:
        """The kernel of ``workload`` (label or spec); ``None`` when the export holds one."""
        if workload is None:
            if len(self.kernels) > 1:
                raise ExportError(f"{self.path} holds {len(self.kernels)} kernels; pick one with --workload "
                                  f"({', '.join(k.label for k in self.kernels)})")
            return self.kernels[0]
        for k in self.kernels:
            if isinstance(workload, str) and workload == k.label:
                return k
        wl = workload if isinstance(workload, Conv2dWorkload) else parse_workload(workload)
        for k in self.kernels:
            if k.conv2d == wl:
                return k
        raise ExportError(f"{self.path} has no kernel for {wl.label}; it has {', '.join(k.label for k in self.kernels)}")

    @property
    def backend(self) -> Any:
        """The backend of the export's family (it runs and checks the kernels)."""
        return backend_for(self.manifest.family)

    def check_board(self, board: Board) -> None:
        """Refuse a board this export cannot run on (other family, architecture, GPU or VTA hardware)."""
        m, p, backend = self.manifest, board.profile, self.backend
        if backend_for(p) is not backend:
            raise ExportError(f"this export is for {m.board_type} ({backend.export_summary(m)}) and holds "
                              f"{backend.kernels_noun}; board {board.name} is a {p.family} board ({p.name}): "
                              f"run it on a {m.family} board, or export the log for {board.name}")
        backend.check_export_board(m, board)

    def template(self, kernel: KernelEntry, profile: BoardProfile) -> Template:
        """The kernel's template on ``profile`` (inputs and numpy reference)."""
        options = {k: v for k, v in kernel.template.items() if k != "template"}
        return self.backend.template(kernel.conv2d, profile, **options)

    def run(self, board: str | Board, inputs: Sequence[np.ndarray] | None = None, check: bool = True, *,
            workload: str | Conv2dWorkload | None = None, seed: int = 0, repeat: int = 3,
            tracker: tuple[str, int] | str | None = None, inventory: Inventory | None = None,
            on_wait: Any = None) -> RunResult:
        """Run one kernel on ``board`` (``inputs`` default: the template's random inputs of ``seed``).

        CPU/GPU boards go through TVM RPC (the built-in ``local`` through a loopback tracker and
        server); ``vta-fsim`` runs in-process; other VTA boards through their agent. ``check``
        compares the output with the numpy reference (bit-exact on VTA, 1e-3 on float32). The kernel runs
        through the board's tuning runner; ``on_wait(message)`` is told when it waits for the board.
        """
        b = board if isinstance(board, Board) else resolve_board(board, inventory)
        self.check_board(b)
        kernel = self.kernel(workload)
        template = self.template(kernel, b.profile)
        if inputs is None:
            inputs = template.make_inputs(np.random.default_rng(seed))
        inputs = self._check_inputs(kernel, list(inputs))
        outputs, seconds = self.backend.run_kernel(self.path, kernel, b, inputs, repeat, tracker, on_wait)
        correct, message = None, ""
        if check:
            correct, message = self.backend.compare(outputs[self.backend.output_name], template.reference(inputs))
        return RunResult(kernel.label, b.name, outputs, seconds, correct, kernel.latency_s, message)

    def run_all(self, board: str | Board, check: bool = True, **kwargs: Any) -> list[RunResult]:
        """:meth:`run` for every kernel."""
        return [self.run(board, check=check, workload=k.label, **kwargs) for k in self.kernels]

    def _check_inputs(self, kernel: KernelEntry, inputs: list[np.ndarray]) -> list[np.ndarray]:
        specs = self.backend.input_specs(kernel)
        if len(inputs) != len(specs):
            raise ExportError(f"{kernel.label} takes {len(specs)} inputs ({', '.join(n for n, _ in specs)}), "
                              f"got {len(inputs)}")
        out = []
        for (name, spec), x in zip(specs, inputs):
            x = np.asarray(x)
            if list(x.shape) != list(spec["shape"]) or x.dtype != np.dtype(spec["dtype"]):
                raise ExportError(f"input {name} of {kernel.label} must be {spec['dtype']}{spec['shape']} "
                                  f"({spec['layout']}), got {x.dtype}{list(x.shape)}")
            out.append(np.ascontiguousarray(x))
        return out
