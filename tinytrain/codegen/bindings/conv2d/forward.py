"""The int8 forward convolution's binding: the first kernel variant of VARIANTS that applies (the model: CMSIS-NN's
arm_convolve_wrapper_s8). Each variant (layer.Variant) states when it applies, the tables it builds, its signature
and its stack and flash cost; the order is the preference."""

from __future__ import annotations

from tinytrain.codegen.bindings.conv2d import depthwise, host, pointwise, regular
from tinytrain.codegen.bindings.conv2d.layer import Conv, Variant, choose
from tinytrain.codegen.context import Call
from tinytrain.ir import Node

VARIANTS: tuple[Variant, ...] = (
    host.HOST_PAIRS,                      # host build: frozen weight as halfword pairs (tt_rows.h)
    host.HOST_SPLIT,                      # host build: updated rows in SRAM, the frozen ones as pairs
    host.HOST_ROWS,                       # host build: the int8 weight (updated; depthwise)
    depthwise.DEPTHWISE_MAP,              # small maps: every window clipped at compile time
    depthwise.DEPTHWISE_PLANAR_PAIRS,     # a channel at a time through a ring of rows, tap pair tables
    depthwise.DEPTHWISE_PLANAR,           # the same, pairs made per channel
    depthwise.DEPTHWISE_PACKED,           # four channels at a time, 3x3 taps packed as halfwords
    depthwise.DEPTHWISE,                  # four channels at a time
    pointwise.POINTWISE_XW2_PACKED,       # two pixels widened into buffers, rows packed
    pointwise.POINTWISE_XW2,              # two pixels widened into buffers
    pointwise.POINTWISE_XW_PACKED,        # one pixel widened, rows packed four at a time
    pointwise.POINTWISE_XW,               # one pixel widened
    pointwise.POINTWISE_X2,               # two pixels widened on the way
    pointwise.POINTWISE,                  # one pixel widened on the way
    regular.REGULAR_XW2_PADDED,           # two windows widened, rows padded to whole words and packed
    regular.REGULAR_XW2,                  # two windows widened
    regular.REGULAR_XW,                   # one window widened
    regular.REGULAR,                      # one window widened on the way
)


# A variant's reason when it is for another kind of convolution or target (--explain counts those instead of
# listing them).
OTHER_KIND = ("not depthwise", "not pointwise", "not a regular convolution", "a Cortex-M target", "a host build")


def conv2d(node: Node, ctx) -> Call:
    conv = Conv.of(node, ctx)
    variant, passed = choose(VARIANTS, conv)
    call = variant.build(conv)
    ctx.choices.append(explanation(conv, variant, passed, call))
    return call


def explanation(conv: Conv, variant: Variant, passed: list[tuple[str, str]], call: Call) -> str:
    """What --explain prints of one node: the variant, its kernel and costs, and why not each earlier one."""
    other = sum(why in OTHER_KIND for _, why in passed)
    lines = [f"{conv.node.name}: {variant.name} ({call.kernel.name}, kernels/{variant.template}.c.j2); stack "
             f"{variant.stack(conv)} B, weights and tables {variant.flash(conv)} B of flash"
             + (f" (tables: {', '.join(variant.tables)})" if variant.tables else "")]
    lines += [f"    not {name}: {why}" for name, why in passed if why not in OTHER_KIND]
    if other:
        lines.append(f"    ({other} variants for other kinds of convolution or targets)")
    return "\n".join(lines)


def explain_text(choices: tuple[str, ...]) -> str:
    """The --explain section: per forward convolution, in the order emitted (the first variant that applies of
    bindings/conv2d/forward.py VARIANTS)."""
    head = "kernel variants (the first that applies, bindings/conv2d/forward.py VARIANTS):"
    return "\n".join([head] + (list(choices) or ["  no convolution"]))
