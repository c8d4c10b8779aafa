"""SGD update of an int8 weight or int32 bias in place (docs/design.md §3) — the spec C replicates bit for bit.

Inputs: param (int8 (C_out,...) weight or int32 (C_out,) bias, written in place), grad fp32 (C_sel,...)
(the gradient of the real parameter for the selected output channels ``channels``, all when None),
scale fp32 (C_sel,) (the per-channel step factor set by QAS, lr folded in: see training/qas.py),
momentum fp32 (C_sel,...) or "" (written in place), step int32 (1,) or "" (the step counter, read by
stochastic rounding and by an lr schedule only).

Per element, in this order, every operation in IEEE float32 (C: -ffp-contract=off):
    d = g                                  (no momentum)
    M = mu * M;  M = M + g;  d = M          (momentum mu: two float32 operations)
    v = d * scale[c]                       (one float32 multiply; c = the element's selected channel)
    v = v * f                              (an lr schedule only: f = schedule.factor(step), training/schedule.py)
    r = rintf(v)                           (NEAREST: ties to even)
    r = floorf(v + u)                      (STOCHASTIC: u below, one float32 add)
    r = min(max(r, -2^30), 2^30)           (then exactly an integer)
    p[channel] = clamp(p[channel] - (int)r, -127, 127)     int8 weights (symmetric range)
    p[channel] = clamp(p[channel] - (int)r, INT32_MIN, INT32_MAX)   int32 biases (64-bit subtraction)

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
from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef
from tinytrain.quant import INT32_MAX, INT32_MIN
from tinytrain.training.schedule import Schedule

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

    @property
    def reads_step(self) -> bool:
        return self.rounding is Rounding.STOCHASTIC or self.schedule is not None


PARAM, GRAD, SCALE, MOMENTUM, STEP = range(5)


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
    return []


def mix32(x: np.ndarray) -> np.ndarray:
    """lowbias32 integer hash on uint32 arrays (wrapping multiplication)."""
    x = np.asarray(x, np.uint32)
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def uniform(seed: int, step: int, stream: int, n: int) -> np.ndarray:
    """The n float32 draws u_i in [0, 1) of one update node at one step."""
    key = mix32(np.array([(seed ^ GOLDEN) & MASK32], np.uint32))
    key = mix32(key ^ np.uint32(step & MASK32))
    key = mix32(key ^ np.uint32(stream & MASK32))
    i = np.arange(n, dtype=np.uint32)
    h = mix32(key + i * np.uint32(GOLDEN))
    return (h >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


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
    lo, hi = (-127, 127) if p.dtype == np.int8 else (INT32_MIN, INT32_MAX)
    rows = slice(None) if a.channels is None else np.asarray(a.channels)
    out = p.copy()
    out[rows] = np.clip(p[rows].astype(np.int64) - r, lo, hi).astype(p.dtype)
    return [out, new_m]


def macs(a: SgdUpdateAttrs, ins, outs) -> int:
    return ins[GRAD].size


def update_bound(a: SgdUpdateAttrs, grad: float) -> list[float]:
    """[gradient, momentum] bounds: M = mu M + g stays within |g|max / (1 - mu) over any number of steps."""
    if not a.momentum:
        return [grad, 0.0]
    return [grad, grad / (1.0 - a.momentum) if 0 <= a.momentum < 1 else float("inf")]


def bound(a: SgdUpdateAttrs, ins, bounds) -> list[float]:
    return update_bound(a, bounds[GRAD])


OP = OpDef("sgd_update", SgdUpdateAttrs, infer_shapes, reference, macs, writes=(PARAM, MOMENTUM), bound=bound)
