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


ZOO = {"resnet18": ResNet18, "mobilenet_v1": mobilenet_v1}
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
