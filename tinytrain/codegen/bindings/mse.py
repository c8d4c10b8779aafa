"""The C bindings of the loss ``mse`` and its gradient (ops/mse.py): an int8 output against an int8 target (the
model's input, for reconstruction) or a float32 one (the sample's target, ``tt_set_target``: names.TARGET)."""

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
    floats = t.dtype is DType.FLOAT32
    if not floats and t.dtype is not DType.INT8:
        raise UnsupportedModelError(f"codegen: the mse target {t.name} is {t.dtype.value}, not int8 or float32")
    d = q.size
    s = Signature()
    s.add("float *grad" if grad else "float *loss", ctx.fp(out.name), "(D,)" if grad else "(1,)")
    s.add("const int8_t *out", ctx.act(q.name), "(D,)")
    if floats:  # the sample's float target, in the caller's memory (tt_set_target)
        s.add("const float *target", ctx.scalar(t.name), "(D,)")
    else:
        s.add("const int8_t *target", ctx.act(t.name), "(D,)")
    s.ints(D=d)
    s.int32s(zp=q.quant.zp, **({} if floats else {"zt": t.quant.zp}))
    s.add("float scale", float_literal(q.quant.s))
    if not floats:
        s.add("float t_scale", float_literal(t.quant.s))
    if grad:
        s.add("float c", float_literal(float(grad_scale(d))), "2 / D")
    name = "tt_mse_grad_f32" if grad else "tt_mse_loss_f32"
    return s.call("mse", name + ("_ft" if floats else ""), dict(grad=grad, float_target=floats))


def mse_grad(node: Node, ctx) -> Call:
    return mse(node, ctx, grad=True)


BINDINGS: dict[str, Binding] = {
    "mse": mse,
    "mse_grad": mse_grad,
}
