"""The PyTorch-side rows of the per-quantizer benchmark: NNCF's torch backend (post-training, on the float PyTorch
model, exported with torch.onnx.export) and Brevitas (quantization-aware: a Brevitas copy of the network made from
the float model's BatchNorm-folded weights, fine-tuned, exported with ``export_onnx_qcdq``).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np

from common import mbv2_tiny

SEED = 0


def _real(x: np.ndarray):
    import torch

    return torch.from_numpy((x.astype(np.float32) / np.float32(255)).transpose(0, 3, 1, 2).copy())


def nncf_torch(model, calib: np.ndarray, out: Path) -> Path:
    """nncf.quantize of the PyTorch model (activations per tensor, as the guide says: NNCF's default per-channel
    ones after a BatchNorm and ReLU6 are refused), the calibration images, its quantizers set to export
    QuantizeLinear / DequantizeLinear pairs (NNCF's torch default is OpenVINO FakeQuantize, which tinytrain refuses
    naming this fix), then torch.onnx.export. The nn.Sequential is wrapped in a module of its own: NNCF adds its hook storage as a child, which a Sequential would
    call as a layer."""
    import copy
    import os

    # NNCF's torch backend compiles its C++ quantize kernels on first use: minutes on a busy 2-core machine
    os.environ.setdefault("NNCF_EXTENSION_LOAD_TIMEOUT", "900")
    import nncf
    import torch
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, QuantizationParameters
    from nncf.torch.quantization.layers import QuantizerExportMode

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = copy.deepcopy(model).eval()

        def forward(self, x):
            return self.net(x)

    logging.getLogger("nncf").setLevel(logging.ERROR)
    dataset = nncf.Dataset(list(_real(calib)), lambda x: x[None])
    advanced = AdvancedQuantizationParameters(activations_quantization_params=QuantizationParameters(per_channel=False))
    quantized = nncf.quantize(Wrapped().eval(), dataset, subset_size=len(calib), advanced_parameters=advanced)
    for m in quantized.modules():
        if hasattr(m, "set_export_mode"):
            m.set_export_mode(QuantizerExportMode.ONNX_QUANTIZE_DEQUANTIZE_PAIRS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(quantized, (torch.zeros(1, 1, 28, 28),), str(out), input_names=["image"],
                          output_names=["logits"], dynamo=False, opset_version=17)
    return out


def brevitas_network(weights: dict[str, np.ndarray]):
    """mbv2_tiny's network in Brevitas, 8-bit: an input quantizer, QuantConv2d (per-channel int8 weights, the folded
    BatchNorm as an int32 bias), QuantReLU (ReLU where the float model has ReLU6: Brevitas's int8 ReLU quantizer),
    each residual sum re-quantized, pool, QuantLinear; the folded float weights loaded."""
    import torch
    from brevitas import nn as qnn
    from brevitas.quant import Int8ActPerTensorFloat, Int8WeightPerChannelFloat, Int32Bias

    act = dict(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True)
    count = iter(range(len(weights)))

    def conv(cin, cout, k, stride=1, groups=1, relu=True):
        i = next(count)
        c = qnn.QuantConv2d(cin, cout, k, stride, k // 2, groups=groups, bias=True, weight_quant=Int8WeightPerChannelFloat,
                            bias_quant=Int32Bias, return_quant_tensor=True)
        c.weight.data, c.bias.data = torch.from_numpy(weights[f"c{i}_w"]), torch.from_numpy(weights[f"c{i}_b"])
        return torch.nn.Sequential(c, qnn.QuantReLU(**act) if relu else qnn.QuantIdentity(**act))

    class Block(torch.nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            mid = cin * expand
            layers = [conv(cin, mid, 1)] if expand != 1 else []
            self.body = torch.nn.Sequential(*layers, conv(mid, mid, 3, stride, mid), conv(mid, cout, 1, relu=False))
            self.add = qnn.QuantIdentity(**act) if stride == 1 and cin == cout else None

        def forward(self, x):
            y = self.body(x)
            return self.add(x.value + y.value) if self.add is not None else y

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp, self.stem = qnn.QuantIdentity(**act), conv(1, 16, 3, 2)
            self.blocks = torch.nn.Sequential(*(Block(*b) for b in mbv2_tiny.BLOCKS))
            self.head, self.q2 = conv(32, 64, 1), qnn.QuantIdentity(**act)
            self.fc = qnn.QuantLinear(64, 10, bias=True, weight_quant=Int8WeightPerChannelFloat, bias_quant=Int32Bias)
            self.fc.weight.data, self.fc.bias.data = torch.from_numpy(weights["fc_w"]), torch.from_numpy(weights["fc_b"])
            self.out = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat)

        def forward(self, x):
            y = self.head(self.blocks(self.stem(self.inp(x))))
            return self.out(self.fc(self.q2(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))))

    return Net()


def brevitas_qat(model, train: tuple[np.ndarray, np.ndarray], out: Path, epochs: int = 1) -> Path:
    """The Brevitas copy of ``model`` fine-tuned quantization-aware (Adam 5e-4, batch 128, ``epochs`` on the float
    model's training images, seed 0), exported with export_onnx_qcdq (opset 13)."""
    import torch
    from brevitas.export import export_onnx_qcdq

    net = brevitas_network(mbv2_tiny.folded_weights(model)).train()
    opt = torch.optim.Adam(net.parameters(), 5e-4)
    xs, ys = _real(train[0]), torch.from_numpy(train[1].astype(np.int64))
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(epochs):
        for idx in torch.randperm(len(xs), generator=gen).split(128):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xs[idx]), ys[idx]).backward()
            opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_onnx_qcdq(net.eval(), torch.zeros(1, 1, 28, 28), export_path=str(out), opset_version=13, dynamo=False)
    return out
