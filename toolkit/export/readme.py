"""The README of an export folder: what is in it, how to run and check it, and how to load it without edgetune
(that section is the family's: ``kernel_usage``/``model_usage`` of the module its backend names in ``readme``)."""

from __future__ import annotations

import importlib
from typing import Any

from toolkit.backends import backend_for
from toolkit.manifest import LOG_DIR, LOG_FILE, ExportManifest


def _usage(backend: Any) -> Any:
    return importlib.import_module(backend.readme)


def kernel_readme(m: ExportManifest, folder: str = "FOLDER") -> str:
    """The folder's README: what is in it and how to load and call it (``folder``: the export's path)."""
    backend = backend_for(m.family)
    rows = "\n".join(f"| {k.label} | `{', '.join(k.files.values())}` | {k.latency_s * 1e3:.4f} ms |"
                     for k in m.kernels)
    head = (f"# edgetune export: {len(m.kernels)} conv2d kernel(s) for {m.board} ({m.board_type}, {m.arch})\n\n"
            f"Tuned on {m.tuned_on['board']} ({m.tuned_on['board_type']}); edgetune {m.edgetune}, TVM {m.tvm}. "
            f"`manifest.json` lists every file with its sha256; `{LOG_FILE}` is the tuning log it came from.\n\n"
            f"| workload | files | tuned latency |\n|---|---|---|\n{rows}\n\n"
            f"Run and check it: `edgetune run {folder} --board BOARD` (a {m.board_type} board"
            f"{backend.readme_run_also}).\n\n")
    return head + _usage(backend).kernel_usage(m, backend)


def model_readme(m: ExportManifest, backend: Any) -> str:
    """The README of a whole-model export: what each conv got and how to load the model."""
    model = m.model or {}
    rows = "\n".join(f"| {c['module']} | {c['workload'] or '-'} | {c['schedule']} | {c['why']} |"
                     for c in model.get("convs", []))
    source = model.get("source", {})
    return (f"# edgetune export: model {source.get('model')} for {m.board} ({m.board_type}, {m.arch})\n\n"
            f"edgetune {m.edgetune}, TVM {m.tvm}. `manifest.json` lists every file with its sha256; `{LOG_DIR}/` "
            "holds the tuning logs the kernels came from.\n\n"
            f"| conv | workload | schedule | from |\n|---|---|---|---|\n{rows}\n\n"
            f"Run and check it: `edgetune run FOLDER --board BOARD --input x.npy --check`.\n\n"
            + _usage(backend).model_usage(m, backend))
