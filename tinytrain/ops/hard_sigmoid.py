"""Hard sigmoid, int8 -> int8: f(x) = max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid; MobileNetV3's
relu6(x + 3) / 6 is alpha 1/6, beta 1/2), a 256-entry table (tinytrain/tables.py): onnxruntime's float32
DequantizeLinear -> HardSigmoid -> QuantizeLinear. TFLite has no such builtin (converters write it as ADD, RELU6,
MUL), so only ONNX models import it.
"""

from __future__ import annotations

import numpy as np

from tinytrain import tables
from tinytrain.ir import QuantParams
from tinytrain.ops import OpDef, elementwise_min_read, elementwise_rows, no_macs


def onnx_table(xq: QuantParams, yq: QuantParams, alpha: float, beta: float, lo: float | None = None,
               hi: float | None = None) -> tuple[int, ...]:
    a, b = np.float32(alpha), np.float32(beta)

    def f(x):
        return np.minimum(np.maximum(x * a + b, np.float32(0)), np.float32(1))
    return tables.float32_table(f, xq, yq, lo, hi)


OP = OpDef("hard_sigmoid", tables.TableAttrs, tables.infer_shapes, tables.reference, no_macs,
           backward=tables.backward, min_read=elementwise_min_read, rows=elementwise_rows)
