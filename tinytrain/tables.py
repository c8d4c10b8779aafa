"""Elementwise int8 ops as 256-entry tables (ops/hard_swish.py, ops/logistic.py, ops/hard_sigmoid.py).

An int8 -> int8 elementwise op is a function of the input's int8 value alone, so its spec is a table of the 256
outputs, computed when the model is imported by a faithful port of the source runtime's arithmetic (TFLite Micro's
fixed point, or onnxruntime's float32 DequantizeLinear -> op -> QuantizeLinear); the simulator and the C both look
the value up (``y = table[x + 128]``), so they agree bit for bit by construction.

The backward is fp32 on the saved int8 input: g_x = g * slope[x + 128], where slope[q] is the real function's
derivative at the dequantized input, 0 where the int8 output sits on the int8 range's bounds (the straight-through
clamp convention of ops/clamp_mask.py). One float32 product per element (ops/table_grad.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tinytrain.ir import QuantParams

INT8_VALUES = np.arange(-128, 128, dtype=np.int64)


@dataclass(frozen=True)
class TableAttrs:
    """``table``: the int8 output for each int8 input -128 .. 127; ``derivative``: the real function's (for the
    backward), by name in ``DERIVATIVES``; ``alpha`` / ``beta``: its parameters (hard sigmoid)."""

    table: tuple[int, ...]
    derivative: str
    alpha: float = 0.0
    beta: float = 0.0

    def __post_init__(self) -> None:
        if len(self.table) != 256 or not all(-128 <= v <= 127 for v in self.table):
            raise ValueError(f"a table op needs 256 int8 outputs, got {len(self.table)}")
        if self.derivative not in DERIVATIVES:
            raise ValueError(f"unknown derivative {self.derivative!r}")


def _hard_swish_slope(r: np.ndarray, a: TableAttrs) -> np.ndarray:
    return np.where(r < -3.0, 0.0, np.where(r > 3.0, 1.0, (2.0 * r + 3.0) / 6.0))


def _logistic_slope(r: np.ndarray, a: TableAttrs) -> np.ndarray:
    s = 1.0 / (1.0 + np.exp(-r))
    return s * (1.0 - s)


def _hard_sigmoid_slope(r: np.ndarray, a: TableAttrs) -> np.ndarray:
    t = a.alpha * r + a.beta
    return np.where((t > 0.0) & (t < 1.0), a.alpha, 0.0)


DERIVATIVES: dict[str, Callable[[np.ndarray, TableAttrs], np.ndarray]] = {
    "hard_swish": _hard_swish_slope, "logistic": _logistic_slope, "hard_sigmoid": _hard_sigmoid_slope}


def infer_shapes(a: TableAttrs, ins) -> list[tuple[int, ...]]:
    return [ins[0].shape]


def reference(a: TableAttrs, arrays, ins, outs) -> list[np.ndarray]:
    return [np.asarray(a.table, np.int8)[arrays[0].astype(np.int64) + 128]]


def slope_table(a: TableAttrs, xq: QuantParams) -> tuple[float, ...]:
    """float32 g_x / g for each int8 input value (0 where the output is on an int8 bound)."""
    real = (INT8_VALUES - xq.zp) * xq.s
    slope = np.where(np.isin(np.asarray(a.table), (-128, 127)), 0.0, DERIVATIVES[a.derivative](real, a))
    return tuple(float(v) for v in slope.astype(np.float32))


def backward(b, node, out_grads) -> list[str | None]:
    from tinytrain.ops.table_grad import TableGradAttrs

    x = node.inputs[0]
    if not b.needs_grad(x):
        return [None]
    attrs = TableGradAttrs(slope_table(node.attrs, b.tensor(x).quant))
    return [b.emit("table_grad", [out_grads[0], x], attrs, f"{node.name}.grad_input")[0]]


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
