"""The C bindings of ``fully_connected`` (ops/fully_connected.py): the int8 forward, the fp32 input and weight
gradients, and the weight gradient fused with its SGD update (ops/grad_weight_sgd_update.py).
"""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.bindings.common import (bias_input, bias_wzp_suffix, channel_range, input_dequant,
                                               requant_tables, rounding_suffix, rq_helper, weight_dequant, weight_param,
                                               weight_zero_points)
from tinytrain.codegen.bindings.conv2d.integer import add_rescale
from tinytrain.codegen.bindings.grad_weight_sgd_update import fused_call
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def fully_connected(node: Node, ctx) -> Call:
    a = node.attrs
    x, w, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    cout, depth = w.shape
    bias = bias_input(node)
    wzp = weight_zero_points(w, cout)
    has_wzp = bool(np.any(wzp))
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(Co,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(K,)")
    split = weight_param(s, ctx, w, "(Co,K)")
    if bias is not None:
        s.add("const int32_t *bias", ctx.const(bias), "(Co,)")
    requant_tables(s, ctx, node, a.requant, cout, wzp if has_wzp else None)
    s.ints(K=depth, Co=cout)
    s.int32s(in_zp=x.quant.zp, out_zp=y.quant.zp, act_min=a.act_min, act_max=a.act_max)
    name = (f"tt_fully_connected_s8{bias_wzp_suffix(bias is not None, has_wzp)}{rounding_suffix(a.requant)}"
            + ("_split" if split else ""))
    return s.call("fully_connected", name, dict(has_bias=bias is not None, has_wzp=has_wzp, rq=rq_helper(a.requant),
                                                split=split))


def fully_connected_grad_input(node: Node, ctx) -> Call:
    g, w, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    cout, depth = w.shape
    s = Signature()
    s.add("float *gx", ctx.fp(gx.name), "(K,)")
    s.add("const float *gz", ctx.fp(g.name), "(Co,)")
    split = weight_param(s, ctx, w, "(Co,K)")
    has_wzp = weight_dequant(s, ctx, node, w)
    s.ints(K=depth, Co=cout)
    return s.call("fully_connected_grad", "tt_fully_connected_grad_input_f32" + ("_wzp" if has_wzp else "")
                  + ("_split" if split else ""), dict(variant="input", has_wzp=has_wzp, split=split))


def fully_connected_grad_input_int(node: Node, ctx) -> Call:
    """The integer step's input gradient (ops/fully_connected.py fully_connected_grad_input_int): the pointwise
    convolution's kernel (kernels/conv2d_grad_input_int.c.j2) on N pixels of C_out inputs."""
    g, w, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    cout, depth = w.shape
    s = Signature()
    s.add("tt_i32a *gx", ctx.ints(gx.name), "(P,Ci)")
    s.add("const tt_i32a *gz", ctx.ints(g.name), "(P,Co)")
    split = weight_param(s, ctx, w, "(Co,Ci)")
    s.add("const int32_t *fold", ctx.const(node.inputs[2]), "(Co,): M[o], s_w[o] / max s_w in Q15")
    wzp = weight_zero_points(w, cout)
    has_wzp = bool(np.any(wzp))
    if has_wzp:
        s.add("const int32_t *w_zp", ctx.table(node, "w_zp", wzp), "(Co,)")
    s.ints(P=g.shape[0], Ci=depth, Co=cout)
    k = dict(variant="pointwise", split=split, has_wzp=has_wzp)
    add_rescale(s, ctx, node, k)
    return s.call("conv2d_grad_input_int", "tt_fully_connected_grad_input_int" + ("_wzp" if has_wzp else "")
                  + ("_split" if split else "") + ("_exp" if k["has_exp"] else ""), k)


def fully_connected_grad_weight(node: Node, ctx) -> Call:
    return fully_connected_grad_weight_into(node, ctx, node.attrs, node.inputs, ctx.fp(node.outputs[0]))


def fully_connected_grad_weight_into(node: Node, ctx, a, inputs, gw: str, rows: int | None = None) -> Call:
    """The weight gradient of ``inputs`` (g_z, x) written to ``gw`` (a C pointer expression); ``rows``: as
    conv2d_grad_weight_into's, the same for every row count here."""
    g, x = ctx.tensor(inputs[0]), ctx.tensor(inputs[1])
    cout, depth = g.shape[1], x.shape[1]
    c0, cs = channel_range(a.channels, cout, node)
    s = Signature()
    s.add("float *gw", gw, "(Cs,K)")
    s.add("const float *gz", ctx.fp(g.name), "(Co,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(K,)")
    s.ints(K=depth, c0=c0, Cs=cs)
    input_dequant(s, x)
    return s.call("fully_connected_grad", "tt_fully_connected_grad_weight_f32",
                  dict(variant="weight", has_wzp=False, split=False))


def fully_connected_grad_weight_int(node: Node, ctx) -> Call:
    """The integer step's weight gradient (ops/fully_connected.py fully_connected_grad_weight_int), batch 1."""
    g, x = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    cout, depth = g.shape[1], x.shape[1]
    c0, cs = channel_range(node.attrs.channels, cout, node)
    s = Signature()
    s.add("tt_i32a *gw", ctx.ints(node.outputs[0]), "(Cs,K)")
    s.add("const tt_i32a *gz", ctx.ints(g.name), "(Co,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(K,)")
    s.ints(K=depth, c0=c0, Cs=cs)
    s.int32s(in_zp=x.quant.zp)
    return s.call("fully_connected_grad_weight_int", "tt_fully_connected_grad_weight_int", {})


def fully_connected_grad_weight_sgd_update(node: Node, ctx) -> Call:
    return fused_call(node, ctx, fully_connected_grad_weight_into)


BINDINGS: dict[str, Binding] = {
    "fully_connected_grad_input_int": fully_connected_grad_input_int,
    "fully_connected": fully_connected,
    "fully_connected_grad_input": fully_connected_grad_input,
    "fully_connected_grad_weight": fully_connected_grad_weight,
    "fully_connected_grad_weight_int": fully_connected_grad_weight_int,
    "fully_connected_grad_weight_sgd_update": fully_connected_grad_weight_sgd_update,
}
