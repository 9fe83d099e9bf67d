"""Hardware families as backends: one :class:`~toolkit.backends.base.Backend` object per family
(:mod:`.vta` for VTA, :mod:`.tvm` for TVM's CPU and CUDA targets), found by :func:`backend_for`."""

from toolkit.backends.registry import (BACKENDS, backend_for, board_for, make_runner, make_task, network_tasks,
                                       tasks_of, template_for)

__all__ = ["BACKENDS", "backend_for", "board_for", "make_runner", "make_task", "network_tasks", "tasks_of",
           "template_for"]
