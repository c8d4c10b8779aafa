"""MobileNetV2 (Sandler et al., 2018) at width multiplier 0.35.

Channel rounding follows torchvision / TF (``make_divisible(c * 0.35, 8)``), giving
stem 16, stages 8-8-16-24-32-56-112.  The block list is the standard inverted-residual
table (t, c, n, s):

    (1, 16, 1, 1) (6, 24, 2, 2) (6, 32, 3, 2) (6, 64, 4, 2) (6, 96, 3, 1) (6, 160, 3, 2) (6, 320, 1, 1)

Last 1x1 conv ("feature mix"): **448 channels** = make_divisible(1280 * 0.35, 8), exactly as
in the MCUNet model-zoo config ``mbv2-w0.35-r144_imagenet.json`` (the network the MCUNet /
on-device-training papers call MobileNetV2-w0.35; its published 0.75 M params / 23.5 M MACs
only add up with 448).  torchvision instead keeps 1280 for width < 1; pass
``last_channel=1280`` for that variant, or ``last_channel=None`` for the "nomix" variant
(no last conv, classifier straight on the 112-channel features).
"""

from __future__ import annotations

from torch import nn

from .common import Classifier, ConvBNAct, InvertedResidual, make_divisible

INPUT_SIZE = 128
WIDTH = 0.35
# t, c, n, s
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
            (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
DEFAULT_LAST = "scaled"  # make_divisible(1280 * width, 8) = 448

# Published figures (MCUNet model zoo, "mbv2-w0.35", ImageNet 1000 classes, 144x144).
PUBLISHED = {
    "source": "MCUNet model zoo (mit-han-lab/mcunet README), net_id mbv2-w0.35 (= mbv2-w0.35-r144_imagenet)",
    "params": 0.75e6, "macs": 23.5e6, "resolution": 144, "num_classes": 1000,
}


def mobilenet_v2(num_classes: int = 2, width: float = WIDTH, last_channel: int | str | None = DEFAULT_LAST,
                 input_size: int = INPUT_SIZE) -> Classifier:
    stem = make_divisible(32 * width, 8)
    layers: list[nn.Module] = [ConvBNAct(3, stem, 3, 2, act="relu6")]
    cin = stem
    for t, c, n, s in SETTINGS:
        cout = make_divisible(c * width, 8)
        for i in range(n):
            layers.append(InvertedResidual(cin, cout, 3, s if i == 0 else 1, t))
            cin = cout
    if last_channel == "scaled":
        last_channel = make_divisible(1280 * width, 8) if width < 1.0 else 1280
    if last_channel is not None:
        layers.append(ConvBNAct(cin, int(last_channel), 1, 1, act="relu6"))
        cin = int(last_channel)
    return Classifier(nn.Sequential(*layers), cin, num_classes, input_size, "mbv2-w0.35")
