"""The convolution's fp32 gradients: the input gradient (conv2d_grad_input.c.j2: pointwise tiles of pixels, a
depthwise one by channel planes or across channels on a host) and the weight gradient (conv2d_grad_weight.c.j2), alone
or fused with its SGD update (ops/grad_weight_sgd_update.py)."""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.bindings.common import channel_range, input_dequant, weight_dequant, weight_param, window_name
from tinytrain.codegen.bindings.conv2d.host import HOST_WEIGHT_MAX
from tinytrain.codegen.bindings.grad_weight_sgd_update import fused_call, fused_int_call
from tinytrain.codegen.context import Call, Signature
from tinytrain.ir import Node
from tinytrain.ops.conv2d import grad_input_block


def conv_geometry(a, w_shape, padding, groups, cin, cout) -> tuple[str, dict]:
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
    tag, k = conv_geometry(a, w.shape, a.padding, a.groups, cin, cout)
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
                  + "".join(f"_tiles{n}" for n in k["tiles"])
                  + (("_host" if pointwise else "_channels") if k["host"] else ""), k)


def conv2d_grad_weight(node: Node, ctx) -> Call:
    return conv2d_grad_weight_into(node, ctx, node.attrs, node.inputs, ctx.fp(node.outputs[0]))


def conv2d_grad_weight_into(node: Node, ctx, a, inputs, gw: str, rows: int | None = None) -> Call:
    """The weight gradient of ``inputs`` (g_z, x) written to ``gw`` (a C pointer expression), at most ``rows`` rows a
    call (None: the whole selection)."""
    g, x = ctx.tensor(inputs[0]), ctx.tensor(inputs[1])
    _, ho, wo, cout = g.shape
    _, h, wd, cin = x.shape
    c0, cs = channel_range(a.channels, cout, node)
    tag, k = conv_geometry(a, (cout,) + tuple(a.kernel) + (0,), a.padding, a.groups, cin, cout)
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


def conv2d_grad_weight_int(node: Node, ctx) -> Call:
    """The integer step's weight gradient (ops/conv2d.py conv2d_grad_weight_int): pointwise, regular or depthwise."""
    return conv2d_grad_weight_int_into(node, ctx, node.attrs, node.inputs, ctx.ints(node.outputs[0]))


def conv2d_grad_weight_int_sgd_update_int(node: Node, ctx) -> Call:
    return fused_int_call(node, ctx, conv2d_grad_weight_int_into)


def conv2d_grad_weight_int_into(node: Node, ctx, a, inputs, gw: str) -> Call:
    """The integer weight gradient of ``inputs`` (g_z, x) written to ``gw`` (a C pointer expression)."""
    g, x = ctx.tensor(inputs[0]), ctx.tensor(inputs[1])
    _, ho, wo, cout = g.shape
    _, h, wd, cin = x.shape
    c0, cs = channel_range(a.channels, cout, node)
    tag, k = conv_geometry(a, (cout,) + tuple(a.kernel) + (0,), a.padding, a.groups, cin, cout)
    s = Signature()
    if k["variant"] == "pointwise":
        s.add("tt_i32a *gw", gw, "(Cs,K)")
        s.add("const tt_i32a *gz", ctx.ints(g.name), "(P,Co)")
        s.add("const int8_t *inp", ctx.act(x.name), "(P,K)")
        s.ints(P=ho * wo, K=cin, Co=cout, c0=c0, Cs=cs)
    else:
        s.add("tt_i32a *gw", gw, "(Cs,KH,KW,Cg)")
        s.add("const tt_i32a *gz", ctx.ints(g.name), "(Ho,Wo,Co)")
        s.add("const int8_t *inp", ctx.act(x.name), "(H,W,Ci)")
        s.ints(H=h, W=wd, Ci=cin, Ho=ho, Wo=wo, Co=cout, c0=c0, Cs=cs)
    s.int32s(in_zp=x.quant.zp)
    return s.call("conv2d_grad_weight_int", f"tt_conv_{tag}_grad_weight_int", k)
