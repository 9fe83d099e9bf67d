"""Workloads: the conv2d spec grammar (:mod:`.spec`), built-in networks (:mod:`.networks`), named
layers (:mod:`.catalog`) and conv extraction from PyTorch models (:mod:`.extract`, imported on use).

>>> parse_workload("resnet18.C2").spec()
'conv2d:N=1,H=56,W=56,CI=64,CO=64,K=3,S=1,P=1'
"""

from toolkit.workloads.catalog import NAMED, list_named, parse_workload
from toolkit.workloads.networks import RESNET18
from toolkit.workloads.spec import Conv2dWorkload, parse_spec, with_name

__all__ = ["NAMED", "RESNET18", "Conv2dWorkload", "list_named", "parse_spec", "parse_workload", "with_name"]
