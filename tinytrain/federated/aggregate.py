"""The fleet's aggregation rule (docs/guide/fleet.md): the sample-weighted mean of the devices' trainable state,
put back on the device's integer grid. Pure numpy, exact integers, independent of the order of the replies.

Per state entry (``codegen.state.state_layout`` of the training step: only the rows the plan trains):

- an int8 weight with a remainder of F bits (the tensor NAME.remainder, F > 0): each device's fixed-point value
  q = p * 2^F + rem (ops/sgd_update.py), the integer mean Q = round_half_even(sum n_i q_i / sum n_i), then split as
  the update kernel does: p = (Q + 2^(F-1)) >> F, rem = Q - p * 2^F (p in [-127, 127], rem in [-2^(F-1), 2^(F-1)));
- an int8 weight without a remainder (F = 0) and an int32 bias: round_half_even(sum n_i v_i / sum n_i);
- a float32 momentum buffer: the float64 weighted mean (devices summed in device order), rounded to float32.

n_i is device i's sample count. The step counter of the new state is the given ``step``.

A server lr (``rate`` = a/b, a fraction of small integers, default 1) scales the mean's step from the previous
global value v0 (the same fixed-point q, int8 or int32 value): v0 + round_half_even(a (sum n_i v_i - N v0) / (b N)),
N = sum n_i, before the split and the clip; rate 1 is the plain mean above, bit for bit. Float buffers:
v0 + rate (mean - v0) in float64.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

import numpy as np

from tinytrain.codegen.state import StateEntry
from tinytrain.ops.sgd_update import packed, pack_nibbles, unpack_nibbles
from tinytrain.simulator import TrainState

REMAINDER = ".remainder"
MAX_RATE_TERM = 64


def round_half_even(num: np.ndarray, den: int) -> np.ndarray:
    """num / den (den > 0) rounded to the nearest integer, ties to even, in exact integer arithmetic."""
    q, r = np.divmod(np.asarray(num, np.int64), den)  # floor division: 0 <= r < den
    twice = 2 * r
    up = (twice > den) | ((twice == den) & (q % 2 == 1))
    return (q + up).astype(np.int64)


def weighted_mean(values: Sequence[np.ndarray], weights: Sequence[int], base: np.ndarray | None = None,
                  rate: Fraction = Fraction(1)) -> np.ndarray:
    """round_half_even(sum w_i v_i / sum w_i) of integer arrays (int64 sums; weights positive). With ``base`` (the
    previous global values) and a server lr ``rate`` = a/b: base + round_half_even(a (sum w_i v_i - W base) / (b W)),
    W = sum w_i, the mean's step from ``base`` scaled by ``rate`` (rate 1: the plain mean, bit for bit)."""
    den = int(sum(weights))
    if any(w <= 0 for w in weights) or den >= 1 << 31:  # |v| < 2^31 and sum w < 2^31: no int64 sum overflows
        raise ValueError(f"aggregation weights must be positive and sum below 2^31, got {list(weights)}")
    num = sum(np.asarray(v, np.int64) * int(w) for v, w in zip(values, weights, strict=True))
    if base is None or rate == 1:
        return round_half_even(num, den)
    check_rate(rate)
    if rate.numerator * den >= 1 << 31:  # a |sum w_i (v_i - base)| < a W 2^32 < 2^63
        raise ValueError(f"server lr {rate} with {den} samples: the numerator times the samples must stay below 2^31")
    base = np.asarray(base, np.int64)
    return base + round_half_even(rate.numerator * (num - den * base), rate.denominator * den)


def check_rate(rate: Fraction) -> None:
    """A server lr a/b with 0 < a/b and a, b <= 64 (the int64 products of weighted_mean cannot overflow)."""
    if not (0 < rate and rate.numerator <= MAX_RATE_TERM and rate.denominator <= MAX_RATE_TERM):
        raise ValueError(f"server lr {rate}: give a positive fraction a/b with a, b <= {MAX_RATE_TERM}")


def fixed_point(p: np.ndarray, rem: np.ndarray, bits: int) -> np.ndarray:
    """q = p * 2^bits + rem of weight rows ``p`` and their stored remainder (packed nibbles for bits <= 4)."""
    parts = unpack_nibbles(rem, p.shape) if packed(bits) else rem
    return p.astype(np.int64) * (1 << bits) + parts.astype(np.int64)


def split_fixed_point(q: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 p, stored remainder) of q: p = (q + 2^(bits-1)) >> bits, rem = q - p * 2^bits (the kernels' rule)."""
    one = 1 << bits
    q = np.clip(q, -127 * one, 127 * one)
    p = (q + (one >> 1)) >> bits
    parts = (q - p * one).astype(np.int8)
    return p.astype(np.int8), pack_nibbles(parts) if packed(bits) else parts


def aggregate(layout: list[StateEntry], states: Sequence[TrainState], weights: Sequence[int], step: int,
              base: TrainState, bits: int, rate: Fraction = Fraction(1)) -> TrainState:
    """The aggregated state (see the module docstring). ``base``: the previous global state (the tensors' rows
    outside the layout's are never trained: equal on every device); ``bits``: the plan's remainder_bits F;
    ``rate``: the server lr on the mean's step from ``base`` (weighted_mean)."""
    if not states:
        raise ValueError("nothing to aggregate")
    names = {e.name for e in layout}
    out = base.copy()
    out.step, out.nonfinite = int(step), 0
    for e in layout:
        if e.name.endswith(REMAINDER) and e.name[: -len(REMAINDER)] in names:
            continue  # with its weight
        rows = slice(e.row0, e.row0 + e.shape[0])
        values = [np.asarray(s.tensors[e.name])[rows] for s in states]
        rem_name = e.name + REMAINDER
        if rem_name in names:
            q0 = fixed_point(np.asarray(base.tensors[e.name])[rows], base.tensors[rem_name], bits)
            q = weighted_mean([fixed_point(v, s.tensors[rem_name], bits) for v, s in zip(values, states)], weights,
                              q0, rate)
            out.tensors[e.name][rows], out.tensors[rem_name] = split_fixed_point(q, bits)
        elif e.kind == "f32":
            acc = sum(np.asarray(v, np.float64) * int(w) for v, w in zip(values, weights)) / float(sum(weights))
            b0 = np.asarray(base.tensors[e.name][rows], np.float64)
            out.tensors[e.name][rows] = (acc if rate == 1 else b0 + float(rate) * (acc - b0)).astype(np.float32)
        else:
            lo, hi = (-127, 127) if e.kind == "i8" else (-(1 << 31), (1 << 31) - 1)
            b0 = np.asarray(base.tensors[e.name])[rows]
            out.tensors[e.name][rows] = np.clip(weighted_mean(values, weights, b0, rate), lo, hi)
    return out
