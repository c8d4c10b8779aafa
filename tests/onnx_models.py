"""Small models exported to ONNX and quantized by onnxruntime, for the frontend tests.

``build_quantized(tmpdir)`` writes a MobileNetV2-style torch network (stem conv, inverted-residual
blocks with expand 1x1 / depthwise 3x3 stride 1 and 2 / project 1x1 and residual adds, ReLU6,
global average pool, flatten, Linear; 64x64 input, random BatchNorm statistics) as

- ``mbv2_float.onnx``: ``torch.onnx.export(..., dynamo=True, opset_version=18)`` of the eval-mode
  model with BatchNorm folded into the convolutions, then onnxscript's optimizer (constant folding);
- ``mbv2_qdq.onnx``: ``quantize_static`` with ``QuantFormat.QDQ``, per-channel int8 weights, int8
  activations;
- ``mbv2_qop.onnx``: the same with ``QuantFormat.QOperator``;

calibrated on seeded random inputs (the distribution the tests use). ``quantize(..., "uint8")``
makes the uint8-activation variants. ``build_patterns(tmpdir)`` quantizes two small onnx.helper
models covering the op patterns the MobileNet does not use. Exporting takes a few seconds, so the
tests build once per session.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

INPUT_SIZE = 64
NUM_CLASSES = 10
CALIBRATION_SAMPLES = 32
STEM = 16
SEED = 0
# (cin, cout, stride, expand) of the inverted-residual blocks
BLOCKS = ((16, 8, 1, 1), (8, 16, 2, 4), (16, 16, 1, 4), (16, 24, 2, 4), (24, 24, 1, 4))


def _torch_model(seed: int = 0):
    import torch
    from torch import nn

    class ConvBN(nn.Sequential):
        def __init__(self, cin, cout, k, stride=1, groups=1, act=True):
            layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
            if act:
                layers.append(nn.ReLU6())
            super().__init__(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            mid = cin * expand
            layers = [ConvBN(cin, mid, 1)] if expand != 1 else []
            layers += [ConvBN(mid, mid, 3, stride, groups=mid), ConvBN(mid, cout, 1, act=False)]
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.block(x)
            return x + y if self.residual else y

    class MobileNetV2Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(ConvBN(3, STEM, 3, 2), *(InvertedResidual(*b) for b in BLOCKS))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten(1)
            self.classifier = nn.Linear(BLOCKS[-1][1], NUM_CLASSES)

        def forward(self, x):
            return self.classifier(self.flatten(self.pool(self.features(x))))

    torch.manual_seed(seed)
    model = MobileNetV2Tiny()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def fold_batchnorm(model):
    """An eval-mode copy with every Conv2d -> BatchNorm2d pair folded into one biased Conv2d."""
    import torch
    from torch import nn

    model = copy.deepcopy(model).eval()
    for module in model.modules():
        if not isinstance(module, nn.Sequential):
            continue
        children = list(module.children())
        for i in range(len(children) - 1):
            conv, bn = children[i], children[i + 1]
            if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d):
                scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
                fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                                  conv.dilation, conv.groups, bias=True)
                with torch.no_grad():
                    fused.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
                    bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
                    fused.bias.copy_(bn.bias + (bias - bn.running_mean) * scale)
                module[i] = fused
                module[i + 1] = nn.Identity()
    return model


def random_inputs(n: int, seed: int, size: int | None = None) -> np.ndarray:
    size = size or INPUT_SIZE
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


def export_float(path: Path, size: int | None = None) -> Path:
    import torch

    model = fold_batchnorm(_torch_model(SEED))
    example = (torch.from_numpy(random_inputs(1, 123, size)),)
    program = torch.onnx.export(model, example, dynamo=True, opset_version=18, input_names=["input"],
                                output_names=["logits"], verbose=False)
    program.optimize()
    program.save(str(path))
    return path


def quantize(float_path: Path, out_path: Path, fmt: str, activation: str = "int8") -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            data = random_inputs(CALIBRATION_SAMPLES, 7)
            self._it = iter([{"input": data[i : i + 1]} for i in range(len(data))])

        def get_next(self):
            return next(self._it, None)

    quantize_static(str(float_path), str(out_path), Reader(),
                    quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                    per_channel=True,
                    activation_type=QuantType.QInt8 if activation == "int8" else QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return out_path


def build_quantized(tmpdir: Path) -> dict[str, Path]:
    """Float, QDQ and QOperator (int8 activations) MobileNetV2-style models in ``tmpdir``."""
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
    tmpdir = Path(tmpdir)
    float_path = export_float(tmpdir / "mbv2_float.onnx")
    return {
        "float": float_path,
        "qdq": quantize(float_path, tmpdir / "mbv2_qdq.onnx", "qdq"),
        "qop": quantize(float_path, tmpdir / "mbv2_qop.onnx", "qop"),
    }


# --------------------------------------------------------------------------- small hand-built float models


def _pattern_models() -> dict:
    """Float ONNX models (onnx.helper) covering the op patterns the MobileNet does not use."""
    import onnx
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    rng = np.random.RandomState(0)

    def init(name, *shape, s=0.3):
        return nh.from_array((rng.randn(*shape) * s).astype(np.float32), name)

    def model(nodes, inits, in_shape, out_shape):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 9
        onnx.checker.check_model(m)
        return m

    # convolution variants: auto_pad SAME_UPPER + stride 2, Clip(0, 6), dilation, Relu, depthwise with
    # channel multiplier 2, residual Add + Relu, GlobalAveragePool, Squeeze, Gemm with transB = 0
    convs = model(
        [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], strides=[2, 2], auto_pad="SAME_UPPER"),
         helper.make_node("Clip", ["c1", "zero", "six"], ["r1"]),
         helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], dilations=[2, 2], pads=[2, 2, 2, 2]),
         helper.make_node("Relu", ["c2"], ["r2"]),
         helper.make_node("Conv", ["r2", "W3", "B3"], ["d"], group=8, pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["d", "W4", "B4"], ["e"]),
         helper.make_node("Add", ["d", "e"], ["a"]),
         helper.make_node("Relu", ["a"], ["ra"]),
         helper.make_node("GlobalAveragePool", ["ra"], ["g"]),
         helper.make_node("Squeeze", ["g", "axes"], ["s"]),
         helper.make_node("Gemm", ["s", "G", "GB"], ["y"])],
        [init("W1", 8, 3, 3, 3), init("B1", 8, s=0.1), init("W2", 8, 8, 3, 3, s=0.15), init("B2", 8, s=0.1),
         init("W3", 16, 1, 3, 3), init("B3", 16, s=0.1), init("W4", 16, 16, 1, 1), init("B4", 16, s=0.1),
         init("G", 16, 5), init("GB", 5, s=0.1), nh.from_array(np.array(0, np.float32), "zero"),
         nh.from_array(np.array(6, np.float32), "six"), nh.from_array(np.array([2, 3], np.int64), "axes")],
        [1, 3, 9, 9], [1, 5])
    # pooling and friends: Pad, AveragePool, GlobalAveragePool, Flatten, MatMul + Add, Softmax
    pools = model(
        [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Pad", ["r", "pads"], ["p"]),
         helper.make_node("AveragePool", ["p"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("GlobalAveragePool", ["ap"], ["g"]),
         helper.make_node("Flatten", ["g"], ["f"]),
         helper.make_node("MatMul", ["f", "M"], ["mm"]),
         helper.make_node("Add", ["mm", "MB"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["y"])],
        [init("W", 8, 3, 3, 3), init("B", 8, s=0.1), init("M", 8, 5), init("MB", 5, s=0.1),
         nh.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")],
        [1, 3, 8, 8], [1, 5])
    return {"convs": convs, "pools": pools}


def build_patterns(tmpdir: Path) -> dict[str, Path]:
    """The pattern models quantized by quantize_static in several flavours.

    Keys: ``{convs,pools}_{qdq,qop}_{int8,int8sym,uint8}``. Symmetric int8 activations make onnxruntime
    keep Relu / Clip as separate nodes (an asymmetric range absorbs them into the quantization).
    """
    import logging

    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    logging.getLogger().setLevel(logging.ERROR)
    tmpdir = Path(tmpdir)
    out = {}
    for name, m in _pattern_models().items():
        float_path = tmpdir / f"{name}_float.onnx"
        onnx.save(m, float_path)
        shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]

        class Reader(CalibrationDataReader):
            def __init__(self):
                data = np.random.default_rng(11).standard_normal((CALIBRATION_SAMPLES, *shape[1:])).astype(np.float32)
                self._it = iter([{"x": data[i : i + 1]} for i in range(len(data))])

            def get_next(self):
                return next(self._it, None)

        for fmt in ("qdq", "qop"):
            for act in ("int8", "int8sym", "uint8"):
                path = tmpdir / f"{name}_{fmt}_{act}.onnx"
                quantize_static(str(float_path), str(path), Reader(),
                                quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                                per_channel=True,
                                activation_type=QuantType.QUInt8 if act == "uint8" else QuantType.QInt8,
                                weight_type=QuantType.QInt8,
                                extra_options={"ActivationSymmetric": act == "int8sym"})
                out[f"{name}_{fmt}_{act}"] = path
        out[f"{name}_float"] = float_path
    return out


def write_tiny_task(d: Path) -> Path:
    """``d``/tiny.onnx (the tiny MobileNetV2-shaped test model) and ``d``/tiny.npz (40 learnable 2-class images):
    the small search / API task of the plan tests."""
    from ir_builders import tiny_mobilenet
    from tinytrain.export_onnx import graph_to_onnx, save_onnx

    g, _ = tiny_mobilenet(seed=0)
    save_onnx(graph_to_onnx(g), d / "tiny.onnx")
    rng = np.random.default_rng(0)
    y = np.arange(40) % 2
    x = rng.integers(0, 256, (40, 16, 16, 3)).astype(np.uint8)
    x[y == 1, :8] //= 2
    np.savez(d / "tiny.npz", x=x, y=y)
    return d
