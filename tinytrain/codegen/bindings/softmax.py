"""The C binding of ``softmax`` (ops/softmax.py).
"""

from __future__ import annotations

from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def softmax(node: Node, ctx) -> Call:
    a = node.attrs
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    depth = x.shape[-1]
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(R,D)")
    s.add("const int8_t *inp", ctx.act(x.name), "(R,D)")
    s.ints(R=x.size // depth, D=depth)
    s.int32s(input_multiplier=a.input_multiplier)
    s.ints(input_left_shift=a.input_left_shift)
    s.int32s(diff_min=a.diff_min)
    return s.call("softmax", "tt_softmax_s8", {})


BINDINGS: dict[str, Binding] = {
    "softmax": softmax,
}
