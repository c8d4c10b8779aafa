"""Regular (not pointwise, not depthwise) forward convolutions on the device kernels (conv2d.c.j2): windows of up
to XW_MAX / 2 elements gathered two output pixels at a time ("xw2"), padded to whole words as a packed table where
they are not; else one window at a time widened into a buffer ("xw"); else widened on the way."""

from __future__ import annotations

from tinytrain.codegen.bindings.conv2d.assemble import head, int8_weight, requant, sizes, tail
from tinytrain.codegen.bindings.conv2d.layer import Conv, Variant, unless
from tinytrain.codegen.bindings.conv2d.pointwise import XW_MAX, packed_weight
from tinytrain.codegen.context import Call


def padded_window(c: Conv) -> int:
    """The window length of a device two-pixel kernel padded to a multiple of 4, when that differs from the window
    and the weight is frozen: its rows are then a table padded with zeros (of halfwords: pointwise.packed_weight)
    and every inner product runs whole words. 0: not padded."""
    kpad = -(-c.window // 4) * 4
    return kpad if c.device and kpad != c.window and kpad <= XW_MAX // 2 and c.frozen else 0


def _window_ci(c: Conv) -> bool:
    """A device two-pixel kernel has Ci as a constant: each window row it gathers is then a copy of a constant
    length, which gcc makes a few word loads and stores."""
    return c.device and c.window <= XW_MAX // 2


def _xw2_why_not(c: Conv) -> str | None:
    return unless((c.regular, "not a regular convolution"),
                  (c.window <= XW_MAX // 2, f"a window of over XW_MAX / 2 = {XW_MAX // 2} elements"))


def _xw_why_not(c: Conv) -> str | None:
    return unless((c.regular, "not a regular convolution"),
                  (c.window <= XW_MAX, f"a window of over XW_MAX = {XW_MAX} elements"),
                  (c.split_rows is None, "a split weight"))


def _build(c: Conv, xw2: int, xw: int, kpad: int) -> Call:
    s = head(c)
    split = packed_weight(s, c, kpad) if kpad else int8_weight(s, c)
    packed = kpad > 0
    requant(s, c, packed=packed)
    window_ci = _window_ci(c)
    suffix, k = tail(s, c, sizes(c, ci=not window_ci, co=True), split)
    stage = "_xw2" if xw2 else ("_xw" if xw else "")
    co_odd = bool(xw2 and c.cout % 2)
    return s.call("conv2d", f"tt_conv_{c.window_name}{stage}_s8{suffix}" + (f"_k{kpad}" if kpad else "")
                  + (f"_ci{c.cin}" if window_ci else "") + ("_packed" if packed else "")
                  + ("_co_odd" if co_odd else ""),
                  dict(k, pointwise=False, xw=0 if xw2 else xw, xw2=xw2, x2=False, kpad=kpad, packed=packed,
                       ci=c.cin if window_ci else 0, zb=False, has_wzp=c.has_wzp and not packed, co_odd=co_odd))


REGULAR_XW2_PADDED = Variant(
    "regular xw2, rows padded and packed", "conv2d", ("weight_packed",),
    lambda c: _xw2_why_not(c) or unless((padded_window(c) > 0, "a window of whole words, or the weight not frozen "
                                         "on a device")),
    lambda c: _build(c, XW_MAX // 2, 0, padded_window(c)),
    stack=lambda c: 2 * (XW_MAX // 2) + 2 * 2 * (XW_MAX // 2), flash=lambda c: 2 * c.cout * padded_window(c))
REGULAR_XW2 = Variant(
    "regular xw2", "conv2d", (), _xw2_why_not, lambda c: _build(c, XW_MAX // 2, 0, 0),
    stack=lambda c: 2 * (XW_MAX // 2) + 2 * 2 * (XW_MAX // 2), flash=lambda c: c.cout * c.window)
REGULAR_XW = Variant(
    "regular xw", "conv2d", (), _xw_why_not, lambda c: _build(c, 0, XW_MAX, 0),
    stack=lambda c: XW_MAX + 2 * XW_MAX, flash=lambda c: c.cout * c.window)
REGULAR = Variant(
    "regular", "conv2d", (), lambda c: unless((c.regular, "not a regular convolution")),
    lambda c: _build(c, 0, 0, 0), stack=lambda c: 0, flash=lambda c: c.cout * c.window)
