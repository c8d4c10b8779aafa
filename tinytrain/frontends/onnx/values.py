"""What an ONNX value is during conversion, and how ONNX shapes map to the IR's layout.

Every ONNX value is an :class:`Act` (an integer activation backed by an IR int8 tensor), an
:class:`FVal` (a float value, possibly a lazy :class:`Pending` computation) or a
:class:`SoftmaxOut`; see onnx_convert. ONNX rank-4 tensors are NCHW, their IR tensors NHWC; other
ranks keep their layout.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from tinytrain.frontends.onnx.constants import QConst
from tinytrain.ir import QuantParams


@dataclass
class Act:
    """An integer activation of the ONNX graph and the IR int8 tensor holding it."""

    ir: str
    shape: tuple[int, ...]  # ONNX shape (batch 1), NCHW for rank 4
    dtype: str  # ONNX element type: "int8" or "uint8"
    quant: QuantParams | None = None  # IR (int8) quantization; None only for an int graph input not yet used
    gain: tuple[float, ...] | None = None  # quantized per channel: real = nominal * gain[c] (channels.py)


@dataclass
class Pending:
    """A float computation on dequantized inputs waiting for the QuantizeLinear that fixes its output.

    ``op`` is "clamp" (a standalone Relu / Clip) or "reshape" (a reshape of the pending ``args["inner"]``), the
    converter's own, or names an op whose handler deferred it (ops/<op>.py): ``emit(converter, pending, yq,
    out_hint)`` then emits it once yq is known and returns its output's IR tensor. ``reopens``: a later standalone
    clamp or constant add may re-emit it (the layers with a fused clamp range); a pending whose args hold
    ``x``, ``w`` and ``bias`` (a convolution, a fully-connected layer) can fold a constant add into its bias."""

    op: str
    shape: tuple[int, ...]  # ONNX shape of the float result
    args: dict[str, Any]
    source: str  # ONNX node (for messages)
    lo: float | None = None  # real clamp range (fused Relu / Clip)
    hi: float | None = None
    emit: Callable[[Any, "Pending", QuantParams, str], str] | None = None
    reopens: bool = False

    @property
    def has_bias(self) -> bool:
        return {"x", "w", "bias"} <= set(self.args)

    def clamped(self, lo: float | None, hi: float | None) -> Pending:
        new_lo = lo if self.lo is None else (self.lo if lo is None else max(lo, self.lo))
        new_hi = hi if self.hi is None else (self.hi if hi is None else min(hi, self.hi))
        if self.op == "reshape":
            return replace(self, args={**self.args, "inner": self.args["inner"].clamped(lo, hi)})
        return replace(self, lo=new_lo, hi=new_hi)


@dataclass
class FVal:
    """A float value of the ONNX graph."""

    kind: str  # input | dq | qconst | fconst | pending | softmax
    act: Act | None = None
    qconst: QConst | None = None
    array: np.ndarray | None = None
    pending: Pending | None = None
    source: str = ""


@dataclass
class SoftmaxOut:
    """The quantized output of a Softmax: only allowed to reach the graph output (then dropped)."""

    act: Act
    source: str


def ir_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """ONNX shape -> IR shape (NCHW -> NHWC for rank 4)."""
    if len(shape) == 4:
        n, c, h, w = shape
        return (n, h, w, c)
    return tuple(shape)


def onnx_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) == 4:
        n, h, w, c = shape
        return (n, c, h, w)
    return tuple(shape)


def _to_ir_layout(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


def reshape_keeps_order(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether an ONNX reshape src -> dst is a plain byte-preserving reshape of the IR tensors."""
    n = int(np.prod(src))
    if len(src) != 4 and len(dst) != 4:
        return True
    idx = np.arange(n, dtype=np.int64).reshape(src)
    return np.array_equal(_to_ir_layout(idx).ravel(), _to_ir_layout(idx.reshape(dst)).ravel())


def same_quant(a: QuantParams, b: QuantParams) -> bool:
    return np.float32(a.s) == np.float32(b.s) and a.zp == b.zp
