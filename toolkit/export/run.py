"""Reading an export back (every listed file hashed) and running its kernels through their backend."""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.backends import backend_for
from toolkit.backends.base import Agreement
from toolkit.boards import Board, BoardProfile, Inventory, resolve_board
from toolkit.errors import ConfigError, EdgetuneError
from toolkit.manifest import (MANIFEST, MAX_MANIFEST_BYTES, ExportError, ExportManifest, KernelEntry, inside,
                                     sha256_file)
from toolkit.tuning.core.runner import MeasureOptions, Runner
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


@dataclass
class ModelRun:
    """A whole model run on a board: outputs per input, latency per inference (median of the timed runs and
    their spread), each conv's time with ``per_layer``, and the comparison with PyTorch when asked."""

    board: str
    outputs: list[list[np.ndarray]]
    costs: list[float]
    per_layer: list[dict[str, Any]]
    correct: bool | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    """Family-specific facts (a VTA model: ``bit_exact``, ``vta_ms``, ``cpu_ms``, every layer's time and the
    agreement with PyTorch)."""

    @property
    def latency_s(self) -> float:
        """Median seconds of one inference over the timed runs."""
        return float(np.median(self.costs))

    def stacked(self) -> list[np.ndarray]:
        """Each output of every input, stacked on the batch axis (as the inputs were)."""
        return [np.concatenate([out[i] for out in self.outputs]) for i in range(len(self.outputs[0]))]

    def to_json(self) -> dict[str, Any]:
        return {"board": self.board, "latency_ms": self.latency_s * 1e3,
                "latency_min_ms": min(self.costs) * 1e3, "latency_max_ms": max(self.costs) * 1e3,
                "timed_runs": len(self.costs), "inputs": len(self.outputs), "correct": self.correct,
                "message": self.message, "outputs": [list(o.shape) for o in self.stacked()],
                "per_layer": self.per_layer, **({"details": self.details} if self.details else {})}


