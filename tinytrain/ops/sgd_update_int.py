"""The integer SGD update (plan "backward": "int", training/integer_step.py): ``sgd_update``'s landing with the step
computed in integers from an int32 gradient — the spec C replicates bit for bit.

Inputs as ``sgd_update``'s (ops/sgd_update.py): param (int8 weight or int32 bias, written in place), grad int32
(C_sel,...) (the integer gradient, of real scale s_g), scale int32 (C_sel, 2): per selected channel the fixed-point
step factor (M, n) with k = M 2^-n (``fixed_point``; k = 2^F lr s_g / s[c], QAS folded in by the pass), momentum ""
(none: the integer step keeps no momentum), step int32 (1,) (stochastic rounding or an lr schedule), remainder
(F > 0), and exp int32 (1,) or absent: the gradient's run-time exponent e (its real scale s_g 2^-e; ops/conv2d/integer.py:
the gradients behind an input gradient carry one), so the step factor is M 2^-(n+e).

With an lr schedule, each channel's M first becomes (M f) >> 15, f = schedule.factor_q15(step) the schedule's Q15
factor in integers (lr_schedule.py); 0 <= f <= 2^15, so it stays below 2^31. Then per element i of channel c,
integers only, with n the channel's shift plus e (when n + e > 62, t is first shifted by the excess, n = 62; when
n + e < 0, r = t 2^-n exactly, clamped: +-2^30 where |t| > 2^30 >> -n, and nothing else below):
    t = g * M                                        (int64, exact: |g| < 2^31, 0 <= M < 2^31, so |t| < 2^62)
    d = h_i >> (32 - n) if n <= 32 else h_i << (n - 32)   (STOCHASTIC: h_i the uint32 hash of ops/sgd_update.py)
    d = 2^(n-1) if n > 0 else 0                      (NEAREST: ties up)
    r = (t + d) >> n                                 (arithmetic shift = floor; 0 <= d < 2^n <= 2^62: no overflow)
    r = min(max(r, -2^30), 2^30)
then r lands exactly as in ``sgd_update`` (remainder of F bits, or the clamp). E[r] = t 2^-n up to the draw's 2^-32
granularity: unbiased like the float step.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops import OpDef
from tinytrain.ops import sgd_update as sgd
from tinytrain.ops.sgd_update import (EXP, GRAD, MAX_SHIFT, MOMENTUM, PARAM, REMAINDER, SCALE, STEP, Rounding,
                                     SgdUpdateAttrs)
from tinytrain.quant import INT32_MAX, INT32_MIN



def infer_shapes(a: SgdUpdateAttrs, ins) -> list[tuple[int, ...]]:
    p, g, k = ins[PARAM], ins[GRAD], ins[SCALE]
    n_sel = p.shape[0] if a.channels is None else len(a.channels)
    if g.shape != (n_sel,) + p.shape[1:] or k.shape != (n_sel, 2):
        raise ValueError(f"sgd_update_int: gradient {g.shape} / scale {k.shape} do not fit {n_sel} channels of "
                         f"{p.shape}")
    if a.momentum or (len(ins) > MOMENTUM and ins[MOMENTUM] is not None):
        raise ValueError("sgd_update_int: the integer step has no momentum")
    if (len(ins) > STEP and ins[STEP] is not None) != a.reads_step:
        raise ValueError("sgd_update_int: the step counter is an input exactly when rounding is stochastic or an lr "
                         "schedule reads it")
    sgd.check_remainder(a, p, g, ins[REMAINDER] if len(ins) > REMAINDER else None)
    if len(ins) > EXP and ins[EXP] is not None and ins[EXP].shape != (1,):
        raise ValueError(f"sgd_update_int: the gradient's exponent has shape {ins[EXP].shape}, not (1,)")
    return []


def integer_step(g: np.ndarray, k: np.ndarray, a: SgdUpdateAttrs, step: int, exp: int = 0) -> np.ndarray:
    """r (int64, the gradient's shape): each element's step in LSBs (2^-F LSBs with a remainder); ``exp``: the
    gradient's exponent."""
    shape = (-1,) + (1,) * (g.ndim - 1)
    mult, n = k[:, 0].astype(np.int64).reshape(shape), k[:, 1].astype(np.int64).reshape(shape) + exp
    if a.schedule is not None:
        mult = (mult * a.schedule.factor_q15(step)) >> 15
    excess = np.maximum(n - MAX_SHIFT, 0)
    n = n - excess
    t = (g.astype(np.int64) * mult) >> excess
    neg = n < 0  # only with an exponent: a step of 2^-n >= 1 LSB per unit, exact or clamped to +-2^30
    if neg.any():
        up = np.minimum(np.where(neg, -n, 0), 31)
        big = neg & (np.abs(t) > (np.int64(1 << 30) >> up))
        t = np.where(big, np.sign(t) << 30, t << np.where(big, 0, up))
        n = np.maximum(n, 0)
    if a.rounding is Rounding.NEAREST:
        d = np.where(n > 0, np.left_shift(np.int64(1), np.maximum(n - 1, 0)), 0)
    else:
        h = sgd.draws(a.seed, step, a.stream, g.size).reshape(g.shape).astype(np.int64)
        d = np.where(n <= 32, h >> np.minimum(32 - n, 32), h << np.maximum(n - 32, 0))
    r = (t + d) >> n
    return np.clip(r, -(1 << 30), 1 << 30)


def reference(a: SgdUpdateAttrs, arrays, ins, outs) -> list[np.ndarray | None]:
    p, g, k = arrays[PARAM], np.asarray(arrays[GRAD]), np.asarray(arrays[SCALE])
    step = int(np.asarray(arrays[STEP]).reshape(-1)[0]) if len(arrays) > STEP and arrays[STEP] is not None else 0
    exp = int(np.asarray(arrays[EXP]).reshape(-1)[0]) if len(arrays) > EXP and arrays[EXP] is not None else 0
    r = integer_step(g, k, a, step, exp)
    rows = slice(None) if a.channels is None else np.asarray(a.channels)
    out = p.copy()
    if a.remainder_bits:
        out[rows], new_rem = sgd.land_remainder(p[rows], arrays[REMAINDER], r, a.remainder_bits)
        return [out, None, new_rem]
    lo, hi = (-127, 127) if p.dtype == np.int8 else (INT32_MIN, INT32_MAX)
    out[rows] = np.clip(p[rows].astype(np.int64) - r, lo, hi).astype(p.dtype)
    return [out, None, None]


def bound(a: SgdUpdateAttrs, ins, bounds) -> list[float]:
    """The gradient it applies fits int32 (training/finite.py checks it); then |g M| < 2^62 and r is exact."""
    return [bounds[GRAD], 0.0]


OP = OpDef("sgd_update_int", SgdUpdateAttrs, infer_shapes, reference, sgd.macs, writes=(PARAM, MOMENTUM, REMAINDER),
           bound=bound)
