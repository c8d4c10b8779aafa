"""The C bindings of ``mul`` and ``mul_grad`` (ops/mul.py): shapes padded to rank 4, a broadcast operand read with
stride 0 along its size-1 dimensions."""

from __future__ import annotations

from tinytrain.codegen.bindings.common import rounding_suffix, rq_helper
from tinytrain.codegen.cformat import float_literal
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def _dims4(shape) -> tuple[int, ...]:
    return (1,) * (4 - len(shape)) + tuple(shape) if len(shape) <= 4 else None


def _strides(shape, full) -> dict[str, int]:
    """C-order element strides of ``shape`` read at ``full``'s indices: 0 along a broadcast dimension."""
    s, step = [0] * 4, 1
    for d in range(3, -1, -1):
        s[d] = 0 if shape[d] == 1 and full[d] > 1 else step
        step *= shape[d]
    return s


def _shape_args(s: Signature, full, ops: dict[str, tuple[int, ...]]) -> None:
    s.ints(D0=full[0], D1=full[1], D2=full[2], D3=full[3])
    for key, shape in ops.items():
        st = _strides(shape, full)
        s.ints(**{f"{key}s{d}": st[d] for d in range(4)})


def mul(node: Node, ctx) -> Call:
    a = node.attrs
    x1, x2, y = (ctx.tensor(n) for n in (*node.inputs, node.outputs[0]))
    full = _dims4(y.shape)
    if full is None:
        raise ValueError(f"mul: rank {len(y.shape)} > 4")
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(D0,D1,D2,D3)")
    s.add("const int8_t *in1", ctx.act(x1.name), "read with strides a*")
    s.add("const int8_t *in2", ctx.act(x2.name), "read with strides b*")
    _shape_args(s, full, {"a": _dims4(x1.shape), "b": _dims4(x2.shape)})
    s.int32s(zp1=x1.quant.zp, zp2=x2.quant.zp, out_zp=y.quant.zp, multiplier=a.output.multiplier[0],
             shift=a.output.shift[0], act_min=a.act_min, act_max=a.act_max)
    return s.call("mul", "tt_mul_s8" + rounding_suffix(a.output), dict(rq=rq_helper(a.output)))


def mul_grad(node: Node, ctx) -> Call:
    g, o, gk = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    full = _dims4(g.shape)
    s = Signature()
    s.add("float *gk", ctx.fp(gk.name), "the operand's shape: strides k*")
    s.add("const float *g", ctx.fp(g.name), "(D0,D1,D2,D3)")
    s.add("const int8_t *other", ctx.act(o.name), "the other operand (saved), strides o*")
    _shape_args(s, full, {"k": _dims4(gk.shape), "o": _dims4(o.shape)})
    s.ints(Nk=gk.size)
    s.int32s(other_zp=o.quant.zp)
    s.add("float other_scale", float_literal(o.quant.s))
    return s.call("mul_grad", "tt_mul_grad_f32", {})


BINDINGS: dict[str, Binding] = {
    "mul": mul,
    "mul_grad": mul_grad,
}
