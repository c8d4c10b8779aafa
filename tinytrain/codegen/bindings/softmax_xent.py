"""The C bindings of the loss ``softmax_xent`` and its gradient (ops/softmax_xent.py).
"""

from __future__ import annotations

from tinytrain.codegen.cformat import float_literal
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import Node


def softmax_xent(node: Node, ctx, grad: bool = False) -> Call:
    q, label = ctx.tensor(node.inputs[0]), node.inputs[1]
    out = ctx.tensor(node.outputs[0])
    if q.shape[0] != 1:
        raise UnsupportedModelError("codegen: a training step takes one sample (batch 1)")
    s = Signature()
    s.add("float *grad" if grad else "float *loss", ctx.fp(out.name), "(D,)" if grad else "(1,)")
    s.add("const int8_t *logits", ctx.act(q.name), "(D,)")
    s.ints(D=q.shape[-1])
    s.int32s(zp=q.quant.zp)
    s.add("float scale", float_literal(q.quant.s))
    s.add("int label", ctx.scalar(label))
    return s.call("softmax_xent", "tt_softmax_xent_grad_f32" if grad else "tt_softmax_xent_loss_f32", dict(grad=grad))


def softmax_xent_grad(node: Node, ctx) -> Call:
    return softmax_xent(node, ctx, grad=True)


def softmax_xent_grad_int(node: Node, ctx) -> Call:
    """The integer step's loss gradient (ops/softmax_xent.py softmax_xent_grad_int): int32, from the exp table."""
    q, label, table = ctx.tensor(node.inputs[0]), node.inputs[1], node.inputs[2]
    if q.shape[0] != 1:
        raise UnsupportedModelError("codegen: a training step takes one sample (batch 1)")
    s = Signature()
    s.add("tt_i32a *grad", ctx.ints(node.outputs[0]), "(D,), scale 2^-14")
    s.add("const int8_t *logits", ctx.act(q.name), "(D,)")
    s.add("const int32_t *table", ctx.const(table), "(256,): exp(-s j) in Q15")
    s.ints(D=q.shape[-1])
    s.add("int label", ctx.scalar(label))
    return s.call("softmax_xent_grad_int", "tt_softmax_xent_grad_int", {})


BINDINGS: dict[str, Binding] = {
    "softmax_xent": softmax_xent,
    "softmax_xent_grad": softmax_xent_grad,
    "softmax_xent_grad_int": softmax_xent_grad_int,
}
