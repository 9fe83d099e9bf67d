"""A tuning task: one workload, on one board, with one template, and the backend that measures it.

Tasks are made by :func:`toolkit.backends.make_task`, which picks the board family's backend::

    task = make_task(parse_workload("resnet18.C2"), resolve_board("vta-fsim"))
    task.space.size     # 2304
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from toolkit.boards import Board, BoardProfile
from toolkit.tuning.core.builder import Builder
from toolkit.tuning.core.runner import Runner
from toolkit.tuning.core.space import ConfigSpace
from toolkit.tuning.core.template import Template
from toolkit.workloads import Conv2dWorkload


class Measurement(Protocol):
    """What the tuning loop needs of a task's backend (:class:`toolkit.backends.base.Backend` is one)."""

    def default_builder(self, board: Board) -> Builder:
        """The builder of a run on ``board`` unless one is given."""

    def make_runner(self, board: Board, **options: Any) -> Runner:
        """The runner that measures on ``board``."""

    def pretrained_transfer(self, profile: BoardProfile) -> Any:
        """The transfer model edgetune ships for ``profile`` (``None`` where none is): what a tuner's
        ``transfer="pretrained"`` stands for."""


@dataclass
class Task:
    """What is tuned. ``space`` is the template's space (built once); ``backend`` builds and measures."""

    workload: Conv2dWorkload
    board: Board
    template: Template
    backend: Measurement = field(repr=False, compare=False)
    _space: ConfigSpace | None = field(default=None, repr=False, compare=False)

    @property
    def space(self) -> ConfigSpace:
        if self._space is None:
            self._space = self.template.space()
        return self._space

    @property
    def flops(self) -> int:
        """Operations of one run (2 per MAC)."""
        return self.workload.flops

    def describe(self) -> dict[str, Any]:
        """The task as stored in a log header; a log resumes only for an equal description."""
        return {
            "workload": self.workload.to_dict(),
            "board": self.board.name,
            "board_type": self.board.profile.name,
            "target": self.board.profile.target,
            "template": self.template.describe(),
            "hw": self.template.hardware(),
        }
