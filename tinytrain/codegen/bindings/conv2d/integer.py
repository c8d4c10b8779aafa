"""The C binding of ``conv2d_grad_input_int`` (ops/conv2d/integer.py): the integer step's input gradient of a pointwise
or depthwise (multiplier 1) convolution (kernels/conv2d_grad_input_int.c.j2).
"""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.bindings.common import weight_param, weight_zero_points
from tinytrain.codegen.bindings.conv2d.grad import conv_geometry
from tinytrain.codegen.context import Call, Signature
from tinytrain.ir import Node


def conv2d_grad_input_int(node: Node, ctx) -> Call:
    """The integer step's input gradient (ops/conv2d/integer.py): pointwise or depthwise (multiplier 1)."""
    a = node.attrs
    g, w, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    _, ho, wo, cout = g.shape
    _, h, wd, cin = gx.shape
    tag, k = conv_geometry(a, w.shape, a.padding, a.groups, cin, cout)
    pointwise = k["variant"] == "pointwise"
    s = Signature()
    s.add("tt_i32a *gx", ctx.ints(gx.name), "(P,Ci)" if pointwise else "(H,W,Ci)")
    s.add("const tt_i32a *gz", ctx.ints(g.name), "(P,Co)" if pointwise else "(Ho,Wo,Co)")
    k["split"] = weight_param(s, ctx, w, "(Co,Ci)" if pointwise else f"(Co,{k['kh']},{k['kw']})")
    s.add("const int32_t *fold", ctx.const(node.inputs[2]), "(Co,): M[o], s_w[o] / max s_w in Q15")
    wzp = weight_zero_points(w, cout)
    k["has_wzp"] = bool(np.any(wzp))
    if k["has_wzp"]:
        s.add("const int32_t *w_zp", ctx.table(node, "w_zp", wzp), "(Co,)")
    if pointwise:
        s.ints(P=h * wd, Ci=cin, Co=cout)
    else:
        s.ints(H=h, W=wd, C=cin, Ho=ho, Wo=wo)
    add_rescale(s, ctx, node, k)
    return s.call("conv2d_grad_input_int", f"tt_conv_{tag}_grad_input_int" + ("_wzp" if k["has_wzp"] else "")
                  + ("_split" if k["split"] else "") + ("_exp" if k["has_exp"] else ""), k)


def add_rescale(s: Signature, ctx, node: Node, k: dict) -> None:
    """The run-time rescale's parameters (ops/conv2d/integer.py): g_z's exponent if it has one, g_x's exponent, the shifts
    R and T and the limit L."""
    k["has_exp"] = len(node.inputs) > 3 and bool(node.inputs[3])
    if k["has_exp"]:
        s.add("const tt_i32a *ez", ctx.ints(node.inputs[3]), "(1,): g_z's exponent")
    s.add("tt_i32a *ex", ctx.ints(node.outputs[1]), "(1,): g_x's exponent")
    s.ints(R=node.attrs.pre_shift, T=node.attrs.shift, L=node.attrs.limit)

