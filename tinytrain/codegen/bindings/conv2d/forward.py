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


def conv2d(node: Node, ctx) -> Call:
    conv = Conv.of(node, ctx)
    variant, _ = choose(VARIANTS, conv)
    return variant.build(conv)


def explain(node: Node, ctx) -> tuple[Variant, list[tuple[str, str]], Conv]:
    """The variant ``conv2d`` chooses for ``node``, the (name, reason) of each earlier one, and the layer."""
    conv = Conv.of(node, ctx)
    variant, passed = choose(VARIANTS, conv)
    return variant, passed, conv
