"""A MobileNetV3-Small-like network (Howard et al., 2019, "Searching for MobileNetV3", Table 2) at width 0.5 and
64x64 input: the zoo's model with hard-swish and squeeze-and-excitation (tinytrain's ops of users' own models).

The eleven bneck blocks of MobileNetV3-Small (kernel, expanded width, output width, SE, non-linearity, stride)

    (3, 16, 16, SE, RE, 2) (3, 72, 24, -, RE, 2) (3, 88, 24, -, RE, 1) (5, 96, 40, SE, HS, 2) (5, 240, 40, SE, HS, 1)
    (5, 240, 40, SE, HS, 1) (5, 120, 48, SE, HS, 1) (5, 144, 48, SE, HS, 1) (5, 288, 96, SE, HS, 2)
    (5, 576, 96, SE, HS, 1) (5, 576, 96, SE, HS, 1)

with every width times 0.5 (``make_divisible(c * 0.5, 8)``), a hard-swish 3x3 stride-2 stem, squeeze-and-excitation
as global average pool -> 1x1 conv to make_divisible(expanded / 4, 8) -> ReLU -> 1x1 conv -> hard sigmoid ->
channel-wise multiply, and the last 1x1 conv (576 * 0.5) with hard-swish. "Like": the paper's head has a hidden
1024-unit hard-swish layer and dropout before the classifier; here the classifier reads the pooled features
directly, as in the other zoo models. Hard sigmoid is PyTorch's relu6(x + 3) / 6 (ONNX HardSigmoid alpha 1/6).
"""

from __future__ import annotations

import torch
from torch import nn

from .common import Classifier, ConvBNAct, make_divisible

INPUT_SIZE = 64
WIDTH = 0.5
# kernel, expanded, out, SE, activation, stride (MobileNetV3-Small, Table 2)
SETTINGS = [(3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
            (5, 96, 40, True, "hswish", 2), (5, 240, 40, True, "hswish", 1), (5, 240, 40, True, "hswish", 1),
            (5, 120, 48, True, "hswish", 1), (5, 144, 48, True, "hswish", 1), (5, 288, 96, True, "hswish", 2),
            (5, 576, 96, True, "hswish", 1), (5, 576, 96, True, "hswish", 1)]

PUBLISHED = {
    "source": "Howard et al. 2019, Table 2 (MobileNetV3-Small 1.0, 224x224: 2.5 M params, 56 M MACs); this model "
              "is the same block table at width 0.5 and 64x64 without the 1024-unit hidden layer",
    "params": 2.5e6, "macs": 56e6, "resolution": 224, "num_classes": 1000,
}


class SqueezeExcite(nn.Module):
    """x * hardsigmoid(conv(relu(conv(avgpool(x))))): both 1x1 convs with bias, no BatchNorm."""

    def __init__(self, channels: int):
        super().__init__()
        squeeze = make_divisible(channels / 4, 8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeeze, 1)
        self.relu = nn.ReLU()
        self.expand = nn.Conv2d(squeeze, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.expand(self.relu(self.reduce(self.pool(x)))))


class Bneck(nn.Module):
    """1x1 expand (unless the width stays) -> kxk depthwise -> SE -> 1x1 linear project (+ identity)."""

    def __init__(self, cin: int, mid: int, cout: int, k: int, stride: int, se: bool, act: str):
        super().__init__()
        layers: list[nn.Module] = []
        if mid != cin:
            layers.append(ConvBNAct(cin, mid, 1, 1, act=act))
        layers.append(ConvBNAct(mid, mid, k, stride, groups=mid, act=act))
        if se:
            layers.append(SqueezeExcite(mid))
        layers.append(ConvBNAct(mid, cout, 1, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


def mobilenet_v3_small(num_classes: int = 2, width: float = WIDTH, input_size: int = INPUT_SIZE) -> Classifier:
    stem = make_divisible(16 * width, 8)
    layers: list[nn.Module] = [ConvBNAct(3, stem, 3, 2, act="hswish")]
    cin = stem
    for k, exp, c, se, act, s in SETTINGS:
        mid, cout = make_divisible(exp * width, 8), make_divisible(c * width, 8)
        layers.append(Bneck(cin, mid, cout, k, s, se, act))
        cin = cout
    last = make_divisible(576 * width, 8)
    layers.append(ConvBNAct(cin, last, 1, 1, act="hswish"))
    return Classifier(nn.Sequential(*layers), last, num_classes, input_size, "mbv3s-w0.5")
