"""The C binding of ``sgd_update`` (ops/sgd_update.py): the QAS-scaled update of an int8 weight or int32 bias in
place, nearest or stochastic rounding, with or without momentum and an lr schedule; ``update_call`` also serves the
fused updates.
"""

from __future__ import annotations

from tinytrain.codegen.bindings.common import channel_range
from tinytrain.codegen.cformat import float_literal
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Node
from tinytrain.ops.sgd_update import GRAD, MOMENTUM, PARAM, REMAINDER, SCALE, STEP, Rounding, packed


def sgd_update(node: Node, ctx) -> Call:
    names = list(node.inputs) + [""] * (REMAINDER + 1 - len(node.inputs))
    return update_call(node, ctx, node.attrs, names[PARAM], ctx.fp(names[GRAD]), names[SCALE], names[MOMENTUM],
                       names[STEP], names[REMAINDER], block=False)


def add_remainder(s: Signature, ctx, remainder: str, bits: int) -> None:
    """The remainder state argument of an update kernel (plain and integer)."""
    s.add("int8_t *remainder", ctx.state(remainder),
          "(Cs,(E+1)/2): the weights' sub-LSB parts, two to a byte" if packed(bits)
          else "(Cs,E): the weights' sub-LSB parts")


def add_draws(s: Signature, ctx, a, stochastic: bool, step: str) -> None:
    """The arguments of an update kernel's stochastic-rounding draws and of its step counter (plain and integer)."""
    if stochastic:
        s.add("uint32_t seed", f"{a.seed & 0xFFFFFFFF}u")
        s.add("uint32_t stream", f"{a.stream & 0xFFFFFFFF}u")
    if a.reads_step:
        s.add("uint32_t step", f"(uint32_t){ctx.scalar(step)}")


def update_call(node: Node, ctx, a, param: str, grad: str, scale: str, momentum: str, step: str, remainder: str,
                block: bool) -> Call:
    """The update of ``param`` by the gradient at ``grad`` (a C pointer expression), keeping ``remainder`` (a state
    tensor, or ""). ``block``: a kernel that updates a block of rows of the selection, given the index i0 of its first
    element (0 here)."""
    p, k = ctx.tensor(param), ctx.tensor(scale)
    ptype = {DType.INT8: "int8_t", DType.INT32: "int32_t"}.get(p.dtype)
    if ptype is None:
        raise UnsupportedModelError(f"codegen: cannot update {p.dtype.value} parameter {p.name}")
    cout = p.shape[0]
    c0, cs = channel_range(a.channels, cout, node)
    if ctx.trainable_rows(p.name) not in (None, cs):
        raise AssertionError(f"{p.name}: {ctx.trainable_rows(p.name)} rows in SRAM, {cs} updated")
    stochastic = a.rounding is Rounding.STOCHASTIC
    block = block and stochastic  # only the draws depend on the element's index in the selection
    s = Signature()
    s.add(f"{ptype} *param", ctx.state(p.name), "(Cs,E)")
    s.add("const float *grad", grad, "(Cs,E)")
    s.add("const float *scale", ctx.const(k.name), "(Cs,)")
    if momentum:
        s.add("float *momentum", ctx.state(momentum), "(Cs,E)")
    if remainder:
        add_remainder(s, ctx, remainder, a.remainder_bits)
    s.ints(Cs=cs, E=p.size // cout)
    if momentum:
        s.add("float mu", float_literal(a.momentum))
    add_draws(s, ctx, a, stochastic, step)
    scheduled = a.schedule is not None
    if scheduled:
        s.add("uint32_t warmup", f"{a.schedule.warmup}u")
        s.add("uint32_t steps", f"{a.schedule.steps}u")
        s.add("float lr_floor", float_literal(a.schedule.floor))
    if block:
        s.ints(i0=0)
    bits = "s8" if ptype == "int8_t" else "s32"
    host = ctx.host and stochastic  # sgd_update.c.j2: a row's draws and clamps in a loop gcc vectorizes
    name = (f"tt_sgd_update_{bits}_{'stochastic' if stochastic else 'nearest'}" + ("_momentum" if momentum else "")
            + (f"_rem{a.remainder_bits}" if remainder else "") + ("_cosine" if scheduled else "")
            + ("_block" if block else "") + ("_host" if host else ""))
    return s.call("sgd_update", name, dict(ptype=ptype, stochastic=stochastic, momentum=bool(momentum), block=block,
                                           scheduled=scheduled, host=host,
                                           remainder_bits=a.remainder_bits if remainder else 0))


BINDINGS: dict[str, Binding] = {
    "sgd_update": sgd_update,
}
