"""The C binding of ``grad_accumulate`` (ops/grad_accumulate.py).
"""

from __future__ import annotations

from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def grad_accumulate(node: Node, ctx) -> Call:
    a, b, out = (ctx.tensor(n) for n in (*node.inputs, node.outputs[0]))
    s = Signature()
    s.add("float *out", ctx.fp(out.name), "(N,)")
    s.add("const float *a", ctx.fp(a.name), "(N,)")
    s.add("const float *b", ctx.fp(b.name), "(N,)")
    s.ints(N=out.size)
    return s.call("grad_accumulate", "tt_grad_accumulate_f32", {})


BINDINGS: dict[str, Binding] = {
    "grad_accumulate": grad_accumulate,
}
