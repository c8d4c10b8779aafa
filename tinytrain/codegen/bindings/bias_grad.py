"""The C binding of ``bias_grad`` (ops/bias_grad.py).
"""

from __future__ import annotations

from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def bias_grad(node: Node, ctx) -> Call:
    g, gb = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    c = g.shape[-1]
    s = Signature()
    s.add("float *gb", ctx.fp(gb.name), "(C,)")
    s.add("const float *g", ctx.fp(g.name), "(P,C)")
    s.ints(P=g.size // c, C=c)
    return s.call("bias_grad", "tt_bias_grad_f32" + ("_host" if ctx.host else ""), {"host": ctx.host})


def bias_grad_int(node: Node, ctx) -> Call:
    """The integer step's bias gradient (ops/bias_grad.py bias_grad_int)."""
    g = ctx.tensor(node.inputs[0])
    c = g.shape[-1]
    s = Signature()
    s.add("tt_i32a *gb", ctx.ints(node.outputs[0]), "(C,)")
    s.add("const tt_i32a *g", ctx.ints(g.name), "(P,C)")
    s.ints(P=g.size // c, C=c)
    return s.call("bias_grad_int", "tt_bias_grad_int", {})


BINDINGS: dict[str, Binding] = {
    "bias_grad": bias_grad,
    "bias_grad_int": bias_grad_int,
}
