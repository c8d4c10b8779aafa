"""MobileNetV1 (Howard et al., 2017) at width 0.25, 96x96 -- the MLPerf Tiny Visual Wake
Words reference network.

Structure as in the MLPerf Tiny reference (``vww_model.py``): conv3x3 s2 -> 8, then 13
depthwise-separable blocks (dw3x3 + BN + ReLU, pw1x1 + BN + ReLU) with output channels
16, 32(s2), 32, 64(s2), 64, 128(s2), 128 x5, 256(s2), 256; global average pool (3x3) ->
flatten -> Linear.  Plain ReLU (not ReLU6) as in MLPerf.

Difference from the TF reference: padding is PyTorch-symmetric (k // 2 on every side).
TF's 'same' padding with stride 2 on an even input pads only bottom/right, so the
sampling grid of the stride-2 layers is shifted by one pixel; shapes, parameter and MAC
counts are identical.
"""

from __future__ import annotations

from torch import nn

from .common import Classifier, ConvBNAct

INPUT_SIZE = 96
WIDTH = 0.25
# (out_channels@1.0, stride) of the 13 depthwise-separable blocks
BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
          (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]

PUBLISHED = {
    "source": "MobileNets paper Table 6/7 (0.25 MobileNet-224: 0.5 M params, 41 M mult-adds, "
              "ImageNet 224x224); MLPerf Tiny VWW reference: 96x96, 2 classes, 325 KB int8 .tflite",
    "params": 0.5e6, "macs": 41e6, "resolution": 224, "num_classes": 1000,
}


def mobilenet_v1(num_classes: int = 2, width: float = WIDTH, input_size: int = INPUT_SIZE) -> Classifier:
    stem = int(32 * width)
    layers: list[nn.Module] = [ConvBNAct(3, stem, 3, 2, act="relu")]
    cin = stem
    for c, s in BLOCKS:
        cout = int(c * width)
        layers.append(nn.Sequential(
            ConvBNAct(cin, cin, 3, s, groups=cin, act="relu"),
            ConvBNAct(cin, cout, 1, 1, act="relu"),
        ))
        cin = cout
    return Classifier(nn.Sequential(*layers), cin, num_classes, input_size, "mbv1-0.25-vww")
