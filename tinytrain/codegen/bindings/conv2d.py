"""The C bindings of ``conv2d`` (ops/conv2d.py): the int8 forward (regular, pointwise, depthwise), the fp32 input
and weight gradients, and the weight gradient fused with its SGD update (ops/grad_weight_sgd_update.py).
"""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.bindings.common import (band_params, bias_input, bias_wzp_suffix, channel_range, input_dequant,
                                               requant_tables, rounding_suffix, rq_helper, weight_dequant, weight_param,
                                               weight_zero_points, window_name)
from tinytrain.codegen.bindings.grad_weight_sgd_update import fused_call
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node
from tinytrain.ops.conv2d import grad_input_block


# The longest input vector a convolution kernel widens into a stack buffer once per output pixel (conv2d.c.j2 "xw"):
# 256 int8 channels, 512 bytes of int16 (+ 256 bytes of im2col window), part of the measured stack (memory/report.py
# STACK_BYTES: the models measured have 256-channel pointwise inputs).
XW_MAX = 256
# The most elements of a host build kernel's stack arrays (conv2d_rows.c.j2: a weight the step updates, as K x Cp
# halfwords; conv2d_grad_input.c.j2: a blocked depthwise gx, 4 bytes each): at most 256 KB of the host thread's
# stack; a larger one takes the device's kernel.
HOST_WEIGHT_MAX = 1 << 16
# The most input channels a device pointwise kernel has as a compile-time constant ("ci").
FIXED_CI_MAX = 128
# The most output channels of a two-pixel pointwise kernel whose second pixel's outputs wait in a stack buffer
# (conv2d.c.j2 "hold"; the models measured have at most 160 there).
HOLD_MAX = 256
# The fewest pixels (per call) of a pointwise kernel whose weight rows are packed as halfwords (rows_packed): each
# packed weight saves its widening once per pixel, for 2 more bytes of flash. Measured on qemu-m7: the 4x4 layers of
# mbv2-w0.35 / proxyless-w0.3 / mcunet-5fps (16 pixels at 128x128 inputs) hold most of their pointwise weights
# (62-92 KB, twice that packed) for 4-6 % of their MACs.
PACKED_MIN_PIXELS = 32


