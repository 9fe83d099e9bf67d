"""Deployable exports of tuned kernels, and running them on a board or the simulator.

:func:`export` takes the best valid record per workload of a tuning log, rebuilds it through the
board family's backend and writes a folder a board can use without edgetune's compiler
(:mod:`.write`); :func:`load_export` reads such a folder back, checking every file's sha256, and
:meth:`Export.run` runs a kernel through its backend (TVM RPC, the VTA agent, or the in-process
simulator) and checks its output against the numpy reference (:mod:`.run`). The manifest's schema
is :mod:`.manifest`; the folder's README is :mod:`.readme`'s.

>>> ex = export("demo-out/logs/vta-fsim/resnet18.C2.jsonl", "demo-out/export")  # doctest: +SKIP
>>> load_export("demo-out/export").run("vta-fsim").correct                        # doctest: +SKIP
True
"""

from toolkit.manifest import (KERNEL_KEYS, MANIFEST, MANIFEST_KEYS, ExportError, ExportManifest, KernelEntry,
                                     sha256_file)
from toolkit.export.run import Export, RunResult, load_export
from toolkit.export.readme import kernel_readme, model_readme
from toolkit.export.write import export

__all__ = ["KERNEL_KEYS", "MANIFEST", "MANIFEST_KEYS", "Export", "ExportError", "ExportManifest", "KernelEntry",
           "RunResult", "export", "kernel_readme", "load_export", "model_readme", "sha256_file"]
