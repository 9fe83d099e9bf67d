"""The workloads a bench runs: specs, named layers and network names."""

from __future__ import annotations

from typing import Iterable

from toolkit.errors import WorkloadError
from toolkit.workloads import Conv2dWorkload, parse_workload


def expand_workloads(items: Iterable[str], *, first_conv_on_cpu: bool = False) -> list[Conv2dWorkload]:
    """Workload specs, named layers and network names -> workloads (duplicates dropped, order kept).

    A network name means its tunable layers; ``resnet18`` on a board whose backend leaves the first
    conv on the CPU (VTA: ``first_conv_on_cpu``) means C2..C11 (C1 has 3 input channels, as in TVM's
    VTA tutorials).

    >>> [w.name for w in expand_workloads(["resnet18"], first_conv_on_cpu=True)][:2]
    ['resnet18.C2', 'resnet18.C3']
    """
    from toolkit.workloads.networks import NETWORKS, get_network

    out: dict[Conv2dWorkload, None] = {}
    for item in items:
        for part in (p.strip() for p in item.split(";" if ":" in item else ",")):
            if not part:
                continue
            key = part.lower().replace("-", "_")
            if key in NETWORKS:
                layers = [layer.workload for layer in get_network(key).dense()]
                if first_conv_on_cpu and key == "resnet18":
                    layers = [w for w in layers if w.name != "resnet18.C1"]
                out.update(dict.fromkeys(layers))
            else:
                out[parse_workload(part)] = None
    if not out:
        raise WorkloadError("no workloads given; pass --workloads resnet18, resnet18.C2,resnet18.C5 or a spec")
    return list(out)
