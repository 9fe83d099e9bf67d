"""The development and test sets of conv layers: defaults are chosen on one, figures reported on the other.

:data:`DEVELOPMENT` is ResNet-18 C2-C11 (every default and option of edgetune's tuners was chosen on it).
:data:`TEST` holds conv layers none of those choices looked at: layers of the other built-in networks
(ResNet-50, VGG-16, MobileNet v1's pointwise convs, YOLOv3-tiny) and synthetic shapes, covering 3x3 and 1x1
kernels, strides 1 and 2, 14x14 to 56x56 inputs and 64 to 512 channels (all multiples of 16, so every one
runs on VTA as it is).

>>> len(DEVELOPMENT), len(TEST) >= 20
(10, True)
>>> [split_of(parse_workload(name)) for name in ("resnet18.C5", "vgg16.L7", "resnet18.C1")]
['development', 'test', None]
"""

from __future__ import annotations

from toolkit.workloads.catalog import parse_workload
from toolkit.workloads.spec import Conv2dWorkload

DEVELOPMENT: tuple[str, ...] = tuple(f"resnet18.C{i}" for i in range(2, 12))
"""ResNet-18's conv layers after the first: the set edgetune's defaults were chosen on."""

TEST: tuple[str, ...] = (
    # ResNet-50 bottlenecks (1x1 and strided 3x3)
    "resnet50.L2", "resnet50.L4", "resnet50.L6", "resnet50.L7", "resnet50.L8", "resnet50.L9", "resnet50.L10",
    "resnet50.L13", "resnet50.L19",
    # VGG-16 (3x3, wide)
    "vgg16.L5", "vgg16.L7", "vgg16.L9",
    # MobileNet v1 pointwise convs (1x1)
    "mobilenet_v1.L5", "mobilenet_v1.L9", "mobilenet_v1.L13",
    # YOLOv3-tiny (3x3 at 52 and 26)
    "yolov3_tiny.L4", "yolov3_tiny.L5", "yolov3_tiny.L11",
    # synthetic shapes no network above has
    "conv2d:H=28,W=28,CI=96,CO=192,K=3,S=1,P=1",
    "conv2d:H=14,W=14,CI=320,CO=160,K=1,S=1,P=0",
    "conv2d:H=42,W=42,CI=64,CO=96,K=3,S=2,P=1",
    "conv2d:H=21,W=21,CI=224,CO=224,K=3,S=1,P=1",
)
"""Held-out layers: never looked at when choosing a default; benchmarks report on them."""


def development_set() -> list[Conv2dWorkload]:
    """The development layers as workloads."""
    return [parse_workload(name) for name in DEVELOPMENT]


def test_set() -> list[Conv2dWorkload]:
    """The held-out layers as workloads."""
    return [parse_workload(name) for name in TEST]


test_set.__test__ = False  # type: ignore[attr-defined]  # a workload list, not a test


def split_of(workload: Conv2dWorkload) -> str | None:
    """``"development"``, ``"test"`` or ``None`` (in neither) for a workload, by shape."""
    spec = workload.spec()
    if spec in {w.spec() for w in development_set()}:
        return "development"
    if spec in {w.spec() for w in test_set()}:
        return "test"
    return None
