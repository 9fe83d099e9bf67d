"""Built-in networks: every conv layer's shape and how many times it occurs.

A network is a list of :class:`ConvLayer` (a shape, its multiplicity, groups and dilation).
Tables are generated from the published architectures (ResNet: He et al. 2016 with the
torchvision v1.5 bottleneck, stride on the 3x3; VGG-16 configuration D; AlexNet as in
torchvision; MobileNet-v1 1.0-224; YOLOv3-tiny from darknet's ``yolov3-tiny.cfg`` at 416x416).
Identical shapes are merged into one layer with a count. Layers are named ``<net>.L<i>`` in
order of first appearance, except ResNet-18, which keeps TVM's VTA names ``C1``..``C11``.

>>> from toolkit.workloads.networks import get_network
>>> net = get_network("resnet18")
>>> [(l.name, l.count) for l in net.layers][:3]
[('resnet18.C1', 1), ('resnet18.C2', 4), ('resnet18.C3', 1)]
>>> round(net.macs / 1e9, 2)
1.81
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable, Iterable

from toolkit.errors import WorkloadError
from toolkit.workloads.spec import Conv2dWorkload


@dataclass(frozen=True)
class ConvLayer:
    """One conv shape in a network (its groups and dilation in the workload), ``count`` times, and the modules
    that use it."""

    workload: Conv2dWorkload
    count: int = 1
    modules: tuple[str, ...] = ()

    @property
    def name(self) -> str | None:
        """The layer's name (``resnet18.C2``), if it has one."""
        return self.workload.name

    def to_dict(self) -> dict:
        """JSON-able form."""
        w = self.workload
        return {
            "name": self.name, "spec": w.spec(), "count": self.count, "kind": w.kind, "groups": w.g,
            "dilation": [w.dh, w.dw], "out": f"{w.oh}x{w.ow}", "macs": w.macs, "modules": list(self.modules),
        }


@dataclass(frozen=True)
class Network:
    """A network's conv layers (identical shapes merged) and its input shape (NCHW)."""

    name: str
    input_shape: tuple[int, int, int, int]
    layers: tuple[ConvLayer, ...]
    source: str = ""

    @property
    def macs(self) -> int:
        """Conv MACs of one inference (every layer times its count)."""
        return sum(layer.workload.macs * layer.count for layer in self.layers)

    @property
    def n_convs(self) -> int:
        """Number of conv layers before merging."""
        return sum(layer.count for layer in self.layers)

    def dense(self) -> list[ConvLayer]:
        """Layers that are plain convs (groups 1, dilation 1)."""
        return [layer for layer in self.layers if layer.workload.kind == "conv"]

    def layer(self, name: str) -> ConvLayer:
        """A layer by name (``resnet50.L3`` or ``L3``); :class:`WorkloadError` if absent."""
        short = name.split(".", 1)[1] if "." in name else name
        for layer in self.layers:
            if layer.name and layer.name.split(".", 1)[1].lower() == short.lower():
                return layer
        raise WorkloadError(
            f"unknown workload {self.name}.{short}: network {self.name} has no layer {short!r}; its layers are "
            f"{', '.join(layer.name.split('.', 1)[1] for layer in self.layers if layer.name)}"
        )

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {
            "name": self.name, "input_shape": list(self.input_shape), "source": self.source,
            "macs": self.macs, "n_convs": self.n_convs, "layers": [layer.to_dict() for layer in self.layers],
        }


def merge_layers(layers: Iterable[ConvLayer], prefix: str | None = None) -> tuple[ConvLayer, ...]:
    """Merge identical shapes (the same workload: groups and dilation included) keeping first-appearance order.

    With ``prefix``, layers are renamed ``<prefix>.L1``, ``<prefix>.L2``, ...
    """
    merged: dict[tuple, ConvLayer] = {}
    for layer in layers:
        key = layer.workload
        if key in merged:
            old = merged[key]
            merged[key] = replace(old, count=old.count + layer.count, modules=old.modules + layer.modules)
        else:
            merged[key] = layer
    out = tuple(merged.values())
    if prefix is not None:
        out = tuple(
            replace(layer, workload=replace(layer.workload, name=f"{prefix}.L{i}"))
            for i, layer in enumerate(out, 1)
        )
    return out


