"""The C bindings of ``pack_clamp_mask`` and ``clamp_mask_packed`` (ops/clamp_mask_packed.py): the clamp mask
saved as bits in the forward pass, and applied to a gradient.
"""

from __future__ import annotations

from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node


def pack_clamp_mask(node: Node, ctx) -> Call:
    """A forward node of the training step: the clamp mask of a saved output, in bits (``ctx.bits``)."""
    y, bits = ctx.tensor(node.inputs[0]), ctx.tensor(node.outputs[0])
    s = Signature()
    s.add("uint8_t *bits", ctx.bits(bits.name), "((N+7)/8,)")
    s.add("const int8_t *y", ctx.act(y.name), "(N,)")
    s.ints(N=y.size)
    s.int32s(act_min=node.attrs.act_min, act_max=node.attrs.act_max)
    return s.call("pack_clamp_mask", "tt_pack_clamp_mask_s8" + ("_host" if ctx.host else ""), {"host": ctx.host})


def clamp_mask_packed(node: Node, ctx) -> Call:
    g, bits, out = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    s = Signature()
    s.add("float *out", ctx.fp(out.name), "(N,)")
    s.add("const float *g", ctx.fp(g.name), "(N,)")
    s.add("const uint8_t *bits", ctx.bits(bits.name), "((N+7)/8,)")
    s.ints(N=out.size)
    return s.call("clamp_mask_packed", "tt_clamp_mask_packed_f32" + ("_host" if ctx.host else ""), {"host": ctx.host})


BINDINGS: dict[str, Binding] = {
    "pack_clamp_mask": pack_clamp_mask,
    "clamp_mask_packed": clamp_mask_packed,
}
