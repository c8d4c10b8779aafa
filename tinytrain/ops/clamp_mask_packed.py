"""The clamp mask of an int8 output saved as bits (forward), and its application to the gradient (backward, fp32).

Where the backward pass reads a saved int8 output only to know whether its clamp was active (``clamp_mask``), one
bit per element is enough (docs/guide/how-it-works.md): ``pack_clamp_mask`` runs in the forward pass right
after the output's producer and stores bit i % 8 of byte i // 8 of a sample (LSB first) = act_min < y[i] < act_max;
the last byte's unused bits are 0. ``clamp_mask_packed`` then gives g_in = g_out where the bit is 1, else 0 —
exactly ``clamp_mask``'s result (an output on a bound counts as clamped), from 1/8 of the saved bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.ops import OpDef, no_macs, same_bound
from tinytrain.ops.clamp_mask import ClampMaskAttrs


def packed_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """(N, bytes per sample) of the bits of a tensor of ``shape`` (dimension 0 the batch)."""
    per_sample = int(np.prod(shape[1:], dtype=np.int64))
    return shape[0], (per_sample + 7) // 8


def pack_shapes(a: ClampMaskAttrs, ins) -> list[tuple[int, ...]]:
    return [packed_shape(ins[0].shape)]


def pack_reference(a: ClampMaskAttrs, arrays, ins, outs) -> list[np.ndarray]:
    y = arrays[0].reshape(arrays[0].shape[0], -1)
    inside = (y > a.act_min) & (y < a.act_max)
    return [np.packbits(inside, axis=1, bitorder="little")]


@dataclass(frozen=True)
class ClampMaskPackedAttrs:
    """g_in = g_out where the saved bit is 1 (see the module docstring)."""


def apply_shapes(a: ClampMaskPackedAttrs, ins) -> list[tuple[int, ...]]:
    g, bits = ins
    if bits.shape != packed_shape(g.shape):
        raise ValueError(f"clamp_mask_packed: bits {bits.shape} do not fit gradient {g.shape}")
    return [g.shape]


def unpack(bits: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The boolean mask of a batch of ``shape`` from its packed bits."""
    n = int(np.prod(shape[1:], dtype=np.int64))
    return np.unpackbits(bits, axis=1, count=n, bitorder="little").astype(bool).reshape(shape)


def apply_reference(a: ClampMaskPackedAttrs, arrays, ins, outs) -> list[np.ndarray]:
    g, bits = arrays
    return [np.where(unpack(bits, g.shape), g, np.float32(0)).astype(np.float32)]


def apply_min_read(a: ClampMaskPackedAttrs, ins, outs, k: int) -> np.ndarray | None:
    """In place over the gradient only (output element q reads gradient element q)."""
    return np.arange(outs[0].size, dtype=np.int64) if k == 0 else None


PACK = OpDef("pack_clamp_mask", ClampMaskAttrs, pack_shapes, pack_reference, no_macs)
OP = OpDef("clamp_mask_packed", ClampMaskPackedAttrs, apply_shapes, apply_reference, no_macs,
           min_read=apply_min_read, bound=same_bound)
OPS = (PACK, OP)