class _Builder:
    """Walks an architecture, tracking the feature map, and records every conv."""

    def __init__(self, c: int, h: int, w: int, n: int = 1) -> None:
        self.n, self.c, self.h, self.w = n, c, h, w
        self.layers: list[ConvLayer] = []

    def conv(self, co: int, k: int, s: int = 1, p: int | None = None, groups: int = 1,
             ci: int | None = None, h: int | None = None, w: int | None = None, move: bool = True) -> ConvLayer:
        """Add a conv (input ``ci, h, w`` default to the current map); ``move`` updates the map."""
        ci, h, w = ci or self.c, h or self.h, w or self.w
        layer = ConvLayer(Conv2dWorkload(self.n, h, w, ci, co, k, k, s, s, k // 2 if p is None else p,
                                         k // 2 if p is None else p, g=groups))
        self.layers.append(layer)
        if move:
            self.c, self.h, self.w = co, layer.workload.oh, layer.workload.ow
        return layer

    def pool(self, k: int, s: int, p: int = 0) -> None:
        """A max/avg pool (floor mode)."""
        self.h = (self.h + 2 * p - k) // s + 1
        self.w = (self.w + 2 * p - k) // s + 1


def _resnet(blocks: tuple[int, int, int, int], bottleneck: bool) -> list[ConvLayer]:
    b = _Builder(3, 224, 224)
    b.conv(64, 7, 2, 3)
    b.pool(3, 2, 1)
    expansion = 4 if bottleneck else 1
    for stage, (width, n_blocks) in enumerate(zip((64, 128, 256, 512), blocks)):
        for i in range(n_blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            cin, h, w = b.c, b.h, b.w
            if bottleneck:
                b.conv(width, 1, 1, 0)
                b.conv(width, 3, stride, 1)
                b.conv(width * expansion, 1, 1, 0)
            else:
                b.conv(width, 3, stride, 1)
                b.conv(width, 3, 1, 1)
            if stride != 1 or cin != width * expansion:
                b.conv(width * expansion, 1, stride, 0, ci=cin, h=h, w=w, move=False)
    return b.layers


RESNET18_TABLE = {
    # (H, W, CI, CO, K, P, S): TVM's VTA ResNet-18 table (vta/tests/.../test_benchmark_topi_conv2d.py).
    "C1": (224, 224, 3, 64, 7, 3, 2),
    "C2": (56, 56, 64, 64, 3, 1, 1),
    "C3": (56, 56, 64, 128, 3, 1, 2),
    "C4": (56, 56, 64, 128, 1, 0, 2),
    "C5": (28, 28, 128, 128, 3, 1, 1),
    "C6": (28, 28, 128, 256, 3, 1, 2),
    "C7": (28, 28, 128, 256, 1, 0, 2),
    "C8": (14, 14, 256, 256, 3, 1, 1),
    "C9": (14, 14, 256, 512, 3, 1, 2),
    "C10": (14, 14, 256, 512, 1, 0, 2),
    "C11": (7, 7, 512, 512, 3, 1, 1),
}
"""ResNet-18's conv layer names C1..C11 and shapes, as in TVM's VTA benchmarks (the one ResNet-18 table)."""

RESNET18: dict[str, Conv2dWorkload] = {
    f"resnet18.{k}": Conv2dWorkload(1, h, w, ci, co, kk, kk, s, s, p, p, name=f"resnet18.{k}")
    for k, (h, w, ci, co, kk, p, s) in RESNET18_TABLE.items()
}
"""ResNet-18 conv layers C1..C11 by name; :func:`_resnet18` checks the built network against it."""


def _resnet18() -> tuple[ConvLayer, ...]:
    merged = merge_layers(_resnet((2, 2, 2, 2), bottleneck=False))
    by_shape = {w: name for name, w in RESNET18.items()}
    out = []
    for layer in merged:
        if layer.workload not in by_shape:  # pragma: no cover - guarded by the tests
            raise AssertionError(f"ResNet-18 layer {layer.workload.spec()} is not in TVM's table")
        out.append(replace(layer, workload=RESNET18[by_shape[layer.workload]]))
    return tuple(sorted(out, key=lambda layer: int(layer.name.rsplit("C", 1)[1])))


def _vgg16() -> list[ConvLayer]:
    b = _Builder(3, 224, 224)
    for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
        if v == "M":
            b.pool(2, 2)
        else:
            b.conv(v, 3, 1, 1)
    return b.layers


def _alexnet() -> list[ConvLayer]:
    b = _Builder(3, 224, 224)
    b.conv(64, 11, 4, 2)
    b.pool(3, 2)
    b.conv(192, 5, 1, 2)
    b.pool(3, 2)
    b.conv(384, 3, 1, 1)
    b.conv(256, 3, 1, 1)
    b.conv(256, 3, 1, 1)
    return b.layers


def _mobilenet_v1() -> list[ConvLayer]:
    b = _Builder(3, 224, 224)
    b.conv(32, 3, 2, 1)
    for co, s in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                  (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)):
        b.conv(b.c, 3, s, 1, groups=b.c)   # depthwise 3x3
        b.conv(co, 1, 1, 0)                # pointwise
    return b.layers


def _yolov3_tiny() -> list[ConvLayer]:
    b = _Builder(3, 416, 416)
    for co in (16, 32, 64, 128, 256):
        b.conv(co, 3)
        if co == 256:
            route_36 = (b.c, b.h, b.w)   # layer 8: 256 x 26 x 26, routed to the second head
        b.pool(2, 2)
    b.conv(512, 3)      # then a size-2 stride-1 maxpool that darknet pads to keep 13x13
    b.conv(1024, 3)
    b.conv(256, 1)
    route_13 = (b.c, b.h, b.w)
    b.conv(512, 3)
    b.conv(255, 1)      # head 1: 3 x (80 + 5)
    b.c, b.h, b.w = route_13
    b.conv(128, 1)
    b.c, b.h, b.w = 128 + route_36[0], b.h * 2, b.w * 2   # upsample x2, concat with layer 8
    b.conv(256, 3)
    b.conv(255, 1)      # head 2
    return b.layers


_SOURCES: dict[str, tuple[Callable[[], Iterable[ConvLayer]], tuple[int, int, int, int], str]] = {
    "resnet18": (_resnet18, (1, 3, 224, 224), "He et al. 2016; layer names and shapes as TVM's VTA table"),
    "resnet34": (lambda: _resnet((3, 4, 6, 3), False), (1, 3, 224, 224), "He et al. 2016, basic blocks"),
    "resnet50": (lambda: _resnet((3, 4, 6, 3), True), (1, 3, 224, 224),
                 "He et al. 2016, bottleneck v1.5 (stride on the 3x3, as torchvision)"),
    "vgg16": (_vgg16, (1, 3, 224, 224), "Simonyan & Zisserman 2015, configuration D"),
    "alexnet": (_alexnet, (1, 3, 224, 224), "Krizhevsky et al. 2012, single-tower variant of torchvision"),
    "mobilenet_v1": (_mobilenet_v1, (1, 3, 224, 224), "Howard et al. 2017, width 1.0, 224x224"),
    "yolov3_tiny": (_yolov3_tiny, (1, 3, 416, 416), "darknet yolov3-tiny.cfg, 416x416, 80 classes"),
}

NETWORKS: tuple[str, ...] = tuple(_SOURCES)
"""Names of the built-in networks."""


@lru_cache(maxsize=None)
def get_network(name: str) -> Network:
    """A built-in network by name; :class:`WorkloadError` naming the choices if unknown."""
    key = name.strip().lower().replace("-", "_")
    if key not in _SOURCES:
        raise WorkloadError(f"unknown network {name!r}: use one of {', '.join(NETWORKS)}")
    build, shape, source = _SOURCES[key]
    layers = build()
    layers = tuple(layers) if key == "resnet18" else merge_layers(layers, prefix=key)
    return Network(key, shape, layers, source)


def network_layer(name: str) -> Conv2dWorkload:
    """The workload of a network layer named ``<net>.<layer>`` (``resnet50.L3``); :class:`WorkloadError` if the
    network or layer is unknown."""
    net_name, _, short = name.strip().partition(".")
    return get_network(net_name).layer(short).workload


@dataclass(frozen=True)
class NetworkTask:
    """One workload to tune for a network: the shape as the board runs it, and its weight."""

    workload: Conv2dWorkload
    count: int
    layers: tuple[str, ...]

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"name": self.workload.name, "spec": self.workload.spec(), "count": self.count,
                "layers": list(self.layers), "macs": self.workload.macs}


@dataclass(frozen=True)
class TaskPlan:
    """What tuning a network on a board family means: the tasks, and the layers left out (with why)."""

    network: Network
    tasks: tuple[NetworkTask, ...]
    skipped: tuple[tuple[str, str], ...]

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"network": self.network.name, "tasks": [t.to_dict() for t in self.tasks],
                "skipped": [{"layer": name, "reason": why} for name, why in self.skipped]}


