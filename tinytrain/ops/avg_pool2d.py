"""Average pooling, int8, same quantization in and out (TFLite reference AveragePool).

Padding cells are not counted; the sum is divided by the number of valid cells with rounding
half away from zero (int8 models) or half up (models imported from uint8, where it was exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tinytrain.ops import OpDef


@dataclass(frozen=True)
class AvgPool2dAttrs:
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    act_min: int = -128
    act_max: int = 127
    round_half_up: bool = False


def infer_shapes(a: AvgPool2dAttrs, ins) -> list[tuple[int, ...]]:
    n, h, w, c = ins[0].shape
    pt, pl, pb, pr = a.padding
    ho = (h + pt + pb - a.kernel[0]) // a.stride[0] + 1
    wo = (w + pl + pr - a.kernel[1]) // a.stride[1] + 1
    if ho <= 0 or wo <= 0:
        raise ValueError(f"avg_pool2d: kernel {a.kernel} larger than input {ins[0].shape}")
    return [(n, ho, wo, c)]


def divide_rounded(acc: np.ndarray, count, half_up: bool) -> np.ndarray:
    """acc / count rounded as TFLite does: half away from zero, or half up (uint8 origin)."""
    count = np.asarray(count, np.int64)
    half = count // 2
    if half_up:
        return (acc + half) // count
    return np.where(acc > 0, (acc + half) // count, -((half - acc) // count))


def _window_sums(x: np.ndarray, a: AvgPool2dAttrs, ho: int, wo: int) -> np.ndarray:
    pt, pl, pb, pr = a.padding
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    win = sliding_window_view(xp, a.kernel, axis=(1, 2))
    win = win[:, : (ho - 1) * a.stride[0] + 1 : a.stride[0], : (wo - 1) * a.stride[1] + 1 : a.stride[1]]
    return win.sum(axis=(-2, -1))


def reference(a: AvgPool2dAttrs, arrays, ins, outs) -> list[np.ndarray]:
    x = arrays[0].astype(np.int64)
    _, ho, wo, _ = outs[0].shape
    sums = _window_sums(x, a, ho, wo)
    counts = _window_sums(np.ones((1,) + x.shape[1:3] + (1,), np.int64), a, ho, wo)
    y = divide_rounded(sums, counts, a.round_half_up)
    return [np.clip(y, a.act_min, a.act_max).astype(np.int8)]


def macs(a: AvgPool2dAttrs, ins, outs) -> int:
    return 0


OP = OpDef("avg_pool2d", AvgPool2dAttrs, infer_shapes, reference, macs)
