"""The C bindings of ``max_pool2d`` and its gradient (ops/max_pool2d.py)."""

from __future__ import annotations

from tinytrain.codegen.bindings.common import band_params, window_name
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def _window(a) -> tuple[dict, str]:
    (kh, kw), (sh, sw), (pt, pl) = a.kernel, a.stride, a.padding[:2]
    return dict(kh=kh, kw=kw, sh=sh, sw=sw, pt=pt, pl=pl), window_name(kh, kw, sh, sw, pt=pt, pl=pl,
                                                                         padded=any(a.padding))


def max_pool2d(node: Node, ctx) -> Call:
    """A streamed region runs it on a band of output rows (``ctx.band``)."""
    a = node.attrs
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    _, h, wd, c = x.shape
    _, ho, wo, _ = y.shape
    band = ctx.band(node)
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(Ho,Wo,C)")
    s.add("const int8_t *inp", ctx.act(x.name), "(H,W,C)")
    s.ints(H=h, W=wd, C=c, **({} if band else {"Ho": ho}), Wo=wo)
    if band:
        band_params(s, band)
    s.int32s(act_min=a.act_min, act_max=a.act_max)
    k, win = _window(a)
    return s.call("max_pool2d", f"tt_max_pool_{win}_s8" + ("_band" if band else ""), dict(k, band=band is not None))


def max_pool2d_grad(node: Node, ctx) -> Call:
    g, x, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    _, ho, wo, c = g.shape
    _, h, wd, _ = gx.shape
    s = Signature()
    s.add("float *gx", ctx.fp(gx.name), "(H,W,C)")
    s.add("const float *g", ctx.fp(g.name), "(Ho,Wo,C)")
    s.add("const int8_t *x", ctx.act(x.name), "(H,W,C), the saved input")
    s.ints(H=h, W=wd, C=c, Ho=ho, Wo=wo)
    k, win = _window(node.attrs)
    return s.call("max_pool2d_grad", f"tt_max_pool_{win}_grad_f32", k)


BINDINGS: dict[str, Binding] = {
    "max_pool2d": max_pool2d,
    "max_pool2d_grad": max_pool2d_grad,
}