def dense_refusal(workload: Conv2dWorkload) -> str | None:
    """Why an accelerator that runs dense convs only (VTA) cannot run ``workload`` (``None``: it can)."""
    if workload.g > 1:
        return f"{workload.kind} conv (groups={workload.g}): VTA runs dense convs"
    if (workload.dh, workload.dw) != (1, 1):
        return f"dilated conv (dilation {workload.dh}x{workload.dw}): VTA conv2d needs dilation 1"
    return None


def pad_to_block(workload: Conv2dWorkload, block: int = 16) -> Conv2dWorkload:
    """``workload`` with CI and CO rounded up to a multiple of ``block``, as TVM's VTA ``graph_pack`` does."""
    def up(c: int) -> int:
        return -(-c // block) * block

    return replace(workload, ci=up(workload.ci), co=up(workload.co))


SPACE_TO_DEPTH_STRIDES = (1, 2)
"""The strides whose convs :func:`space_to_depth` rewrites (pixel blocks of ``stride x stride`` become channels)."""


def space_to_depth(workload: Conv2dWorkload, block: int = 16) -> Conv2dWorkload | None:
    """The conv an accelerator with channel blocks runs for one whose input channels are not a multiple of
    ``block``: the zero-padded input's ``r x r`` pixel blocks (``r`` the stride, 1 or 2 in both axes) become
    channels, ``CI*r*r`` rounded up to ``block``, and the conv a stride-1 unpadded one of kernel ``ceil(K/r)``
    with the same output (``r = 1``: the channels padded, nothing else). ``None``: the channels are a multiple
    already, or the strides differ or exceed 2.

    >>> space_to_depth(Conv2dWorkload(1, 224, 224, 3, 64, 7, 7, 2, 2, 3, 3)).spec()
    'conv2d:N=1,H=115,W=115,CI=16,CO=64,K=4,S=1,P=0'
    """
    wl, r = workload, workload.sh
    if wl.ci % block == 0 or wl.sw != r or r not in SPACE_TO_DEPTH_STRIDES:
        return None
    ci = -(-wl.ci * r * r // block) * block
    if r == 1:      # channels padded; VTA pads the rows and columns itself
        return replace(wl, ci=ci)
    kh, kw = -(-wl.kh // r), -(-wl.kw // r)
    return replace(wl, h=wl.oh + kh - 1, w=wl.ow + kw - 1, ci=ci, kh=kh, kw=kw, sh=1, sw=1, ph=0, pw=0)


FIRST_CONV = ("s2d", "cpu", "pad")
"""Where an accelerator with channel blocks runs a network's first conv (:func:`plan_tasks`)."""


def plan_tasks(network: Network, *, block: int | None = None, first_conv: str = "s2d") -> TaskPlan:
    """The tasks of ``network``: every conv layer as it is (grouped, depthwise and dilated ones included), or,
    on an accelerator with channel blocks (``block``: VTA's 16, see
    :meth:`toolkit.backends.base.Backend.plan_network`), the dense ones padded.

    With ``block``, grouped and dilated layers are skipped (:func:`dense_refusal`), channels are padded to it,
    and the network's first conv is rewritten by :func:`space_to_depth` when its input channels are not a
    multiple of the block (``first_conv="s2d"``, as any such conv is: what a VTA model export runs), stays on
    the CPU (``"cpu"``, as TVM's VTA flow does: ``quantize`` skips conv 0 and ``graph_pack`` starts after it)
    or is padded too (``"pad"``, as TVM's v0.5 table padded C1 to 16 input channels). Layers whose padded
    shapes coincide become one task.
    """
    if first_conv not in FIRST_CONV:
        raise WorkloadError(f"first_conv must be one of {', '.join(map(repr, FIRST_CONV))}, got {first_conv!r}")
    vta = block is not None
    tasks: dict[Conv2dWorkload, NetworkTask] = {}
    skipped: list[tuple[str, str]] = []
    for i, layer in enumerate(network.layers):
        label = layer.name or layer.workload.spec()
        count = layer.count
        refusal = dense_refusal(layer.workload) if vta else None
        if refusal:
            skipped.append((label, f"{refusal}; runs on the CPU"))
            continue
        if vta and i == 0 and first_conv == "cpu":
            skipped.append((label, "first conv stays on the CPU, as in TVM's VTA flow (first conv 'pad' pads it "
                                   "to the block instead)"))
            count -= 1
            if count == 0:
                continue
        workload = layer.workload
        if vta and first_conv == "s2d":
            workload = space_to_depth(workload, block) or workload
        workload = pad_to_block(workload, block) if vta else workload
        if workload in tasks:
            old = tasks[workload]
            tasks[workload] = replace(old, count=old.count + count, layers=old.layers + (label,))
        else:
            tasks[workload] = NetworkTask(replace(workload, name=layer.name), count, (label,))
    return TaskPlan(network, tuple(tasks.values()), tuple(skipped))
