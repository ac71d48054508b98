"""Convolutional image classifiers: ResNet (basic and bottleneck), VGG, MobileNetV2.

Widths are the first stage's channels (64 in the papers); later stages double it as in
the originals. Inputs of 64 pixels or less get the CIFAR stem (3x3 convolution, no
max-pool) so that small, fast-to-profile images keep realistic feature-map sizes;
larger inputs get the ImageNet stem (7x7 stride 2 + max-pool).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["VGG", "MobileNetV2", "ResNet", "resnet_stages", "vgg_layers"]

_RESNET_STAGES = {
    10: [1, 1, 1, 1],
    18: [2, 2, 2, 2],
    26: [3, 3, 3, 3],
    34: [3, 4, 6, 3],
    50: [3, 4, 6, 3],
    38: [2, 3, 5, 2],
    101: [3, 4, 23, 3],
}
_VGG_CONFIGS = {
    11: [1, 1, 2, 2, 2],
    13: [2, 2, 2, 2, 2],
    16: [2, 2, 3, 3, 3],
    19: [2, 2, 4, 4, 4],
}


def resnet_stages(depth: int) -> list[int]:
    """Blocks per stage for a ResNet depth (18/34 basic, 50/101 bottleneck as in He et al.)."""
    if depth not in _RESNET_STAGES:
        raise ValueError(f"resnet depth={depth} is not one of {sorted(_RESNET_STAGES)}")
    return _RESNET_STAGES[depth]


def vgg_layers(depth: int) -> list[int]:
    """Convolutions per stage for a VGG depth (Simonyan & Zisserman configs A, B, D, E)."""
    if depth not in _VGG_CONFIGS:
        raise ValueError(f"vgg depth={depth} is not one of {sorted(_VGG_CONFIGS)}")
    return _VGG_CONFIGS[depth]


def _stem(width: int, image_size: int) -> nn.Sequential:
    if image_size <= 64:
        return nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True)
        )
    return nn.Sequential(
        nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(True),
        nn.MaxPool2d(3, stride=2, padding=1),
    )


class _Basic(nn.Module):
    expansion = 1

    def __init__(self, inp: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inp, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(True)
        self.down: nn.Module = nn.Identity()
        if stride != 1 or inp != width:
            self.down = nn.Sequential(
                nn.Conv2d(inp, width, 1, stride, bias=False), nn.BatchNorm2d(width)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        result: Tensor = self.relu(out + self.down(x))
        return result


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inp: int, width: int, stride: int) -> None:
        super().__init__()
        out_ch = width * 4
        self.conv1 = nn.Conv2d(inp, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(True)
        self.down: nn.Module = nn.Identity()
        if stride != 1 or inp != out_ch:
            self.down = nn.Sequential(
                nn.Conv2d(inp, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        result: Tensor = self.relu(out + self.down(x))
        return result


class ResNet(nn.Module):
    """He et al. 2016; ``depth`` picks the stage layout, ``bottleneck`` the block."""

    def __init__(
        self,
        depth: int = 18,
        width: int = 64,
        image_size: int = 224,
        num_classes: int = 1000,
        bottleneck: bool = False,
    ) -> None:
        super().__init__()
        block = _Bottleneck if bottleneck else _Basic
        self.stem = _stem(width, image_size)
        layers: list[nn.Module] = []
        inp = width
        for stage, blocks in enumerate(resnet_stages(depth)):
            planes = width * 2**stage
            for index in range(blocks):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(block(inp, planes, stride))
                inp = planes * block.expansion
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inp, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.layers(self.stem(x)))
        logits: Tensor = self.fc(torch.flatten(x, 1))
        return logits


class VGG(nn.Module):
    """Simonyan & Zisserman 2015 (no batch norm), classifier sized for small inputs."""

    def __init__(
        self,
        depth: int = 16,
        width: int = 64,
        image_size: int = 224,
        num_classes: int = 1000,
        hidden: int = 4096,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        inp = 3
        for stage, convs in enumerate(vgg_layers(depth)):
            out = width * 2 ** min(stage, 3)
            for _ in range(convs):
                layers += [nn.Conv2d(inp, out, 3, padding=1), nn.ReLU(True)]
                inp = out
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        side = max(1, image_size // 32)
        self.pool = nn.AdaptiveAvgPool2d(side)
        self.classifier = nn.Sequential(
            nn.Linear(inp * side * side, hidden),
            nn.ReLU(True),
            nn.Linear(hidden, hidden),
            nn.ReLU(True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.features(x))
        logits: Tensor = self.classifier(torch.flatten(x, 1))
        return logits


def _divisible(value: float, divisor: int = 8) -> int:
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class _Inverted(nn.Module):
    def __init__(self, inp: int, out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = inp * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [
                nn.Conv2d(inp, hidden, 1, bias=False),
                nn.BatchNorm2d(hidden),
                nn.ReLU6(True),
            ]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(True),
            nn.Conv2d(hidden, out, 1, bias=False),
            nn.BatchNorm2d(out),
        ]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and inp == out

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.block(x)
        return x + out if self.residual else out


class MobileNetV2(nn.Module):
    """Sandler et al. 2018; ``width`` is the width multiplier x100, ``depth`` repeats x100."""

    _SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1))
    _SETTINGS_TAIL = ((6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(
        self, width: int = 100, depth: int = 100, image_size: int = 224, num_classes: int = 1000
    ) -> None:
        super().__init__()
        mult = width / 100
        inp = _divisible(32 * mult)
        small = image_size <= 64
        layers: list[nn.Module] = [
            nn.Conv2d(3, inp, 3, 1 if small else 2, 1, bias=False),
            nn.BatchNorm2d(inp),
            nn.ReLU6(True),
        ]
        for expand, channels, repeats, stride in self._SETTINGS + self._SETTINGS_TAIL:
            out = _divisible(channels * mult)
            count = max(1, round(repeats * depth / 100))
            for index in range(count):
                first_stride = 1 if small and channels == 24 else stride
                layers.append(_Inverted(inp, out, first_stride if index == 0 else 1, expand))
                inp = out
        last = _divisible(1280 * max(1.0, mult))
        layers += [nn.Conv2d(inp, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6(True)]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(last, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.features(x))
        logits: Tensor = self.classifier(torch.flatten(x, 1))
        return logits
