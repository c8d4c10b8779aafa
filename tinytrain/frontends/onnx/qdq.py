"""ONNX QDQ models (onnxruntime ``quantize_static(..., quant_format=QuantFormat.QDQ)``) -> the int8 IR.

The graph is float ops between DequantizeLinear (DQ) and QuantizeLinear (Q) nodes:
``float input -> Q -> (DQ -> op -> Q)* -> DQ -> output``. The IR input is the int8 (or uint8) tensor
after the first Q, the IR output the integer tensor before the final DQ. A float op on dequantized inputs becomes a
pending computation its Q emits (convert.py); the ops' own handlers (``ONNX`` of ``tinytrain/ops/<op>.py``) read

- ``DQ(x), DQ(w int8 per-channel axis 0), DQ(b int32) -> Conv [-> Relu | Clip] -> Q``: conv2d
  (group 1 or depthwise; pads / strides / dilations / auto_pad); the activation becomes the clamp
  range. onnxruntime usually removes Relu/Clip(0, 6) when the Q range already implies it (zero
  point at the bottom of the int8 range, calibrated max <= 6): the Q range is then the clamp;
- ``Gemm`` and ``MatMul`` (an optional constant ``Add`` folds into the bias) -> fully_connected;
- ``Add`` of two DQ activations -> add; ``Mul`` -> mul; ``Concat`` -> concat; ``MaxPool`` -> max_pool2d;
  ``HardSwish`` / ``Sigmoid`` / ``HardSigmoid`` -> their tables;
- ``GlobalAveragePool`` / ``ReduceMean`` over H, W -> mean; ``AveragePool`` -> avg_pool2d;
- ``Flatten`` / ``Reshape`` / ``Squeeze`` / ``Unsqueeze`` when NCHW -> NHWC does not change the
  element order (spatial 1x1); ``Pad`` (constant zero);

and the converter's own: Q / DQ / Identity and a trailing ``Softmax`` (dropped; the IR outputs the logits:
boundary.py), standalone ``Relu`` / ``Clip`` (clamp.py; a Clip between Q and DQ clips integers), a
``BatchNormalization`` after a Conv (folded into it: batchnorm.py, fold.py), ``Transpose`` to NHWC and back around
per-channel constant ops (layout.py).
"""

from __future__ import annotations

from tinytrain.frontends.onnx import batchnorm, boundary, clamp, layout
from tinytrain.frontends.onnx.convert import Handler
from tinytrain.ops import declared


def handlers() -> dict[str, Handler]:
    """ONNX op type -> handler of the QDQ reader."""
    return {**boundary.HANDLERS, **clamp.HANDLERS, **batchnorm.HANDLERS, **layout.HANDLERS, **declared("ONNX")}
