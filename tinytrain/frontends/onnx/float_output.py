"""A float graph output after the last quantized layer (NNCF's default: no QuantizeLinear after the classifier's
Gemm): the layer is kept, its output quantized to int8 with the range its arithmetic can reach.

The model carries no calibration range for a float output, but the layer's int8 input, int8 weights and int32 bias
bound it: per output channel c, acc[c] = sum_k (w[c,k] - zw[c]) * (x[k] - zx) + b[c] lies between the sums of each
term's smaller and larger end (x - zx over the input's int8 range), and y[c] = s_x * s_w[c] * acc[c]. The output's
scale and zero point span [min_c lo[c], max_c hi[c]], so no value saturates; the rounding is half an output LSB,
(hi - lo) / 510, stated in a Notice. Only a layer with weights (Conv, Gemm, MatMul) is taken: anything else has no
such bound and is refused, naming what to do.
"""

from __future__ import annotations

import warnings

import numpy as np

from tinytrain.errors import Notice
from tinytrain.frontends.onnx.values import Act, Pending
from tinytrain.ir import QuantParams


def reachable_range(cv, p: Pending) -> tuple[float, float]:
    """[lo, hi] of the real output a pending Conv / Gemm can compute from any int8 input."""
    xq = cv.tensors[p.args["x"]].quant
    w = cv.tensors[p.args["w"]]
    wz = np.asarray(w.data, np.int64).reshape(w.shape[0], -1) - np.asarray(w.quant.zero_point, np.int64).reshape(-1, 1)
    ends = np.array([-128 - xq.zp, 127 - xq.zp], np.int64)
    terms = wz[..., None] * ends  # (C, K, 2)
    bias = np.zeros(w.shape[0], np.int64) if p.args["bias"] is None else p.args["bias"].astype(np.int64)
    scale = xq.s * np.asarray(w.quant.scale, np.float64)
    lo = (terms.min(-1).sum(-1) + bias) * scale
    hi = (terms.max(-1).sum(-1) + bias) * scale
    return float(min(lo.min(), 0.0)), float(max(hi.max(), 0.0))


def quantized_float_output(cv, name: str, p: Pending, dtype: str) -> Act:
    """The IR int8 output of the pending layer ``p`` whose float result is graph output ``name``."""
    if not p.has_bias:
        raise cv.unsupported(f"graph output '{name}' is the float result of {p.source} with no QuantizeLinear after "
                             f"it, and only a Conv / Gemm's range is known without calibration; quantize the "
                             f"model's outputs too (onnxruntime quantize_static does; NNCF: keep the output quantizer)")
    lo, hi = reachable_range(cv, p)
    s = float(np.float32((hi - lo) / 255))
    zp = int(np.clip(np.rint(-128 - lo / s), -128, 127))
    q = QuantParams.per_tensor(s, zp)
    warnings.warn(Notice(f"graph output '{name}' is the float result of {p.source}: quantized to int8 with scale "
                         f"{s:.6g}, zero point {zp}, the range [{lo:.4g}, {hi:.4g}] its int8 input and weights can "
                         f"reach (the model carries no calibration range for it); the logits round to {s / 2:.3g}"))
    ir = cv.materialize(p, q, name)
    return cv.new_act(ir, cv.tensors[ir].shape, dtype)
