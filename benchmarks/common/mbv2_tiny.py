"""The MobileNetV2-style network of quantize_float.py (PyTorch), its BatchNorm-folded weights, and the same network
in Keras built from those weights. Imports nothing of tinytrain and loads torch / tensorflow lazily, so the export
script of another environment (export_tflite.py, run in /work/venv-tf or /work/venv-litert) imports it too.

A stem conv 3x3/2, inverted-residual blocks (expand 1x1 / depthwise 3x3 / project 1x1, ReLU6, BatchNorm, residual
adds where stride 1 and the widths match), a 1x1 head conv, global average pool, Linear; 28x28x1 input, p / 255.
"""

from __future__ import annotations

import numpy as np

BLOCKS = ((16, 16, 1, 1), (16, 24, 2, 4), (24, 24, 1, 4), (24, 32, 2, 4), (32, 32, 1, 4))


def mobilenet_v2_tiny(seed: int = 0):
    import torch
    from torch import nn

    def conv_bn(cin, cout, k, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, *([nn.ReLU6()] if act else []))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            mid = cin * expand
            layers = [conv_bn(cin, mid, 1)] if expand != 1 else []
            self.body = nn.Sequential(*layers, conv_bn(mid, mid, 3, stride, mid), conv_bn(mid, cout, 1, act=False))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    torch.manual_seed(seed)
    return nn.Sequential(conv_bn(1, 16, 3, 2), *(Block(*b) for b in BLOCKS), conv_bn(32, 64, 1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(64, 10))


def folded_weights(model) -> dict[str, np.ndarray]:
    """Each conv's BatchNorm-folded weight ``c{i}_w`` (PyTorch layout) and bias ``c{i}_b`` in network order, and the
    classifier's ``fc_w`` / ``fc_b``."""
    from torch import nn

    out, convs = {}, [m for m in model.modules() if isinstance(m, nn.Sequential) and len(m) >= 2
                      and isinstance(m[0], nn.Conv2d) and isinstance(m[1], nn.BatchNorm2d)]
    for i, seq in enumerate(convs):
        conv, bn = seq[0], seq[1]
        g = (bn.weight / (bn.running_var + bn.eps).sqrt()).detach().numpy()
        out[f"c{i}_w"] = conv.weight.detach().numpy() * g[:, None, None, None]
        out[f"c{i}_b"] = bn.bias.detach().numpy() - bn.running_mean.detach().numpy() * g
    fc = model[-1]
    out["fc_w"], out["fc_b"] = fc.weight.detach().numpy(), fc.bias.detach().numpy()
    return out


def keras_model(w: dict[str, np.ndarray]):
    """The same network in Keras (NHWC 28x28x1) with the folded weights: PyTorch's symmetric padding written as
    ZeroPadding2D before each strided conv (Keras's "same" pads a stride-2 conv at the bottom / right only)."""
    import tensorflow as tf

    layers, count = tf.keras.layers, iter(range(len(w)))

    def conv(x, k, stride, depthwise=False, act=True):
        i = next(count)
        kernel, bias = w[f"c{i}_w"], w[f"c{i}_b"]
        if stride != 1:
            x = layers.ZeroPadding2D(k // 2)(x)
        pad = "same" if stride == 1 else "valid"
        if depthwise:
            layer = layers.DepthwiseConv2D(k, stride, pad)
            x = layer(x)
            layer.set_weights([kernel.transpose(2, 3, 0, 1), bias])
        else:
            layer = layers.Conv2D(kernel.shape[0], k, stride, pad)
            x = layer(x)
            layer.set_weights([kernel.transpose(2, 3, 1, 0), bias])
        return layers.ReLU(6.0)(x) if act else x

    inp = tf.keras.Input((28, 28, 1))
    x = conv(inp, 3, 2)
    for cin, cout, stride, expand in BLOCKS:
        y = conv(x, 1, 1) if expand != 1 else x
        y = conv(conv(y, 3, stride, depthwise=True), 1, 1, act=False)
        x = layers.Add()([x, y]) if stride == 1 and cin == cout else y
    x = layers.GlobalAveragePooling2D()(conv(x, 1, 1))
    fc = layers.Dense(10)
    out = fc(x)
    fc.set_weights([w["fc_w"].T, w["fc_b"]])
    return tf.keras.Model(inp, out)
