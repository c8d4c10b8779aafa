"""MCUNet "5fps" ImageNet network (Lin et al., NeurIPS 2020; model-zoo net_id mcunet-in1).

Block list copied from the published config ``mcunet-5fps_imagenet.json`` (MCUNet
release, also the backbone the on-device-training paper calls "MCUNet-5FPS").  Nothing
is guessed: every block's (in, out, kernel, stride, expand ratio, mid channels) is the
published one.  Note the real config uses expand ratios 1/3/4/5/6 (not only 3/4/6) and
depthwise kernels 3/5/7.  Each entry: (out, kernel, stride, expand_ratio, mid):

    stem conv3x3 s2 -> 16
    (8,  3, 1, 1, -)     no expand conv
    (16, 3, 2, 4, 32)
    (16, 3, 1, 3, 48)    + identity
    (24, 7, 2, 3, 48)
    (24, 3, 1, 5, 120)   + identity
    (40, 3, 2, 5, 120)
    (40, 7, 1, 4, 160)   + identity
    (48, 5, 1, 4, 160)
    (48, 3, 1, 3, 144)   + identity
    (48, 3, 1, 4, 192)   + identity
    (96, 7, 2, 5, 240)
    (96, 5, 1, 4, 384)   + identity
    (96, 5, 1, 4, 384)   + identity
    (160, 3, 1, 6, 576)
    no last 1x1 conv ("feature_mix_layer": null): pool -> Linear(160, classes)

The published model runs at 96x96; the zoo uses 128x128 like the on-device-training paper.
"""

from __future__ import annotations

from torch import nn

from .common import Classifier, ConvBNAct, InvertedResidual

INPUT_SIZE = 128
STEM = 16
# (out, kernel, stride, expand_ratio, mid_channels)
BLOCKS = [
    (8, 3, 1, 1, None),
    (16, 3, 2, 4, 32), (16, 3, 1, 3, 48),
    (24, 7, 2, 3, 48), (24, 3, 1, 5, 120),
    (40, 3, 2, 5, 120), (40, 7, 1, 4, 160),
    (48, 5, 1, 4, 160), (48, 3, 1, 3, 144), (48, 3, 1, 4, 192),
    (96, 7, 2, 5, 240), (96, 5, 1, 4, 384), (96, 5, 1, 4, 384),
    (160, 3, 1, 6, 576),
]

PUBLISHED = {
    "source": "MCUNet model zoo (mit-han-lab/mcunet README), net_id mcunet-in1 (= mcunet-5fps_imagenet)",
    "params": 0.64e6, "macs": 12.8e6, "resolution": 96, "num_classes": 1000,
}


def mcunet_5fps(num_classes: int = 2, input_size: int = INPUT_SIZE) -> Classifier:
    layers: list[nn.Module] = [ConvBNAct(3, STEM, 3, 2, act="relu6", bn_eps=1e-5)]
    cin = STEM
    for cout, k, s, e, mid in BLOCKS:
        layers.append(InvertedResidual(cin, cout, k, s, e, mid=mid, bn_eps=1e-5))
        cin = cout
    return Classifier(nn.Sequential(*layers), cin, num_classes, input_size, "mcunet-5fps")
