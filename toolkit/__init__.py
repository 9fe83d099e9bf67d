"""edgetune: tune deep-learning kernels on embedded accelerators and edge boards.

The import package is ``toolkit``; the distribution and the command are ``edgetune``. The names
below are the Python API in one place, imported on first use (``import toolkit`` stays cheap)::

    import toolkit as et

    task = et.make_task(et.parse_workload("resnet18.C11"), et.resolve_board("vta-fsim"))
    summary = et.tune(task, et.make_tuner("xgb", seed=0), 32, log="c11.jsonl")
    et.write_export("c11.jsonl", "c11-export")
    et.load_export("c11-export").run("vta-fsim").correct      # True
"""

from __future__ import annotations

import importlib
from typing import Any

from toolkit.version import __version__

_API = {
    "tune": "toolkit.tuning.session:tune",
    "TuneSummary": "toolkit.tuning.session:TuneSummary",
    "tune_network": "toolkit.tuning.network:tune_network",
    "Task": "toolkit.tuning.core.task:Task",
    "MeasureOptions": "toolkit.tuning.core.runner:MeasureOptions",
    "Tuner": "toolkit.tuning.tuners.base:Tuner",
    "TuningContext": "toolkit.tuning.tuners.base:TuningContext",
    "Option": "toolkit.tuning.tuners.base:Option",
    "register": "toolkit.tuning.tuners.base:register",
    "make_tuner": "toolkit.tuning.tuners.base:make_tuner",
    "read_log": "toolkit.tuning.journal:read_log",
    "TransferModel": "toolkit.tuning.models.transfer:TransferModel",
    "transfer_model_from": "toolkit.tuning.models.transfer:transfer_model_from",
    "make_task": "toolkit.backends.registry:make_task",
    "tasks_of": "toolkit.backends.registry:tasks_of",
    "network_tasks": "toolkit.backends.registry:network_tasks",
    "backend_for": "toolkit.backends.registry:backend_for",
    "resolve_board": "toolkit.boards:resolve_board",
    "parse_workload": "toolkit.workloads.catalog:parse_workload",
    "get_network": "toolkit.workloads.networks:get_network",
    "write_export": "toolkit.export.write:export",
    "load_export": "toolkit.export.run:load_export",
    "export_model": "toolkit.export.model:export_model",
}
"""Facade name -> ``module:attribute``."""

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
    module, attr = _API[name].split(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
