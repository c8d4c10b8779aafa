"""Activations quantized per channel (NNCF's default at a depthwise convolution's input: Conv -> Q(scale per
channel) -> DQ -> depthwise Conv), taken exactly where the arithmetic allows.

tinytrain's activations have one scale. A per-channel quantization y[c] -> round(y[c] / s[c]) + z (one zero point)
of a layer with weights (Conv, Gemm) is the same integers as the per-tensor quantization with a nominal scale s0 of
that layer times g[c] = s0 / s[c] (fold.py ``fold_scale``: the int8 weights and int32 bias kept, the weight scale
times g[c]). The IR tensor holds those integers with scale s0, and its real value per channel is the nominal one
times ``gain[c]`` = s[c] / s0 (``Act.gain``). The only reader that can undo the gain exactly is a depthwise Conv,
whose output channel c reads input channel c alone: its weight scale times gain[c] (its int32 bias, at
s[c] * s_w[c], is then at the nominal scale times the new weight scale). Every other case is refused in one line:
a per-channel quantization of a value no Conv / Gemm computes, per-channel zero points that differ, a clamp above
(Relu6: its integer bound would differ per channel), and any reader other than a depthwise Conv.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx

from tinytrain.frontends.onnx.constants import QConst
from tinytrain.frontends.onnx.parse import node_label
from tinytrain.frontends.onnx.values import Act, FVal
from tinytrain.ir import QuantParams


def per_channel_scales(cv, node: onnx.NodeProto, what: str, default_type: str):
    """(scales, IR zero point, ONNX dtype) of a Q / DQ whose per-channel scales differ, else None."""
    s = np.asarray(cv.scale_of(node, 1, f"{what} scale"), np.float32).ravel()
    if s.size == 1 or np.all(s == s[0]):
        return None
    zp, dtype = cv.zero_point_of(node, 2, f"{what} zero point", default_type)
    if np.any(zp != zp[0]) or dtype not in ("int8", "uint8"):
        raise cv.unsupported(f"{node_label(node)}: {what} is quantized per channel with zero points that differ; "
                             f"tinytrain takes per-channel activation scales with one zero point (symmetric)")
    return s.astype(np.float64), int(zp[0]) - (128 if dtype == "uint8" else 0), dtype


def quantize_per_channel(cv, node: onnx.NodeProto, v, scales: np.ndarray, zp: int, dtype: str) -> Act:
    """QuantizeLinear per channel of a pending Conv / Gemm (module docstring)."""
    label = node_label(node)
    p = v.pending if isinstance(v, FVal) and v.kind == "pending" else None
    if p is None or not p.has_bias:
        raise cv.unsupported(f"{label} quantizes '{node.input[0]}' per channel ({scales.size} scales), which no Conv / "
                             f"Gemm right before it computes; quantize activations per tensor (NNCF: "
                             f"QuantizationParameters(per_channel=False))")
    if p.hi is not None:
        raise cv.unsupported(f"{label} quantizes the clamped output of {p.source} per channel: its upper bound would "
                             f"be a different integer in each channel; quantize activations per tensor (NNCF: "
                             f"QuantizationParameters(per_channel=False))")
    s0 = float(scales.max())
    p = cv.fold_scale(p, s0 / scales, p.source)
    ir = cv.materialize(p, QuantParams.per_tensor(s0, zp), node.output[0])
    act = cv.new_act(ir, cv.tensors[ir].shape, dtype)
    act.gain = tuple(float(g) for g in scales / s0)
    return act


def dequantize_per_channel(cv, node: onnx.NodeProto, act: Act) -> None:
    """DequantizeLinear of an activation with a gain: its scales must be the ones it was quantized with."""
    found = per_channel_scales(cv, node, "input", act.dtype)
    s0 = act.quant.s
    if found is None or not np.allclose(found[0] / s0, act.gain, rtol=1e-6, atol=0) or found[1] != act.quant.zp:
        raise cv.unsupported(f"{node_label(node)} dequantizes '{node.input[0]}' with other parameters than it was "
                             f"quantized with; dequantize with the same scales and zero point")
    cv.values[node.output[0]] = FVal("dq", act=act, source=node.input[0])


def depthwise_weight(cv, node: onnx.NodeProto, x: Act, w: QConst, groups: int) -> QConst:
    """The weight of a depthwise Conv reading ``x`` (an activation with a gain), its scale times the gain."""
    cout = w.data.shape[0]
    if groups != x.shape[1] or cout != groups:
        raise cv.unsupported(f"{node_label(node)} reads '{node.input[0]}', quantized per channel, and is not a "
                             f"depthwise Conv (one output channel per input channel); quantize activations per "
                             f"tensor (NNCF: QuantizationParameters(per_channel=False))")
    scale = np.resize(w.scale, cout) * np.asarray(x.gain)
    zp = np.resize(w.zero_point, cout)
    return replace(w, scale=np.asarray(scale, np.float32).astype(np.float64), zero_point=zp, axis=0)
