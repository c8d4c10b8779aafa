"""SGD update of an int8 weight or int32 bias in place (docs/design.md §3) — the spec C replicates bit for bit.

Inputs: param (int8 (C_out,...) weight or int32 (C_out,) bias, written in place), grad fp32 (C_sel,...)
(the gradient of the real parameter for the selected output channels ``channels``, all when None),
scale fp32 (C_sel,) (the per-channel step factor set by QAS, lr folded in: see training/qas.py),
momentum fp32 (C_sel,...) or "" (written in place), step int32 (1,) or "" (the step counter, read by
stochastic rounding and by an lr schedule only), remainder int8 (an int8 weight's sub-LSB parts, written in place;
present exactly when ``remainder_bits`` F > 0): (C_sel,...) one byte per weight element, or for F <= 4 (C_sel, ceil(E/2))
two per byte (``remainder_shape``: element e of a row of E in byte e // 2, the low nibble for even e).

Per element, in this order, every operation in IEEE float32 (C: -ffp-contract=off):
    d = g                                  (no momentum)
    M = mu * M;  M = M + g;  d = M          (momentum mu: two float32 operations)
    v = d * scale[c]                       (one float32 multiply; c = the element's selected channel)
    v = v * f                              (an lr schedule only: f = schedule.factor(step), lr_schedule.py)
    r = rintf(v)                           (NEAREST: ties to even)
    r = floorf(v + u)                      (STOCHASTIC: u below, one float32 add)
    r = min(max(r, -2^30), 2^30)           (then exactly an integer)
    p[channel] = clamp(p[channel] - (int)r, -127, 127)     int8 weights (symmetric range)
    p[channel] = clamp(p[channel] - (int)r, INT32_MIN, INT32_MAX)   int32 biases (64-bit subtraction)

With a remainder of F bits (int8 weights, 1 <= F <= 8), the weight is the fixed-point value q = p * 2^F + rem, an
int8 p (what every forward kernel reads) and a signed remainder rem in [-2^(F-1), 2^(F-1)) of its LSB: the step is
counted in 2^-F LSBs (the pass folds 2^F into ``scale``, training/qas.py), so r lands on q instead of p:
    q = clamp(p[channel] * 2^F + rem - r, -127 * 2^F, 127 * 2^F)      (int32: |r| <= 2^30)
    p[channel] = (q + 2^(F-1)) >> F     (floor: p is q rounded to nearest, ties up; always in [-127, 127])
    rem = q - p[channel] * 2^F
No step is lost below one LSB of p; rounding (stochastic or nearest) acts at 2^-F LSB.

Stochastic rounding draws u in [0, 1) from a stateless hash (all uint32 arithmetic, wrapping):
    mix(x):  x ^= x >> 16; x *= 0x7FEB352D; x ^= x >> 15; x *= 0x846CA68B; x ^= x >> 16
    key = mix(mix(mix(seed ^ 0x9E3779B9) ^ step) ^ stream)
    h_i = mix(key + i * 0x9E3779B9)         i = the element's index in grad (C order)
    u_i = (float)(h_i >> 8) * 2^-24         (exact in float32)
``stream`` numbers the update nodes of a training graph, so every element of every tensor at every
step draws its own u. E[r] = v, so sub-LSB steps are not lost (see training/qas.py for the decision).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

import numpy as np

from tinytrain.errors import PlanError
from tinytrain.lr_schedule import Schedule
from tinytrain.ops import OpDef
from tinytrain.quant import INT32_MAX, INT32_MIN

MASK32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9
R_LIMIT = float(1 << 30)


class Rounding(enum.Enum):
    NEAREST = "nearest"
    STOCHASTIC = "stochastic"


@dataclass(frozen=True)
class SgdUpdateAttrs:
    channels: tuple[int, ...] | None = None
    rounding: Rounding = Rounding.STOCHASTIC
    momentum: float = 0.0
    stream: int = 0
    seed: int = 0
    schedule: Schedule | None = None
    remainder_bits: int = 0

    @property
    def reads_step(self) -> bool:
        return self.rounding is Rounding.STOCHASTIC or self.schedule is not None


PARAM, GRAD, SCALE, MOMENTUM, STEP, REMAINDER = range(6)
EXP = REMAINDER + 1  # the integer update's (ops/sgd_update_int.py): the gradient's exponent (optional)
MAX_SHIFT = 62  # the integer update's largest static shift
MAX_REMAINDER_BITS = 8


def infer_shapes(a: SgdUpdateAttrs, ins) -> list[tuple[int, ...]]:
    p, g, k = ins[PARAM], ins[GRAD], ins[SCALE]
    m = ins[MOMENTUM] if len(ins) > MOMENTUM else None
    step = ins[STEP] if len(ins) > STEP else None
    n_sel = p.shape[0] if a.channels is None else len(a.channels)
    if a.channels is not None and (not a.channels or min(a.channels) < 0 or max(a.channels) >= p.shape[0]
                                   or list(a.channels) != sorted(set(a.channels))):
        raise ValueError(f"sgd_update: channels {a.channels} are not increasing channels of {p.shape}")
    if g.shape != (n_sel,) + p.shape[1:] or k.shape != (n_sel,):
        raise ValueError(f"sgd_update: gradient {g.shape} / scale {k.shape} do not fit {n_sel} channels of {p.shape}")
    if (m is not None) != (a.momentum != 0.0) or (m is not None and m.shape != g.shape):
        raise ValueError("sgd_update: a momentum buffer of the gradient's shape is needed exactly when momentum != 0")
    if (step is not None) != a.reads_step:
        raise ValueError("sgd_update: the step counter is an input exactly when stochastic rounding or an lr "
                         "schedule reads it")
    check_remainder(a, p, g, ins[REMAINDER] if len(ins) > REMAINDER else None)
    return []


def check_remainder(a: SgdUpdateAttrs, p, g, rem) -> None:
    """A remainder input (int8, ``remainder_shape``) exactly when ``remainder_bits`` > 0, on int8 weights only."""
    if not 0 <= a.remainder_bits <= MAX_REMAINDER_BITS:
        raise ValueError(f"sgd_update: remainder_bits {a.remainder_bits} is not 0..{MAX_REMAINDER_BITS}")
    if (rem is not None) != (a.remainder_bits > 0):
        raise ValueError("sgd_update: a remainder input is needed exactly when remainder_bits > 0")
    if rem is not None and (p.dtype.np != np.int8 or rem.dtype.np != np.int8
                            or rem.shape != remainder_shape(g.shape, a.remainder_bits)):
        raise ValueError(f"sgd_update: a remainder is an int8 array of shape "
                         f"{remainder_shape(g.shape, a.remainder_bits)} beside an int8 weight")


def packed(bits: int) -> bool:
    """Whether remainders of ``bits`` bits go two to a byte."""
    return bits <= 4


def remainder_shape(grad_shape: tuple[int, ...], bits: int) -> tuple[int, ...]:
    """The remainder array of an update whose gradient has ``grad_shape``: one byte per element, or a row of E
    elements in ceil(E/2) bytes."""
    if not packed(bits):
        return tuple(grad_shape)
    e = int(np.prod(grad_shape[1:], dtype=np.int64))
    return (grad_shape[0], (e + 1) // 2)


def mix32(x: np.ndarray) -> np.ndarray:
    """lowbias32 integer hash on uint32 arrays (wrapping multiplication)."""
    x = np.asarray(x, np.uint32)
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def draws(seed: int, step: int, stream: int, n: int) -> np.ndarray:
    """The n uint32 hashes h_i of one update node at one step."""
    key = mix32(np.array([(seed ^ GOLDEN) & MASK32], np.uint32))
    key = mix32(key ^ np.uint32(step & MASK32))
    key = mix32(key ^ np.uint32(stream & MASK32))
    i = np.arange(n, dtype=np.uint32)
    return mix32(key + i * np.uint32(GOLDEN))


def uniform(seed: int, step: int, stream: int, n: int) -> np.ndarray:
    """The n float32 draws u_i in [0, 1) of one update node at one step."""
    return (draws(seed, step, stream, n) >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


def integer_step(v: np.ndarray, rounding: Rounding, seed: int, step: int, stream: int) -> np.ndarray:
    """r: the float32 step v landed on the integer grid (int64)."""
    v = np.asarray(v, np.float32)
    if rounding is Rounding.NEAREST:
        r = np.rint(v)
    else:
        r = np.floor(v + uniform(seed, step, stream, v.size).reshape(v.shape))
    return np.clip(r, -R_LIMIT, R_LIMIT).astype(np.int64)


def reference(a: SgdUpdateAttrs, arrays, ins, outs) -> list[np.ndarray | None]:
    p, g, k = arrays[PARAM], arrays[GRAD].astype(np.float32), arrays[SCALE].astype(np.float32)
    m = arrays[MOMENTUM] if len(arrays) > MOMENTUM else None
    step = int(np.asarray(arrays[STEP]).reshape(-1)[0]) if len(arrays) > STEP and arrays[STEP] is not None else 0
    if g.ndim and g.shape[0] != k.shape[0]:
        raise ValueError("sgd_update: gradient and scale disagree")
    new_m = None
    d = g
    if m is not None:
        new_m = (np.float32(a.momentum) * m.astype(np.float32)).astype(np.float32) + g
        d = new_m
    v = d * k.reshape((-1,) + (1,) * (g.ndim - 1))
    if a.schedule is not None:
        v = v * a.schedule.factor(step)
    r = integer_step(v, a.rounding, a.seed, step, a.stream)
    rows = slice(None) if a.channels is None else np.asarray(a.channels)
    out = p.copy()
    if a.remainder_bits:
        out[rows], new_rem = land_remainder(p[rows], arrays[REMAINDER], r, a.remainder_bits)
        return [out, new_m, new_rem]
    lo, hi = (-127, 127) if p.dtype == np.int8 else (INT32_MIN, INT32_MAX)
    out[rows] = np.clip(p[rows].astype(np.int64) - r, lo, hi).astype(p.dtype)
    return [out, new_m, None]


def land_remainder(p: np.ndarray, rem: np.ndarray, r: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(p, rem) after the step r (in 2^-bits LSBs) lands on the fixed-point weight q = p * 2^bits + rem."""
    one = 1 << bits
    parts = unpack_nibbles(rem, p.shape) if packed(bits) else rem
    q = p.astype(np.int64) * one + parts.astype(np.int64) - r
    q = np.clip(q, -127 * one, 127 * one)
    w = (q + (one >> 1)) >> bits
    parts = (q - w * one).astype(np.int8)
    return w.astype(np.int8), pack_nibbles(parts) if packed(bits) else parts


