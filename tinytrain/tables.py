"""Elementwise int8 ops as 256-entry tables (ops/hard_swish.py, ops/logistic.py, ops/hard_sigmoid.py, ...): what
the table ops share, their arithmetic and their hooks' common parts.

An int8 -> int8 elementwise op is a function of the input's int8 value alone, so its spec is a table of the 256
outputs, computed when the model is imported by a faithful port of the source runtime's arithmetic (TFLite Micro's
fixed point, or onnxruntime's float32 DequantizeLinear -> op -> QuantizeLinear); the simulator and the C both look
the value up (``y = table[x + 128]``), so they agree bit for bit by construction.

The backward is fp32 on the saved int8 input: g_x = g * slope[x + 128], where slope[q] is the real function's
derivative at the dequantized input, 0 where the int8 output sits on the int8 range's bounds (the straight-through
clamp convention of ops/clamp_mask.py). One float32 product per element (ops/table_grad.py). Each table op's module
gives its derivative (``backward_with``).

Imports: ONNX DequantizeLinear -> op -> (Relu / Clip) -> QuantizeLinear becomes the table of that float32
computation (``onnx_defer``), a QOperator kernel the table of its own (``onnx_qlinear``), a TFLite builtin the table
of the runtime's arithmetic (``tflite_read``); exported as the ONNX float op between DequantizeLinear and
QuantizeLinear (``export_as``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.ir import QuantParams

INT8_VALUES = np.arange(-128, 128, dtype=np.int64)


@dataclass(frozen=True)
class TableAttrs:
    """``table``: the int8 output for each int8 input -128 .. 127; ``derivative``: the op whose table it is (its
    module's backward has the real function's derivative); ``alpha`` / ``beta``: the function's parameters."""

    table: tuple[int, ...]
    derivative: str
    alpha: float = 0.0
    beta: float = 0.0

    def __post_init__(self) -> None:
        if len(self.table) != 256 or not all(-128 <= v <= 127 for v in self.table):
            raise ValueError(f"a table op needs 256 int8 outputs, got {len(self.table)}")


@dataclass(frozen=True)
class TableGradAttrs:
    """The attributes of ``table_grad`` (ops/table_grad.py), the backward of every table op."""

    slope: tuple[float, ...]  # 256 float32 values, by int8 input value + 128


Slope = Callable[[np.ndarray, TableAttrs], np.ndarray]  # the real function's derivative at real inputs


def infer_shapes(a: TableAttrs, ins) -> list[tuple[int, ...]]:
    return [ins[0].shape]


def reference(a: TableAttrs, arrays, ins, outs) -> list[np.ndarray]:
    return [np.asarray(a.table, np.int8)[arrays[0].astype(np.int64) + 128]]


def slope_table(a: TableAttrs, xq: QuantParams, slope: Slope) -> tuple[float, ...]:
    """float32 g_x / g for each int8 input value (0 where the output is on an int8 bound)."""
    real = (INT8_VALUES - xq.zp) * xq.s
    values = np.where(np.isin(np.asarray(a.table), (-128, 127)), 0.0, slope(real, a))
    return tuple(float(v) for v in values.astype(np.float32))


def backward_with(slope: Slope):
    """The backward rule of a table op whose real function has derivative ``slope``: g_x = g * slope[x + 128]."""
    def backward(b, node, out_grads) -> list[str | None]:
        x = node.inputs[0]
        if not b.needs_grad(x):
            return [None]
        attrs = TableGradAttrs(slope_table(node.attrs, b.tensor(x).quant, slope))
        return [b.emit("table_grad", [out_grads[0], x], attrs, f"{node.name}.grad_input")[0]]
    return backward


def float32_table(fn: Callable[[np.ndarray], np.ndarray], xq: QuantParams, yq: QuantParams,
                  lo: float | None = None, hi: float | None = None) -> tuple[int, ...]:
    """onnxruntime's DequantizeLinear -> fn -> (Relu / Clip) -> QuantizeLinear in float32: x_real = (x - zx) * sx,
    y = saturate(round_half_even(fn(x_real) / sy) + zy). ``fn`` maps float32 to float32."""
    real = np.float32(INT8_VALUES - xq.zp) * np.float32(xq.s)
    y = np.asarray(fn(real), np.float32)
    if lo is not None:
        y = np.maximum(y, np.float32(lo))
    if hi is not None:
        y = np.minimum(y, np.float32(hi))
    q = np.rint(y / np.float32(yq.s)).astype(np.int64) + yq.zp
    return tuple(int(v) for v in np.clip(q, -128, 127))


# ---- the hooks' common parts (ops/__init__.py) --------------------------------------------------------------------


def onnx_emit(cv, p, yq, out_hint: str) -> str:
    """The table of DequantizeLinear -> op -> (Relu / Clip) -> QuantizeLinear in onnxruntime's float32 arithmetic,
    once QuantizeLinear fixes the output: ``p.args["make"](xq, yq, lo, hi)``."""
    a = p.args
    table = a["make"](cv.tensors[a["x"]].quant, yq, p.lo, p.hi)
    attrs = TableAttrs(table, a["kind"], a.get("alpha", 0.0), a.get("beta", 0.0))
    return cv.add_node(a["kind"], p.source, [a["x"]], out_hint, yq, attrs, p.source)


