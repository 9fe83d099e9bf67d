"""A tuning task: one workload, on one board, with one template.

>>> from toolkit.boards import resolve_board
>>> from toolkit.workloads import parse_workload
>>> task = Task.create(parse_workload("resnet18.C2"), resolve_board("vta-fsim"))  # doctest: +SKIP
>>> task.space.size  # doctest: +SKIP
2304
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolkit.boards import Board
from toolkit.tuning.space import ConfigSpace
from toolkit.tuning.template import Template
from toolkit.workloads import Conv2dWorkload


@dataclass
class Task:
    """What is tuned. ``space`` is the template's space (built once)."""

    workload: Conv2dWorkload
    board: Board
    template: Template
    _space: ConfigSpace | None = field(default=None, repr=False, compare=False)

    @classmethod
    def create(cls, workload: Conv2dWorkload, board: Board, **template_options: Any) -> Task:
        """The task with the board family's template (see :func:`toolkit.templates.template_for`)."""
        from toolkit.templates import template_for

        return cls(workload, board, template_for(workload, board.profile, **template_options))

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
        hw = getattr(self.template, "hardware", None)
        return {
            "workload": self.workload.to_dict(),
            "board": self.board.name,
            "board_type": self.board.profile.name,
            "target": self.board.profile.target,
            "template": self.template.describe(),
            "hw": hw() if callable(hw) else self.board.profile.vta,
        }
