"""Build the LiteRT-torch (PT2E int8 -> TFLite) fixtures of the quantizer zoo with LiteRT-torch itself.

Run in LiteRT-torch's own environment (its pins conflict with the project's dev extras):

    python3.11 -m venv /work/venv-litert && /work/venv-litert/bin/pip install torch==2.13.0 && \
        /work/venv-litert/bin/pip install litert-torch==0.10.0
    /work/venv-litert/bin/python tests/quantizers/make_litert.py [OUT_DIR]

Recipe (what a user of LiteRT-torch writes): ``torch.export.export(model, args).module()``, then torchao's
``prepare_pt2e`` with LiteRT-torch's ``PT2EQuantizer().set_global(get_symmetric_quantization_config(
is_per_channel=True, is_dynamic=False))``, 16 seeded calibration batches, ``convert_pt2e(fold_quantize=False)``, and
``litert_torch.convert(m, args, quant_config=QuantConfig(pt2e_quantizer=quantizer))``. The models take NCHW float
input (PyTorch's layout), so the export starts with a TRANSPOSE to NHWC; LiteRT-torch leaves each residual ADD and
what follows it up to the next QUANTIZE in float.

Models (float weights from ``torch.manual_seed(0)``, calibration from numpy's ``default_rng(1)``, inputs in [0, 1)):
- ``litert_mbv2.tflite``: a MobileNetV2-style net, 3x16x16 input: Conv 3x3/2 + ReLU6, two inverted residual blocks
  (1x1 expand + ReLU6, depthwise 3x3 + ReLU6, 1x1 project, the residual add), the 1x1 head conv + ReLU6 (as
  MobileNetV2 ends), global mean, Linear 3 classes;
- ``litert_cnn.tflite``: a small CNN, 3x16x16 input: Conv 3x3/2 + ReLU, Conv 3x3/2 + ReLU, global mean, Linear;
- ``litert_pooled_residual.tflite``: the MobileNetV2-style net without its head conv: the last residual ADD is pooled
  in float (ADD -> TRANSPOSE -> MEAN -> QUANTIZE), refused.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
SIZE = 16


class _InvertedResidual(nn.Module):
    def __init__(self, c: int, expand: int):
        super().__init__()
        h = c * expand
        self.body = nn.Sequential(nn.Conv2d(c, h, 1), nn.ReLU6(), nn.Conv2d(h, h, 3, padding=1, groups=h), nn.ReLU6(),
                                  nn.Conv2d(h, c, 1))

    def forward(self, x):
        return x + self.body(x)


class MobileNetV2ish(nn.Module):
    def __init__(self, head: bool = True):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU6())
        self.blocks = nn.Sequential(_InvertedResidual(8, 2), _InvertedResidual(8, 2))
        self.head = nn.Sequential(nn.Conv2d(8, 16, 1), nn.ReLU6()) if head else nn.Identity()
        self.fc = nn.Linear(16 if head else 8, 3)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(self.body(x).mean((2, 3)))


MODELS = {"litert_mbv2": MobileNetV2ish, "litert_cnn": SmallCnn,
          "litert_pooled_residual": lambda: MobileNetV2ish(head=False)}


def convert(model: nn.Module) -> bytes:
    """The PT2E int8 recipe of the module docstring; the .tflite bytes."""
    import litert_torch
    from litert_torch.quantize import pt2e_quantizer
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e import quantize_pt2e

    args = (torch.zeros(1, 3, SIZE, SIZE),)
    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
        pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
    m = quantize_pt2e.prepare_pt2e(torch.export.export(model.eval(), args).module(), quantizer)
    rng = np.random.default_rng(1)
    for _ in range(16):
        m(torch.from_numpy(rng.random((1, 3, SIZE, SIZE), np.float32)))
    m = quantize_pt2e.convert_pt2e(m, fold_quantize=False)
    edge = litert_torch.convert(m, args, quant_config=QuantConfig(pt2e_quantizer=quantizer))
    return bytes(edge.model_content())


def build(out: Path = HERE) -> dict[str, Path]:
    paths = {}
    for name, make in MODELS.items():
        torch.manual_seed(0)
        paths[name] = out / f"{name}.tflite"
        paths[name].write_bytes(convert(make()))
    return paths


if __name__ == "__main__":
    for name, path in build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE).items():
        print(f"{path} ({path.stat().st_size} bytes)")
