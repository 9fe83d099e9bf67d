"""Templates by board family: ``vta`` (edgetune's VTA compiler), ``cpu`` and ``cuda`` (TVM)."""

from __future__ import annotations

from typing import Any

from toolkit.boards import BoardProfile
from toolkit.errors import BoardError
from toolkit.tuning.template import Template
from toolkit.workloads import Conv2dWorkload


def template_for(workload: Conv2dWorkload, profile: BoardProfile, **options: Any) -> Template:
    """The conv2d template of ``profile``'s family, with template ``options`` (e.g. ``tvm_compat``)."""
    if profile.family == "vta":
        from toolkit.templates.vta import VTAConv2dTemplate as cls
    elif profile.family == "cpu":
        from toolkit.templates.cpu import CPUConv2dTemplate as cls
    elif profile.family == "cuda":
        from toolkit.templates.cuda import CUDAConv2dTemplate as cls
    else:
        raise BoardError(f"board type {profile.name!r} has family {profile.family!r}, which has no template")
    return cls(workload, profile, **options)
