"""The C binding of ``requantize`` (ops/requantize.py).
"""

from __future__ import annotations

from tinytrain.codegen.bindings.common import rounding_suffix, rq_helper
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def requantize(node: Node, ctx) -> Call:
    r = node.attrs.requant
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(N,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(N,)")
    s.ints(N=y.size)
    s.int32s(in_zp=x.quant.zp, multiplier=r.multiplier[0], shift=r.shift[0], out_zp=y.quant.zp)
    return s.call("requantize", "tt_requantize_tensor_s8" + rounding_suffix(r), dict(rq=rq_helper(r)))


BINDINGS: dict[str, Binding] = {
    "requantize": requantize,
}