def reference_outputs(loaded: Any, x: np.ndarray) -> list[np.ndarray]:
    """The PyTorch model's outputs for one input ``x``, flattened to a list."""
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # torch-internal deprecations, not the user's
        out = loaded.program.module()(torch.from_numpy(np.ascontiguousarray(x)))
    flat = out if isinstance(out, (tuple, list)) else [out]
    return [o.detach().cpu().numpy() for o in flat]


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
        labels = ", ".join(k.label for k in self.kernels)
        raise ExportError(f"{self.path} has no kernel for {wl.label}; it has {labels}")

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

    @contextlib.contextmanager
    def session(self, board: Board, *, tracker: tuple[str, int] | str | None = None,
                on_wait: Any = None) -> Iterator[Runner]:
        """The runner that runs this export's kernels on ``board`` (tuning's, through the board's tracker), open
        for several :meth:`run` calls and closed at the end (a loopback ``local`` board starts once)."""
        runner = self.backend.make_runner(board, tracker=tracker)
        runner.on_wait = on_wait
        try:
            yield runner
        finally:
            runner.close()

    def run(self, board: str | Board, inputs: Sequence[np.ndarray] | None = None, check: bool = True, *,
            workload: str | Conv2dWorkload | None = None, seed: int = 0, repeat: int = 3,
            tracker: tuple[str, int] | str | None = None, inventory: Inventory | None = None,
            on_wait: Any = None, session: Runner | None = None) -> RunResult:
        """Run one kernel on ``board`` (``inputs`` default: the template's random inputs of ``seed``).

        CPU/GPU boards go through TVM RPC (the built-in ``local`` through a loopback tracker and
        server); ``vta-fsim`` runs in-process; other VTA boards through their agent. ``check``
        compares the output with the numpy reference (bit-exact on VTA, 1e-3 on float32). The kernel runs
        through the board's tuning runner (``session``, from :meth:`session`, serves several calls; without
        one, a runner is opened for this call); ``on_wait(message)`` is told when it waits for the board.
        """
        b = board if isinstance(board, Board) else resolve_board(board, inventory)
        self.check_board(b)
        kernel = self.kernel(workload)
        template = self.template(kernel, b.profile)
        if inputs is None:
            inputs = template.make_inputs(np.random.default_rng(seed))
        inputs = self._check_inputs(kernel, list(inputs))
        if session is None:
            with self.session(b, tracker=tracker, on_wait=on_wait) as runner:
                outputs, seconds = self.backend.run_kernel(self.path, kernel, b, inputs, repeat, runner)
        else:
            outputs, seconds = self.backend.run_kernel(self.path, kernel, b, inputs, repeat, session)
        correct, message = None, ""
        if check:
            correct, message = self.backend.compare(outputs[self.backend.output_name], template.reference(inputs))
        return RunResult(kernel.label, b.name, outputs, seconds, correct, kernel.latency_s, message)

    @property
    def is_model(self) -> bool:
        """Whether the export holds a whole model (else conv kernels)."""
        return self.manifest.model is not None

    def model_inputs(self, x: np.ndarray | None = None, seed: int = 0) -> list[np.ndarray]:
        """``x`` (one input, or several stacked on the batch axis) split into the model's inputs, checked;
        default: one random input of ``seed``."""
        spec = self._model()["inputs"][0]
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if x is None:
            return [np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)]
        x = np.asarray(x)
        if x.dtype != dtype or x.ndim != len(shape) or tuple(x.shape[1:]) != shape[1:] or not x.shape[0] \
                or x.shape[0] % shape[0]:
            raise ExportError(f"the model takes {dtype} inputs of shape {list(shape)} (or N of them stacked on "
                              f"axis 0), got {x.dtype}{list(x.shape)}")
        return [np.ascontiguousarray(x[i:i + shape[0]]) for i in range(0, x.shape[0], shape[0])]

    def run_model(self, board: str | Board, inputs: np.ndarray | None = None, *, check: bool | None = False,
                  options: MeasureOptions | None = None, per_layer: bool = False,
                  tracker: tuple[str, int] | str | None = None, inventory: Inventory | None = None,
                  on_wait: Any = None, agreement: Agreement | None = None) -> ModelRun:
        """Run the exported model on ``board``: every input of ``inputs`` (:meth:`model_inputs`) in one session,
        then timed as tuning times a kernel (``options``: number, repeat, min_repeat_ms, timeout_s); ``check``
        compares each output with the PyTorch model's (:meth:`reference`; ``None``: when that model loads here,
        else ``message`` says why not); ``per_layer`` times each conv; ``agreement``: the least agreement with the
        float model a quantised model must show (reported either way)."""
        b = board if isinstance(board, Board) else resolve_board(board, inventory)
        self.check_board(b)
        if agreement is not None and agreement.asked:
            if not self.backend.quantised_models:
                raise ConfigError(f"--min-cosine and --min-top1 judge quantised models against the float one; this "
                                  f"{self.manifest.family} model runs in float32 and is checked against PyTorch's "
                                  "outputs: drop them")
            if check is False:
                raise ConfigError("--min-cosine and --min-top1 compare with the PyTorch model: drop --no-check")
        xs = self.model_inputs(inputs)
        loaded, why = None, ""
        if check is not False:
            try:
                loaded = self.reference()
            except EdgetuneError as exc:
                if check:
                    raise
                why = f"not checked: {exc}"
        timing = self.backend.run_model(self.path, self.manifest, b, xs, options or MeasureOptions(),
                                        tracker=tracker, on_wait=on_wait, per_layer=per_layer)
        layers = [{"module": c["module"], "workload": c["workload"], "schedule": c["schedule"],
                   "seconds": timing.kernels.get(c.get("kernel") or ""),
                   "tuned_seconds": (c.get("record") or {}).get("latency_s")}
                  for c in self._model()["convs"]] if per_layer else []
        reference = None if loaded is None else [reference_outputs(loaded, x) for x in xs]
        correct, message = self.backend.check_model(timing, reference, agreement)
        return ModelRun(b.name, timing.outputs, timing.costs, layers, correct,
                        "; ".join(m for m in (message, why) if m), timing.details)

    def reference(self) -> Any:
        """The PyTorch model the export was made from, loaded again (:class:`ExportError` when it cannot be:
        a file moved or changed, a model passed as an object)."""
        from toolkit.workloads.model_files import load_model

        source = self._model()["source"]
        kind, text = source.get("kind"), str(source.get("model"))
        shape = tuple(self._model()["inputs"][0]["shape"])
        if kind == "module":
            raise ExportError("the export was made from a model object; compare it in Python "
                              "(Export.run_model(...).outputs) or export the model from a file to --check it")
        if kind in ("pt2", "torchscript") and not Path(text).is_file():
            raise ExportError(f"--check needs the model file {text}, which is not here; run without --check")
        loaded = load_model(text, shape, seed=int(source.get("seed") or 0))
        if loaded.source.get("weights_sha256") != source.get("weights_sha256"):
            raise ExportError(f"model {text} has other weights than when it was exported; export it again to "
                              "--check it")
        return loaded

    def _model(self) -> dict[str, Any]:
        if self.manifest.model is None:
            raise ExportError(f"{self.path} holds conv kernels, not a model; export a model with "
                              "`edgetune export --model MODEL`")
        return self.manifest.model

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
