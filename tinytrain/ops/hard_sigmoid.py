"""Hard sigmoid, int8 -> int8: f(x) = max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid; MobileNetV3's
relu6(x + 3) / 6 is alpha 1/6, beta 1/2), a 256-entry table (tinytrain/tables.py): onnxruntime's float32
DequantizeLinear -> HardSigmoid -> QuantizeLinear. TFLite has no such builtin (converters write it as ADD, RELU6,
MUL), so only ONNX models import it.
"""

from __future__ import annotations

import numpy as np

from tinytrain import tables
from tinytrain.ir import QuantParams
from tinytrain.ops import OpDef, OpDoc, elementwise_min_read, elementwise_rows, no_macs


def onnx_table(xq: QuantParams, yq: QuantParams, alpha: float, beta: float, lo: float | None = None,
               hi: float | None = None) -> tuple[int, ...]:
    a, b = np.float32(alpha), np.float32(beta)

    def f(x):
        return np.minimum(np.maximum(x * a + b, np.float32(0)), np.float32(1))
    return tables.float32_table(f, xq, yq, lo, hi)


def slope(r: np.ndarray, a: tables.TableAttrs) -> np.ndarray:
    t = a.alpha * r + a.beta
    return np.where((t > 0.0) & (t < 1.0), a.alpha, 0.0)


# ---- the importer, the exporter, the twin (ops/__init__.py: hooks) -----------------------------------------------


def onnx_hard_sigmoid(cv, node) -> None:
    a = cv.attrs(node)
    alpha, beta = (float(np.float32(a.get(k, d))) for k, d in (("alpha", 0.2), ("beta", 0.5)))  # float attributes

    def make(xq, yq, lo, hi):
        return onnx_table(xq, yq, alpha, beta, lo, hi)
    tables.onnx_defer(cv, node, "hard_sigmoid", make, alpha=alpha, beta=beta)


def export(ex, n) -> None:
    tables.export_as(ex, n, "HardSigmoid", alpha=float(n.attrs.alpha), beta=float(n.attrs.beta))


def twin(t, node, xs, params, clamp):
    return t.torch.clamp(xs[0] * node.attrs.alpha + node.attrs.beta, 0.0, 1.0)


ONNX = {"HardSigmoid": onnx_hard_sigmoid}
DOC = OpDoc("— (converters write ADD, RELU6, MUL)", "HardSigmoid (alpha, beta)", "256-entry table", "g * slope[x]",
            "input (int8)")
OP = OpDef("hard_sigmoid", tables.TableAttrs, tables.infer_shapes, tables.reference, no_macs,
           backward=tables.backward_with(slope), min_read=elementwise_min_read, rows=elementwise_rows, export=export,
           twin=twin, doc=DOC)
