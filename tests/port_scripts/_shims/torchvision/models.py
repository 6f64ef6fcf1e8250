"""resnet18 as a tiny network with ResNet's parts that scripts touch: `fc` (an nn.Linear with in_features) last."""

from __future__ import annotations

from typing import Any

from torch import nn


class _TinyResNet(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=4, padding=3, bias=False)
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x: Any) -> Any:
        return self.fc(self.avgpool(self.relu(self.conv1(x))).flatten(1))


def resnet18(weights: Any = None, progress: bool = True, pretrained: bool = False, **kwargs: Any) -> nn.Module:
    return _TinyResNet(**kwargs)
