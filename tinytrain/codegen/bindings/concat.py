"""The C bindings of ``concat`` and ``concat_grad`` (ops/concat.py): copies of contiguous runs (``outer`` runs
before the axis, each input's run ``inner`` elements long), through a table for a requantized input."""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def _outer_inner(shape, axis: int) -> tuple[int, int]:
    return int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))


def concat(node: Node, ctx) -> Call:
    a = node.attrs
    y = ctx.tensor(node.outputs[0])
    outer, total = _outer_inner(y.shape, a.axis)
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), f"(outer, {total}) by row")
    flags = []
    for k, (name, table) in enumerate(zip(node.inputs, a.tables)):
        x = ctx.tensor(name)
        s.add(f"const int8_t *in{k}", ctx.act(x.name), "(outer, inner_k)")
        if table is not None:
            s.add(f"const int8_t *table{k}", ctx.table(node, f"table{k}", np.asarray(table, np.int8)),
                  "(256,) requantized values by input + 128")
        s.ints(**{f"inner{k}": _outer_inner(x.shape, a.axis)[1]})
        flags.append(table is not None)
    s.ints(outer=outer)
    code = "".join("t" if f else "c" for f in flags)
    return s.call("concat", f"tt_concat_{code}_s8", dict(tables=flags))


def concat_grad(node: Node, ctx) -> Call:
    a = node.attrs
    g, gk = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    outer, total = _outer_inner(g.shape, a.axis)
    inner = _outer_inner(gk.shape, a.axis)[1]
    s = Signature()
    s.add("float *gk", ctx.fp(gk.name), "(outer, inner)")
    s.add("const float *g", ctx.fp(g.name), "(outer, total)")
    s.ints(outer=outer, total=total, inner=inner, offset=inner // a.size * a.begin)
    return s.call("concat_grad", "tt_concat_grad_f32", {})


BINDINGS: dict[str, Binding] = {
    "concat": concat,
    "concat_grad": concat_grad,
}
