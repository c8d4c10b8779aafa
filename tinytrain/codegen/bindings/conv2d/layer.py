"""A forward convolution as its kernel variants see it (``Conv``: the layer's geometry and the target's
capabilities), the ``Variant`` unit, and the choice of the first variant that applies (``choose``), with the
reasons the earlier ones did not (``tinytrain compile --explain``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tinytrain.codegen.bindings.common import bias_input, weight_zero_points, window_name
from tinytrain.codegen.context import Band, Call
from tinytrain.ir import Node, Tensor


@dataclass(frozen=True)
class Conv:
    """A forward convolution node with its tensors, sizes and the target (``ctx``: the emitter's context)."""

    node: Node
    ctx: Any
    x: Tensor
    w: Tensor
    y: Tensor
    h: int
    wd: int
    cin: int
    cout: int
    kh: int
    kw: int
    ho: int
    wo: int
    wzp: np.ndarray
    bias: str | None
    band: Band | None

    @staticmethod
    def of(node: Node, ctx) -> Conv:
        x, w, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
        _, h, wd, cin = x.shape
        cout, kh, kw, _ = w.shape
        _, ho, wo, _ = y.shape
        a = node.attrs
        pointwise = a.groups == 1 and (kh, kw) == (1, 1) and a.stride == (1, 1) and not any(a.padding)
        return Conv(node, ctx, x, w, y, h, wd, cin, cout, kh, kw, ho, wo, weight_zero_points(w, cout),
                    bias_input(node), None if pointwise else ctx.band(node))

    @property
    def depthwise(self) -> bool:
        return self.node.attrs.groups != 1

    @property
    def padded(self) -> bool:
        return any(self.node.attrs.padding)

    @property
    def pointwise(self) -> bool:
        a = self.node.attrs
        return not self.depthwise and (self.kh, self.kw) == (1, 1) and a.stride == (1, 1) and not self.padded

    @property
    def regular(self) -> bool:
        return not (self.pointwise or self.depthwise)

    @property
    def device(self) -> bool:
        """A Cortex-M target (context.arm_dsp): the device kernels' variants; else a host build's."""
        return not self.ctx.host

    @property
    def has_wzp(self) -> bool:
        return bool(np.any(self.wzp))

    @property
    def frozen(self) -> bool:
        """The step does not update the weight: tables may be made from it."""
        return not self.ctx.trainable(self.w.name)

    @property
    def split_rows(self) -> int | None:
        """The weight's rows that are an SRAM copy when only some are (context.trainable_rows)."""
        return self.ctx.trainable_rows(self.w.name)

    @property
    def window(self) -> int:
        """The elements of an output's input vector: kh * kw * Ci (a pointwise one: Ci)."""
        return self.kh * self.kw * self.cin

    @property
    def pixels(self) -> int:
        return self.h * self.wd

    @property
    def geometry(self) -> dict:
        """The template parameters every forward variant has (conv2d.c.j2 and the others' ``k``)."""
        a = self.node.attrs
        (sh, sw), (dh, dw), (pt, pl) = a.stride, a.dilation, a.padding[:2]
        return dict(kh=self.kh, kw=self.kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, padded=self.padded,
                    has_bias=self.bias is not None, has_wzp=self.has_wzp)

    @property
    def window_name(self) -> str:
        g = self.geometry
        return window_name(g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"], g["pt"], g["pl"], self.padded)


def unless(*checks: tuple[bool, str]) -> str | None:
    """The reason of the first check that fails (None: all hold); a variant's ``why_not``."""
    return next((why for ok, why in checks if not ok), None)


@dataclass(frozen=True)
class Variant:
    """One forward convolution kernel: when it applies (``why_not``: None, else the reason it does not), what it
    builds (``build``: the flash tables, the signature and the kernel; ``tables`` names them) and its cost
    (``stack``: the bytes of its stack arrays, ``flash``: the bytes of the weights and tables it reads)."""

    name: str
    template: str
    tables: tuple[str, ...]
    why_not: Callable[[Conv], str | None]
    build: Callable[[Conv], Call]
    stack: Callable[[Conv], int]
    flash: Callable[[Conv], int]


PLAIN = "its tables would not fit the flash budget (codegen/flash.py)"


def choose(variants: tuple[Variant, ...], conv: Conv) -> tuple[Variant, list[tuple[str, str]]]:
    """The first variant that applies, and (name, reason) of each earlier one."""
    passed = []
    for v in variants:
        why = PLAIN if v.tables and conv.node.name in conv.ctx.plain else v.why_not(conv)
        if why is None:
            return v, passed
        passed.append((v.name, why))
    raise AssertionError(f"no convolution kernel variant takes node {conv.node.name}")


def overlap(ctx, x: str, y: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The arena bytes of input ``x`` and output ``y`` (Context.extent) where they meet, None where they do not."""
    (i0, i1), (o0, o1) = ctx.extent(x), ctx.extent(y)
    return None if o1 <= i0 or i1 <= o0 else ((i0, i1), (o0, o1))
