"""The C bindings of ``mean`` and its gradients, plain and masked (ops/mean.py).
"""

from __future__ import annotations

from tinytrain.codegen.bindings.common import rounding_suffix, rq_helper, rq_operand
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node
from tinytrain.ops.mean import mean_multiplier


def mean(node: Node, ctx) -> Call:
    """Mean over H, W: 1/count is in the multiplier (folded as tflite-micro's QuantizedMeanOrSum does, or
    already in the Requant: ops/mean.py's mean_multiplier)."""

    a = node.attrs
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, h, wd, c = x.shape
    count = h * wd
    multiplier, shift = mean_multiplier(a, count)
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(C,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(P,C)")
    s.ints(P=count, C=c)
    s.int32s(in_zp=x.quant.zp, multiplier=multiplier, shift=rq_operand(rq_helper(a.requant), multiplier, shift),
             out_zp=y.quant.zp, act_min=a.act_min, act_max=a.act_max)
    return s.call("mean", "tt_mean_s8" + rounding_suffix(a.requant), dict(rq=rq_helper(a.requant)))


def mean_grad(node: Node, ctx) -> Call:
    g, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, h, wd, c = gx.shape
    s = Signature()
    s.add("float *gx", ctx.fp(gx.name), "(P,C)")
    s.add("const float *g", ctx.fp(g.name), "(C,)")
    s.ints(P=h * wd, C=c)
    return s.call("mean_grad", "tt_mean_grad_f32", {})


def mean_grad_masked(node: Node, ctx) -> Call:
    g, bits, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    _, h, wd, c = gx.shape
    s = Signature()
    s.add("float *gx", ctx.fp(gx.name), "(P,C)")
    s.add("const float *g", ctx.fp(g.name), "(C,)")
    s.add("const uint8_t *bits", ctx.bits(bits.name), "((P*C+7)/8,)")
    s.ints(P=h * wd, C=c)
    return s.call("mean_grad_masked", "tt_mean_grad_masked_f32" + ("_host" if ctx.host else ""), {"host": ctx.host})


def broadcast_grad_int(node: Node, ctx) -> Call:
    """The integer step's gradient of a mean or a global average pool (ops/mean.py mean_grad_int, ops/avg_pool2d.py
    avg_pool2d_grad_int): the int32 gradient broadcast to every cell (the scale carries the 1/count)."""
    g, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, h, wd, c = gx.shape
    s = Signature()
    s.add("tt_i32a *gx", ctx.ints(gx.name), "(P,C)")
    s.add("const tt_i32a *g", ctx.ints(g.name), "(C,)")
    s.ints(P=h * wd, C=c)
    return s.call("broadcast_grad_int", "tt_broadcast_grad_int", {})


BINDINGS: dict[str, Binding] = {
    "mean_grad_int": broadcast_grad_int,
    "mean": mean,
    "mean_grad": mean_grad,
    "mean_grad_masked": mean_grad_masked,
}
