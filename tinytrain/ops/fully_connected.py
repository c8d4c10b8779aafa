"""Fully connected, int8: x (N,K), w (C_out,K), bias (C_out,) int32 or absent -> (N,C_out)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef
from tinytrain.quant import Requant, requantize


@dataclass(frozen=True)
class FullyConnectedAttrs:
    requant: Requant
    act_min: int = -128
    act_max: int = 127


def infer_shapes(a: FullyConnectedAttrs, ins) -> list[tuple[int, ...]]:
    x, w = ins[0], ins[1]
    if len(x.shape) != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"fully_connected: input {x.shape} does not match weight {w.shape}")
    return [(x.shape[0], w.shape[0])]


def accumulate(x: np.ndarray, zx: int, w: np.ndarray, zw, bias: np.ndarray | None) -> np.ndarray:
    xz = x.astype(np.float64) - zx
    wz = w.astype(np.float64) - np.asarray(zw, np.float64).reshape(-1, 1)
    acc = (xz @ wz.T).astype(np.int64)
    if bias is not None:
        acc += bias.astype(np.int64)
    return acc


def reference(a: FullyConnectedAttrs, arrays, ins, outs) -> list[np.ndarray]:
    bias = arrays[2] if len(arrays) > 2 else None
    acc = accumulate(arrays[0], ins[0].quant.zp, arrays[1], ins[1].quant.zero_point, bias)
    return [requantize(acc, a.requant, outs[0].quant.zp, a.act_min, a.act_max)]


def macs(a: FullyConnectedAttrs, ins, outs) -> int:
    return ins[1].shape[0] * ins[1].shape[1]


OP = OpDef("fully_connected", FullyConnectedAttrs, infer_shapes, reference, macs)
