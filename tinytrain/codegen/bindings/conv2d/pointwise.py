"""Pointwise forward convolutions (conv2d.c.j2, ``pointwise``): an output pixel's Ci inputs widened once into a
stack buffer, two pixels at a time ("xw2") or one ("xw"), else widened on the way two pixels at a time ("x2"), else
one pixel at a time; the weight rows packed as halfwords where enough pixels share them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinytrain.codegen.bindings.conv2d.assemble import head, int8_weight, requant, sizes, tail
from tinytrain.codegen.bindings.conv2d.layer import Conv, Variant, overlap, unless
from tinytrain.codegen.bindings.conv2d.tables import packed_quads, packed_rows
from tinytrain.codegen.context import Call, Signature

# The longest input vector a convolution kernel widens into a stack buffer once per output pixel (conv2d.c.j2 "xw"):
# 256 int8 channels, 512 bytes of int16 (+ 256 bytes of im2col window), part of the measured stack (tinytrain/cores.py
# STACK_BYTES: the models measured have 256-channel pointwise inputs). Inputs of up to XW_MAX / 2 go two pixels at a
# time ("xw2": 2 output channels x 2 pixels per inner product, the buffers as long as one pixel's of XW_MAX).
XW_MAX = 256
# The most input channels a device pointwise kernel has as a compile-time constant ("ci"): its inner products unroll
# (#pragma GCC unroll in tt_dot2x2w_s8, commit ca5d4d1).
FIXED_CI_MAX = 128
# The most output channels of a two-pixel pointwise kernel whose second pixel's outputs wait in a stack buffer
# (conv2d.c.j2 "hold"; the models measured have at most 160 there; commit 95ddfe5).
HOLD_MAX = 256
# The fewest pixels (per call) of a pointwise kernel whose weight rows are packed as halfwords (packed_rows,
# conv2d.c.j2 "packed"): each packed weight saves its widening once per pixel, for 2 more bytes of flash. Measured on
# qemu-m7 (commit 01fdfe4): the 4x4 layers of mbv2-w0.35 / proxyless-w0.3 / mcunet-5fps (16 pixels at 128x128 inputs)
# hold most of their pointwise weights (62-92 KB, twice that packed) for 4-6 % of their MACs.
PACKED_MIN_PIXELS = 32


def pair_safe(ctx, x: str, y: str, pixels: int, ci: int, co: int) -> bool:
    """Whether a pointwise kernel taking two pixels at a time with their inputs widened on the way (conv2d.c.j2
    "x2": pixel p + 1's outputs are stored while pixel p's input is still read) may write output ``y`` where the
    planner put it against input ``x`` (ops/conv2d.py min_read keeps only pixel p + 1's own input safe from its
    outputs): their buffers apart, or every pixel's outputs below the input of the pixel before."""
    extents = overlap(ctx, x, y)
    if extents is None:
        return True
    (i0, _), (o0, _) = extents
    p = np.arange(1, pixels)
    return bool(np.all(o0 + (p + 1) * co <= i0 + (p - 1) * ci))



@dataclass(frozen=True)
class Stage:
    """How a pointwise kernel takes its inputs (conv2d.c.j2's template parameters of that name)."""

    xw2: int = 0         # two pixels widened into buffers of this many channels
    xw: int = 0          # one pixel widened into a buffer of this many channels
    x2: bool = False     # two pixels widened on the way
    hold: int = 0        # x2: the second pixel's Co outputs wait in a stack buffer
    zb: bool = False     # x2: the input zero point in a table of the rows' sums
    ci: bool = False     # the input channel count a constant
    packed: bool = False  # the weight rows a table of halfwords


def _fixed_ci(c: Conv) -> bool:
    return c.device and c.cin <= FIXED_CI_MAX and c.cin % 4 == 0


def _packed_rows(c: Conv) -> str | None:
    return unless((c.pixels >= PACKED_MIN_PIXELS, f"fewer than PACKED_MIN_PIXELS = {PACKED_MIN_PIXELS} pixels"),
                  (c.frozen, "the step updates the weight"))


