"""Softmax cross-entropy on the dequantized int8 logits (docs/design.md §3): the loss and its gradient.

Inputs: logits int8 (N,...,C) (per-tensor quantized; any middle dimensions are 1), labels int32 (N,).
fp32 in this order: z = s * (q - zp); m = max(z); e = exp(z - m); S = sum(e) (in order d = 0..D-1); p = e / S;
loss = (log(S) + m) - z[label]; grad = p - onehot(label); exp and log are the C's tt_expf / tt_logf (tinytrain/f32.py),
so every float32 operation is the kernel's (kernels/softmax_xent.c.j2), bit for bit. The loss of a batch is the sum of the
per-sample losses (training steps are batch 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tinytrain import f32
from tinytrain.ops import OpDef, keep, no_macs


@dataclass(frozen=True)
class SoftmaxXentAttrs:
    pass


def _check(ins) -> int:
    logits, labels = ins
    if len(labels.shape) != 1 or labels.shape[0] != logits.shape[0]:
        raise ValueError(f"softmax_xent: labels {labels.shape} do not match logits {logits.shape}")
    if any(d != 1 for d in logits.shape[1:-1]):
        raise ValueError(f"softmax_xent: logits {logits.shape} are not (N,C)")
    return logits.shape[-1]


def loss_shapes(a: SoftmaxXentAttrs, ins) -> list[tuple[int, ...]]:
    _check(ins)
    return [(ins[0].shape[0],)]


def grad_shapes(a: SoftmaxXentAttrs, ins) -> list[tuple[int, ...]]:
    _check(ins)
    return [ins[0].shape]


def _softmax_parts(arrays, ins):
    q, labels = arrays
    n, c = q.shape[0], ins[0].shape[-1]
    labels = np.asarray(labels).astype(np.int64)
    if labels.min() < 0 or labels.max() >= c:
        raise ValueError(f"labels must be in [0, {c}); got {labels.min()}..{labels.max()}")
    qp = ins[0].quant
    z = (q.reshape(n, c).astype(np.int32) - np.int32(qp.zp)).astype(np.float32) * np.float32(qp.s)
    m = z.max(axis=1, keepdims=True)
    e = f32.expf(z - m)
    s = f32.ordered_sum(e, axis=1)[:, None]
    return z, m, e, s, labels


def loss_reference(a: SoftmaxXentAttrs, arrays, ins, outs) -> list[np.ndarray]:
    z, m, e, s, labels = _softmax_parts(arrays, ins)
    zl = np.take_along_axis(z, labels[:, None], axis=1)
    return [((f32.logf(s) + m) - zl).reshape(-1).astype(np.float32)]


def grad_reference(a: SoftmaxXentAttrs, arrays, ins, outs) -> list[np.ndarray]:
    z, m, e, s, labels = _softmax_parts(arrays, ins)
    g = e / s
    g[np.arange(len(labels)), labels] -= np.float32(1)
    return [g.astype(np.float32).reshape(arrays[0].shape)]


LOSS = OpDef("softmax_xent", SoftmaxXentAttrs, loss_shapes, loss_reference, no_macs, integer=keep, loss=True)
def grad_bound(a: SoftmaxXentAttrs, ins, bounds) -> list[float]:
    """p - onehot is in [-1, 1] whenever the logits are finite, i.e. whenever the loss is (the guard's check)."""
    return [1.0]




# ---- the integer loss gradient (plan "backward": "int", training/integer_step.py) ----------------------------

GRAD_FRAC_BITS = 14  # the integer gradient's scale: 2^-14, so p - onehot lies in [-2^14, 2^14]
EXP_FRAC_BITS = 15   # the exp table's values: Q15, exp(0) = 2^15


@dataclass(frozen=True)
class SoftmaxXentGradIntAttrs:
    """grad = round(2^14 p) - 2^14 onehot(label), int32; p from the exp table, in integers only."""


def exp_table(logits_scale: float) -> np.ndarray:
    """e[j] = round(2^15 exp(-s j)), j = 0..255 (int32): exp of a logit j LSBs below the largest, s its float32
    scale; computed once on the host (the only float arithmetic of the integer loss gradient)."""
    j = np.arange(256, dtype=np.float64)
    return np.round(np.exp(-np.float64(np.float32(logits_scale)) * j) * (1 << EXP_FRAC_BITS)).astype(np.int32)


def grad_int_shapes(a: SoftmaxXentGradIntAttrs, ins) -> list[tuple[int, ...]]:
    if _check(ins[:2]) >= 1 << 16:
        raise ValueError("softmax_xent_grad_int: more than 65535 classes")
    if ins[2].shape != (256,):
        raise ValueError(f"softmax_xent_grad_int: exp table {ins[2].shape} is not (256,)")
    return [ins[0].shape]


def grad_int_reference(a: SoftmaxXentGradIntAttrs, arrays, ins, outs) -> list[np.ndarray]:
    """Per sample: m = max q; e_d = table[m - q_d]; S = sum e_d (int64, exact); p_d = (e_d 2^14 + S / 2) / S
    (integer division, floor); grad_d = p_d, minus 2^14 at the label."""
    q, labels, table = arrays
    n, c = q.shape[0], ins[0].shape[-1]
    labels = np.asarray(labels).astype(np.int64)
    if labels.min() < 0 or labels.max() >= c:
        raise ValueError(f"labels must be in [0, {c}); got {labels.min()}..{labels.max()}")
    q = q.reshape(n, c).astype(np.int64)
    e = np.asarray(table, np.int64)[q.max(axis=1, keepdims=True) - q]
    s = e.sum(axis=1, keepdims=True)
    g = ((e << GRAD_FRAC_BITS) + s // 2) // s
    g[np.arange(n), labels] -= 1 << GRAD_FRAC_BITS
    return [g.astype(np.int32).reshape(arrays[0].shape)]


def grad_int_bound(a: SoftmaxXentGradIntAttrs, ins, bounds) -> list[float]:
    """|grad| <= 2^14 (p in [0, 2^14]). Integer intermediates: e_d <= 2^15, e_d 2^14 <= 2^29, and S <= D 2^15 < 2^31
    (the shape rule takes D < 2^16 classes), so every value fits a uint32."""
    return [float(1 << GRAD_FRAC_BITS)]


def integer(node, rewrite):
    """softmax_xent_grad -> softmax_xent_grad_int: the exp table of the logits' scale, the gradient's scale 2^-14."""
    logits = rewrite.tensors[node.inputs[0]]
    table = rewrite.constant(f"{node.name}.exp_table", exp_table(logits.quant.s))
    rewrite.int_output(node.outputs[0], 2.0 ** -GRAD_FRAC_BITS)
    return replace(node, op="softmax_xent_grad_int", inputs=(*node.inputs, table), attrs=SoftmaxXentGradIntAttrs())


GRAD = OpDef("softmax_xent_grad", SoftmaxXentAttrs, grad_shapes, grad_reference, no_macs, bound=grad_bound,
             integer=integer)
GRAD_INT = OpDef("softmax_xent_grad_int", SoftmaxXentGradIntAttrs, grad_int_shapes, grad_int_reference, no_macs,
                 bound=grad_int_bound)
OPS = (LOSS, GRAD, GRAD_INT)
