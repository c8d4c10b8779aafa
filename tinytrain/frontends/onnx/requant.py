"""The requantization choices of the ONNX frontends: onnxruntime-faithful rounding.

Arithmetic (design.md section 3): weights int8 per output channel, biases int32 with scale
s_x*s_w[c], requantization by an integer multiplier and shift, no float in the forward pass. The oracle is
onnxruntime's integer execution (its default session fuses QDQ groups into QLinearConv / QGemm /
QLinearGlobalAveragePool, and QOperator models are those kernels): MLAS requantizes the int32 accumulator
as nearbyint(float32(float32(acc) * scale)), scale computed in float32. ONNX imports reproduce that, and
round once everywhere else:

- conv2d / fully_connected / mean use onnxruntime's float32 rounding (``Requant.fp32``,
  quant.multiply_by_float32_scale, C tt_requantize_fp32): the scale is computed as onnxruntime does,
  float32(float32(s_x * s_w[c]) / s_y) (``quant.ort_output_scales``) or, for a mean, float32(s_in /
  float32(s_out * count)) (``ops/mean.py ort_mean_scale``, ``MeanAttrs.count_folded``), and the accumulator times it
  is rounded to float32 and then half to even, all emulated in 64-bit integer arithmetic. Bit-exact with
  onnxruntime's integer kernels (tests/frontends/test_onnx_frontend.py, ~220 million values of the zoo models). The
  single rounding used before (the real value times a 31-bit multiplier, rounded once, ties toward
  +infinity) differed from them on a few values per million, near-ties that float32 rounds onto the tie;
  TFLite's default double rounding on up to 0.6 % of a convolution's values;
- requantize / add use single-rounding requantization (``Requant.single_rounding``:
  TFLITE_SINGLE_ROUNDING, = CMSIS-NN CMSIS_NN_USE_SINGLE_ROUNDING); add: TFLite's three requantizations,
  each rounded once; the two input rescales keep 20 extra bits, so in effect the real sum is rounded
  once, as onnxruntime's float Add (it keeps residual Adds in float) does up to float32 error;
- AveragePool: with the same quantization in and out the centered average is rounded half to even
  (``round_half_even``); with another output quantization (QLinearAveragePool) one multiplier of
  s_in / (c * s_out) per valid-cell count c rounds the real average once (``AvgPool2dAttrs.output``);
- clamp bounds of a fused Relu / Clip are rounded half to even, as QuantizeLinear does.

What remains (measured in tests/frontends/test_onnx_frontend.py): where onnxruntime computes in float (QDQ
models without graph optimization, and with them on x86 the Convs it cannot fuse because their input
and output activations end up int8 and uint8, and residual Adds), a value whose real result lies within
its float32 error (about 1e-5 LSB) of a rounding boundary can round either way, and so can an exact tie
(ours rounds toward +infinity in add / requantize, onnxruntime to even). Exact ties are common only in
same-scale average pools, which round them to even, but there onnxruntime's float32 sum of dequantized
values breaks some ties the other way (3 % of the values of the pools model in tests/onnx_models.py).
Op by op that is a few values per million; end to end a flip in an early layer of a deep network can
reach the logits of some images. The MatMul -> Add fold below is the one structural difference.

Conventions and documented deviations:

- uint8 tensors become int8 (q - 128, zero point - 128); a uint8 graph input sets
  ``Graph.uint8_input`` / ``uint8_output``. uint8 weights keep their (shifted) zero point: conv2d and fully_connected
  compute (w - zw).
- The IR input is the int8 tensor after the model's first QuantizeLinear (or the model's int8/uint8
  input itself); the IR output is the integer tensor before the final DequantizeLinear.
- A trailing Softmax / LogSoftmax (float, QDQ-quantized, or com.microsoft QLinearSoftmax) is
  dropped: the IR output is then the int8 logits feeding it. Training applies softmax
  cross-entropy to the dequantized logits itself (design.md section 3) and the arg-max is unchanged.
- A DQ bias whose scale differs from s_x*s_w[c] by more than float rounding (relative 1e-6) is
  re-rounded to s_x*s_w[c] (round half to even); a float bias is quantized the same way.
- Adding a constant to the output of a Conv/Gemm/MatMul (MatMul -> Add in QDQ, QLinearMatMul ->
  QLinearAdd in QOperator) is folded into that layer's int32 bias and the layer is re-emitted
  with the Add's output quantization: one rounding instead of onnxruntime's two (it rounds and
  saturates the MatMul output to its own quantization first), so the result may differ from
  onnxruntime's by one LSB on many values (about 30 % in tests/onnx_models.py's pools model), by up
  to two in principle; ours is the more exact. Reproducing it would need an int8 "add a constant"
  op, which the IR does not have.
- AveragePool is an IR avg_pool2d (with its own output quantization when it differs from the
  input's) unless the window covers the whole unpadded input, where it is an IR mean. A
  standalone Relu/Clip that the output quantization does not already imply is a requantize (if the
  quantization changes) and an IR avg_pool2d with a 1x1 window used as a clamp.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ir import QuantParams
from tinytrain.quant import Requant, activation_range

BIAS_REL_TOL = 1e-6


def round_half_even(x: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(x, np.float64))


def clamp_range(yq: QuantParams, lo: float | None, hi: float | None) -> tuple[int, int]:
    """The integer clamp range of the real range [lo, hi] in quantization yq, bounds rounded half to even."""
    return activation_range(yq.zp, yq.s, lo, hi, half_even=True)


def requantize_requant(s_x: float, s_y: float) -> Requant:
    """requantize: single rounding."""
    return Requant.from_scales([s_x / s_y], True)
