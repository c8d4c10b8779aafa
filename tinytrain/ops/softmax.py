"""Softmax over the last axis, int8 in and out (TFLite reference Softmax, gemmlowp fixed point).

The output is quantized with scale 1/256 and zero point -128. The input differences to the row
maximum are rescaled to Q5.26, exponentiated with gemmlowp's exp_on_negative_values, summed in
Q12.19, and divided with a Newton-Raphson reciprocal — all integer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinytrain.errors import ModelError, UnsupportedModelError
from tinytrain.ops import OpDef, OpDoc, TfliteRead, no_macs
from tinytrain.quant import (INT32_MAX, quantize_multiplier, rounding_divide_by_pot,
                             saturating_left_shift, srdhm)

SCALED_DIFF_INTEGER_BITS = 5
ACCUMULATION_INTEGER_BITS = 12


@dataclass(frozen=True)
class SoftmaxAttrs:
    beta: float
    input_multiplier: int
    input_left_shift: int
    diff_min: int

    @staticmethod
    def from_scale(beta: float, input_scale: float) -> SoftmaxAttrs:
        """PreprocessSoftmaxScaling + CalculateInputRadius, as TFLite's Prepare does."""
        real = min(beta * input_scale * (1 << (31 - SCALED_DIFF_INTEGER_BITS)), float((1 << 31) - 1))
        multiplier, left_shift = quantize_multiplier(real)
        if left_shift < 0:
            raise ValueError("softmax: input scale too small for the fixed-point softmax")
        radius = ((1 << SCALED_DIFF_INTEGER_BITS) - 1) * (1 << (31 - SCALED_DIFF_INTEGER_BITS)) / (1 << left_shift)
        return SoftmaxAttrs(beta, multiplier, left_shift, -int(math.floor(radius)))


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a: np.ndarray) -> np.ndarray:
    constant_term = 1895147668
    constant_1_over_3 = 715827883
    x = a + (1 << 28)
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(srdhm(x4_over_4 + x3, constant_1_over_3) + x2, 1)
    return constant_term + srdhm(constant_term, x + poly)


def exp_on_negative_values(a: np.ndarray) -> np.ndarray:
    """gemmlowp exp for Q5.26 inputs <= 0, result in Q0.31."""
    fractional_bits = 31 - SCALED_DIFF_INTEGER_BITS
    one_quarter = 1 << (fractional_bits - 2)
    mask = one_quarter - 1
    a_mod_quarter_minus_one_quarter = (a & mask) - one_quarter
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(
        saturating_left_shift(a_mod_quarter_minus_one_quarter, SCALED_DIFF_INTEGER_BITS))
    remainder = a_mod_quarter_minus_one_quarter - a
    barrel = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401), (4, 242))
    for exponent, multiplier in barrel:
        if SCALED_DIFF_INTEGER_BITS > exponent:
            bit = 1 << (fractional_bits + exponent)
            result = np.where((remainder & bit) != 0, srdhm(result, multiplier), result)
    return np.where(a == 0, INT32_MAX, result)


def _one_over_one_plus_x_for_x_in_0_1(a: np.ndarray) -> np.ndarray:
    s = a + np.int64(INT32_MAX)
    half_denominator = np.where(s >= 0, (s + 1) >> 1, -((-(s - 1)) >> 1))  # (s + sign) / 2 in C
    x = 1515870810 + srdhm(half_denominator, -1010580540)
    one_f2 = 1 << 29
    for _ in range(3):
        half_denominator_times_x = srdhm(half_denominator, x)
        one_minus = one_f2 - half_denominator_times_x
        x = x + saturating_left_shift(srdhm(x, one_minus), 2)
    return saturating_left_shift(x, 1)


def reference(a: SoftmaxAttrs, arrays, ins, outs) -> list[np.ndarray]:
    x = arrays[0].astype(np.int64)
    diff = x - x.max(axis=-1, keepdims=True)
    valid = diff >= a.diff_min
    rescaled = srdhm(diff << a.input_left_shift, a.input_multiplier)
    exps = exp_on_negative_values(rescaled)
    sum_of_exps = np.where(valid, rounding_divide_by_pot(exps, ACCUMULATION_INTEGER_BITS), 0).sum(axis=-1, keepdims=True)
    # CountLeadingZeros of the (positive) int32 sum.
    headroom_plus_one = np.vectorize(lambda v: 32 - int(v).bit_length(), otypes=[np.int64])(sum_of_exps)
    num_bits_over_unit = ACCUMULATION_INTEGER_BITS - headroom_plus_one
    shifted_sum_minus_one = ((sum_of_exps << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31)
    shifted_scale = _one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one)
    unsat = rounding_divide_by_pot(srdhm(shifted_scale, exps), num_bits_over_unit + 31 - 8)
    y = np.where(valid, np.clip(unsat - 128, -128, 127), -128)
    return [y.astype(np.int8)]


def infer_shapes(a: SoftmaxAttrs, ins) -> list[tuple[int, ...]]:
    return [ins[0].shape]


# ---- the importer, the exporter, the twin (ops/__init__.py: hooks; ONNX's Softmax at the output is dropped:
# frontends/onnx/boundary.py) ----------------------------------------------------------------------------------


def tflite_softmax(im, op) -> None:
    x, out = im.act(op.inputs[0]), im.out(op)
    if out.quant.s != 1.0 / 256 or out.quant.zp != -128:
        raise UnsupportedModelError(f"operator {op.index} (SOFTMAX): output quantization s={out.quant.s} "
                                    f"zp={out.quant.zp} (int8 form); TFLite requires 1/256 and -128")
    beta = op.options["beta"]
    if not math.isfinite(beta):
        raise ModelError(f"operator {op.index}: softmax beta {beta} is not finite")
    try:
        attrs = SoftmaxAttrs.from_scale(beta, x.quant.s)
    except ValueError as e:
        raise UnsupportedModelError(f"operator {op.index} (SOFTMAX): {e}") from None
    im.node(op, "softmax", [x.name], [out.name], attrs)


def export(ex, n) -> None:
    axis = 1 if len(ex.g.tensors[n.inputs[0]].shape) == 4 else -1  # the IR's last axis is NCHW's channel axis
    ex.q(ex.node("Softmax", [ex.dq(n.inputs[0], n.name)], f"{n.outputs[0]}_float", n.name, axis=axis), n.outputs[0],
         n.name)


def twin(t, node, xs, params, clamp):
    return xs[0]  # the logits: trained with softmax cross-entropy


TFLITE = {"SOFTMAX": TfliteRead(tflite_softmax, (9, (("beta", 0, "<f", 0.0),)))}
DOC = OpDoc("SOFTMAX", "Softmax (dropped at the output)", "TFLite fixed point", "(the loss takes the logits)", "—")
OP = OpDef("softmax", SoftmaxAttrs, infer_shapes, reference, no_macs, export=export, twin=twin, doc=DOC,
           after_logits=True)
