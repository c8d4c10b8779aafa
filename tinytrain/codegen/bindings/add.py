"""The C binding of ``add`` (ops/add.py): int8 elementwise add with rescaled inputs.
"""

from __future__ import annotations

from tinytrain.codegen.bindings.common import rounding_suffix, rq_helper
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def add(node: Node, ctx) -> Call:
    a = node.attrs
    x1, x2, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(N,)")
    s.add("const int8_t *in1", ctx.act(x1.name), "(N,)")
    s.add("const int8_t *in2", ctx.act(x2.name), "(N,)")
    s.ints(N=y.size)
    s.int32s(in1_zp=x1.quant.zp, in1_multiplier=a.input1.multiplier[0], in1_shift=a.input1.shift[0],
             in2_zp=x2.quant.zp, in2_multiplier=a.input2.multiplier[0], in2_shift=a.input2.shift[0],
             out_zp=y.quant.zp, out_multiplier=a.output.multiplier[0], out_shift=a.output.shift[0])
    s.ints(left_shift=a.left_shift)
    s.int32s(act_min=a.act_min, act_max=a.act_max)
    return s.call("add", "tt_add_s8" + rounding_suffix(a.input1, a.input2, a.output),
                  dict(rq1=rq_helper(a.input1), rq2=rq_helper(a.input2), rq_out=rq_helper(a.output)))


BINDINGS: dict[str, Binding] = {
    "add": add,
}
