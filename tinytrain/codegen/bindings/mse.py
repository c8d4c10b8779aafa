"""The C bindings of the loss ``mse`` and its gradient (ops/mse.py): an int8 output against an int8 target (the
model's input, for reconstruction)."""

from __future__ import annotations

from tinytrain.codegen.cformat import float_literal
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Node
from tinytrain.ops.mse import grad_scale


def mse(node: Node, ctx, grad: bool = False) -> Call:
    q, t = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    out = ctx.tensor(node.outputs[0])
    if q.shape[0] != 1:
        raise UnsupportedModelError("codegen: a training step takes one sample (batch 1)")
    if t.dtype is not DType.INT8:
        raise UnsupportedModelError("codegen: the C training step takes an int8 target (reconstruction of the input); "
                                    "float targets train on --engine sim")
    d = q.size
    s = Signature()
    s.add("float *grad" if grad else "float *loss", ctx.fp(out.name), "(D,)" if grad else "(1,)")
    s.add("const int8_t *out", ctx.act(q.name), "(D,)")
    s.add("const int8_t *target", ctx.act(t.name), "(D,)")
    s.ints(D=d)
    s.int32s(zp=q.quant.zp, zt=t.quant.zp)
    s.add("float scale", float_literal(q.quant.s))
    s.add("float t_scale", float_literal(t.quant.s))
    if grad:
        s.add("float c", float_literal(float(grad_scale(d))), "2 / D")
    return s.call("mse", "tt_mse_grad_f32" if grad else "tt_mse_loss_f32", dict(grad=grad))


def mse_grad(node: Node, ctx) -> Call:
    return mse(node, ctx, grad=True)


BINDINGS: dict[str, Binding] = {
    "mse": mse,
    "mse_grad": mse_grad,
}
