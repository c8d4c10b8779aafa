"""Depthwise forward convolutions on a Cortex-M: one channel at a time with every output's window clipped at compile
time (depthwise_map.c.j2) where the output map is small; else one channel at a time through a ring of input rows
(depthwise_planar.c.j2) where the window and map suit it; else four channels at a time (depthwise_conv2d.c.j2), with
the taps packed as halfwords for 3x3 windows of a frozen weight."""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.bindings.conv2d.assemble import head, int8_weight, requant, sizes, tail
from tinytrain.codegen.bindings.conv2d.layer import Conv, Variant, overlap, unless
from tinytrain.codegen.bindings.conv2d.tables import packed_taps, planar_pairs
from tinytrain.codegen.context import Call, Signature

# The most stack bytes of the ring of input rows of a planar depthwise kernel (depthwise_planar.c.j2: kh rows of
# planar_width halfwords) or of the input map of one unrolling every window (depthwise_map.c.j2); a wider one takes
# the kernel four channels at a time. 3x3 windows over 64-pixel rows take 408, 5x5 ones at stride 2 680 (measured on
# qemu-m7: planar, proxyless-w0.3's streamed 5x5 layer saves 0.31 M instructions per step for 4 bytes more of the
# measured stack), inside the measured stack's reserve (tinytrain/cores.py STACK_BYTES).
PLANAR_RING_MAX = 680
# The least share of a planar depthwise kernel's window taps that lie inside the input (the rest, padding, it
# multiplies too, where the four-channel kernel skips them): measured on qemu-m7, 7x7 windows over 4x4 maps (a third
# inside) take a third more instructions planar, 5x5 ones (a half inside) a little fewer (maps that small now take
# depthwise_map.c.j2, which skips the padding).
PLANAR_MIN_INSIDE = 0.45
# The most channels of a planar depthwise kernel: its gather reads a row's inputs 7 channel counts apart at most as
# immediate offsets of 12 bits (tt_simd.h tt_gather16_s8).
PLANAR_C_MAX = 585


# The most products, as window rows x words (kh * (kw + 1) / 2 per output), a depthwise kernel that unrolls every
# output's clipped window (depthwise_map.c.j2) has per channel: its code. Measured on qemu-m7 against the planar
# kernel, per step of each zoo model: 4x4 maps -0.4 to -0.7 M instructions (less flash: no tap pair tables), 8x8 ones
# -0.5 to -0.8 M more for -12 to +33 KB of flash, 3x3 windows over 16x16 maps (1,536) -0.1 to -0.3 M more for 8 to
# 13 KB; 5x5 ones over 16x16 maps (3,840) -0.27 M more for 35 KB (left planar).
MAP_TERMS_MAX = 2048


