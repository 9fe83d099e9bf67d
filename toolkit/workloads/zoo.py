"""Built-in networks as PyTorch modules with seeded random weights, for whole-model exports and benchmarks.

The conv tables of :mod:`toolkit.workloads.networks` say which shapes a network has; the modules here are
the networks themselves (batch-norm after every conv, as the published architectures have it), so a
built-in name can be exported and run end to end. Weights and batch-norm statistics are drawn from
``seed``: the outputs mean nothing, but every operator (batch-norm included) does real arithmetic.

>>> model = zoo_model("resnet18", seed=0)
>>> sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
20
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from toolkit.errors import WorkloadError


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    """ResNet's two-conv block (He et al. 2016); a 1x1 projection on the shortcut when the shape changes."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(cin, width, 3, stride)
        self.conv2, self.bn2 = _conv_bn(width, width, 3)
        self.down = nn.Sequential(*_conv_bn(cin, width, 1, stride)) if stride != 1 or cin != width else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet18(nn.Module):
    """ResNet-18 for 224x224 inputs (torchvision's layout, 1000 classes); ``base``: the first stage's channels
    (64; each later stage doubles them)."""

    def __init__(self, base: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.pool = nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], base
        for i, width in enumerate((base, 2 * base, 4 * base, 8 * base)):
            for j in range(2):
                blocks.append(BasicBlock(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.pool(torch.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


MOBILENET_V1 = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)] + \
    [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
"""MobileNet-v1 1.0's depthwise-separable blocks: (input channels, output channels, stride)."""


def mobilenet_v1() -> nn.Module:
    """MobileNet-v1 1.0 for 224x224 inputs (Howard et al. 2017): depthwise 3x3 + pointwise 1x1 blocks."""
    layers: list[nn.Module] = [*_conv_bn(3, 32, 3, 2), nn.ReLU()]
    for cin, cout, stride in MOBILENET_V1:
        layers += [*_conv_bn(cin, cin, 3, stride, groups=cin), nn.ReLU(), *_conv_bn(cin, cout, 1), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, 1000))


class InvertedResidual(nn.Module):
    """MobileNet-v2/v3's block: a 1x1 expansion (none when ``exp == cin``), a depthwise ``k x k`` conv of
    ``stride``, an optional squeeze-and-excitation gate (v3: 1x1 convs on the pooled map, ReLU then
    Hardsigmoid), a linear 1x1 projection; the input added back when the shape is kept."""

    def __init__(self, cin: int, exp: int, cout: int, k: int, stride: int, act: type[nn.Module], se: bool) -> None:
        super().__init__()
        layers: list[nn.Module] = [] if exp == cin else [*_conv_bn(cin, exp, 1), act()]
        layers += [*_conv_bn(exp, exp, k, stride, groups=exp), act()]
        self.expand = nn.Sequential(*layers)
        squeeze = max(8, (exp // 4 + 4) // 8 * 8)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(exp, squeeze, 1), nn.ReLU(),
                                nn.Conv2d(squeeze, exp, 1), nn.Hardsigmoid()) if se else None
        self.project = nn.Sequential(*_conv_bn(exp, cout, 1))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.expand(x)
        if self.se is not None:
            y = y * self.se(y)
        y = self.project(y)
        return x + y if self.residual else y


MOBILENET_V2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
"""MobileNet-v2 1.0's stages: (expansion, output channels, blocks, first stride)."""


def mobilenet_v2() -> nn.Module:
    """MobileNet-v2 1.0 for 224x224 inputs (Sandler et al. 2018): inverted residuals with ReLU6."""
    layers: list[nn.Module] = [*_conv_bn(3, 32, 3, 2), nn.ReLU6()]
    cin = 32
    for t, c, n, s in MOBILENET_V2:
        for i in range(n):
            layers.append(InvertedResidual(cin, cin * t, c, 3, s if i == 0 else 1, nn.ReLU6, False))
            cin = c
    layers += [*_conv_bn(cin, 1280, 1), nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


MOBILENET_V3_SMALL = [(3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2), (3, 88, 24, False, False, 1),
                      (5, 96, 40, True, True, 2), (5, 240, 40, True, True, 1), (5, 240, 40, True, True, 1),
                      (5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1), (5, 288, 96, True, True, 2),
                      (5, 576, 96, True, True, 1), (5, 576, 96, True, True, 1)]
"""MobileNet-v3-Small's blocks: (kernel, expanded channels, output channels, SE gate, Hardswish, stride)."""


def mobilenet_v3_small() -> nn.Module:
    """MobileNet-v3-Small for 224x224 inputs (Howard et al. 2019): Hardswish, SE gates, 5x5 depthwise convs."""
    layers: list[nn.Module] = [*_conv_bn(3, 16, 3, 2), nn.Hardswish()]
    cin = 16
    for k, exp, cout, se, hs, stride in MOBILENET_V3_SMALL:
        layers.append(InvertedResidual(cin, exp, cout, k, stride, nn.Hardswish if hs else nn.ReLU, se))
        cin = cout
    layers += [*_conv_bn(cin, 576, 1), nn.Hardswish(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(576, 1024),
               nn.Hardswish(), nn.Linear(1024, 1000)]
    return nn.Sequential(*layers)


ZOO = {"resnet18": ResNet18, "mobilenet_v1": mobilenet_v1, "mobilenet_v2": mobilenet_v2,
       "mobilenet_v3_small": mobilenet_v3_small}
"""Built-in network name -> a function that builds its module."""


def zoo_model(name: str, seed: int = 0) -> nn.Module:
    """The built-in network ``name`` in eval mode, its weights and batch-norm statistics drawn from ``seed``."""
    key = name.strip().lower().replace("-", "_")
    if key not in ZOO:
        raise WorkloadError(f"no built-in model {name!r}; built-in models: {', '.join(ZOO)}")
    return seeded(ZOO[key], seed)


def seeded(build: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    """``build()`` in eval mode, its weights and batch-norm statistics drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=generator)
                m.bias.uniform_(-0.2, 0.2, generator=generator)
                m.running_mean.uniform_(-0.2, 0.2, generator=generator)
                m.running_var.uniform_(0.5, 2.0, generator=generator)
    return model
