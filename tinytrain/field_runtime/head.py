"""Class-incremental heads: a new class's row of the head imprinted from its examples in the replay buffer.

The head is the cut model's last layer, compiled with one row per class up to ``max_classes``; it must read the
cut itself (the plan trains the head only), so the buffer's latents are its input features. Imprinting (Qi et al.
2018), in integers on the state bytes (the C edits the same bytes between ``tt_state_save`` and ``tt_state_load``):
with S_c the sum of the class's latents in the buffer (n_c of them) and S the sum over all n filled slots, the
direction d = n S_c - n_c S (the class mean minus the buffer's mean, times n n_c) is scaled to ``SCALE_NUM`` /
``SCALE_DEN`` of the mean integer L2 norm of the other seen classes' rows, floored (``DEFAULT_NORM`` x sqrt(width)
when there are none): T, and row[k] = clamp(round(d[k] T / isqrt(sum d^2)), -127, 127), rounding half up. The
row's bias puts its accumulator at the buffer's mean latent level with the other seen rows' mean there: with
s = S - n z (z the latent's zero point), bias = floor((floor(sum_j (w_j . s + n b_j) / m) - row . s) / n) over the
m other seen rows j (the sum 0 when none); with an empty buffer the floor mean of their biases (0 when none). Every
other state row of the class (weight remainders) is zeroed. 5/8 of the norm: chosen on validation images (a new
class from ten examples; the full norm takes too many of the old classes' samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tinytrain.codegen.state import HEADER_BYTES, state_layout
from tinytrain.errors import UsageError
from tinytrain.field_runtime.buffer import Slots
from tinytrain.ir import Graph
from tinytrain.training.sparse import layers

DEFAULT_NORM = 16
SCALE_NUM, SCALE_DEN = 5, 8


@dataclass(frozen=True)
class HeadLayout:
    """Where the head's rows sit in the state bytes: weight rows of ``width`` int8, int32 biases, other rows."""

    classes: int
    width: int
    weight: int  # byte offset of row 0
    bias: int
    others: tuple[tuple[int, int], ...]  # (byte offset of row 0, bytes per row)
    zero: int = 0  # the latent's (the head input's) zero point

    @property
    def scale(self) -> tuple[int, int]:
        """(numerator, denominator) of the imprinted row's norm over the other rows' mean norm."""
        return SCALE_NUM, SCALE_DEN


def head_layout(cut_graph: Graph, tg: Graph) -> HeadLayout | None:
    """The head's rows in the state of the training graph ``tg`` of ``cut_graph``; None when the state does not
    hold the whole head (its weights and bias trained, all rows) or the head does not read the cut."""
    head = layers(cut_graph)[-1]
    if head.inputs[0] != cut_graph.inputs[0] or len(head.inputs) < 3:
        return None
    w, b = head.inputs[1], head.inputs[2]
    at, where = HEADER_BYTES, {}
    for e in state_layout(tg):
        where[e.name] = (at, e)
        at += e.nbytes
    if w not in where or b not in where or any(where[n][1].partial for n in (w, b)):
        return None
    rows = where[w][1].full_rows
    others = tuple((off, e.nbytes // rows) for name, (off, e) in where.items()
                   if name not in (w, b) and not e.partial and e.full_rows == rows and name.startswith(w))
    width = int(np.prod(where[w][1].shape[1:]))
    zero = cut_graph.tensors[head.inputs[0]].quant.zero_point[0]
    return HeadLayout(rows, width, where[w][0], where[b][0], others, int(zero))


def check_sums(layout: HeadLayout, slots: int) -> None:
    """Refuse a buffer whose imprinting sums could overflow int64 (the C's arithmetic)."""
    d = 255 * slots * slots
    if d * d * layout.width >= 1 << 62 or d * 4096 >= 1 << 62:
        raise UsageError(f"--replay {slots}: too many slots for exact imprinting of a {layout.width}-wide head")


def _rdiv(a: int, b: int) -> int:
    return (2 * a + b) // (2 * b)


def imprint(state: bytes, layout: HeadLayout, buf: Slots, c: int, seen: np.ndarray) -> bytes:
    """The state bytes with class ``c``'s head row imprinted from the buffer (``seen``: the classes in use)."""
    out = bytearray(state)
    n = buf.filled
    xs, ys = buf.x[:n].astype(np.int64), buf.y[:n]
    mine = ys == c
    d = xs[mine].sum(0) * n - xs.sum(0) * int(mine.sum())
    w = np.frombuffer(state, np.int8, layout.classes * layout.width, layout.weight).reshape(layout.classes, -1)
    w = w.astype(np.int64)
    b = np.frombuffer(state, "<i4", layout.classes, layout.bias).astype(np.int64)
    others = [j for j in range(layout.classes) if seen[j] and j != c]
    if others:
        target = sum(math.isqrt(int((w[j] ** 2).sum())) for j in others) // len(others) * SCALE_NUM // SCALE_DEN
    else:
        target = DEFAULT_NORM * math.isqrt(layout.width)
    nd = math.isqrt(int((d * d).sum()))
    row = [0] * layout.width if nd == 0 else [min(127, max(-127, _rdiv(int(v) * target, nd))) for v in d]
    at = layout.weight + c * layout.width
    out[at : at + layout.width] = np.asarray(row, np.int8).tobytes()
    out[layout.bias + 4 * c : layout.bias + 4 * c + 4] = _bias(w, b, others, xs, row, layout.zero).to_bytes(
        4, "little", signed=True)
    for off, size in layout.others:
        out[off + c * size : off + (c + 1) * size] = bytes(size)
    return bytes(out)


def _bias(w: np.ndarray, b: np.ndarray, others: list[int], xs: np.ndarray, row: list[int], zero: int) -> int:
    """The new row's bias: its accumulator at the buffer's mean latent level with the other rows' mean there."""
    n = len(xs)
    if n == 0:
        return sum(int(b[j]) for j in others) // len(others) if others else 0
    s = xs.sum(0) - n * zero
    level = sum(int(w[j] @ s) + n * int(b[j]) for j in others) // len(others) if others else 0
    return (level - int(np.asarray(row, np.int64) @ s)) // n
