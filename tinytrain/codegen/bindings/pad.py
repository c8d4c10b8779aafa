"""The C bindings of ``pad`` and its gradient (ops/pad.py).
"""

from __future__ import annotations

from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import Node


def pad(node: Node, ctx) -> Call:
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    dims, pads = list(x.shape[1:]), list(node.attrs.pads)
    if len(dims) > 3:
        raise ValueError(f"pad: {len(dims)} non-batch dimensions, the C kernel handles up to 3")
    dims, pads = [1] * (3 - len(dims)) + dims, [(0, 0)] * (3 - len(pads)) + pads
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(O0,O1,O2)")
    s.add("const int8_t *inp", ctx.act(x.name), "(D0,D1,D2)")
    s.ints(D0=dims[0], D1=dims[1], D2=dims[2], B0=pads[0][0], B1=pads[1][0], B2=pads[2][0],
           O0=dims[0] + sum(pads[0]), O1=dims[1] + sum(pads[1]), O2=dims[2] + sum(pads[2]))
    s.add("int value", y.quant.zp)
    return s.call("pad", "tt_pad_s8", {})


def pad_grad(node: Node, ctx) -> Call:
    g, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    dims, pads = list(gx.shape[1:]), list(node.attrs.pads)
    if len(dims) > 3:
        raise UnsupportedModelError(f"pad_grad: {len(dims)} non-batch dimensions, the C kernel handles up to 3")
    dims, pads = [1] * (3 - len(dims)) + dims, [(0, 0)] * (3 - len(pads)) + pads
    s = Signature()
    s.add("float *gx", ctx.fp(gx.name), "(D0,D1,D2)")
    s.add("const float *g", ctx.fp(g.name), "(O0,O1,O2)")
    s.ints(D0=dims[0], D1=dims[1], D2=dims[2], B0=pads[0][0], B1=pads[1][0], B2=pads[2][0],
           O1=dims[1] + sum(pads[1]), O2=dims[2] + sum(pads[2]))
    return s.call("pad_grad", "tt_pad_grad_f32", {})


BINDINGS: dict[str, Binding] = {
    "pad": pad,
    "pad_grad": pad_grad,
}
