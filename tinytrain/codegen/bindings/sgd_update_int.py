"""The C binding of ``sgd_update_int`` (ops/sgd_update_int.py): the integer step's update of an int8 weight or int32
bias in place, from an int32 gradient and a fixed-point step factor per channel.
"""

from __future__ import annotations

from tinytrain.codegen.bindings.common import channel_range
from tinytrain.codegen.bindings.sgd_update import add_draws, add_remainder
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.errors import UnsupportedModelError
from tinytrain.ir import DType, Node
from tinytrain.ops.sgd_update import GRAD, PARAM, REMAINDER, SCALE, STEP, Rounding
from tinytrain.ops.sgd_update import EXP


def sgd_update_int(node: Node, ctx) -> Call:
    names = list(node.inputs) + [""] * (EXP + 1 - len(node.inputs))
    return update_int_call(node, ctx, node.attrs, names[PARAM], ctx.ints(names[GRAD]), names[SCALE], names[STEP],
                           names[REMAINDER], names[EXP], block=False)


def update_int_call(node: Node, ctx, a, param: str, grad: str, fixed: str, step: str, remainder: str, exp: str,
                    block: bool) -> Call:
    """The integer update of ``param`` by the int32 gradient at ``grad`` (a C pointer expression) whose run-time
    exponent is the tensor ``exp`` ("": none); ``block``: a kernel updating a block of rows of the selection, given
    the index i0 of its first element (0 here; the fused weight gradient's, ops/grad_weight_sgd_update.py)."""
    p = ctx.tensor(param)
    ptype = {DType.INT8: "int8_t", DType.INT32: "int32_t"}.get(p.dtype)
    if ptype is None:
        raise UnsupportedModelError(f"codegen: cannot update {p.dtype.value} parameter {p.name}")
    cout = p.shape[0]
    _, cs = channel_range(a.channels, cout, node)
    stochastic = a.rounding is Rounding.STOCHASTIC
    block = block and stochastic  # only the draws depend on the element's index in the selection
    s = Signature()
    s.add(f"{ptype} *param", ctx.state(p.name), "(Cs,E)")
    s.add("const tt_i32a *grad", grad, "(Cs,E)")
    s.add("const int32_t *fixed", ctx.const(fixed), "(Cs,2): the step factor M 2^-sh as (M, sh)")
    if exp:
        s.add("const tt_i32a *gexp", ctx.ints(exp), "(1,): the gradient's exponent e, the factor M 2^-(sh+e)")
    if remainder:
        add_remainder(s, ctx, remainder, a.remainder_bits)
    s.ints(Cs=cs, E=p.size // cout)
    add_draws(s, ctx, a, stochastic, step)
    scheduled = a.schedule is not None
    if scheduled:
        s.add("uint32_t warmup", f"{a.schedule.warmup}u")
        s.add("uint32_t steps", f"{a.schedule.steps}u")
        s.add("int32_t floor_q15", str(a.schedule.floor_q15))
    if block:
        s.ints(i0=0)
    bits = "s8" if ptype == "int8_t" else "s32"
    name = (f"tt_sgd_update_int_{bits}_{'stochastic' if stochastic else 'nearest'}"
            + (f"_rem{a.remainder_bits}" if remainder else "") + ("_cosine" if scheduled else "")
            + ("_block" if block else "") + ("_exp" if exp else ""))
    return s.call("sgd_update_int", name, dict(ptype=ptype, stochastic=stochastic, scheduled=scheduled, block=block,
                                               remainder_bits=a.remainder_bits if remainder else 0,
                                               has_exp=bool(exp)))


BINDINGS: dict[str, Binding] = {
    "sgd_update_int": sgd_update_int,
}