def map_outputs(k: dict, h: int, wd: int, ho: int, wo: int) -> bool:
    """Whether depthwise_map.c.j2 takes a depthwise convolution: odd windows at least 3 wide, not dilated, of at most
    MAP_TERMS_MAX products per channel, from an input map whose int16 copy fits PLANAR_RING_MAX bytes."""
    return (k["kw"] >= 3 and k["kw"] % 2 == 1 and (k["dh"], k["dw"]) == (1, 1)
            and ho * wo * k["kh"] * (k["kw"] + 1) // 2 <= MAP_TERMS_MAX and h * ((wd + 1) // 2) * 4 <= PLANAR_RING_MAX)


def planar_width(k: dict, h: int, wd: int, ho: int, wo: int) -> int:
    """The halfwords of a row of the planar depthwise kernel's ring (depthwise_planar.c.j2), even, or 0 where the
    four-channel kernel (depthwise_conv2d.c.j2) takes it: windows not odd and at least 3 wide, dilated, strided by
    more than 2 along the row or more than their height down, or (measured on qemu-m7) 3 wide at stride 2 (the
    gather of four inputs per output costs more than the taps it saves); a ring over PLANAR_RING_MAX bytes; fewer
    than PLANAR_MIN_INSIDE of the taps inside the input. A row holds the input row after pl padding cells, and
    reaches as far as the whole words the last outputs read: two outputs at a time from halfword 0 (stride 1) or
    0 and 2 (stride 2), m + 1 (stride 1) or m + 2 (stride 2) words each, kw = 2m + 1."""
    kh, kw, sh, sw = k["kh"], k["kw"], k["sh"], k["sw"]
    if (kw < 3 or kw % 2 == 0 or (k["dh"], k["dw"]) != (1, 1) or sw not in (1, 2) or sh > kh
            or (kw == 3 and sw == 2)):
        return 0
    inside = (_inside_taps(h, ho, sh, k["pt"], kh) * _inside_taps(wd, wo, sw, k["pl"], kw)) / (kh * kw)
    last = (wo - 1) - (wo - 1) % 2  # the first output of the last pair (of a lone last output: itself)
    reach = last * sw + kw + (1 if sw == 1 else 3)  # halfwords up to the last word read, +1
    n = max(k["pl"] + wd, reach)
    n += n % 2
    return n if kh * n * 2 <= PLANAR_RING_MAX and inside >= PLANAR_MIN_INSIDE else 0


def _inside_taps(n: int, n_out: int, stride: int, pad: int, taps: int) -> float:
    """The mean count of a window's taps along one axis that lie inside the input's ``n`` cells."""
    first = np.arange(n_out) * stride - pad
    return float(np.mean(np.maximum(np.minimum(first + taps, n) - np.maximum(first, 0), 0)))


def planar_safe(ctx, x: str, y: str, c: int, band) -> bool:
    """Whether the planar depthwise kernel, which stores channel by channel (all of channel 0's outputs first), may
    write output ``y`` where the planner put it against input ``x``: their buffers apart, or (whole tensors) the
    output the planner's distance of whole pixels ahead of the input (ops/conv2d.py min_read: an output element
    is stored below every input element a later one reads, which per channel still holds; a distance of a part of
    a pixel would have a channel's outputs overwrite another channel's inputs not yet read)."""
    extents = overlap(ctx, x, y)
    if extents is None:
        return True
    (i0, _), (o0, _) = extents
    return band is None and i0 >= o0 and (i0 - o0) % c == 0




def _device_dw(c: Conv) -> str | None:
    return unless((c.depthwise, "not depthwise"), (c.device, "a host build"), (c.cout == c.cin, "a multiplier over 1"))


def _placed(c: Conv) -> bool:
    return planar_safe(c.ctx, c.x.name, c.y.name, c.cin, c.band)


def _map_why_not(c: Conv) -> str | None:
    return _device_dw(c) or unless(
        (c.band is None, "a band of a streamed region"),
        (map_outputs(c.geometry, c.h, c.wd, c.ho, c.wo),
         f"the window or map is too large (MAP_TERMS_MAX = {MAP_TERMS_MAX}, PLANAR_RING_MAX = {PLANAR_RING_MAX})"),
        (_placed(c), "the planner's placement of its output against its input (planar_safe)"))


def _planar_why_not(c: Conv) -> str | None:
    return _device_dw(c) or unless(
        (c.cin <= PLANAR_C_MAX, f"over PLANAR_C_MAX = {PLANAR_C_MAX} channels"),
        (planar_width(c.geometry, c.h, c.wd, c.ho, c.wo) > 0, "the window, stride, ring or padding (planar_width)"),
        (_placed(c), "the planner's placement of its output against its input (planar_safe)"))


def _planar_pairs_why_not(c: Conv) -> str | None:
    # The taps' halfword pairs and sums as tables, for 3x3 windows (2.7 times the flash of the int8 weights) and for
    # a band's kernel, which would make them again at every row; larger windows make theirs once per channel
    # (measured on qemu-m7: tables for all saved 0.4-0.8 M instructions of mcunet-5fps / proxyless-w0.3's steps for
    # 84-138 KB more flash).
    return _planar_why_not(c) or unless((c.kh * c.kw <= 9 or c.band is not None, "a window over 3x3 outside a band"),
                                        (c.frozen, "the step updates the weight"))


def _packed_why_not(c: Conv) -> str | None:
    # Depthwise taps packed as halfwords (twice the flash of the int8 weights): 3x3 windows only, where the weights
    # are few and the loads a large share of a tap (measured on qemu-m7: packing 5x5 / 7x7 too saved 5-8 % of the
    # depthwise instructions for 74-144 KB more flash on mcunet / proxyless).
    return _device_dw(c) or unless((c.cout % 4 == 0, "channels not a multiple of 4"),
                                   (c.kh * c.kw <= 9, "a window over 3x3"), (c.frozen, "the step updates the weight"))


def _map(c: Conv) -> Call:
    s = head(c)
    split = int8_weight(s, c)
    requant(s, c, packed=False)
    suffix, k = tail(s, c, {}, split)  # every size a constant
    return s.call("depthwise_map", f"tt_depthwise_conv_{c.window_name}_s8{suffix}_map_c{c.cin}_{c.h}x{c.wd}_to_"
                  f"{c.ho}x{c.wo}", dict(k, c=c.cin, h=c.h, w=c.wd, ho=c.ho, wo=c.wo))


def _pair_tables(s: Signature, c: Conv) -> bool:
    pairs, sums = planar_pairs(c.w.data, c.wzp)
    s.add("const uint32_t *wpairs", c.ctx.table(c.node, "tap_pairs", pairs), f"(Co,{c.kh},{c.kw - 1}): per window "
          f"row (w_2k, w_2k+1), then (w_2k-1, w_2k){', less w_zp' if c.has_wzp else ''}")
    s.add("const int32_t *wsums", c.ctx.table(c.node, "tap_sums", sums), "(Co,): sum of the taps")
    return False


def _planar(c: Conv, pairs: bool) -> Call:
    s = head(c)
    split = _pair_tables(s, c) if pairs else int8_weight(s, c)
    requant(s, c, packed=pairs)
    suffix, k = tail(s, c, sizes(c, ci=False, co=False, planar=True), split)
    wb = planar_width(c.geometry, c.h, c.wd, c.ho, c.wo)
    return s.call("depthwise_planar", f"tt_depthwise_conv_{c.window_name}_s8{suffix}_planar_c{c.cin}_w{c.wd}"
                  + ("_pairs" if pairs else ""), dict(k, c=c.cin, w=c.wd, wo=c.wo, wb=wb, pairs=pairs))


def _packed_taps(s: Signature, c: Conv) -> bool:
    s.add("const uint32_t *wpk", c.ctx.table(c.node, "taps_packed", packed_taps(c.w.data, c.wzp)),
          f"(Co/4,{c.kh * c.kw},2): (w[o], w[o+2]), (w[o+1], w[o+3]) per tap{', less w_zp' if c.has_wzp else ''}")
    return False


def _channels4(c: Conv, packed: bool) -> Call:
    s = head(c)
    split = _packed_taps(s, c) if packed else int8_weight(s, c)
    requant(s, c, packed=packed)
    suffix, k = tail(s, c, sizes(c, ci=True, co=True), split)
    mult = c.cout // c.cin
    name = f"tt_depthwise_conv_{c.window_name}" + (f"_m{mult}" if mult > 1 else "") + f"_s8{suffix}"
    return s.call("depthwise_conv2d", name + ("_packed" if packed else ""), dict(k, mult=mult, packed=packed))


def _ring_bytes(c: Conv) -> int:
    return c.kh * planar_width(c.geometry, c.h, c.wd, c.ho, c.wo) * 2


def _taps(c: Conv) -> int:
    return c.cout * c.kh * c.kw


DEPTHWISE_MAP = Variant(
    "depthwise map", "depthwise_map", (), _map_why_not, _map,
    stack=lambda c: c.h * ((c.wd + 1) // 2) * 4 + c.kh * (c.kw - 1) * 4, flash=_taps)
DEPTHWISE_PLANAR_PAIRS = Variant(
    "depthwise planar, tap pair tables", "depthwise_planar", ("tap_pairs", "tap_sums"), _planar_pairs_why_not,
    lambda c: _planar(c, True), stack=_ring_bytes, flash=lambda c: c.cout * (c.kh * (c.kw - 1) + 1) * 4)
DEPTHWISE_PLANAR = Variant(
    "depthwise planar", "depthwise_planar", (), _planar_why_not, lambda c: _planar(c, False),
    stack=lambda c: _ring_bytes(c) + c.kh * (c.kw - 1) * 4, flash=_taps)
DEPTHWISE_PACKED = Variant(
    "depthwise packed taps", "depthwise_conv2d", ("taps_packed",), _packed_why_not, lambda c: _channels4(c, True),
    stack=lambda c: 0, flash=lambda c: 2 * _taps(c))
DEPTHWISE = Variant(
    "depthwise four channels", "depthwise_conv2d", (), lambda c: unless((c.depthwise, "not depthwise")),
    lambda c: _channels4(c, False), stack=lambda c: 0, flash=_taps)
