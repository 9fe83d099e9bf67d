"""Named workloads: ResNet-18's layers by name, and every layer of a built-in network.

>>> parse_workload("resnet18.C2") == parse_workload("conv2d:H=56,W=56,CI=64,CO=64,K=3,S=1,P=1")
True
>>> parse_workload("resnet50.L3").label
'resnet50.L3'
"""

from __future__ import annotations

import re

from toolkit.errors import WorkloadError
from toolkit.workloads.networks import NETWORKS, RESNET18, network_layer
from toolkit.workloads.spec import Conv2dWorkload, parse_spec

NAMED: dict[str, Conv2dWorkload] = dict(RESNET18)
"""Every named layer ``edgetune`` lists, by name (network layers ``<net>.L<i>`` resolve too)."""


def _natural(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def parse_workload(spec: str) -> Conv2dWorkload:
    """Parse ``conv2d:N=1,H=56,...``, a named layer such as ``resnet18.C2``, or a layer of a
    built-in network (``resnet50.L3``, see :mod:`toolkit.workloads.networks`).

    Raises :class:`WorkloadError` naming the bad field.
    """
    text = spec.strip()
    if text in NAMED:
        return NAMED[text]
    lowered = {k.lower(): v for k, v in NAMED.items()}
    if text.lower() in lowered:
        return lowered[text.lower()]
    if "." in text and not text.lower().startswith("conv2d:"):
        if text.split(".", 1)[0].lower().replace("-", "_") in NETWORKS:
            return network_layer(text)
    if not text.lower().startswith("conv2d:"):
        known = ", ".join(sorted(NAMED, key=_natural))
        raise WorkloadError(
            f"unknown workload {spec!r}: give a spec like conv2d:H=56,W=56,CI=64,CO=64,K=3,S=1,P=1 "
            f"or a named layer ({known})"
        )
    return parse_spec(text)


def list_named() -> list[Conv2dWorkload]:
    """Named layers in natural order (C2 before C10)."""
    return [NAMED[k] for k in sorted(NAMED, key=_natural)]
