"""The C bindings of ``avg_pool2d`` and its gradient (ops/avg_pool2d.py).
"""

from __future__ import annotations

from tinytrain.codegen.bindings.common import per_channel, rounding_suffix, rq_helper, window_name
from tinytrain.codegen.bindings.mean import broadcast_grad_int
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def avg_pool2d(node: Node, ctx) -> Call:
    a = node.attrs
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, h, wd, c = x.shape
    _, ho, wo, _ = y.shape
    (kh, kw), (sh, sw), (pt, pl) = a.kernel, a.stride, a.padding[:2]
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(Ho,Wo,C)")
    s.add("const int8_t *inp", ctx.act(x.name), "(H,W,C)")
    s.ints(H=h, W=wd, C=c, Ho=ho, Wo=wo)
    rq = None
    if a.output is not None:  # another output quantization: multiplier and shift per valid-cell count
        s.add("const int32_t *multiplier", ctx.table(node, "multiplier", per_channel(a.output.multiplier, kh * kw)),
              f"({kh * kw},) by count - 1")
        s.add("const int32_t *shift", ctx.table(node, "shift", per_channel(a.output.shift, kh * kw)),
              f"({kh * kw},) by count - 1")
        s.int32s(in_zp=x.quant.zp, out_zp=y.quant.zp)
        rounding, rq = "requant", rq_helper(a.output)
        suffix = "_rq" + rounding_suffix(a.output)
    elif a.round_half_even:
        s.int32s(in_zp=x.quant.zp)
        rounding, suffix = "half_even", "_half_even"
    else:
        rounding, suffix = ("half_up", "_half_up") if a.round_half_up else ("away", "")
    s.int32s(act_min=a.act_min, act_max=a.act_max)
    name = f"tt_avg_pool_{window_name(kh, kw, sh, sw, pt=pt, pl=pl, padded=any(a.padding))}_s8"
    return s.call("avg_pool2d", name + suffix,
                  dict(kh=kh, kw=kw, sh=sh, sw=sw, pt=pt, pl=pl, rounding=rounding, rq=rq))


def avg_pool2d_grad(node: Node, ctx) -> Call:
    a = node.attrs
    g, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, ho, wo, c = g.shape
    _, h, wd, _ = gx.shape
    (kh, kw), (sh, sw), (pt, pl) = a.kernel, a.stride, a.padding[:2]
    s = Signature()
    s.add("float *gx", ctx.fp(gx.name), "(H,W,C)")
    s.add("const float *g", ctx.fp(g.name), "(Ho,Wo,C)")
    s.ints(H=h, W=wd, C=c, Ho=ho, Wo=wo)
    name = f"tt_avg_pool_{window_name(kh, kw, sh, sw, pt=pt, pl=pl, padded=any(a.padding))}_grad_f32"
    return s.call("avg_pool2d_grad", name, dict(kh=kh, kw=kw, sh=sh, sw=sw, pt=pt, pl=pl))


BINDINGS: dict[str, Binding] = {
    "avg_pool2d_grad_int": broadcast_grad_int,
    "avg_pool2d": avg_pool2d,
    "avg_pool2d_grad": avg_pool2d_grad,
}
