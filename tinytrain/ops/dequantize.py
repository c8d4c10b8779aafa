"""int8 -> float32: x = (q - zp) * s, computed in float32."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, no_macs


@dataclass(frozen=True)
class DequantizeAttrs:
    pass


def infer_shapes(a: DequantizeAttrs, ins) -> list[tuple[int, ...]]:
    return [ins[0].shape]


def reference(a: DequantizeAttrs, arrays, ins, outs) -> list[np.ndarray]:
    q = ins[0].quant
    return [(arrays[0].astype(np.int32) - np.int32(q.zp)).astype(np.float32) * np.float32(q.s)]


def export(ex, n) -> None:
    s, z = ex.act_qparams(ex.g.tensors[n.inputs[0]])
    ex.names[n.outputs[0]] = ex.node("DequantizeLinear", [ex.names[n.inputs[0]], s, z], "", n.name,
                                     output=n.outputs[0])


def twin(t, node, xs, params, clamp):
    return xs[0]


OP = OpDef("dequantize", DequantizeAttrs, infer_shapes, reference, no_macs, export=export, twin=twin,
           after_logits=True)
