"""Shared building blocks for the model zoo (plain PyTorch, no torchvision).

Every network in the zoo is built from three pieces:

* ``ConvBNAct``  -- Conv2d (no bias) -> BatchNorm2d -> optional ReLU / ReLU6,
* ``InvertedResidual`` -- MobileNetV2 / ProxylessNAS / MCUNet block
  (1x1 expand -> kxk depthwise -> 1x1 linear project, identity shortcut when
  stride == 1 and in == out),
* ``Classifier`` -- features -> global average pool -> flatten -> Linear.

``fold_bn`` turns a trained model into the deploy form (BatchNorm folded into
the conv weight and a conv bias), which is what gets exported to ONNX.
"""

from __future__ import annotations

import copy
from typing import Iterable

import torch
from torch import nn


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round a channel count the way torchvision / the TF MobileNet code do.

    Rounds to the nearest multiple of ``divisor``, never below ``min_value``
    (default: ``divisor``) and never more than 10 % below ``v``.
    """
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _act(kind: str | None) -> nn.Module:
    if kind is None:
        return nn.Identity()
    if kind == "relu6":
        return nn.ReLU6(inplace=False)
    if kind == "relu":
        return nn.ReLU(inplace=False)
    if kind == "hswish":
        return nn.Hardswish(inplace=False)
    raise ValueError(f"unknown activation {kind!r}")


class ConvBNAct(nn.Module):
    """Conv2d(bias=False) -> BatchNorm2d -> activation, 'same' symmetric padding."""

    def __init__(self, cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1,
                 act: str | None = "relu6", bn_eps: float = 1e-3):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, padding=k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=bn_eps, momentum=0.1)
        self.act = _act(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class InvertedResidual(nn.Module):
    """MBConv block as in MobileNetV2 / ProxylessNAS / MCUNet (no squeeze-excite).

    expand_ratio == 1 means no expand conv (depthwise directly on the input).
    ``mid`` overrides the expanded width (MCUNet configs state it explicitly).
    """

    def __init__(self, cin: int, cout: int, k: int, stride: int, expand_ratio: float,
                 mid: int | None = None, act: str = "relu6", bn_eps: float = 1e-3):
        super().__init__()
        if mid is None:
            mid = int(round(cin * expand_ratio))
        self.cin, self.cout, self.k, self.stride, self.mid = cin, cout, k, stride, mid
        self.expand_ratio = expand_ratio
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNAct(cin, mid, 1, 1, act=act, bn_eps=bn_eps))
        else:
            mid = cin
            self.mid = cin
        layers.append(ConvBNAct(mid, mid, k, stride, groups=mid, act=act, bn_eps=bn_eps))
        layers.append(ConvBNAct(mid, cout, 1, 1, act=None, bn_eps=bn_eps))
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


class Classifier(nn.Module):
    """features -> global average pool -> flatten -> Linear."""

    def __init__(self, features: nn.Module, feat_dim: int, num_classes: int,
                 input_size: int, name: str):
        super().__init__()
        self.features = features
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.classifier = nn.Linear(feat_dim, num_classes)
        self.input_size = input_size
        self.arch_name = name
        self.num_classes = num_classes
        init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.pool(self.features(x))))


def init_weights(model: nn.Module) -> None:
    """Kaiming-normal convs, zero-init last BN of each residual branch, small FC."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
    for m in model.modules():
        if isinstance(m, InvertedResidual) and m.use_res:
            nn.init.zeros_(m.block[-1].bn.weight)


# --------------------------------------------------------------------------- deploy helpers

def fold_bn(model: nn.Module) -> nn.Module:
    """Return an eval-mode deep copy with every ConvBNAct's BatchNorm folded into its conv.

    W' = W * gamma / sqrt(var + eps) (per output channel), b' = beta - mean * gamma / sqrt(var + eps).
    """
    model = copy.deepcopy(model).eval()
    for m in model.modules():
        if isinstance(m, ConvBNAct) and isinstance(m.bn, nn.BatchNorm2d):
            conv, bn = m.conv, m.bn
            std = torch.sqrt(bn.running_var + bn.eps)
            scale = bn.weight / std
            new = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                            conv.padding, conv.dilation, conv.groups, bias=True)
            with torch.no_grad():
                new.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
                b0 = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
                new.bias.copy_(bn.bias + (b0 - bn.running_mean) * scale)
            m.conv = new
            m.bn = nn.Identity()
    return model


def count_params(model: nn.Module) -> int:
    """All parameters (conv/linear weights and biases, BatchNorm gamma/beta)."""
    return sum(p.numel() for p in model.parameters())


def count_deploy_params(model: nn.Module) -> int:
    """Weights + biases of the BN-folded model = the numbers stored in the int8 graph."""
    return count_params(fold_bn(model))


def layer_macs(model: nn.Module, input_size: int | Iterable[int]) -> list[dict]:
    """Per-layer multiply-accumulates of every Conv2d / Linear for one image (batch 1).

    Conv: H_out * W_out * C_out * (C_in / groups) * kh * kw.  Linear: in * out.
    Bias adds, activations, pooling and residual adds are not counted.
    """
    if isinstance(input_size, int):
        hw = (input_size, input_size)
    else:
        hw = tuple(input_size)
    rows: list[dict] = []
    hooks = []

    def conv_hook(mod: nn.Conv2d, _inp, out):
        kh, kw = mod.kernel_size
        macs = out.shape[2] * out.shape[3] * mod.out_channels * (mod.in_channels // mod.groups) * kh * kw
        rows.append({"type": "Conv", "groups": mod.groups, "cin": mod.in_channels,
                     "cout": mod.out_channels, "k": kh, "stride": mod.stride[0],
                     "out_hw": [int(out.shape[2]), int(out.shape[3])], "macs": int(macs)})

    def fc_hook(mod: nn.Linear, _inp, _out):
        rows.append({"type": "Gemm", "cin": mod.in_features, "cout": mod.out_features,
                     "macs": int(mod.in_features * mod.out_features)})

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(fc_hook))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, 3, *hw))
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return rows


def count_macs(model: nn.Module, input_size: int | Iterable[int]) -> int:
    return sum(r["macs"] for r in layer_macs(model, input_size))