def unpack_nibbles(rem: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The signed 4-bit values of a packed remainder, in the weight rows' ``shape``."""
    b = rem.astype(np.int8)
    lo = (b.view(np.uint8) << np.uint8(4)).view(np.int8) >> 4
    hi = b >> 4
    both = np.stack([lo, hi], axis=-1).reshape(len(rem), -1)
    return both[:, : int(np.prod(shape[1:], dtype=np.int64))].reshape(shape)


def pack_nibbles(parts: np.ndarray) -> np.ndarray:
    """Rows of signed 4-bit values, two to a byte (element e of a row in byte e // 2, the low nibble for even e)."""
    rows = parts.reshape(len(parts), -1).astype(np.int16)
    if rows.shape[1] % 2:
        rows = np.concatenate([rows, np.zeros((len(rows), 1), np.int16)], axis=1)
    b = (rows[:, 0::2] & 15) | ((rows[:, 1::2] & 15) << 4)
    return b.astype(np.uint8).view(np.int8)


def macs(a: SgdUpdateAttrs, ins, outs) -> int:
    return ins[GRAD].size


def update_bound(a: SgdUpdateAttrs, grad: float) -> list[float]:
    """[gradient, momentum] bounds: M = mu M + g stays within |g|max / (1 - mu) over any number of steps."""
    if not a.momentum:
        return [grad, 0.0]
    return [grad, grad / (1.0 - a.momentum) if 0 <= a.momentum < 1 else float("inf")]


def bound(a: SgdUpdateAttrs, ins, bounds) -> list[float]:
    return update_bound(a, bounds[GRAD])


# ---- the integer step's rewrite (OpDef.integer, training/integer_step.py): sgd_update -> sgd_update_int ---------


def fixed_point(k: float, what: str, free: bool = False) -> tuple[int, int]:
    """(M, n) with M 2^-n = k to 31 significant bits, M in [2^30, 2^31). Without ``free``: 0 <= n <= 62 (a k
    below 2^-32 loses bits of M: M 2^-62), PlanError when k >= 2^31 (steps that large have no integer form). With
    ``free`` (a gradient with a run-time exponent, which moves the shift at run time): any n."""
    if not (math.isfinite(k) and k >= 0):
        raise PlanError(f"the step factor of {what} is {k!r}; the integer step needs a finite positive one")
    if k == 0:
        return 0, 0
    m, e = math.frexp(k)
    mult, n = int(round(m * (1 << 31))), 31 - e
    if mult == 1 << 31:
        mult, n = mult >> 1, n - 1
    if free:
        return mult, n
    if n < 0:
        raise PlanError(f"the step factor of {what} ({k:.3g} LSB per gradient unit) is too large for the integer "
                        'step; use a smaller lr or "backward": "fp32"')
    if n > MAX_SHIFT:
        mult, n = mult >> (n - MAX_SHIFT), MAX_SHIFT
    return mult, n


def integer(node, rewrite):
    """The update with its float32 step factor k[c] replaced by (M, n) per channel: k[c] s_g = M 2^-n, and its
    gradient's exponent (if it has one) appended."""
    a, tensors = node.attrs, rewrite.tensors
    if a.momentum:
        raise PlanError('"backward": "int" keeps no momentum; drop it or use "fp32"')
    g, k = node.inputs[GRAD], tensors[node.inputs[SCALE]]
    s_g = rewrite.scale(g, node)
    free = g in rewrite.exps  # its exponent moves the shift at run time: any static shift (ops/sgd_update_int.py)
    fixed = np.array([fixed_point(float(v) * s_g, node.inputs[PARAM], free) for v in k.data], np.int32).reshape(-1, 2)
    name = rewrite.constant(f"{node.inputs[PARAM]}.step_fixed", fixed)
    inputs = tuple(name if j == SCALE else i for j, i in enumerate(node.inputs))
    inputs = inputs + ("",) * (EXP - len(inputs)) + (rewrite.exps[g],) if free else inputs
    return replace(node, op="sgd_update_int", inputs=inputs)


OP = OpDef("sgd_update", SgdUpdateAttrs, infer_shapes, reference, macs, writes=(PARAM, MOMENTUM, REMAINDER),
           bound=bound, integer=integer)
