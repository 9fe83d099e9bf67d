"""Reference architectures written as torch modules (torchvision is not installed).

They follow the published definitions layer by layer, independently of the tables in
``toolkit.workloads.networks``, so extracting them checks those tables.
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.down = nn.Conv2d(cin, width, 1, stride, bias=False) if stride != 1 or cin != width else None

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x)))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.down = nn.Conv2d(cin, width * 4, 1, stride, bias=False) if stride != 1 or cin != width * 4 else None

    def forward(self, x):
        y = self.conv3(torch.relu(self.conv2(torch.relu(self.conv1(x)))))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self, block, layers) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.pool = nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], 64
        for i, (width, n) in enumerate(zip((64, 128, 256, 512), layers)):
            for j in range(n):
                blocks.append(block(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = width * block.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x):
        x = self.blocks(self.pool(torch.relu(self.stem(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def resnet18():
    return ResNet(BasicBlock, (2, 2, 2, 2))


def resnet34():
    return ResNet(BasicBlock, (3, 4, 6, 3))


def resnet50():
    return ResNet(Bottleneck, (3, 4, 6, 3))


def vgg16():
    layers, cin = [], 3
    for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
            cin = v
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(),
                         nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 1000))


def alexnet():
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Flatten(), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
        nn.Linear(4096, 1000))


def mobilenet_v1():
    def dw_pw(cin, cout, stride):
        return [nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.ReLU(),
                nn.Conv2d(cin, cout, 1, bias=False), nn.ReLU()]

    cfg = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)] + \
        [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
    layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.ReLU()]
    for cin, cout, s in cfg:
        layers += dw_pw(cin, cout, s)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, 1000))


class YoloV3Tiny(nn.Module):
    """darknet's yolov3-tiny.cfg (80 classes)."""

    def __init__(self) -> None:
        super().__init__()
        chans = [3, 16, 32, 64, 128, 256]
        self.backbone = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(chans, chans[1:]))
        self.conv6 = nn.Conv2d(256, 512, 3, padding=1)
        self.conv7 = nn.Conv2d(512, 1024, 3, padding=1)
        self.conv8 = nn.Conv2d(1024, 256, 1)
        self.head1 = nn.Sequential(nn.Conv2d(256, 512, 3, padding=1), nn.Conv2d(512, 255, 1))
        self.conv_r = nn.Conv2d(256, 128, 1)
        self.head2 = nn.Sequential(nn.Conv2d(384, 256, 3, padding=1), nn.Conv2d(256, 255, 1))

    def forward(self, x):
        for i, conv in enumerate(self.backbone):
            x = conv(x)
            if i == 4:
                route = x
            x = nn.functional.max_pool2d(x, 2, 2)
        x = self.conv6(x)
        x = nn.functional.max_pool2d(nn.functional.pad(x, (0, 1, 0, 1), mode="replicate"), 2, 1)
        x = self.conv8(self.conv7(x))
        y1 = self.head1(x)
        up = nn.functional.interpolate(self.conv_r(x), scale_factor=2.0, mode="nearest")
        y2 = self.head2(torch.cat([up, route], 1))
        return y1, y2
