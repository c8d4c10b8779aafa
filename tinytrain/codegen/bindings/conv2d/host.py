"""The host build's forward convolutions (conv2d_rows.c.j2): pointwise and regular ones across output channels in
blocks of ``lanes``, their weights as halfword pairs of inputs (tt_rows.h tt_dot_pairs4); depthwise ones of
multiplier 1 across their channels. Each is specialized to its channel counts (Ci and Co constants, not
parameters): its loops across the channels vectorize without remainders."""

from __future__ import annotations

from tinytrain.codegen.bindings.conv2d.assemble import head, int8_weight, requant, sizes, tail
from tinytrain.codegen.bindings.conv2d.layer import Conv, Variant, unless
from tinytrain.codegen.bindings.conv2d.tables import host_pairs_table
from tinytrain.codegen.context import Call, Signature

# The most elements of a host build kernel's stack arrays (conv2d_rows.c.j2: a weight the step updates, as K x Cp
# halfwords; conv2d_grad_input.c.j2: a blocked depthwise gx, 4 bytes each): at most 256 KB of the host thread's
# stack; a larger one takes the device's kernel (set with the host kernels, commit a63c924).
HOST_WEIGHT_MAX = 1 << 16


def lanes(c: Conv) -> int:
    """The output channels of a block."""
    return 8 if c.cout <= 8 else 16


def padded_cout(c: Conv) -> int:
    return -(-c.cout // lanes(c)) * lanes(c)


def _host(c: Conv) -> str | None:
    return unless((not c.device, "a Cortex-M target"))


def _pairs_why_not(c: Conv) -> str | None:
    return _host(c) or unless((not c.depthwise, "depthwise"), (c.frozen, "the step updates the weight"))


def _split_why_not(c: Conv) -> str | None:
    return _host(c) or unless((not c.depthwise, "depthwise"), (c.split_rows is not None, "the weight is not split"),
                              (c.window * padded_cout(c) <= HOST_WEIGHT_MAX,
                               f"its stack array would have over HOST_WEIGHT_MAX = {HOST_WEIGHT_MAX} elements"))


def _rows_why_not(c: Conv) -> str | None:
    if c.depthwise:
        return _host(c) or unless((c.cout == c.cin, "a depthwise multiplier over 1"))
    return _host(c) or unless((c.window * padded_cout(c) <= HOST_WEIGHT_MAX,
                               f"its stack array would have over HOST_WEIGHT_MAX = {HOST_WEIGHT_MAX} elements"))


def _pairs_weights(s: Signature, c: Conv) -> bool:
    s.add("const int16_t *wpairs", c.ctx.table(c.node, "weight_pairs", host_pairs_table(c.w.data, c.wzp, lanes(c))),
          f"(K2,Cp,2): (w[o,2j], w[o,2j+1]){', less w_zp' if c.has_wzp else ''}; 0 past K = {c.window}, past Co")
    return False


def _split_weights(s: Signature, c: Conv) -> bool:
    rows = c.split_rows
    s.add("const int8_t *weight", c.ctx.const(c.w.name), f"(Cs,{c.kh},{c.kw},Ci)" if not c.pointwise else "(Cs,Ci)")
    s.add("const int16_t *wfrozen",
          c.ctx.table(c.node, "frozen_pairs", host_pairs_table(c.w.data[rows:], c.wzp[rows:], 1)),
          f"(K2,Co-Cs,2): rows o >= Cs as (w[o,2j], w[o,2j+1]){', less w_zp' if c.has_wzp else ''}; 0 past K")
    s.ints(Cs=rows)
    return True


def _build(c: Conv, weights, pairs: bool) -> Call:
    s = head(c)
    split = weights(s, c)
    requant(s, c, packed=pairs)
    suffix, k = tail(s, c, sizes(c, ci=False, co=False), split, host=True)
    variant = "pointwise" if c.pointwise else ("depthwise" if c.depthwise else "regular")
    tag = {"pointwise": "1x1", "depthwise": f"depthwise_{c.window_name}", "regular": c.window_name}[variant]
    if c.depthwise:
        tag += f"_c{c.cout}"
        k.update(co=c.cout)
    else:
        tag += f"_c{c.cin}x{c.cout}_channels" + ("_pairs" if pairs else "")
        k.update(ci=c.cin, co=c.cout, lanes=lanes(c), pairs=pairs)
    return s.call("conv2d_rows", f"tt_conv_{tag}_rows_s8{suffix}", dict(k, variant=variant))


HOST_PAIRS = Variant(
    "host pairs", "conv2d_rows", ("weight_pairs",), _pairs_why_not, lambda c: _build(c, _pairs_weights, True),
    stack=lambda c: 0, flash=lambda c: 2 * padded_cout(c) * 2 * -(-c.window // 2))
HOST_SPLIT = Variant(
    "host split weight", "conv2d_rows", ("frozen_pairs",), _split_why_not, lambda c: _build(c, _split_weights, False),
    stack=lambda c: 2 * padded_cout(c) * 2 * -(-c.window // 2),  # the whole weight as pairs, made at each call
    flash=lambda c: 2 * (c.cout - c.split_rows) * 2 * -(-c.window // 2))
HOST_ROWS = Variant(
    "host rows", "conv2d_rows", (), _rows_why_not, lambda c: _build(c, int8_weight, False),
    stack=lambda c: 0 if c.depthwise else 2 * padded_cout(c) * 2 * -(-c.window // 2),
    flash=lambda c: c.cout * c.window // (c.cin if c.depthwise else 1))
