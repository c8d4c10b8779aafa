"""float32 -> int8: q = clamp(round(x / s) + zp). ONNX rounds half to even, TFLite half away from zero."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, no_macs


@dataclass(frozen=True)
class QuantizeAttrs:
    half_to_even: bool = True


def infer_shapes(a: QuantizeAttrs, ins) -> list[tuple[int, ...]]:
    return [ins[0].shape]


def reference(a: QuantizeAttrs, arrays, ins, outs) -> list[np.ndarray]:
    q = outs[0].quant
    v = arrays[0].astype(np.float32) / np.float32(q.s)
    # Half away from zero in float64: floor(|v| + 0.5) in float32 would round 0.49999997 up.
    r = np.rint(v) if a.half_to_even else np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)
    return [np.clip(r.astype(np.float64) + q.zp, -128, 127).astype(np.int8)]


def export(ex, n) -> None:
    ex.q(ex.names[n.inputs[0]], n.outputs[0], n.name)


OP = OpDef("quantize", QuantizeAttrs, infer_shapes, reference, no_macs, export=export)
