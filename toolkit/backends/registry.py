"""Which backend serves a board family: a lazy name -> class registry (a backend's module, and so
TVM, is imported only when a board of its family is used)."""

from __future__ import annotations

import importlib
from typing import Any

from pathlib import Path

from toolkit.boards import Board, BoardProfile, load_profile
from toolkit.errors import BoardError
from toolkit.tuning.core.task import Task
from toolkit.tuning.journal import TunedOn
from toolkit.workloads import Conv2dWorkload
from toolkit.workloads.networks import Network, TaskPlan

BACKENDS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "vta": ("toolkit.backends.vta.backend", "VTABackend", {}),
    "cpu": ("toolkit.backends.tvm.backend", "TVMBackend", {"device": "cpu"}),
    "cuda": ("toolkit.backends.tvm.backend", "TVMBackend", {"device": "cuda"}),
}
"""Board family -> (module, class, constructor arguments) of its backend."""

_INSTANCES: dict[str, Any] = {}


def backend_for(profile: BoardProfile | str) -> Any:
    """The :class:`~toolkit.backends.base.Backend` of a board profile (or a family name)."""
    family = profile if isinstance(profile, str) else profile.family
    if family not in _INSTANCES:
        if family not in BACKENDS:
            name = family if isinstance(profile, str) else f"board type {profile.name!r} has family {family!r}"
            raise BoardError(f"{name}, which has no backend; families: {', '.join(BACKENDS)}")
        module, cls, kwargs = BACKENDS[family]
        _INSTANCES[family] = getattr(importlib.import_module(module), cls)(**kwargs)
    return _INSTANCES[family]


def board_for(name: str, inventory: Any = None, preset: str | None = None) -> Board:
    """The board ``name`` (registered in ``inventory`` or built in), modelling hardware ``preset`` if given
    (``--vta-config``: the VTA simulator; other boards refuse one)."""
    from toolkit.boards import resolve_board

    board = resolve_board(name, inventory)
    return backend_for(board.profile).with_preset(board, preset)


def make_task(workload: Conv2dWorkload, board: Board, **template_options: Any) -> Task:
    """The task of tuning ``workload`` on ``board`` with its family's template (``template_options``,
    e.g. ``tvm_compat=True`` on VTA, are checked by the template).

    >>> from toolkit.boards import resolve_board
    >>> from toolkit.workloads import parse_workload
    >>> make_task(parse_workload("resnet18.C2"), resolve_board("vta-fsim")).space.size
    2304
    """
    backend = backend_for(board.profile)
    return Task(workload, board, backend.template(workload, board.profile, **template_options), backend)


def tasks_of(plan: TaskPlan, board: Board, **template_options: Any) -> list[Task]:
    """One task per task of a network ``plan`` (made by the board's backend, ``plan_network``) on ``board``."""
    return [make_task(t.workload, board, **template_options) for t in plan.tasks]


def network_tasks(network: Network, board: Board, *, first_conv: str = "s2d",
                  **template_options: Any) -> tuple[TaskPlan, list[Task]]:
    """A network's plan on ``board`` (its backend's :meth:`~toolkit.backends.base.Backend.plan_network`) and
    one task per planned task, in order: what :func:`~toolkit.tuning.network.tune_network` takes.

    >>> from toolkit.boards import resolve_board
    >>> from toolkit.workloads.networks import get_network
    >>> plan, tasks = network_tasks(get_network("resnet18"), resolve_board("vta-fsim"))
    >>> len(plan.tasks) == len(tasks), tasks[0].workload.label
    (True, 'resnet18.C1')
    """
    plan = backend_for(board.profile).plan_network(network, first_conv=first_conv)
    return plan, tasks_of(plan, board, **template_options)


def template_for(workload: Conv2dWorkload, profile: BoardProfile, **options: Any) -> Any:
    """The conv2d :class:`~toolkit.tuning.core.template.Template` of ``profile``'s family."""
    return backend_for(profile).template(workload, profile, **options)


def tuned_profile(tuned: TunedOn, log: Path) -> BoardProfile:
    """The profile a log was tuned with: the board type its header records (``tuned``, from
    :meth:`~toolkit.tuning.journal.LogHeader.tuned_on`), with the hardware it records."""
    profile = load_profile(tuned.board_type)
    return backend_for(profile).tuned_profile(profile, tuned.hw, log)


def make_runner(board: Board, **options: Any) -> Any:
    """The :class:`~toolkit.tuning.core.runner.Runner` that measures on ``board`` (its backend's)."""
    return backend_for(board.profile).make_runner(board, **options)