def conv2d(node: Node, ctx) -> Call:
    a = node.attrs
    x, w, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    _, h, wd, cin = x.shape
    cout, kh, kw, _ = w.shape
    _, ho, wo, _ = y.shape
    bias = bias_input(node)
    wzp = weight_zero_points(w, cout)
    has_wzp = bool(np.any(wzp))
    depthwise = a.groups != 1
    padded = any(a.padding)
    pointwise = not depthwise and (kh, kw) == (1, 1) and a.stride == (1, 1) and not padded
    (sh, sw), (dh, dw), (pt, pl) = a.stride, a.dilation, a.padding[:2]
    k = dict(kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, padded=padded,
             has_bias=bias is not None, has_wzp=has_wzp)
    s = Signature()
    if pointwise:
        s.add("int8_t *out", ctx.act(y.name), "(P,Co)")
        s.add("const int8_t *inp", ctx.act(x.name), "(P,Ci)")
    else:
        s.add("int8_t *out", ctx.act(y.name), "(Ho,Wo,Co)")
        s.add("const int8_t *inp", ctx.act(x.name), "(H,W,Ci)")
    kpad = padded_window(kh * kw * cin, ctx, w) if not (pointwise or depthwise or ctx.host) else 0
    # A device pointwise kernel for few input channels has them as a constant (conv2d.c.j2 "ci"): its inner products
    # unroll.
    fixed_ci = pointwise and not ctx.host and cin <= FIXED_CI_MAX and cin % 4 == 0
    # A device regular convolution of two-pixel windows ("xw2") has them too: each window row it gathers is then a
    # copy of a constant length, which gcc makes a few word loads and stores.
    window_ci = not (pointwise or depthwise or ctx.host) and kh * kw * cin <= XW_MAX // 2
    band = None if pointwise else ctx.band(node)
    # A device depthwise convolution one channel at a time with every output's window clipped at compile time
    # (depthwise_map.c.j2) where its output map is small (map_outputs), under planar_safe's placement rule; else one
    # channel at a time (depthwise_planar.c.j2) where planar_width allows it and the planner's placement of its
    # output lets it store in that order (planar_safe); wb: its ring rows' width.
    small = (depthwise and cout == cin and not ctx.host and band is None and map_outputs(k, h, wd, ho, wo)
             and planar_safe(ctx, x.name, y.name, cin, band))
    wb = planar_width(k, h, wd, ho, wo) if depthwise and cout == cin <= PLANAR_C_MAX and not (ctx.host or small) else 0
    if wb and not planar_safe(ctx, x.name, y.name, cin, band):
        wb = 0
    # A device pointwise kernel of XW_MAX / 2 + 1 .. XW_MAX input channels (one pixel at a time, conv2d.c.j2 "xw") may
    # have its rows packed too, four at a time (tt_dot4wp_s8): Ci and Co multiples of 4.
    wide_rows = (pointwise and not ctx.host and XW_MAX // 2 < cin <= XW_MAX and cin % 4 == 0 and cout % 4 == 0)
    # depthwise taps packed as halfwords (twice the flash of the int8 weights): 3x3 windows only, where the weights
    # are few and the loads a large share of a tap (measured on qemu-m7: packing 5x5 / 7x7 too saved 5-8 % of the
    # depthwise instructions for 74-144 KB more flash on mcunet / proxyless)
    packed = (depthwise and not (wb or small) and cout == cin and cout % 4 == 0 and kh * kw <= 9
              and not ctx.trainable(w.name) and not ctx.host)
    # A host build convolves with conv2d_rows.c.j2: pointwise and regular ones across output channels in blocks of
    # `lanes`, their weights as halfword pairs of inputs (tt_rows.h tt_dot_pairs4) — a table made here for a weight
    # the step does not update ("pairs"), else made in a stack array at each call, of at most HOST_WEIGHT_MAX
    # elements (else the device's kernel), from the SRAM rows the step updates and a table of the others (split);
    # depthwise ones of multiplier 1 across their channels.
    lanes = 8 if cout <= 8 else 16
    padded_cout = -(-cout // lanes) * lanes
    host_pairs = ctx.host and not depthwise and not ctx.trainable(w.name)
    host = ctx.host and (cout == cin if depthwise else
                         host_pairs or kh * kw * cin * padded_cout <= HOST_WEIGHT_MAX)
    host_split = host and not depthwise and ctx.trainable_rows(w.name) is not None
    if host_pairs:
        s.add("const int16_t *wpairs", ctx.table(node, "weight_pairs", host_pairs_table(w.data, wzp, lanes)),
              f"(K2,Cp,2): (w[o,2j], w[o,2j+1]){', less w_zp' if has_wzp else ''}; 0 past K = {kh * kw * cin}, "
              f"past Co")
        split, packed = False, True
    elif host_split:
        rows = ctx.trainable_rows(w.name)
        s.add("const int8_t *weight", ctx.const(w.name), f"(Cs,{kh},{kw},Ci)" if not pointwise else "(Cs,Ci)")
        s.add("const int16_t *wfrozen", ctx.table(node, "frozen_pairs", host_pairs_table(w.data[rows:], wzp[rows:], 1)),
              f"(K2,Co-Cs,2): rows o >= Cs as (w[o,2j], w[o,2j+1]){', less w_zp' if has_wzp else ''}; 0 past K")
        s.ints(Cs=rows)
        split = True
    elif packed:  # depthwise_conv2d.c.j2 "packed": four channels' taps as two words of halfwords
        s.add("const uint32_t *wpk", ctx.table(node, "taps_packed", packed_taps(w.data, wzp)),
              f"(Co/4,{kh * kw},2): (w[o], w[o+2]), (w[o+1], w[o+3]) per tap{', less w_zp' if has_wzp else ''}")
        split = False
    elif wb and (kh * kw <= 9 or band) and not ctx.trainable(w.name):
        # depthwise_planar.c.j2 "pairs": the taps' halfword pairs and sums as tables, for 3x3 windows (2.7 times the
        # flash of the int8 weights) and for a band's kernel, which would make them again at every row; larger
        # windows make theirs once per channel (measured on qemu-m7: tables for all saved 0.4-0.8 M instructions of
        # mcunet-5fps / proxyless-w0.3's steps for 84-138 KB more flash)
        pairs, sums = planar_pairs(w.data, wzp)
        s.add("const uint32_t *wpairs", ctx.table(node, "tap_pairs", pairs), f"(Co,{kh},{kw - 1}): per window row "
              f"(w_2k, w_2k+1), then (w_2k-1, w_2k){', less w_zp' if has_wzp else ''}")
        s.add("const int32_t *wsums", ctx.table(node, "tap_sums", sums), "(Co,): sum of the taps")
        split, packed = False, True
    elif rows_packed(fixed_ci or wide_rows, h * wd, kpad, ctx, w):  # conv2d.c.j2 "packed"
        rows = np.zeros((cout, kpad or cin), np.int64)  # a regular one's padded with zeros to kpad elements
        rows[:, : kh * kw * cin] = w.data.reshape(cout, -1).astype(np.int64) - np.asarray(wzp).reshape(cout, 1)
        if wide_rows:  # four rows interleaved (tt_dot4wp_s8)
            s.add("const uint32_t *wpk", ctx.table(node, "weight_packed", packed_quads(rows)),
                  "(Co/4,Ci/4,4,2): (w[o+q,c], w[o+q,c+2]), (w[o+q,c+1], w[o+q,c+3]) per 4 elements and row q"
                  + (", less w_zp" if has_wzp else ""))
        else:
            s.add("const uint32_t *wpk", ctx.table(node, "weight_packed", packed_rows(rows)),
                  f"(Co,{rows.shape[1] // 2}): (w[o,c], w[o,c+2]), (w[o,c+1], w[o,c+3]) per 4 elements"
                  + (", less w_zp" if has_wzp else ""))
        split, packed = False, True
    elif pointwise:
        split = weight_param(s, ctx, w, "(Co,Ci)")
    else:
        split = weight_param(s, ctx, w, f"(Co,{kh},{kw})" if depthwise else f"(Co,{kh},{kw},Ci)")
    if bias is not None:
        s.add("const int32_t *bias", ctx.const(bias), "(Co,)")
    requant_tables(s, ctx, node, a.requant, cout, wzp if has_wzp and not packed else None)
    # A host kernel across channels is specialized to its channel counts (conv2d_rows.c.j2: Ci and Co constants, not
    # parameters), a host depthwise kernel to its channel count (conv2d_rows.c.j2 "co"): their loops across the
    # channels vectorize without remainders.
    # The input vector of an output pixel (pointwise: Ci channels, regular: the kh * kw * Ci window) widened once
    # into a stack buffer when it is short enough (conv2d.c.j2 "xw"), for weights whose rows are one array (their
    # blocks of 4 rows are read as a row and offsets from it).
    # A pointwise input of up to XW_MAX / 2 channels is widened two pixels at a time (conv2d.c.j2 "xw2": 2 output
    # channels x 2 pixels per inner product, each row its own pointer, the buffers as long as one pixel's of XW_MAX).
    xw = XW_MAX if cin * (1 if pointwise else kh * kw) <= XW_MAX and not split else 0
    xw2 = x2 = hold = zb = x2_ci = 0
    if pointwise:
        xw2 = XW_MAX // 2 if cin <= XW_MAX // 2 else 0
        # Inputs neither buffer takes (longer than XW_MAX, or beside a split weight's rows) are widened on the way,
        # still two pixels at a time (conv2d.c.j2 "x2"); where the planner's placement does not let the second
        # pixel's outputs be stored while the first's input is read (pair_safe), they wait in a stack buffer of Co
        # bytes ("hold").
        safe = not (xw2 or xw or ctx.host) and pair_safe(ctx, x.name, y.name, h * wd, cin, cout)
        x2 = not (xw2 or xw or ctx.host) and (safe or cout <= HOLD_MAX)
        hold = cout if x2 and not safe else 0
        # Beside a weight the step does not update, "x2" moves the input zero point into the start of the sums
        # (conv2d.c.j2 "zb": -in_zp * sum_c w[o,c] per channel, a table): the inputs are widened as they are, and the
        # channel count is a constant, so that the inner products need few enough registers for an asm loop
        # (tt_simd.h TT_DOT2X2_ASM).
        zb = x2 and not split and not has_wzp and not ctx.trainable(w.name)
        # Beside a split weight whose SRAM rows are even in number, a pair of rows o, o + 1 is always in one array:
        # "x2" has the channel count as a constant too (rows at immediate offsets, tt_simd.h TT_DOT2X2Z_ASM).
        x2_ci = zb or (x2 and split and ctx.trainable_rows(w.name) % 2 == 0)
        if zb:
            sums = w.data.reshape(cout, -1).astype(np.int64).sum(axis=1)
            s.add("const int32_t *zb", ctx.table(node, "zp_sums", (-x.quant.zp * sums).astype(np.int32)),
                  "(Co,): -in_zp * sum_c weight[o,c]")
    fixed_c = host
    ci, co = ({}, {}) if fixed_c or wb or small else ({} if fixed_ci or window_ci or x2_ci else {"Ci": cin},
                                                    {"Co": cout})
    width = {} if wb else {"W": wd}  # a planar kernel's widths are constants (depthwise_planar.c.j2)
    if pointwise:
        s.ints(P=h * wd, **ci, **co)
    elif small:  # depthwise_map.c.j2: every size a constant
        pass
    else:  # without padding no bounds checks: the input height is not needed
        s.ints(**({"H": h} if padded else {}), **width, **ci, **({} if band else {"Ho": ho}), **(
            {} if wb else {"Wo": wo}), **co)
    if band:
        band_params(s, band)
    # A device convolution kernel whose output range is the full int8 range (ReLU6 folded into the output
    # quantization, or no activation) stores its outputs saturated (SSAT) without the clamp's instructions, and has
    # no act_min / act_max parameters (conv2d.c.j2, depthwise_conv2d.c.j2 "sat").
    sat = not host and (a.act_min, a.act_max) == (-128, 127)
    s.int32s(**({} if zb else {"in_zp": x.quant.zp}), out_zp=y.quant.zp,
             **({} if sat else dict(act_min=a.act_min, act_max=a.act_max)))
    suffix = (bias_wzp_suffix(bias is not None, has_wzp) + rounding_suffix(a.requant) + ("_split" if split else "")
              + ("_band" if band else "") + ("_sat" if sat else ""))
    k["rq"], k["split"], k["band"], k["sat"] = rq_helper(a.requant), split, band is not None, sat
    if host:
        variant = "pointwise" if pointwise else ("depthwise" if depthwise else "regular")
        window = window_name(kh, kw, sh, sw, dh, dw, pt, pl, padded)
        tag = {"pointwise": "1x1", "depthwise": f"depthwise_{window}", "regular": window}[variant]
        if depthwise:
            tag += f"_c{cout}"
            k.update(co=cout)
        else:
            tag += f"_c{cin}x{cout}_channels" + ("_pairs" if host_pairs else "")
            k.update(ci=cin, co=cout, lanes=lanes, pairs=host_pairs)
        return s.call("conv2d_rows", f"tt_conv_{tag}_rows_s8{suffix}", dict(k, variant=variant))
    if small:
        return s.call("depthwise_map", f"tt_depthwise_conv_{window_name(kh, kw, sh, sw, dh, dw, pt, pl, padded)}"
                      f"_s8{suffix}_map_c{cin}_{h}x{wd}_to_{ho}x{wo}", dict(k, c=cin, h=h, w=wd, ho=ho, wo=wo))
    if wb:
        return s.call("depthwise_planar", f"tt_depthwise_conv_{window_name(kh, kw, sh, sw, dh, dw, pt, pl, padded)}"
                      f"_s8{suffix}_planar_c{cin}_w{wd}" + ("_pairs" if packed else ""),
                      dict(k, c=cin, w=wd, wo=wo, wb=wb, pairs=packed))
    if depthwise:
        mult = cout // cin
        name = f"tt_depthwise_conv_{window_name(kh, kw, sh, sw, dh, dw, pt, pl, padded)}" + (
            f"_m{mult}" if mult > 1 else "") + f"_s8{suffix}"
        return s.call("depthwise_conv2d", name + ("_packed" if packed else ""), dict(k, mult=mult, packed=packed))
    if pointwise:
        stage = "_xw2" if xw2 else ("_xw" if xw else ("_x2" + (f"_hold{hold}" if hold else "") if x2 else ""))
        pairs = xw2 or x2
        return s.call("conv2d", f"tt_conv_1x1{stage}_s8{suffix}" + (f"_ci{cin}" if fixed_ci or x2_ci else "")
                      + ("_zb" if zb else "") + ("_packed" if packed else "") + ("_co_odd" if pairs and cout % 2 else ""),
                      dict(k, pointwise=True, xw=0 if pairs else xw, xw2=xw2, x2=x2, hold=hold,
                           ci=cin if fixed_ci or x2_ci else 0, zb=zb, packed=packed, has_wzp=has_wzp and not packed,
                           co_odd=bool(pairs and cout % 2)))
    # A regular window of up to XW_MAX / 2 elements: two output pixels' windows at once, the same way
    # (padded_window).
    xw2 = XW_MAX // 2 if kh * kw * cin <= XW_MAX // 2 else 0
    stage = "_xw2" if xw2 else ("_xw" if xw else "")
    return s.call("conv2d", f"tt_conv_{window_name(kh, kw, sh, sw, dh, dw, pt, pl, padded)}{stage}_s8{suffix}"
                  + (f"_k{kpad}" if kpad else "") + (f"_ci{cin}" if window_ci else "") + ("_packed" if packed else "")
                  + ("_co_odd" if xw2 and cout % 2 else ""),
                  dict(k, pointwise=False, xw=0 if xw2 else xw, xw2=xw2, x2=False, kpad=kpad, packed=packed,
                       ci=cin if window_ci else 0, zb=False,
                       has_wzp=has_wzp and not packed, co_odd=bool(xw2 and cout % 2)))


# The most stack bytes of the ring of input rows of a planar depthwise kernel (depthwise_planar.c.j2: kh rows of
# planar_width halfwords) or of the input map of one unrolling every window (depthwise_map.c.j2); a wider one takes
# the kernel four channels at a time. 3x3 windows over 64-pixel rows take 408, 5x5 ones at stride 2 680 (measured on
# qemu-m7: planar, proxyless-w0.3's streamed 5x5 layer saves 0.31 M instructions per step for 4 bytes more of the
# measured stack), inside the measured stack's reserve (memory/report.py STACK_BYTES).
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
    extents = _extents(ctx, x, y)
    if extents is None:
        return True
    (i0, _), (o0, _) = extents
    return band is None and i0 >= o0 and (i0 - o0) % c == 0


def pair_safe(ctx, x: str, y: str, pixels: int, ci: int, co: int) -> bool:
    """Whether a pointwise kernel taking two pixels at a time with their inputs widened on the way (conv2d.c.j2
    "x2": pixel p + 1's outputs are stored while pixel p's input is still read) may write output ``y`` where the
    planner put it against input ``x`` (ops/conv2d.py min_read keeps only pixel p + 1's own input safe from its
    outputs): their buffers apart, or every pixel's outputs below the input of the pixel before."""
    extents = _extents(ctx, x, y)
    if extents is None:
        return True
    (i0, _), (o0, _) = extents
    p = np.arange(1, pixels)
    return bool(np.all(o0 + (p + 1) * co <= i0 + (p - 1) * ci))


def _extents(ctx, x: str, y: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The arena bytes of input ``x`` and output ``y`` (Context.extent) where they meet, None where they do not."""
    (i0, i1), (o0, o1) = ctx.extent(x), ctx.extent(y)
    return None if o1 <= i0 or i1 <= o0 else ((i0, i1), (o0, o1))


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


def rows_packed(pointwise_rows: bool, pixels: int, kpad: int, ctx, w) -> bool:
    """Whether a convolution kernel's weight rows are a table of int16 halfwords (packed_rows, conv2d.c.j2 "packed":
    per 4 elements 4 weight words instead of 2 words and 4 SXTB16 at each 2 x 2 inner product, 8 instead of 4 and 8
    SXTB16 at each 4 x 1 one, twice the flash of the int8 weights): a pointwise kernel's that may have them
    (``pointwise_rows``: a two-pixel one with a constant Ci, a multiple of 4, or a one-pixel one of XW_MAX / 2 + 1 ..
    XW_MAX channels, Ci and Co multiples of 4) with at least PACKED_MIN_PIXELS pixels, for a weight the step does not
    update, and a regular two-pixel one's padded to kpad elements (padded_window)."""
    return (pointwise_rows and pixels >= PACKED_MIN_PIXELS and not ctx.trainable(w.name)) or kpad > 0


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


def padded_window(n: int, ctx, w) -> int:
    """The window length of a regular convolution's two-pixel kernel (conv2d.c.j2 "xw2", windows of up to XW_MAX / 2
    elements) padded to a multiple of 4, when that differs from ``n`` and the weight is a constant the step does not
    update: its rows are then a table padded with zeros (of halfwords: rows_packed) and every inner product runs
    whole words. 0: not padded."""
    kpad = -(-n // 4) * 4
    return kpad if kpad != n and kpad <= XW_MAX // 2 and not ctx.trainable(w.name) else 0


def _conv_geometry(a, w_shape, padding, groups, cin, cout) -> tuple[str, dict]:
    _, kh, kw, _ = w_shape
    (sh, sw), (dh, dw), (pt, pl) = a.stride, a.dilation, padding[:2]
    padded = any(padding)
    if groups != 1:
        variant = "depthwise"
    elif (kh, kw) == (1, 1) and a.stride == (1, 1) and not padded:
        variant = "pointwise"
    else:
        variant = "regular"
    k = dict(variant=variant, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, padded=padded,
             mult=cout // cin if groups != 1 else 1)
    window = window_name(kh, kw, sh, sw, dh, dw, pt, pl, padded)
    if variant == "pointwise":
        tag = "1x1"
    elif variant == "depthwise":
        tag = f"depthwise_{window}" + (f"_m{k['mult']}" if k["mult"] > 1 else "")
    else:
        tag = window
    return tag, k


POINTWISE_TILES = (4, 3, 2)  # pixels the pointwise input gradient may take together (kernels/conv2d_grad_input.c.j2)


def pointwise_tile_range(gx: int | None, gz: int | None, p: int, ci: int, co: int, n: int) -> tuple[int, int]:
    """Where the pointwise input gradient may take ``n`` pixels at a time: pixels q .. q+n-1 go together only when
    lo <= q and q + n <= hi, (lo, hi) returned (hi < lo + n: nowhere). They write g_x pixels q .. q+n-1 while they
    read g_z from pixel q on: a tile is safe unless those bytes meet in the arena (``gx``, ``gz``: the arena
    offsets, None when a tensor is elsewhere). The planner only keeps g_x pixel q before g_z pixel q
    (ops/conv2d.py grad_input_min_read), so this is checked for the offsets it chose, at every q (the kernel starts
    a tile wherever the previous one ended): the longest run of safe q. In place, an expand layer's g_x (fewer
    channels) is safe from some pixel on, a projection's up to some pixel."""
    if gx is None or gz is None:
        return 0, p
    q = np.arange(0, p - n + 1)
    write_lo, write_hi = gx + q * ci * 4, gx + (q + n) * ci * 4
    unread_lo, unread_hi = gz + q * co * 4, gz + p * co * 4
    safe = np.concatenate([[False], (write_hi <= unread_lo) | (write_lo >= unread_hi), [False]])
    edges = np.flatnonzero(np.diff(safe.astype(np.int8)))  # run starts and ends, alternately
    if not len(edges):
        return 0, 0
    starts, ends = edges[0::2], edges[1::2]
    longest = int(np.argmax(ends - starts))
    return int(starts[longest]), int(ends[longest]) - 1 + n


# The depthwise input gradient one channel at a time, unrolled for its maps (conv2d_grad_input.c.j2 "plane"), where a
# channel has at most PLANE_TERMS_MAX terms (each about two instructions of code). A channel's gz stays in registers
# on maps of at most PLANE_GZ_REGS pixels (else in the blocked kernel's scratch), its taps on windows of at most
# PLANE_TAPS_REGS (else a table in that scratch or a stack array): with a sum and a temporary, at most 16 + 9 + 2 of
# the FPU's 32 registers.
PLANE_TERMS_MAX = 1200
PLANE_GZ_REGS = 16
PLANE_TAPS_REGS = 9


def plane_terms(k: dict, h: int, w: int, ho: int, wo: int) -> int:
    """The terms of one channel of a depthwise input gradient (not dilated) of an h x w map from gz's ho x wo: the
    taps of each pixel that fall on a gz pixel."""
    def inside(n: int, n_out: int, taps: int, pad: int, stride: int) -> int:
        return sum((y + pad - i) % stride == 0 and 0 <= (y + pad - i) // stride < n_out
                   for y in range(n) for i in range(taps))
    return inside(h, ho, k["kh"], k["pt"], k["sh"]) * inside(w, wo, k["kw"], k["pl"], k["sw"])


def apart(ctx, a: str, a_size: int, b: str, b_size: int) -> bool:
    """Whether float tensors ``a`` and ``b`` share no byte (not both in the arena, or apart there)."""
    oa, ob = ctx.offsets.get(a), ctx.offsets.get(b)
    return oa is None or ob is None or oa + 4 * a_size <= ob or ob + 4 * b_size <= oa


def conv2d_grad_input(node: Node, ctx) -> Call:
    a = node.attrs
    g, w, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    _, ho, wo, cout = g.shape
    _, h, wd, cin = gx.shape
    tag, k = _conv_geometry(a, w.shape, a.padding, a.groups, cin, cout)
    s = Signature()
    pointwise = k["variant"] == "pointwise"
    s.add("float *gx", ctx.fp(gx.name), "(P,Ci)" if pointwise else "(H,W,Ci)")
    s.add("const float *gz", ctx.fp(g.name), "(P,Co)" if pointwise else "(Ho,Wo,Co)")
    k["split"] = weight_param(s, ctx, w, "(Co,Ci)" if pointwise else (
        f"(Co,{k['kh']},{k['kw']})" if k["variant"] == "depthwise" else f"(Co,{k['kh']},{k['kw']},Ci)"))
    has_wzp = weight_dequant(s, ctx, node, w)
    block = grad_input_block(a, [g, w], [gx])
    k["block"] = block > 0
    # A host build's depthwise (multiplier 1) runs across channels, staging in stack arrays (conv2d_grad_input.c.j2):
    # a pixel's sums, or with a block the whole gx (at most HOST_WEIGHT_MAX elements, as the forward's arrays). Its
    # pointwise kernel takes four pixels at a time, their sums in vector registers (tt_fma_rows4_s8).
    k["host"] = ctx.host and (pointwise or (k["variant"] == "depthwise" and k["mult"] == 1
                                            and (not block or h * wd * cin <= HOST_WEIGHT_MAX)))
    # A device depthwise (multiplier 1, not dilated) on a small map one channel at a time, unrolled for the map
    # (PLANE_*): in place when blocked (gx has gz's shape), else where gx and gz do not overlap and gz fits registers.
    gz_regs = ho * wo <= PLANE_GZ_REGS
    k["plane"] = (k["variant"] == "depthwise" and k["mult"] == 1 and not k["host"] and (k["dh"], k["dw"]) == (1, 1)
                  and (bool(block) or (gz_regs and apart(ctx, gx.name, gx.size, g.name, g.size)))
                  and plane_terms(k, h, wd, ho, wo) <= PLANE_TERMS_MAX)
    if pointwise:
        s.ints(P=h * wd, Ci=cin, Co=cout)
    elif k["plane"]:  # the maps' sizes are the kernel's constants; Co = Ci
        k.update(h=h, w=wd, ho=ho, wo=wo, gz_regs=gz_regs, taps_regs=k["kh"] * k["kw"] <= PLANE_TAPS_REGS)
        s.ints(Ci=cin)
    else:
        s.ints(H=h, W=wd, Ci=cin, Ho=ho, Wo=wo, Co=cout)
    k["has_wzp"] = has_wzp
    k["tiles"] = []
    for n in POINTWISE_TILES if pointwise and not k["host"] else ():
        lo, hi = pointwise_tile_range(ctx.offsets.get(gx.name), ctx.offsets.get(g.name), h * wd, cin, cout, n)
        if hi >= lo + n:  # pixels q .. q+n-1 may go together where lo <= q and q + n <= hi
            k["tiles"].append(n)
            s.ints(**{f"L{n}": lo, f"P{n}": hi})
    if k["plane"]:  # a channel's gz and taps not in registers: blocked, in the node's scratch (grad_input_scratch: room
        if block and not (k["gz_regs"] and k["taps_regs"]):  # for both); else taps in a stack array
            s.add("float *scratch", ctx.scratch(node), f"({h * wd} + {k['kh'] * k['kw']},)")
    elif block and not k["host"]:  # B channels at a time through the node's scratch (ops/conv2d.py)
        s.add("float *scratch", ctx.scratch(node), "(H,W,B)")
        s.ints(B=block)
    return s.call("conv2d_grad_input", f"tt_conv_{tag}_grad_input_f32" + ("_wzp" if has_wzp else "")
                  + ("_split" if k["split"] else "")
                  + ("_blocked" if k["block"] else "")
                  + ((f"_plane{h}x{wd}" + (f"_of{ho}x{wo}" if (ho, wo) != (h, wd) else "")) if k["plane"] else "")
                  + "".join(f"_tiles{n}" for n in k["tiles"]) + (("_host" if pointwise else "_channels") if k["host"] else ""), k)


def conv2d_grad_weight(node: Node, ctx) -> Call:
    return conv2d_grad_weight_into(node, ctx, node.attrs, node.inputs, ctx.fp(node.outputs[0]))


def conv2d_grad_weight_into(node: Node, ctx, a, inputs, gw: str, rows: int | None = None) -> Call:
    """The weight gradient of ``inputs`` (g_z, x) written to ``gw`` (a C pointer expression), at most ``rows`` rows a
    call (None: the whole selection)."""
    g, x = ctx.tensor(inputs[0]), ctx.tensor(inputs[1])
    _, ho, wo, cout = g.shape
    _, h, wd, cin = x.shape
    c0, cs = channel_range(a.channels, cout, node)
    tag, k = _conv_geometry(a, (cout,) + tuple(a.kernel) + (0,), a.padding, a.groups, cin, cout)
    pointwise = k["variant"] == "pointwise"
    k["host"] = ctx.host and pointwise  # conv2d_grad_weight.c.j2: the input dequantized once per pixel
    s = Signature()
    s.add("float *gw", gw, "(Cs,Ci)" if pointwise else (
        f"(Cs,{k['kh']},{k['kw']})" if k["variant"] == "depthwise" else f"(Cs,{k['kh']},{k['kw']},Ci)"))
    s.add("const float *gz", ctx.fp(g.name), "(P,Co)" if pointwise else "(Ho,Wo,Co)")
    s.add("const int8_t *inp", ctx.act(x.name), "(P,Ci)" if pointwise else "(H,W,Ci)")
    if pointwise:
        s.ints(P=h * wd, Ci=cin, Co=cout)
    elif k["padded"]:
        s.ints(H=h, W=wd, Ci=cin, Ho=ho, Wo=wo, Co=cout)
    else:  # no bounds checks: the input height is not needed
        s.ints(W=wd, Ci=cin, Ho=ho, Wo=wo, Co=cout)
    s.ints(c0=c0, Cs=cs)
    input_dequant(s, x)
    # pointwise rows four at a time (conv2d_grad_weight.c.j2) only where a call can have four: a kernel without that
    # loop when blocks are smaller (the loop, dead, would still index past a small block's scratch); a host build's
    # pointwise kernel has its own form ("host")
    k["quads"] = pointwise and not k["host"] and min(cs, rows or cs) >= 4
    suffix = "_host" if k["host"] else ("_rows1" if pointwise and not k["quads"] else "")
    return s.call("conv2d_grad_weight", f"tt_conv_{tag}_grad_weight_f32{suffix}", k)


def conv2d_grad_weight_sgd_update(node: Node, ctx) -> Call:
    return fused_call(node, ctx, conv2d_grad_weight_into)


BINDINGS: dict[str, Binding] = {
    "conv2d": conv2d,
    "conv2d_grad_input": conv2d_grad_input,
    "conv2d_grad_weight": conv2d_grad_weight,
    "conv2d_grad_weight_sgd_update": conv2d_grad_weight_sgd_update,
}
