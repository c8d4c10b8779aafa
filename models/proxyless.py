"""ProxylessNAS "mobile" (Cai et al., ICLR 2019) at width multiplier 0.3.

Block list: the published searched architecture ``proxyless_mobile.json`` (mit-han-lab
ProxylessNAS release), with its two zero (skip) blocks in the 32-channel stage dropped --
they are identity mappings.  Each entry is (expand ratio, depthwise kernel, out channels,
stride) at width 1.0:

    stem conv3x3 s2 -> 32
    MB1 k3 16 s1
    MB3 k5 32 s2, MB3 k3 32
    MB3 k7 40 s2, MB3 k3 40, MB3 k5 40, MB3 k5 40
    MB6 k7 80 s2, MB3 k5 80, MB3 k5 80, MB3 k5 80
    MB6 k5 96 s1, MB3 k5 96, MB3 k5 96, MB3 k5 96
    MB6 k7 192 s2, MB6 k7 192, MB3 k7 192, MB3 k7 192
    MB6 k7 320 s1
    1x1 conv -> 1280

Width 0.3: every channel count (stem, stage outputs and the 1280 last conv) is
``c * 0.3`` rounded UP to a multiple of 8: stem 16, stages 8-16-16-24-32-64-96, last conv
384.  Expanded widths are ``in * expand_ratio`` (all multiples of 8 already).

Where this is inferred rather than copied: the MCUNet release does not ship the
proxyless-w0.3 config in its repository.  torchvision-style ``make_divisible`` rounding
would give 56 (not 64) channels for the 192 stage and 0.712 M params / 36.8 M MACs with a
1000-class head at 176x176; rounding up gives 0.754 M / 38.28 M, matching the MCUNet model
zoo's published 0.75 M params / 38.3 M MACs, so that is what is used.
"""

from __future__ import annotations

import math

from torch import nn

from .common import Classifier, ConvBNAct, InvertedResidual

INPUT_SIZE = 128
WIDTH = 0.3
# (expand_ratio, kernel, out_channels@1.0, stride), zero/skip blocks removed.
BLOCKS = [
    (1, 3, 16, 1),
    (3, 5, 32, 2), (3, 3, 32, 1),
    (3, 7, 40, 2), (3, 3, 40, 1), (3, 5, 40, 1), (3, 5, 40, 1),
    (6, 7, 80, 2), (3, 5, 80, 1), (3, 5, 80, 1), (3, 5, 80, 1),
    (6, 5, 96, 1), (3, 5, 96, 1), (3, 5, 96, 1), (3, 5, 96, 1),
    (6, 7, 192, 2), (6, 7, 192, 1), (3, 7, 192, 1), (3, 7, 192, 1),
    (6, 7, 320, 1),
]
STEM = 32
LAST = 1280

PUBLISHED = {
    "source": "MCUNet model zoo (mit-han-lab/mcunet README), net_id proxyless-w0.3 (= proxyless-w0.3-r176_imagenet)",
    "params": 0.75e6, "macs": 38.3e6, "resolution": 176, "num_classes": 1000,
}


def _width(c: int, width: float) -> int:
    """c * width rounded up to a multiple of 8 (see module docstring)."""
    return max(8, int(math.ceil(c * width / 8 - 1e-9)) * 8)


def proxyless_nas(num_classes: int = 2, width: float = WIDTH, input_size: int = INPUT_SIZE) -> Classifier:
    stem = _width(STEM, width)
    layers: list[nn.Module] = [ConvBNAct(3, stem, 3, 2, act="relu6")]
    cin = stem
    for e, k, c, s in BLOCKS:
        cout = _width(c, width)
        layers.append(InvertedResidual(cin, cout, k, s, e))
        cin = cout
    last = _width(LAST, width)
    layers.append(ConvBNAct(cin, last, 1, 1, act="relu6"))
    return Classifier(nn.Sequential(*layers), last, num_classes, input_size, "proxyless-w0.3")
