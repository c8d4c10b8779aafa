"""The flash tables forward convolution variants make from a frozen weight: halfword pairs and packings for the
DSP inner products (tt_simd.h) and the host kernels' pairs (tt_rows.h)."""

from __future__ import annotations

import numpy as np


def planar_pairs(weight: np.ndarray, wzp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A depthwise weight (C, kh, kw, 1), kw = 2m + 1, less its zero points, as (C, kh, 2m) words for
    tt_dwrow2_s1 / tt_dwrow2_s2 (tt_simd.h), per window row (w_2k, w_2k+1), k < m, then (w_2k-1, w_2k), k = 1 .. m,
    as int16 halfwords, low first; and each channel's sum of taps (C,) int32."""
    c, kh, kw = weight.shape[:3]
    v = weight.reshape(c, kh, kw).astype(np.int64) - np.asarray(wzp, np.int64).reshape(c, 1, 1)
    h = v & 0xFFFF
    even = h[:, :, 0:kw - 1:2] | (h[:, :, 1:kw:2] << 16)
    odd = h[:, :, 1:kw - 1:2] | (h[:, :, 2:kw:2] << 16)
    return np.concatenate([even, odd], axis=2).astype(np.uint32), v.sum(axis=(1, 2)).astype(np.int32)


def packed_rows(rows: np.ndarray) -> np.ndarray:
    """Weight rows (Co, K), K % 4 == 0, as (Co, K/2) words for tt_dot2x2p_s8 (tt_simd.h): per row and group of four
    elements c..c+3, (w[c], w[c+2]) and (w[c+1], w[c+3]) as int16 halfwords, low first."""
    v = np.asarray(rows, np.int64) & 0xFFFF
    g = v.reshape(v.shape[0], -1, 4)
    return np.stack([g[..., 0] | (g[..., 2] << 16), g[..., 1] | (g[..., 3] << 16)], axis=-1).reshape(
        v.shape[0], -1).astype(np.uint32)


def packed_quads(rows: np.ndarray) -> np.ndarray:
    """Weight rows (Co, K), Co % 4 == 0 and K % 4 == 0, as (Co/4, K/4, 4, 2) words for tt_dot4wp_s8 (tt_simd.h): per
    block of four rows, group of four elements and row, packed_rows' two words, so that one pointer reads a block's
    group at constant offsets."""
    co, k = rows.shape
    return packed_rows(rows).reshape(co // 4, 4, k // 4, 2).transpose(0, 2, 1, 3).copy()


def host_pairs_table(weight: np.ndarray, wzp: np.ndarray, lanes: int) -> np.ndarray:
    """A host convolution's weight (Co, kh, kw, Ci) less its zero points as conv2d_rows.c.j2's wt (K2, Cp, 2) int16:
    [j, o, e] = weight[o, 2j + e] - w_zp[o] over a row's K = kh * kw * Ci elements, 0 past K (K odd) and past Co
    (Cp: Co padded to a multiple of ``lanes``)."""
    co = weight.shape[0]
    rows = weight.reshape(co, -1).astype(np.int32) - np.asarray(wzp, np.int32).reshape(co, 1)
    k2, cp = -(-rows.shape[1] // 2), -(-co // lanes) * lanes
    table = np.zeros((cp, 2 * k2), np.int16)
    table[:co, : rows.shape[1]] = rows
    return table.reshape(cp, k2, 2).transpose(1, 0, 2).reshape(-1)


def packed_taps(weight: np.ndarray, wzp: np.ndarray) -> np.ndarray:
    """A depthwise weight (C, kh, kw, 1), less its zero points, as (C/4, kh*kw, 2) words for tt_mac4p_s8 (tt_simd.h):
    per block of four channels o..o+3 and tap, (w[o], w[o+2]) and (w[o+1], w[o+3]) as int16 halfwords, low first."""
    c = weight.shape[0]
    v = weight.reshape(c, -1).astype(np.int64) - np.asarray(wzp, np.int64).reshape(c, 1)
    taps = v.shape[1]
    rows = v.reshape(c // 4, 4, taps).transpose(0, 2, 1).reshape(c // 4, 4 * taps)  # per block: tap by tap, 4 channels
    return packed_rows(rows).reshape(c // 4, taps, 2)  # packed_rows' halfword pairs, over the block's four channels