def _xw2_why_not(c: Conv) -> str | None:
    return unless((c.pointwise, "not pointwise"), (c.cin <= XW_MAX // 2, f"over XW_MAX / 2 = {XW_MAX // 2} inputs"))


def _xw_why_not(c: Conv) -> str | None:
    return unless((c.pointwise, "not pointwise"), (c.cin <= XW_MAX, f"over XW_MAX = {XW_MAX} inputs"),
                  (c.split_rows is None, "a split weight"))


def _quads_why_not(c: Conv) -> str | None:
    return _xw_why_not(c) or unless((c.device, "a host build"),
                                    (c.cin % 4 == 0 and c.cout % 4 == 0, "channels not multiples of 4")) \
        or _packed_rows(c)


def _x2_safe(c: Conv) -> bool:
    return pair_safe(c.ctx, c.x.name, c.y.name, c.pixels, c.cin, c.cout)


def _x2_why_not(c: Conv) -> str | None:
    return unless((c.pointwise, "not pointwise"), (c.device, "a host build"),
                  (c.cout <= HOLD_MAX or _x2_safe(c),
                   f"over HOLD_MAX = {HOLD_MAX} outputs, placed where the second pixel's may not be stored"))


def _weight_rows(c: Conv, cols: int) -> np.ndarray:
    """The weight rows less their zero points, padded with zeros to ``cols`` elements."""
    rows = np.zeros((c.cout, cols), np.int64)
    rows[:, : c.window] = c.w.data.reshape(c.cout, -1).astype(np.int64) - np.asarray(c.wzp).reshape(c.cout, 1)
    return rows


def packed_weight(s: Signature, c: Conv, cols: int) -> bool:
    """The weight rows as a table of halfword pairs (tt_dot2x2p_s8), padded to ``cols`` elements."""
    rows = _weight_rows(c, cols)
    s.add("const uint32_t *wpk", c.ctx.table(c.node, "weight_packed", packed_rows(rows)),
          f"(Co,{rows.shape[1] // 2}): (w[o,c], w[o,c+2]), (w[o,c+1], w[o,c+3]) per 4 elements"
          + (", less w_zp" if c.has_wzp else ""))
    return False


def _quad_weight(s: Signature, c: Conv) -> bool:
    s.add("const uint32_t *wpk", c.ctx.table(c.node, "weight_packed", packed_quads(_weight_rows(c, c.cin))),
          "(Co/4,Ci/4,4,2): (w[o+q,c], w[o+q,c+2]), (w[o+q,c+1], w[o+q,c+3]) per 4 elements and row q"
          + (", less w_zp" if c.has_wzp else ""))
    return False


def _build(c: Conv, st: Stage, weights) -> Call:
    s = head(c)
    split = weights(s, c)
    requant(s, c, packed=st.packed)
    if st.zb:
        sums = c.w.data.reshape(c.cout, -1).astype(np.int64).sum(axis=1)
        s.add("const int32_t *zb", c.ctx.table(c.node, "zp_sums", (-c.x.quant.zp * sums).astype(np.int32)),
              "(Co,): -in_zp * sum_c weight[o,c]")
    suffix, k = tail(s, c, sizes(c, ci=not st.ci, co=True), split, zb=st.zb)
    x2 = "_x2" + (f"_hold{st.hold}" if st.hold else "") if st.x2 else ""
    stage = "_xw2" if st.xw2 else ("_xw" if st.xw else x2)
    pairs = bool(st.xw2 or st.x2)
    co_odd = bool(pairs and c.cout % 2)
    return s.call("conv2d", f"tt_conv_1x1{stage}_s8{suffix}" + (f"_ci{c.cin}" if st.ci else "")
                  + ("_zb" if st.zb else "") + ("_packed" if st.packed else "") + ("_co_odd" if co_odd else ""),
                  dict(k, pointwise=True, xw=0 if pairs else st.xw, xw2=st.xw2, x2=st.x2, hold=st.hold,
                       ci=c.cin if st.ci else 0, zb=st.zb, packed=st.packed, has_wzp=c.has_wzp and not st.packed,
                       co_odd=co_odd))


def _x2(c: Conv) -> Call:
    # Beside a weight the step does not update, "x2" moves the input zero point into the start of the sums ("zb":
    # -in_zp * sum_c w[o,c] per channel, a table): the inputs are widened as they are, and the channel count is a
    # constant, so that the inner products need few enough registers for an asm loop (tt_simd.h TT_DOT2X2_ASM).
    # Beside a split weight whose SRAM rows are even in number, a pair of rows o, o + 1 is always in one array: the
    # channel count is a constant too (rows at immediate offsets, tt_simd.h TT_DOT2X2Z_ASM).
    split = c.split_rows is not None
    zb = not split and not c.has_wzp and c.frozen
    ci = zb or (split and c.split_rows % 2 == 0)
    return _build(c, Stage(x2=True, hold=0 if _x2_safe(c) else c.cout, zb=zb, ci=ci), int8_weight)


def _xw_bytes(n: int) -> int:
    return 2 * n  # int16 (tt_xw_t / tt_xw2_t: halfword pairs)


POINTWISE_XW2_PACKED = Variant(
    "pointwise xw2, packed rows", "conv2d", ("weight_packed",),
    lambda c: _xw2_why_not(c) or unless((_fixed_ci(c), "Ci not a device constant (FIXED_CI_MAX, a multiple of 4)"))
    or _packed_rows(c),
    lambda c: _build(c, Stage(xw2=XW_MAX // 2, ci=True, packed=True), lambda s, c: packed_weight(s, c, c.cin)),
    stack=lambda c: 2 * _xw_bytes(XW_MAX // 2), flash=lambda c: 2 * c.cout * c.cin)
POINTWISE_XW2 = Variant(
    "pointwise xw2", "conv2d", (), _xw2_why_not,
    lambda c: _build(c, Stage(xw2=XW_MAX // 2, ci=_fixed_ci(c)), int8_weight),
    stack=lambda c: 2 * _xw_bytes(XW_MAX // 2), flash=lambda c: c.cout * c.cin)
POINTWISE_XW_PACKED = Variant(
    "pointwise xw, packed rows of four", "conv2d", ("weight_packed",), _quads_why_not,
    lambda c: _build(c, Stage(xw=XW_MAX, packed=True), _quad_weight),
    stack=lambda c: _xw_bytes(XW_MAX), flash=lambda c: 2 * c.cout * c.cin)
POINTWISE_XW = Variant(
    "pointwise xw", "conv2d", (), _xw_why_not, lambda c: _build(c, Stage(xw=XW_MAX), int8_weight),
    stack=lambda c: _xw_bytes(XW_MAX), flash=lambda c: c.cout * c.cin)
POINTWISE_X2 = Variant(
    "pointwise x2 (hold, zb)", "conv2d", ("zp_sums",), _x2_why_not, _x2,
    stack=lambda c: 0 if _x2_safe(c) else c.cout, flash=lambda c: c.cout * c.cin + 4 * c.cout)
POINTWISE = Variant(
    "pointwise", "conv2d", (), lambda c: unless((c.pointwise, "not pointwise")),
    lambda c: _build(c, Stage(), int8_weight), stack=lambda c: 0, flash=lambda c: c.cout * c.cin)