def onnx_defer(cv, node, kind: str, make, **params) -> None:
    """DQ(x) -> the float op ``kind``: deferred to its QuantizeLinear (``make(xq, yq, lo, hi)`` gives the table)."""
    x = cv.dq_input(node, 0)
    cv.defer(node, kind, x.shape, onnx_emit, x=x.ir, kind=kind, make=make, **params)


def onnx_qlinear(cv, node, kind: str, make) -> None:
    """A com.microsoft QLinear table op (X, X_scale, X_zp, Y_scale, Y_zp): onnxruntime's table of the float op."""
    x = cv.qlinear_input(node, 0, 1, 2)
    yq, dtype = cv.qlinear_output(node, 3, 4)
    p = cv.defer(node, kind, x.shape, onnx_emit, x=x.ir, kind=kind, make=make)
    cv.set_output(node, cv.materialize(p, yq, node.output[0]), dtype)


def tflite_read(im, op, kind: str, make, alpha: float = 0.0) -> None:
    """A TFLite builtin as the table ``make(xq, yq)`` of the runtime's int8 kernel (``alpha``: its parameter)."""
    x, out = im.act(op.inputs[0]), im.out(op)
    if x.shape != out.shape:
        raise ModelError(f"operator {op.index} ({op.name}): input {list(x.shape)} and output {list(out.shape)} differ")
    try:
        table = make(x.quant, out.quant)
    except ValueError as e:
        raise UnsupportedModelError(f"operator {op.index} ({op.name}): {e}") from None
    im.node(op, kind, [x.name], [out.name], TableAttrs(table, kind, alpha))


def _scalar(im, op, index: int) -> tuple[int, QuantParams]:
    """A constant operand's int8 value and quantization (uint8 shifted by -128, as the importer shifts tensors)."""
    t = im.tensor(index)
    data = np.asarray(im.const_data(index, f"{op.name} constant", ("INT8", "UINT8"))).astype(np.int64)
    if t.quant is None:
        raise UnsupportedModelError(f"operator {op.index} ({op.name}): constant {t.name!r} has no quantization; "
                                    "quantize the model fully to int8")
    if data.size == 0 or (data != data.ravel()[0]).any() or len(set(t.quant.scale)) != 1:
        raise UnsupportedModelError(f"operator {op.index} ({op.name}) has a constant operand {t.name!r} of shape "
                                    f"{list(t.shape)} with different values per element; only a scalar constant is "
                                    "supported: fold it into the layer before it ahead of conversion")
    shift = 128 * (t.type == "UINT8")
    return int(data.ravel()[0]) - shift, QuantParams.per_tensor(float(t.quant.scale[0]),
                                                                  int(t.quant.zero_point[0]) - shift)


def real_affine(kind: str, x_first: bool, c_real: float) -> tuple[float, float]:
    """(alpha, beta) of the real y = alpha x + beta of x ``kind`` c (x_first) or c ``kind`` x."""
    if kind == "MUL":
        return c_real, 0.0
    if kind == "ADD":
        return 1.0, c_real
    return (1.0, -c_real) if x_first else (-1.0, c_real)


def tflite_const(im, op, make) -> None:
    """TFLite MUL / ADD / SUB of an activation and a scalar constant (either operand) as the ``const_affine`` table
    (ops/const_affine.py) ``make(x_first, xq, c, cq, yq, act)`` of the runtime's kernel on the constant's value c."""
    k = 0 if im.is_constant(op.inputs[0]) else 1
    if im.is_constant(op.inputs[1 - k]):
        raise UnsupportedModelError(f"operator {op.index} ({op.name}) has two constant operands; fold constants "
                                    "before conversion")
    c, cq = _scalar(im, op, op.inputs[k])
    x, out = im.act(op.inputs[1 - k]), im.out(op)
    if x.shape != out.shape:
        raise UnsupportedModelError(f"operator {op.index} ({op.name}): the activation {list(x.shape)} broadcasts to "
                                    f"{list(out.shape)}; only a scalar constant operand is supported")
    table = make(k == 1, x.quant, c, cq, out.quant, im.activation(op, out))
    alpha, beta = real_affine(op.name, k == 1, cq.s * (c - cq.zp))
    im.node(op, "const_affine", [x.name], [out.name], TableAttrs(table, "const_affine", alpha, beta))


def export_as(ex, n, op: str, **attrs) -> None:
    """Export a table op as the ONNX float op ``op`` between DequantizeLinear and QuantizeLinear (onnxruntime
    recomputes a TFLite import's fixed-point table in float32: up to 1 LSB apart)."""
    ex.q(ex.node(op, [ex.dq(n.inputs[0], n.name)], f"{n.outputs[0]}_float", n.name, **attrs), n.outputs[0], n.name)
