"""The C binding of ``table_grad`` (ops/table_grad.py), and ``table_lookup``, the binding the table ops
(tinytrain/tables.py: hard_swish, logistic, hard_sigmoid) share: their binding modules export it."""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def table_lookup(node: Node, ctx) -> Call:
    """out[i] = table[inp[i] + 128]: 256 bytes of flash; streams row by row and runs in place."""
    x, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(n,)")
    s.add("const int8_t *inp", ctx.act(x.name), "(n,), may be out")
    s.add("const int8_t *table", ctx.table(node, "table", np.asarray(node.attrs.table, np.int8)),
          "(256,) outputs by input + 128")
    s.ints(n=y.size)
    return s.call("table", "tt_table_s8", {})


def table_grad(node: Node, ctx) -> Call:
    g, x, gx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    s = Signature()
    s.add("float *gx", ctx.fp(gx.name), "(n,), may be g")
    s.add("const float *g", ctx.fp(g.name), "(n,)")
    s.add("const int8_t *x", ctx.act(x.name), "(n,), the saved input")
    s.add("const float *slope", ctx.table(node, "slope", np.asarray(node.attrs.slope, np.float32)),
          "(256,) by input + 128")
    s.ints(n=gx.size)
    return s.call("table_grad", "tt_table_grad_f32", {})


BINDINGS: dict[str, Binding] = {"table_grad": table_grad}
