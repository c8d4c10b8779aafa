"""The C binding of ``clamp_mask`` (ops/clamp_mask.py): a gradient masked by the int8 output's clamp.
"""

from __future__ import annotations

from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def clamp_mask(node: Node, ctx) -> Call:
    g, y, out = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    s = Signature()
    s.add("float *out", ctx.fp(out.name), "(N,)")
    s.add("const float *g", ctx.fp(g.name), "(N,)")
    s.add("const int8_t *y", ctx.act(y.name), "(N,)")
    s.ints(N=out.size)
    s.int32s(act_min=node.attrs.act_min, act_max=node.attrs.act_max)
    return s.call("clamp_mask", "tt_clamp_mask_f32" + ("_host" if ctx.host else ""), {"host": ctx.host})


def clamp_mask_int(node: Node, ctx) -> Call:
    """The integer step's clamp mask (ops/clamp_mask.py clamp_mask_int) on an int32 gradient."""
    s = Signature()
    s.add("tt_i32a *out", ctx.ints(node.outputs[0]), "(N,)")
    s.add("const tt_i32a *g", ctx.ints(node.inputs[0]), "(N,)")
    s.add("const int8_t *y", ctx.act(node.inputs[1]), "(N,)")
    s.ints(N=ctx.tensor(node.outputs[0]).size)
    s.int32s(act_min=node.attrs.act_min, act_max=node.attrs.act_max)
    return s.call("clamp_mask_int", "tt_clamp_mask_int", {})


BINDINGS: dict[str, Binding] = {
    "clamp_mask": clamp_mask,
    "clamp_mask_int": clamp_mask_int,
}
