"""The converter's handler of ``Transpose`` between NCHW and NHWC, as PyTorch exports write them around per-channel
constant ops (``x.permute(0, 2, 3, 1) * scale + shift``, then ``.permute(0, 3, 1, 2)``).

The IR is NHWC whatever the ONNX layout, so a Transpose [0, 2, 3, 1] of a rank-4 value changes only how the ONNX
graph indexes it: the value is recorded as a :class:`Permuted` view of its NCHW self, and the Transpose
[0, 3, 1, 2] back returns that self. On the way, a Mul / Div / Add / Sub with a constant folds into the layer
before (fold.py; a constant broadcast along the last, channel, axis of the view is that layer's per-channel
constant), and QuantizeLinear / DequantizeLinear apply to the value inside (``through_view``). Any other op
reading a view is refused, naming the Transpose, as is any other permutation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from tinytrain.frontends.onnx.parse import attrs_of, node_label

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


@dataclass
class Permuted:
    """An ONNX value that is the NHWC transpose of ``inner`` (an Act or FVal in NCHW terms)."""

    inner: Any
    source: str  # the Transpose (for messages)


def nchw_constant(c: np.ndarray) -> np.ndarray:
    """A constant broadcast against an NHWC view as the same constant against the NCHW value."""
    c = np.asarray(c, np.float64)
    if c.ndim > 4:
        return c
    return np.transpose(c.reshape((1,) * (4 - c.ndim) + c.shape), TO_NCHW)


def h_transpose(cv, node: onnx.NodeProto) -> None:
    perm = list(attrs_of(node).get("perm", []))
    v = cv.value(node, 0)
    label = node_label(node)
    if isinstance(v, Permuted) and perm == TO_NCHW:
        cv.values[node.output[0]] = v.inner
        return
    if not isinstance(v, Permuted) and perm == TO_NHWC and len(_shape(v)) == 4:
        cv.values[node.output[0]] = Permuted(v, label)
        return
    raise cv.unsupported(f"{label} permutes '{node.input[0]}' by {perm or 'reversing its axes'}; tinytrain takes "
                         f"only the NCHW -> NHWC [0, 2, 3, 1] transpose of a 4-D activation and the [0, 3, 1, 2] back "
                         f"(with per-channel constant Mul / Add / Sub between them); export without the others")


def _shape(v) -> tuple[int, ...]:
    for holder in (v, getattr(v, "act", None), getattr(v, "pending", None)):
        if holder is not None and getattr(holder, "shape", None) is not None:
            return holder.shape
    return ()


def through_view(handler):
    """``handler`` (QuantizeLinear / DequantizeLinear) applied to the NCHW value inside a view, its result a view."""
    def h(cv, node: onnx.NodeProto) -> None:
        v = cv.values.get(node.input[0])
        if not isinstance(v, Permuted):
            handler(cv, node)
            return
        inner = onnx.NodeProto()
        inner.CopyFrom(node)
        inner.input[0], inner.output[0] = node.input[0] + "_nchw", node.output[0] + "_nchw"
        cv.values[inner.input[0]] = v.inner
        handler(cv, inner)
        cv.values[node.output[0]] = Permuted(cv.values[inner.output[0]], v.source)
    return h


HANDLERS = {"Transpose": h_transpose}
