"""The backward of the table ops (tinytrain/tables.py): g_x = g * slope[x + 128], one float32 product per element,
x the saved int8 input."""

from __future__ import annotations


import numpy as np

from tinytrain.ops import OpDef, elementwise_min_read, no_macs
from tinytrain.tables import TableGradAttrs


def infer_shapes(a: TableGradAttrs, ins) -> list[tuple[int, ...]]:
    g, x = ins
    if g.shape != x.shape or len(a.slope) != 256:
        raise ValueError(f"table_grad: gradient {g.shape}, input {x.shape}, {len(a.slope)} slopes")
    return [g.shape]


def reference(a: TableGradAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g, x = arrays
    return [(g.astype(np.float32) * np.asarray(a.slope, np.float32)[x.astype(np.int64) + 128]).astype(np.float32)]


def bound(a: TableGradAttrs, ins, bounds) -> list[float]:
    return [bounds[0] * float(np.max(np.abs(a.slope)))]


OP = OpDef("table_grad", TableGradAttrs, infer_shapes, reference, no_macs, min_read=elementwise_min_read,
           bound=bound)
